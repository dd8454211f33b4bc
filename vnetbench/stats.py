"""Every statistic of vnetbench, in one place: summaries, confidence intervals, the one pre-declared test, the
multiple-comparison correction, and the rule that names a winner.

The unit of replication is the trial: call these on ONE VALUE PER TRIAL (vnetbench.dataset gives them). Samples
inside a trial (echoes, round trips) describe noise within one trial, not the uncertainty about a scenario.

The pre-declared test is Welch's two-sided t-test on per-trial values at alpha = 0.05, nothing else: no CI-overlap
rule, no second test that must agree. Every printed family of tests is corrected with Holm's step-down method
(holm()); the best of several groups is decided over ALL their pairs (best_of). Every comparison carries the effect
the test is about, the ratio and difference of the MEANS, with intervals that match it: Welch's t interval of the
difference and Fieller's interval of the ratio, with Welch-Satterthwaite degrees of freedom (95 % at any n for
normal data; a percentile bootstrap covers 66 % at n = 2). A test that does not reject says "not significant", never
"same"; min_detectable() says what it could have found. An interval never leaves the physical range: within().
Intervals are computed, never assumed: the mean's by Student's t, the median's by the exact order-statistic
(binomial) method, which assumes nothing about the shape of the distribution.

scipy is imported inside the functions that need it, so that importing this module (and `vnetbench --help`) is fast.
"""
from __future__ import annotations

import math
from functools import cached_property, lru_cache
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from .guards import UNBOUNDED_RATIOS

NAN_PAIR = (math.nan, math.nan)
TEST = "Welch's t-test on per-trial values, two-sided"
CORRECTION = "holm"
BOOTSTRAP_N = 2000


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    std: float                          # sample standard deviation (ddof=1); nan when n == 1
    cv: float                           # std / |mean|; nan when mean == 0 or n == 1
    median: float
    q1: float                           # numpy's default (linear) percentiles
    q3: float
    iqr: float
    min: float
    max: float
    confidence: float
    ci_median: tuple[float, float]      # exact order-statistic interval; (min, max) when n is too small
    ci_median_exact: bool               # False: n too small to reach `confidence`; ci_median is (min, max)
    ci_median_coverage: float           # true coverage of ci_median for continuous data (>= confidence if exact)
    clipped_median: bool = False        # ci_median was cut at the physical range (see within())
    bounds: tuple[float, float] = (-math.inf, math.inf)  # the physical range the mean's interval is cut at

    @cached_property
    def _t_ci_mean(self) -> tuple[float, float]:
        """Student t; nan when n == 1. Computed when read: its t quantile needs scipy, whose import took 75 % of
        `show`'s time, and `show` prints medians."""
        if self.n < 2:
            return NAN_PAIR
        half = t_quantile(self.confidence, self.n - 1) * self.std / math.sqrt(self.n)
        return (self.mean - half, self.mean + half)

    @property
    def ci_mean(self) -> tuple[float, float]:
        """The Student-t interval of the mean, cut at `bounds`."""
        return _cut(self._t_ci_mean, *self.bounds)

    @property
    def clipped(self) -> bool:
        """An interval was cut at the physical range: the reader is told."""
        return self.clipped_median or self.ci_mean != self._t_ci_mean


def _cut(ci: tuple[float, float], lo: float, hi: float) -> tuple[float, float]:
    return ci if math.isnan(ci[0]) else (min(max(ci[0], lo), hi), min(max(ci[1], lo), hi))


@dataclass(frozen=True)
class Comparison:
    """b against a. `ratio` = mean(b) / mean(a) with Fieller's CI, `diff` = mean(b) - mean(a) with Welch's CI."""
    a: Summary
    b: Summary
    alpha: float
    p: float                            # Welch's t-test, two-sided; nan when either side has fewer than 2 values
    significant: bool                   # p < alpha (before any correction; tables apply holm() to p)
    ratio: float                        # nan when mean(a) == 0
    ratio_ci: tuple[float, float]
    diff: float
    diff_ci: tuple[float, float]
    better: str | None = None           # "higher" | "lower" | None: the direction that is an improvement
    why: str | None = None              # why the test cannot judge: TOO_FEW, NO_SPREAD (then p is nan)

    @property
    def verdict(self) -> str:
        """'better' / 'worse' (b against a, by `better`), 'different' without a direction, 'not significant', or
        why the test could not judge ('too few trials', 'cannot tell (no spread)'). Never 'same'."""
        return self.why or verdict(self.significant, self.diff, self.better)


@dataclass(frozen=True)
class Best:
    label: str                          # the leader: the best mean
    better: str                         # "higher" | "lower"
    ties: list[str]                     # groups that cannot be told from the leader (Holm-adjusted p >= alpha)
    comparisons: dict[str, Comparison]  # leader (a) against every other group (b)
    p_adjusted: dict[str, float] = field(default_factory=dict)  # Holm-adjusted p (over ALL pairs) of each comparison
    family: int = 0                     # how many pairwise tests Holm corrected over: k (k - 1) / 2
    correction: str = CORRECTION

    @property
    def tie(self) -> bool:
        return bool(self.ties)


# ---- the only median and percentiles -------------------------------------------------------------------------
def median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float)))


def percentile(values: Sequence[float], q: float | Sequence[float]):
    """numpy's linear percentile(s), q in 0..100."""
    r = np.percentile(np.asarray(values, dtype=float), q)
    return float(r) if np.ndim(r) == 0 else [float(v) for v in r]


# ---- summaries ---------------------------------------------------------------------------------------------------
def _checked(values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0:
        raise ValueError("cannot summarize an empty sample")
    if not np.all(np.isfinite(x)):
        raise ValueError("sample contains NaN or infinite values; a failed measurement must not be averaged in")
    return x


@lru_cache(maxsize=1024)
def t_quantile(confidence: float, df: int) -> float:
    """Student's t quantile of a two-sided `confidence` interval. (scipy.special, not scipy.stats: the same
    function without the second of import that a report or `show` would pay for.)"""
    from scipy.special import stdtrit
    return float(stdtrit(df, (1 + confidence) / 2))


EXACT_MEDIAN_CI_N = 2000  # median_ci_rank sums in integers up to this n


@lru_cache(maxsize=1024)
def median_ci_rank(n: int, confidence: float = 0.95) -> tuple[int, float]:
    """(k, coverage): [x_(k+1), x_(n-k)] (0-based ranks k and n-1-k) is the narrowest order-statistic interval whose
    coverage P(k+1 <= B <= n-k-1), B ~ Binomial(n, 1/2), reaches `confidence`; k = -1 when n is too small.
    The binomial CDF is summed exactly in integers (no scipy import for a median's interval) up to n = 2000; past it
    in floats from log-probabilities (relative error about 1e-13): the integers' cost grows as n^2.7 (2 s at
    n = 8000; a trial of 256 pairs x 150 pings, n = 38400, spent minutes there after its last ping)."""
    if n <= EXACT_MEDIAN_CI_N:
        below = np.cumsum([math.comb(n, i) for i in range(n // 2)], dtype=object)
        coverage = np.array([1 - 2 * float(c / 2 ** n) for c in below], dtype=float)
    else:
        log_all = math.lgamma(n + 1) - n * math.log(2)
        pmf = np.exp([log_all - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(n // 2)])
        coverage = 1 - 2 * np.cumsum(pmf)
    ok = np.flatnonzero(coverage >= confidence)
    if ok.size == 0:
        return -1, float(coverage[0]) if coverage.size else math.nan
    return int(ok[-1]), float(coverage[ok[-1]])


def _ci_median(x: np.ndarray, confidence: float) -> tuple[tuple[float, float], bool, float]:
    n = x.size
    if n < 2:
        return NAN_PAIR, False, math.nan
    s = np.sort(x)
    k, coverage = median_ci_rank(n, confidence)
    if k < 0:
        return (float(s[0]), float(s[-1])), False, coverage
    return (float(s[k]), float(s[n - 1 - k])), True, coverage


def summarize(values: Sequence[float], confidence: float = 0.95) -> Summary:
    """Summary of one sample (one value per trial). Raises ValueError on an empty sample or NaN/infinite values."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = _checked(values)
    mean = float(np.mean(x))
    std = float(np.std(x, ddof=1)) if x.size > 1 else math.nan
    cv = std / abs(mean) if mean != 0 else math.nan
    q1, med, q3 = (float(v) for v in np.percentile(x, [25, 50, 75]))
    ci_median, exact, coverage = _ci_median(x, confidence)
    return Summary(n=int(x.size), mean=mean, std=std, cv=cv, median=med, q1=q1, q3=q3, iqr=q3 - q1,
                   min=float(x.min()), max=float(x.max()), confidence=confidence, ci_median=ci_median,
                   ci_median_exact=exact, ci_median_coverage=coverage)


# ---- bootstrap ---------------------------------------------------------------------------------------------------
def _stat_rows(statistic: Callable, samples: np.ndarray) -> np.ndarray:
    """statistic applied to every row; numpy reductions get axis=1 (fast), anything else row by row."""
    try:
        out = np.asarray(statistic(samples, axis=1), dtype=float)
        if out.shape == (samples.shape[0],):
            return out
    except TypeError:
        pass
    return np.array([statistic(row) for row in samples], dtype=float)


@lru_cache(maxsize=256)
def expanded_levels(size: int, confidence: float) -> tuple[float, float]:
    """The percentiles (0..100) an expanded percentile bootstrap reads (Hesterberg 2015): the plain percentile
    interval is too narrow for small samples (a 95 % interval of the mean covers about 90 % at n = 20), so the tail
    area is taken at z = sqrt(n / (n - 1)) * t(n - 1) instead of the normal quantile."""
    from scipy.special import ndtr  # the normal CDF: sf(z) = ndtr(-z)
    tail = float(ndtr(-math.sqrt(size / (size - 1)) * t_quantile(confidence, size - 1)))
    return 100 * tail, 100 * (1 - tail)


def bootstrap_ci(values: Sequence[float], statistic: Callable = np.median, confidence: float = 0.95,
                 n: int = BOOTSTRAP_N, seed: int = 0) -> tuple[float, float]:
    """Expanded percentile bootstrap interval of `statistic`, resampling the values with replacement (seeded)."""
    x = _checked(values)
    if x.size < 2:
        return NAN_PAIR
    rng = np.random.default_rng(seed)
    stats_ = _stat_rows(statistic, x[rng.integers(0, x.size, (n, x.size))])
    lo, hi = np.percentile(stats_, expanded_levels(x.size, confidence))
    return float(lo), float(hi)


def bootstrap_ci2(a: Sequence[float], b: Sequence[float], effect: Callable[[np.ndarray, np.ndarray], np.ndarray],
                  confidence: float = 0.95, n: int = BOOTSTRAP_N, seed: int = 0) -> tuple[float, float]:
    """Expanded percentile bootstrap of a two-sample effect, each sample resampled on its own (expanded for the
    smaller sample). `effect` gets two (n, size) arrays of resamples and returns n effects (nan ones are dropped)."""
    xa, xb = _checked(a), _checked(b)
    if xa.size < 2 or xb.size < 2:
        return NAN_PAIR
    rng = np.random.default_rng(seed)
    ra = xa[rng.integers(0, xa.size, (n, xa.size))]
    rb = xb[rng.integers(0, xb.size, (n, xb.size))]
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.asarray(effect(ra, rb), dtype=float)
    e = e[np.isfinite(e)]
    if e.size < n / 2:
        return NAN_PAIR
    lo, hi = np.percentile(e, expanded_levels(min(xa.size, xb.size), confidence))
    return float(lo), float(hi)


def RATIO_OF_MEANS(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    return rb.mean(axis=1) / ra.mean(axis=1)


def DIFF_OF_MEANS(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    return rb.mean(axis=1) - ra.mean(axis=1)


def DIFF_OF_MEDIANS(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    return np.median(rb, axis=1) - np.median(ra, axis=1)


# ---- the test ----------------------------------------------------------------------------------------------------
NOT_SIGNIFICANT = "not significant"
TOO_FEW = "too few trials"
NO_SPREAD = "cannot tell (no spread)"
POWER = 0.8


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Welch t-test; nan where it is undefined: fewer than 2 values a side, or neither side varies while
    their means differ ([0, 0, 0] against [1, 1, 1]: the t statistic is infinite, and p = 0 would claim a certainty
    three trials cannot give; degenerate() names the reason). Two equal constant samples: p = 1."""
    xa, xb = _checked(a), _checked(b)
    if xa.size < 2 or xb.size < 2:
        return math.nan
    va, vb = xa.var(ddof=1) / xa.size, xb.var(ddof=1) / xb.size
    if va + vb == 0:
        return 1.0 if xa.mean() == xb.mean() else math.nan
    from scipy.special import stdtr  # Student's t CDF: what scipy's ttest_ind computes, without its overhead
    t = (xa.mean() - xb.mean()) / math.sqrt(va + vb)
    return float(min(1.0, 2 * stdtr(welch_df(va, vb, xa.size, xb.size), -abs(t))))


def degenerate(a: Sequence[float], b: Sequence[float]) -> str | None:
    """Why Welch's test cannot judge a against b (TOO_FEW, NO_SPREAD), or None when it can."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.size < 2 or xb.size < 2:
        return TOO_FEW
    if np.ptp(xa) == 0 and np.ptp(xb) == 0 and xa[0] != xb[0]:
        return NO_SPREAD
    return None


def verdict(significant: bool, diff: float, better: str | None) -> str:
    """'better' / 'worse' / 'different' when the test rejected, else 'not significant' (a test that did not reject
    says nothing about equality)."""
    if not significant or diff == 0:
        return NOT_SIGNIFICANT
    if better not in ("higher", "lower"):
        return "different"
    return "better" if (diff > 0) == (better == "higher") else "worse"


def welch_df(va: float, vb: float, na: int, nb: int) -> float:
    """Welch-Satterthwaite degrees of freedom of va + vb (the squared standard errors of two means)."""
    den = (va * va / (na - 1) if va else 0.0) + (vb * vb / (nb - 1) if vb else 0.0)
    return (va + vb) ** 2 / den if den > 0 else float(na + nb - 2)


def _t(df: float, confidence: float = 0.95) -> float:
    from scipy.special import stdtrit
    return float(stdtrit(df, (1 + confidence) / 2))


def diff_ci(a: Summary, b: Summary, confidence: float = 0.95) -> tuple[float, float]:
    """Welch's t interval of mean(b) - mean(a): the interval the test inverts."""
    if a.n < 2 or b.n < 2:
        return NAN_PAIR
    va, vb = a.std ** 2 / a.n, b.std ** 2 / b.n
    half = _t(welch_df(va, vb, a.n, b.n), confidence) * math.sqrt(va + vb)
    d = b.mean - a.mean
    return (d - half, d + half)


def ratio_ci(a: Summary, b: Summary, confidence: float = 0.95) -> tuple[float, float]:
    """Fieller's interval of mean(b) / mean(a) for independent samples, Welch-Satterthwaite df at the estimate:
    every r with (mb - r ma)^2 <= t^2 (vb + r^2 va). Unbounded (nan, nan) when mean(a) itself cannot be told from 0."""
    if a.n < 2 or b.n < 2 or a.mean == 0:
        return NAN_PAIR
    va, vb = a.std ** 2 / a.n, b.std ** 2 / b.n
    r = b.mean / a.mean
    t = _t(welch_df(r * r * va, vb, a.n, b.n), confidence)
    qa = a.mean ** 2 - t * t * va
    qb = -2 * a.mean * b.mean
    qc = b.mean ** 2 - t * t * vb
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return NAN_PAIR
    root = math.sqrt(disc)
    lo, hi = (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    if a.min >= 0 and b.min >= 0:  # a ratio of non-negative means is not negative
        lo = max(lo, 0.0)
    return (lo, hi)


def contrast_ratio(cells: Sequence[Summary], num: Sequence[float], den: Sequence[float],
                   confidence: float = 0.95) -> tuple[float, tuple[float, float]]:
    """N / D for two contrasts of independent cell means, N = sum num_i * mean_i and D = sum den_i * mean_i (a cell
    may be in both: S1's (Reference - CS) / (IPsec - Reference)), with Fieller's interval: every r with
    (N - r D)^2 <= t^2 sum (num_i - r den_i)^2 v_i, v_i a cell mean's squared standard error, Welch-Satterthwaite df
    at the estimate. (nan, nan) when D cannot be told from 0 or a cell has under 2 values."""
    m = [c.mean for c in cells]
    v = [c.std ** 2 / c.n if c.n > 1 else math.nan for c in cells]
    big_n = sum(a * x for a, x in zip(num, m))
    big_d = sum(d * x for d, x in zip(den, m))
    est = big_n / big_d if big_d else math.nan
    if any(c.n < 2 for c in cells) or not math.isfinite(est):
        return est, NAN_PAIR
    w = [(a - est * d) ** 2 * vi for a, d, vi in zip(num, den, v)]
    df_den = sum(wi * wi / (c.n - 1) for wi, c in zip(w, cells))
    t2 = _t(sum(w) ** 2 / df_den if df_den > 0 else float(sum(c.n - 1 for c in cells)), confidence) ** 2
    qa = big_d ** 2 - t2 * sum(d * d * vi for d, vi in zip(den, v))
    qb = -2 * (big_n * big_d - t2 * sum(a * d * vi for a, d, vi in zip(num, den, v)))
    qc = big_n ** 2 - t2 * sum(a * a * vi for a, vi in zip(num, v))
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return est, NAN_PAIR
    root = math.sqrt(disc)
    return est, ((-qb - root) / (2 * qa), (-qb + root) / (2 * qa))


def compare(a: Sequence[float], b: Sequence[float], alpha: float = 0.05, better: str | None = None,
            seed: int = 0) -> Comparison:
    """b against a, on one value per trial: Welch's p on the means, the ratio of the means with Fieller's 95 % CI and
    their difference with Welch's 95 % CI (one statistic throughout). Significant means p < alpha; a printed family
    of comparisons then applies holm() to the p-values. `seed` is kept for callers; nothing here is random."""
    sa, sb = summarize(a), summarize(b)
    p = welch_p(a, b)
    ratio = sb.mean / sa.mean if sa.mean != 0 else math.nan
    why = degenerate(a, b)
    return Comparison(a=sa, b=sb, alpha=alpha, p=p, significant=bool(p < alpha), ratio=ratio,
                      ratio_ci=ratio_ci(sa, sb), diff=sb.mean - sa.mean, diff_ci=diff_ci(sa, sb), better=better,
                      why=why)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given. NaN p-values stay NaN and do not count."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = idx.size
    if m == 0:
        return out.tolist()
    order = idx[np.argsort(p[idx], kind="stable")]
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adjusted
    return out.tolist()


def holm_verdicts(comparisons: Sequence[Comparison], alpha: float = 0.05) -> list[tuple[float, str]]:
    """One printed family: (Holm-adjusted p, verdict) of each comparison, corrected together."""
    adjusted = holm([c.p for c in comparisons])
    return [(p, c.why or verdict(p < alpha, c.diff, c.better)) for c, p in zip(comparisons, adjusted)]


def best_of(groups: Mapping[str, Sequence[float]], better: str, alpha: float = 0.05) -> Best:
    """The leader (best mean; equal means keep the order of `groups`) and every group that cannot be told from it.
    Welch's test is run on EVERY pair of groups and Holm-corrected over all k (k - 1) / 2 of them: the leader is
    picked from the data, so correcting only its own k - 1 comparisons lets an equal group fall out of the tie too
    often (5-8 % at 4 groups, 13 % at 9); over all pairs the family-wise error stays at alpha whichever group leads.
    A group whose adjusted p against the leader is >= alpha (or undefined) ties with it."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    if not groups:
        raise ValueError("best_of needs at least one group")
    sign = -1.0 if better == "higher" else 1.0
    means = {label: float(np.mean(_checked(v))) for label, v in groups.items()}
    leader = min(groups, key=lambda label: sign * means[label])
    others = [g for g in groups if g != leader]
    labels = list(groups)
    pairs = [(x, y) for i, x in enumerate(labels) for y in labels[i + 1:]]
    p_all = dict(zip(pairs, holm([welch_p(groups[x], groups[y]) for x, y in pairs])))
    comps = {g: compare(groups[leader], groups[g], alpha, better) for g in others}
    adjusted = {g: p_all.get((leader, g), p_all.get((g, leader), math.nan)) for g in others}
    ties = [g for g in others if not adjusted[g] < alpha]
    return Best(label=leader, better=better, ties=ties, comparisons=comps, p_adjusted=adjusted, family=len(pairs))


# ---- what a test could have found ----------------------------------------------------------------------------
@lru_cache(maxsize=4096)
def _min_detectable(na: int, nb: int, cv: float, alpha: float, power: float) -> float:
    from scipy import optimize
    from scipy import stats as sps
    se = cv * math.sqrt(1 / na + 1 / nb)
    # Welch's df is estimated from the data, between min(n) - 1 and na + nb - 2; the noncentral t at the midpoint
    # matches simulated Welch power within half a point at n = 3..10 (bench/power.py); at the top df it overstates
    # the power at n = 3 (15 % instead of 17.5 %).
    df = (min(na, nb) - 1 + na + nb - 2) / 2
    crit = float(sps.t.ppf(1 - alpha / 2, df))

    def gap(delta: float) -> float:
        near = float(sps.nct.sf(crit, df, delta / se))
        return (near if math.isfinite(near) else 1.0) - power
    return float(optimize.brentq(gap, 1e-9, 60 * se))


def min_detectable(na: int, nb: int, cv: float, alpha: float = 0.05, power: float = POWER) -> float:
    """The smallest relative change of the mean that Welch's test at `alpha` finds with probability `power`, for two
    groups of na and nb trials whose trial values vary with coefficient of variation `cv` (noncentral t). At CV 5 %
    and alpha 0.05: about 17 % at n = 3 a side, 11 % at 5, 7 % at 10. Pass alpha / m for the first step of a Holm
    family of m tests. nan when either side has fewer than 2 trials or cv is not positive."""
    if na < 2 or nb < 2 or not cv > 0 or not math.isfinite(cv):
        return math.nan
    return _min_detectable(int(na), int(nb), float(cv), float(alpha), float(power))


def could_find(c: Comparison, alpha: float = 0.05) -> str:
    """'x %' for a comparison that did not reject: the smallest change it finds 80 % of the time at the pooled CV
    of its two sides (empty when that cannot be computed)."""
    cvs = [s.cv for s in (c.a, c.b) if math.isfinite(s.cv)]
    m = min_detectable(c.a.n, c.b.n, float(np.sqrt(np.mean(np.square(cvs)))) if cvs else math.nan, alpha)
    return "" if not math.isfinite(m) else f"{m:.0%}"


# ---- the physical range --------------------------------------------------------------------------------------
def physical_range(metric: str, unit: str) -> tuple[float, float]:
    """Where a metric's values can lie: every vnetbench metric is >= 0; a ratio (a share, a loss) is <= 1 except the
    per-process CPU ratios, which count cores."""
    return (0.0, 1.0) if unit == "ratio" and metric not in UNBOUNDED_RATIOS else (0.0, math.inf)


def within(s: Summary, lo: float = 0.0, hi: float = math.inf) -> Summary:
    """The summary with its intervals cut at the physical range [lo, hi]; `clipped` says an end was cut (the reader
    is told: a Student-t interval of a mean near 0 % or 100 % would otherwise reach below 0 or above 100 %)."""
    median_ci = _cut(s.ci_median, lo, hi)
    return replace(s, ci_median=median_ci, clipped_median=s.clipped_median or median_ci != s.ci_median,
                   bounds=(max(lo, s.bounds[0]), min(hi, s.bounds[1])))


# ---- findings: one test per claim over matched cells -----------------------------------------------------------
def cells_p(cells: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[float, float, str | None]:
    """One test of "b differs from a" over matched cells (each cell: a's and b's per-trial values): (p, the
    geometric-mean ratio b/a over the cells, why it cannot judge). With 3 or more cells the cell is the unit: a
    one-sample t-test of the cells' log ratios of means; with 1 or 2 cells, Welch on the trials of the cell with
    the most of them. Never a verdict from one repetition: TOO_FEW when every cell has fewer than 2 trials a side."""
    usable = [(a, b) for a, b in cells if len(a) and len(b) and np.mean(a) > 0 and np.mean(b) > 0]
    if not usable:
        return math.nan, math.nan, TOO_FEW
    logs = np.array([math.log(np.mean(b) / np.mean(a)) for a, b in usable])
    ratio = float(np.exp(logs.mean()))
    if len(usable) >= 3:
        if np.ptp(logs) == 0:
            return math.nan, ratio, NO_SPREAD
        from scipy import stats as sps
        return float(sps.ttest_1samp(logs, 0.0).pvalue), ratio, None
    a, b = max(usable, key=lambda ab: min(len(ab[0]), len(ab[1])))
    why = degenerate(a, b)
    return (math.nan if why else welch_p(a, b)), ratio, why


def finding_words(p_adjusted: float, ratio: float, why: str | None, alpha: float = 0.05) -> str:
    """What one Holm-corrected finding may say: 'significant: higher/lower' or 'not significant: cannot tell'."""
    if why:
        return f"cannot tell ({why})" if why != NO_SPREAD else why
    if not p_adjusted < alpha:
        return f"not significant (Holm p = {p_adjusted:.2g})"
    return f"significant: {'higher' if ratio > 1 else 'lower'} (Holm p = {p_adjusted:.2g})"


@dataclass(frozen=True)
class Contrast:
    estimate: float                     # sum of weight * mean
    ci: tuple[float, float]             # Welch-Satterthwaite t interval
    p: float                            # two-sided; nan when it cannot be judged
    why: str | None = None


def contrast(terms: Sequence[tuple[float, Sequence[float]]], confidence: float = 0.95) -> Contrast:
    """A test of sum(w * mean(group)) = 0 over independent groups of per-trial values, e.g. whether one mechanism's
    cost (B+M minus B) exceeds another's: (IPsec - Reference) - (Reference - CS) has weights +1, -2, +1. Welch's
    approach: the variance sum(w^2 s^2 / n), Satterthwaite's df. Comparing two estimates by eye ("3.1 > 2.9 ms")
    says yes about half the time when they are equal; this test keeps its 5 %."""
    merged: dict[int, list] = {}
    for w, vals in terms:  # the same group twice (a scenario in both costs): its weights add
        key = id(vals)
        merged[key] = [merged.get(key, [0.0])[0] + w, vals]
    parts = [(w, _checked(v)) for w, v in merged.values() if w != 0]
    est = float(sum(w * x.mean() for w, x in parts))
    if any(x.size < 2 for _, x in parts):
        return Contrast(est, NAN_PAIR, math.nan, TOO_FEW)
    var = [w * w * x.var(ddof=1) / x.size for w, x in parts]
    total = sum(var)
    if total == 0:
        return Contrast(est, (est, est), 1.0 if est == 0 else math.nan, None if est == 0 else NO_SPREAD)
    df = total ** 2 / sum(v * v / (x.size - 1) for v, (_, x) in zip(var, parts))
    from scipy import stats as sps
    se = math.sqrt(total)
    half = float(sps.t.ppf((1 + confidence) / 2, df)) * se
    return Contrast(est, (est - half, est + half), float(2 * sps.t.sf(abs(est) / se, df)))
