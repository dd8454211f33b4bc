"""Every statistic of vnetbench, in one place: summaries, confidence intervals, the one pre-declared test, the
multiple-comparison correction, and the rule that names a winner.

The unit of replication is the trial: call these on ONE VALUE PER TRIAL (vnetbench.dataset gives them). Samples
inside a trial (echoes, round trips) describe noise within one trial, not the uncertainty about a scenario.

The pre-declared test is Welch's two-sided t-test on per-trial values at alpha = 0.05, nothing else: no CI-overlap
rule, no second test that must agree. Tables of many comparisons correct with Holm's step-down method. Every
comparison carries its effect (ratio and difference of the means) with a seeded percentile-bootstrap 95 % CI.
Intervals are computed, never assumed: the mean's by Student's t, the median's by the exact order-statistic
(binomial) method, which assumes nothing about the shape of the distribution.

scipy is imported inside the functions that need it, so that importing this module (and `vnetbench --help`) is fast.
"""
from __future__ import annotations

import math
from functools import cached_property, lru_cache
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

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

    @cached_property
    def ci_mean(self) -> tuple[float, float]:
        """Student t; nan when n == 1. Computed when read: its t quantile needs scipy, whose import took 75 % of
        `show`'s time, and `show` prints medians."""
        if self.n < 2:
            return NAN_PAIR
        half = t_quantile(self.confidence, self.n - 1) * self.std / math.sqrt(self.n)
        return (self.mean - half, self.mean + half)


@dataclass(frozen=True)
class Comparison:
    """b against a. `ratio` = mean(b) / mean(a), `diff` = mean(b) - mean(a), each with a bootstrap CI."""
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

    @property
    def verdict(self) -> str:
        """'better' / 'worse' (b against a, by `better`), 'different' without a direction, or 'same'."""
        return verdict(self.significant, self.diff, self.better)


@dataclass(frozen=True)
class Best:
    label: str                          # the leader: the best mean
    better: str                         # "higher" | "lower"
    ties: list[str]                     # groups that cannot be told from the leader (Holm-adjusted p >= alpha)
    comparisons: dict[str, Comparison]  # leader (a) against every other group (b)
    p_adjusted: dict[str, float] = field(default_factory=dict)  # Holm-adjusted p of each comparison
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
    """Student's t quantile of a two-sided `confidence` interval."""
    from scipy import stats as sps
    return float(sps.t.ppf((1 + confidence) / 2, df=df))


@lru_cache(maxsize=1024)
def median_ci_rank(n: int, confidence: float = 0.95) -> tuple[int, float]:
    """(k, coverage): [x_(k+1), x_(n-k)] (0-based ranks k and n-1-k) is the narrowest order-statistic interval whose
    coverage P(k+1 <= B <= n-k-1), B ~ Binomial(n, 1/2), reaches `confidence`; k = -1 when n is too small.
    The binomial CDF is summed exactly in integers (no scipy import for a median's interval)."""
    j = np.arange(n // 2)
    below = np.cumsum([math.comb(n, i) for i in range(n // 2)], dtype=object)
    coverage = np.array([1 - 2 * float(c / 2 ** n) for c in below], dtype=float)
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
    from scipy import stats as sps
    tail = float(sps.norm.sf(math.sqrt(size / (size - 1)) * t_quantile(confidence, size - 1)))
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
def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Welch t-test. Two constant samples: p = 1 if equal, 0 if not (the test's limit); nan if n < 2."""
    xa, xb = _checked(a), _checked(b)
    if xa.size < 2 or xb.size < 2:
        return math.nan
    va, vb = xa.var(ddof=1) / xa.size, xb.var(ddof=1) / xb.size
    if va + vb == 0:
        return 1.0 if xa.mean() == xb.mean() else 0.0
    from scipy import stats as sps
    return float(sps.ttest_ind(xa, xb, equal_var=False).pvalue)


def verdict(significant: bool, diff: float, better: str | None) -> str:
    if not significant or diff == 0:
        return "same"
    if better not in ("higher", "lower"):
        return "different"
    return "better" if (diff > 0) == (better == "higher") else "worse"


def compare(a: Sequence[float], b: Sequence[float], alpha: float = 0.05, better: str | None = None,
            seed: int = 0) -> Comparison:
    """b against a, on one value per trial: Welch's p, and the ratio and difference of the means with their
    bootstrap 95 % CIs. Significant means p < alpha; a table of comparisons then applies holm() to the p-values."""
    sa, sb = summarize(a), summarize(b)
    p = welch_p(a, b)
    ratio = sb.mean / sa.mean if sa.mean != 0 else math.nan
    ratio_ci = bootstrap_ci2(a, b, RATIO_OF_MEANS, seed=seed)
    diff_ci = bootstrap_ci2(a, b, DIFF_OF_MEANS, seed=seed)
    return Comparison(a=sa, b=sb, alpha=alpha, p=p, significant=bool(p < alpha), ratio=ratio, ratio_ci=ratio_ci,
                      diff=sb.mean - sa.mean, diff_ci=diff_ci, better=better)


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


def best_of(groups: Mapping[str, Sequence[float]], better: str, alpha: float = 0.05) -> Best:
    """The leader (best mean; equal means keep the order of `groups`) and every group that cannot be told from it:
    the leader is compared with every other group by Welch's test, the p-values Holm-corrected together; a group
    whose adjusted p is >= alpha (or undefined: fewer than 2 trials) ties with the leader."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    if not groups:
        raise ValueError("best_of needs at least one group")
    sign = -1.0 if better == "higher" else 1.0
    means = {label: float(np.mean(_checked(v))) for label, v in groups.items()}
    leader = min(groups, key=lambda label: sign * means[label])
    others = [g for g in groups if g != leader]
    comps = {g: compare(groups[leader], groups[g], alpha, better) for g in others}
    adjusted = dict(zip(others, holm([comps[g].p for g in others])))
    ties = [g for g in others if not adjusted[g] < alpha]
    return Best(label=leader, better=better, ties=ties, comparisons=comps, p_adjusted=adjusted)
