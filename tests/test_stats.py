"""stats.py against independent reference computations (numpy/scipy written another way)."""
import math

import numpy as np
import pytest
from scipy import stats as sps

from vnetbench.stats import best_of, compare, summarize

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
    c = compare(a, b)
    assert c.mannwhitney_p == pytest.approx(sps.mannwhitneyu(a, b).pvalue)
    assert c.welch_p == pytest.approx(sps.ttest_ind(a, b, equal_var=False).pvalue)
    assert c.ci_overlap is False and c.significant is True
    same = compare(a[:15], a[15:])
    assert same.ci_overlap and not same.significant


def test_best_clear_winner():
    rng = np.random.default_rng(1)
    groups = {"ovs": rng.normal(9e9, 1e8, 10), "linux-bridge": rng.normal(7e9, 1e8, 10),
              "vxlan": rng.normal(5e9, 1e8, 10)}
    best = best_of(groups, "higher")
    assert (best.label, best.runner_up, best.tie) == ("ovs", "linux-bridge", False)
    assert best.comparison.mannwhitney_p < 0.05


def test_best_tie():
    rng = np.random.default_rng(2)
    groups = {"a": rng.normal(100, 10, 10), "b": rng.normal(101, 10, 10), "c": rng.normal(50, 1, 10)}
    best = best_of(groups, "higher")
    assert best.tie and {best.label, best.runner_up} == {"a", "b"}


def test_best_tie_when_too_few_trials():
    # Perfectly separated, but 3 vs 3 cannot reach Mann-Whitney p < 0.05.
    best = best_of({"x": [1.0, 1.1, 1.2], "y": [5.0, 5.1, 5.2]}, "higher")
    assert best.label == "y" and best.tie
    assert best.comparison.mannwhitney_p == pytest.approx(0.1)


def test_best_lower_is_better():
    rng = np.random.default_rng(3)
    groups = {"slow": rng.normal(80e-6, 2e-6, 12), "fast": rng.normal(40e-6, 2e-6, 12)}
    best = best_of(groups, "lower")
    assert (best.label, best.runner_up, best.tie) == ("fast", "slow", False)


def test_best_single_group_and_bad_args():
    assert best_of({"only": [1.0, 2.0]}, "higher").runner_up is None
    with pytest.raises(ValueError):
        best_of({"a": [1.0]}, "bigger")
    with pytest.raises(ValueError):
        best_of({}, "lower")
