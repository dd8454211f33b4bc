"""stats.py against independent reference computations (numpy/scipy written another way)."""
import math

import numpy as np
import pytest
from scipy import stats as sps

from vnetbench.results import stats
from vnetbench.results.stats import (
    RATIO_OF_MEANS, best_of, bootstrap_ci, bootstrap_ci2, compare, holm, median, median_ci_rank, percentile,
    summarize)

RNG = np.random.default_rng(20240611)
DATASETS = {
    "normal30": RNG.normal(9.4e9, 2e8, 30),
    "lognormal11": RNG.lognormal(-9, 0.5, 11),
    "exp200": RNG.exponential(3.0, 200),
    "ints9_ties": RNG.integers(0, 4, 9).astype(float),
    "n6": RNG.normal(5, 1, 6),
    "n5_too_small": RNG.normal(5, 1, 5),
}


def reference_median_ci(x, confidence):
    """Walk ranks inward from the extremes; coverage written as P(k <= B <= n-k)."""
    s, n = sorted(x), len(x)
    best = None
    for k in range(1, n // 2 + 1):
        cover = sps.binom.cdf(n - k, n, 0.5) - sps.binom.cdf(k - 1, n, 0.5)
        if cover >= 0.95:
            best = (s[k - 1], s[n - k], cover)
    return best


@pytest.mark.parametrize("name", DATASETS)
def test_summary_fields_match_references(name):
    x = DATASETS[name]
    s = summarize(x)
    n = len(x)
    assert s.n == n
    assert s.mean == pytest.approx(sum(x) / n, rel=1e-12)
    assert s.std == pytest.approx(math.sqrt(sum((v - s.mean) ** 2 for v in x) / (n - 1)), rel=1e-9)
    assert s.cv == pytest.approx(s.std / abs(s.mean))
    assert s.median == pytest.approx(np.quantile(x, 0.5))
    assert (s.q1, s.q3) == pytest.approx(tuple(np.quantile(x, [0.25, 0.75], method="linear")))
    assert s.iqr == pytest.approx(sps.iqr(x))
    assert (s.min, s.max) == (min(x), max(x))
    lo, hi = sps.t.interval(0.95, df=n - 1, loc=np.mean(x), scale=sps.sem(x))
    assert s.ci_mean == pytest.approx((lo, hi), rel=1e-9)


@pytest.mark.parametrize("name", DATASETS)
def test_median_ci_exact_method(name):
    x = DATASETS[name]
    s = summarize(x)
    ref = reference_median_ci(x, 0.95)
    scipy_ci = sps.quantile_test(x, q=float(np.median(x)), p=0.5).confidence_interval(0.95)
    if ref is None:
        assert not s.ci_median_exact
        assert s.ci_median == (min(x), max(x))
        assert math.isnan(scipy_ci.low) or math.isnan(scipy_ci.high)
    else:
        assert s.ci_median_exact
        assert s.ci_median == pytest.approx(ref[:2])
        assert s.ci_median_coverage == pytest.approx(ref[2]) and s.ci_median_coverage >= 0.95
        assert s.ci_median == pytest.approx((scipy_ci.low, scipy_ci.high))


def test_median_ci_other_confidence():
    x = DATASETS["exp200"]
    s = summarize(x, confidence=0.99)
    ci = sps.quantile_test(x, q=1.0).confidence_interval(0.99)
    assert s.ci_median == pytest.approx((ci.low, ci.high))
    assert s.ci_mean == pytest.approx(sps.t.interval(0.99, len(x) - 1, np.mean(x), sps.sem(x)))


def test_small_n_median_ci_is_full_range_and_flagged():
    # n = 5: the widest interval (min, max) covers only 1 - 2/32 = 93.75 % < 95 %.
    s = summarize([3.0, 1.0, 2.0, 5.0, 4.0])
    assert not s.ci_median_exact
    assert s.ci_median == (1.0, 5.0)
    assert s.ci_median_coverage == pytest.approx(1 - 2 / 32)
    assert summarize(range(6)).ci_median_exact  # n = 6: 1 - 2/64 = 96.9 %


def test_n1():
    s = summarize([7.0])
    assert (s.n, s.mean, s.median, s.min, s.max, s.iqr) == (1, 7.0, 7.0, 7.0, 7.0, 0.0)
    assert math.isnan(s.std) and math.isnan(s.cv)
    assert all(math.isnan(v) for v in (*s.ci_mean, *s.ci_median))
    assert not s.ci_median_exact


def test_n2():
    s = summarize([1.0, 3.0])
    assert s.std == pytest.approx(math.sqrt(2))
    assert s.ci_mean == pytest.approx(sps.t.interval(0.95, 1, 2.0, math.sqrt(2) / math.sqrt(2)))
    assert s.ci_median == (1.0, 3.0) and not s.ci_median_exact


def test_constant_data():
    s = summarize([4.0] * 10)
    assert (s.std, s.cv, s.iqr) == (0.0, 0.0, 0.0)
    assert s.ci_mean == (4.0, 4.0) and s.ci_median == (4.0, 4.0)
    z = summarize([0.0] * 5)
    assert math.isnan(z.cv)


@pytest.mark.parametrize("bad", [[1.0, float("nan"), 2.0], [1.0, float("inf")], []])
def test_rejects_nan_inf_empty(bad):
    with pytest.raises(ValueError):
        summarize(bad)


def test_compare_matches_scipy():
    a, b = DATASETS["normal30"], DATASETS["normal30"] + 3e8
    c = compare(a, b, better="higher")
    # 30 + 30 trials: 9999 random splits, none as far out as the observed one (Welch: p = 3e-10)
    assert c.p == pytest.approx(1 / 10000) and sps.ttest_ind(a, b, equal_var=False).pvalue < 1e-4
    # the permutation p and scipy's own permutation test of Welch's t agree (its splits are its own: within 0.02)
    near = DATASETS["normal30"][:15] + 2e7
    welch_t = lambda x, y, axis: sps.ttest_ind(x, y, equal_var=False, axis=axis).statistic  # noqa: E731
    scipy_p = sps.permutation_test((a[15:], near), welch_t, n_resamples=9999, vectorized=True, rng=0).pvalue
    assert abs(compare(a[15:], near).p - scipy_p) < 0.02
    assert c.significant and c.verdict == "better"
    assert c.ratio == pytest.approx(np.mean(b) / np.mean(a))
    assert c.diff == pytest.approx(3e8)
    assert c.ratio_ci[0] < c.ratio < c.ratio_ci[1] and c.diff_ci[0] < 3e8 < c.diff_ci[1]
    same = compare(a[:15], a[15:])
    assert not same.significant and same.verdict == "not significant"
    assert same.ratio_ci[0] < 1 < same.ratio_ci[1]


def test_separated_samples_are_significant():
    # Fully separated: of the 70 splits of 8 trials into 4 + 4, only this one and its mirror are as far apart, so the
    # exact p is 2 / 70 (Welch's t-test said 0.0086, a certainty 4 + 4 trials of unknown shape do not give).
    c = compare([10.7, 10.9, 11.1, 11.3], [10, 10.2, 10.4, 10.6], better="higher")
    assert c.p == pytest.approx(2 / 70)
    assert c.significant and c.verdict == "worse"
    assert c.ratio_ci[1] < 1 and c.diff_ci[1] < 0


def test_compare_is_seeded_and_handles_constants():
    a, b = [1.0, 1.2, 0.9, 1.1], [2.0, 2.1, 1.8, 2.2]
    assert compare(a, b).ratio_ci == compare(a, b).ratio_ci
    assert compare([3.0] * 4, [3.0] * 4).p == 1.0
    # retransmits [0, 0, 0] vs [1, 1, 1]: no spread to judge by; p = 0 ("significant") was made up
    flat = compare([0.0] * 3, [1.0] * 3)
    assert math.isnan(flat.p) and not flat.significant and flat.verdict == "cannot tell (no spread)"
    one = compare([1.0], [2.0, 3.0])
    assert math.isnan(one.p) and not one.significant


def test_holm_known_answer():
    # by hand: sorted 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> monotone 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])         # 0.5 * 2 = 1; 0.9 stays >= its predecessor
    out = holm([0.01, float("nan"), 0.02])
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.02)
    assert holm([]) == []


def test_best_compares_leader_with_every_group():
    # A leads by mean; C's spread makes it impossible to tell from A; B is clearly behind.
    best = best_of({"A": [10, 10.1, 10.2, 10.3, 10.4, 10.5], "B": [9, 9.1, 9.2, 9.3, 9.4, 9.5],
                    "C": [1, 17, 2, 15, 3, 16]}, "higher")
    assert best.label == "A" and best.ties == ["C"] and best.tie
    assert best.correction == "holm" and set(best.comparisons) == {"B", "C"}
    assert best.p_adjusted["B"] < 0.05 <= best.p_adjusted["C"]
    # Holm over all three pairs (A-B, A-C, B-C): the smallest p is multiplied by 3
    assert best.family == 3
    assert best.p_adjusted["B"] == pytest.approx(3 * min(best.comparisons[c].p for c in "BC"))


def test_best_clear_winner():
    rng = np.random.default_rng(1)
    groups = {"ovs": rng.normal(9e9, 1e8, 10), "linux-bridge": rng.normal(7e9, 1e8, 10),
              "vxlan": rng.normal(5e9, 1e8, 10)}
    best = best_of(groups, "higher")
    assert (best.label, best.ties, best.tie) == ("ovs", [], False)
    assert all(c.verdict == "worse" for c in best.comparisons.values())


def test_best_tie():
    rng = np.random.default_rng(2)
    groups = {"a": rng.normal(100, 10, 10), "b": rng.normal(101, 10, 10), "c": rng.normal(50, 1, 10)}
    best = best_of(groups, "higher")
    assert best.tie and {best.label, *best.ties} == {"a", "b"}


def test_best_at_three_trials_is_no_test_and_at_five_it_is():
    # 3 vs 3, perfectly separated: the smallest exact p is 2 / 20 = 0.1, so no test can say which leads; at 5 vs 5
    # it is 2 / 252 and the separated groups are told apart.
    best = best_of({"x": [1.0, 1.1, 1.2], "y": [5.0, 5.1, 5.2]}, "higher")
    assert best.label == "y" and best.tie and best.comparisons["x"].why == stats.NO_TEST
    best = best_of({"x": [1.0, 1.1, 1.2, 1.3, 1.4], "y": [5.0, 5.1, 5.2, 5.3, 5.4]}, "higher")
    assert best.label == "y" and not best.tie


def test_best_lower_is_better():
    rng = np.random.default_rng(3)
    groups = {"slow": rng.normal(80e-6, 2e-6, 12), "fast": rng.normal(40e-6, 2e-6, 12)}
    best = best_of(groups, "lower")
    assert (best.label, best.ties) == ("fast", [])


def test_best_single_group_and_bad_args():
    best = best_of({"only": [1.0, 2.0]}, "higher")
    assert best.label == "only" and not best.tie and best.comparisons == {}
    with pytest.raises(ValueError):
        best_of({"a": [1.0]}, "bigger")
    with pytest.raises(ValueError):
        best_of({}, "lower")


def test_median_and_percentile_are_numpy_linear():
    x = DATASETS["exp200"]
    assert median(x) == pytest.approx(np.median(x))
    assert percentile(x, 99) == pytest.approx(np.percentile(x, 99))
    assert percentile(x, [5, 95]) == pytest.approx(list(np.percentile(x, [5, 95])))


def test_order_statistic_median_ci_coverage():
    """The exact interval covers the true median in >= 93 % of 1,000 draws (nominal 95 %), for a skewed law."""
    rng = np.random.default_rng(11)
    for n in (10, 15, 20):
        draws = np.sort(rng.lognormal(0.0, 0.5, (1000, n)), axis=1)   # true median exp(0) = 1
        k, coverage = median_ci_rank(n)
        assert coverage >= 0.95
        hit = np.mean((draws[:, k] <= 1.0) & (draws[:, n - 1 - k] >= 1.0))
        assert hit >= 0.93, (n, hit)
        s = summarize(draws[0])
        assert s.ci_median == (draws[0, k], draws[0, n - 1 - k])


def test_bootstrap_ci_coverage():
    """The bootstrap intervals used by vnetbench cover their true value in >= 93 % of 1,000 draws (nominal 95 %):
    the median of a skewed law at n = 15, and the ratio of two means at n = 10 trials per side."""
    rng = np.random.default_rng(12)
    med = rng.lognormal(0.0, 0.5, (1000, 15))
    hit = sum(lo <= 1.0 <= hi for lo, hi in (bootstrap_ci(x, np.median, seed=i) for i, x in enumerate(med)))
    assert hit / 1000 >= 0.93, hit
    a, b = rng.normal(10, 1, (1000, 10)), rng.normal(12, 2, (1000, 10))
    hit = 0
    for i in range(1000):
        lo, hi = bootstrap_ci2(a[i], b[i], RATIO_OF_MEANS, seed=i)   # at n = 10 the bootstrap holds; at n = 2-3 it
        hit += lo <= 1.2 <= hi                                      # does not, so compare() reports Fieller's
    assert hit / 1000 >= 0.93, hit
    hit = sum(lo <= 1.2 <= hi for lo, hi in (compare(a[i], b[i]).ratio_ci for i in range(1000)))
    assert hit / 1000 >= 0.93, hit


def test_the_tabled_t_quantiles_are_scipys():
    """stats.T95 spares `show` and `report` the scipy import: each entry is exactly what scipy gives."""
    from scipy.special import stdtrit
    assert [float(stdtrit(df, 0.975)) for df in range(1, len(stats.T95) + 1)] == list(stats.T95)
    assert stats.t_quantile(0.95, 101) == float(stdtrit(101, 0.975))
    assert stats.t_quantile(0.9, 5) == float(stdtrit(5, 0.95))
