"""Summary statistics that say how much a number can be trusted, and the rule that names a winner.

Every interval here is computed, never assumed: the mean's by Student's t, the median's by the exact
order-statistic (binomial) method, which needs no assumption about the shape of the distribution.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy import stats as sps

NAN_PAIR = (math.nan, math.nan)


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
    ci_mean: tuple[float, float]        # Student t; nan when n == 1
    ci_median: tuple[float, float]      # exact order-statistic interval; (min, max) when n is too small
    ci_median_exact: bool               # False: n too small to reach `confidence`; ci_median is (min, max)
    ci_median_coverage: float           # true coverage of ci_median for continuous data (>= confidence if exact)


@dataclass(frozen=True)
class Comparison:
    a: Summary
    b: Summary
    alpha: float
    mannwhitney_p: float                # two-sided Mann-Whitney U
    welch_p: float                      # two-sided Welch t-test (informative; nan for zero-variance samples)
    ci_overlap: bool                    # (1 - alpha) CIs of the mean overlap; True when either is undefined
    significant: bool                   # mannwhitney_p < alpha and the CIs do not overlap


@dataclass(frozen=True)
class Best:
    label: str                          # the group with the best mean
    better: str                         # "higher" | "lower"
    runner_up: str | None               # second-best mean; None with a single group
    tie: bool                           # best is not significantly better than runner_up
    comparison: Comparison | None       # best vs runner_up


def _checked(values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0:
        raise ValueError("cannot summarize an empty sample")
    if not np.all(np.isfinite(x)):
        raise ValueError("sample contains NaN or infinite values; a failed measurement must not be averaged in")
    return x


def _ci_mean(x: np.ndarray, mean: float, std: float, confidence: float) -> tuple[float, float]:
    if x.size < 2:
        return NAN_PAIR
    half = float(sps.t.ppf((1 + confidence) / 2, df=x.size - 1)) * std / math.sqrt(x.size)
    return (mean - half, mean + half)


def _ci_median(x: np.ndarray, confidence: float) -> tuple[tuple[float, float], bool, float]:
    """[x_(k), x_(n+1-k)] covers the median with probability P(k <= B <= n-k), B ~ Binomial(n, 1/2).

    The narrowest such interval whose coverage reaches `confidence` is returned with its coverage.
    """
    n = x.size
    if n < 2:
        return NAN_PAIR, False, math.nan
    s = np.sort(x)
    j = np.arange(n // 2)                       # j = k - 1, so k runs 1 .. n//2
    coverage = 1 - 2 * sps.binom.cdf(j, n, 0.5)
    ok = np.flatnonzero(coverage >= confidence)
    if ok.size == 0:
        return (float(s[0]), float(s[-1])), False, float(coverage[0])
    k = int(ok[-1])
    return (float(s[k]), float(s[n - 1 - k])), True, float(coverage[k])


def summarize(values: Sequence[float], confidence: float = 0.95) -> Summary:
    """Summary of one sample. Raises ValueError on an empty sample or NaN/infinite values."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = _checked(values)
    mean = float(np.mean(x))
    std = float(np.std(x, ddof=1)) if x.size > 1 else math.nan
    cv = std / abs(mean) if mean != 0 else math.nan
    q1, median, q3 = (float(v) for v in np.percentile(x, [25, 50, 75]))
    ci_median, exact, coverage = _ci_median(x, confidence)
    return Summary(n=int(x.size), mean=mean, std=std, cv=cv, median=median, q1=q1, q3=q3, iqr=q3 - q1,
                   min=float(x.min()), max=float(x.max()), confidence=confidence,
                   ci_mean=_ci_mean(x, mean, std, confidence), ci_median=ci_median,
                   ci_median_exact=exact, ci_median_coverage=coverage)


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    if any(math.isnan(v) for v in (*a, *b)):
        return True  # an undefined interval cannot show a separation
    return bool(a[0] <= b[1] and b[0] <= a[1])


def compare(a: Sequence[float], b: Sequence[float], alpha: float = 0.05) -> Comparison:
    """Do two samples differ? Significant only when Mann-Whitney p < alpha AND the (1 - alpha) CIs
    of the mean are disjoint: both a rank test and a location interval must agree."""
    sa, sb = summarize(a, 1 - alpha), summarize(b, 1 - alpha)
    xa, xb = _checked(a), _checked(b)
    mw = float(sps.mannwhitneyu(xa, xb, alternative="two-sided").pvalue)
    with warnings.catch_warnings():  # zero-variance samples: Welch is undefined, reported as nan/0
        warnings.simplefilter("ignore", RuntimeWarning)
        welch = float(sps.ttest_ind(xa, xb, equal_var=False).pvalue) if min(xa.size, xb.size) > 1 else math.nan
    overlap = _overlap(sa.ci_mean, sb.ci_mean)
    return Comparison(a=sa, b=sb, alpha=alpha, mannwhitney_p=mw, welch_p=welch, ci_overlap=overlap,
                      significant=bool(mw < alpha and not overlap))


def best_of(groups: Mapping[str, Sequence[float]], better: str, alpha: float = 0.05) -> Best:
    """The label with the best mean ("higher" or "lower" is better) and whether it really wins.

    Rule: rank by mean; the winner is compared with the runner-up only. It is a tie when the two
    (1 - alpha) Student-t CIs of the mean overlap OR the two-sided Mann-Whitney p >= alpha. Note that
    with 3 trials per group Mann-Whitney cannot reach p < 0.05 (its smallest p is 0.1): such runs
    always report a tie, which is the honest answer. Equal means keep the order of `groups`.
    """
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    if not groups:
        raise ValueError("best_of needs at least one group")
    sign = -1.0 if better == "higher" else 1.0
    ranked = sorted(groups, key=lambda label: sign * summarize(groups[label]).mean)
    if len(ranked) == 1:
        return Best(label=ranked[0], better=better, runner_up=None, tie=False, comparison=None)
    c = compare(groups[ranked[0]], groups[ranked[1]], alpha)
    return Best(label=ranked[0], better=better, runner_up=ranked[1], tie=not c.significant, comparison=c)
