"""Every statistic of vnetbench, in one place: summaries, confidence intervals, the one pre-declared test, the
multiple-comparison correction, and the rule that names a winner.

The unit of replication is the trial: call these on ONE VALUE PER TRIAL (vnetbench.results.dataset gives them). Samples
inside a trial (echoes, round trips) describe noise within one trial, not the uncertainty about a scenario.

The pre-declared test is two-sided on per-trial values at alpha = 0.05, nothing else: no CI-overlap rule, no second
test that must agree. Up to EXACT_SPLITS ways of splitting the trials (8 a side) it is the exact permutation test of
Welch's t statistic (every split counted: its error rate holds whatever the trials' distribution, the bimodal trials
of a busy machine included); beyond, the same test over 9999 seeded random splits (valid for the same reason), and
Welch's t-test only past 1000 trials. A test that cannot reach p < alpha at its n (3 + 3 trials: the smallest exact
p is 0.1) is no test: "too few trials for a test", left out of its family (Tarone). Every printed family of tests is
corrected with Holm's step-down method
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

import itertools
import math
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Callable, Mapping, Sequence

from ._lazy_numpy import np

from .guards import UNBOUNDED_RATIOS

NAN_PAIR = (math.nan, math.nan)
TEST = ("permutation test of Welch's t on per-trial values (every split up to 8 trials a side, 9999 seeded "
        "random splits beyond), two-sided")
EXACT_SPLITS = 20000  # the exact test enumerates every split of the trials up to this many (8 + 8: 12870)
RANDOM_SPLITS = 9999  # past them, this many seeded random splits: p down to 1e-4 (0.05 / 48 is 0.001)
RANDOM_MAX = 1000     # trials in all past which Welch's t-test (its normal limit holds there) replaces the splits
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
    """numpy's median: the middle value, or the mean of the middle two."""
    s = sorted(map(float, values))
    if not s:
        return math.nan  # as numpy (which warns)
    if any(math.isnan(v) for v in s):
        return math.nan
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def percentile(values: Sequence[float], q: float | Sequence[float]):
    """numpy's linear percentile(s), q in 0..100: the same floats, from numpy's virtual index and lerp done in Python
    (np.percentile's dispatch imports numpy.ma, 10-15 ms of every `show`, and costs more than the work at n < 100)."""
    s = sorted(map(float, values))
    if not s:
        raise ValueError("percentile of no values")
    if any(math.isnan(v) for v in s):
        return math.nan if isinstance(q, (int, float)) else [math.nan] * len(q)
    return _lerp(s, q / 100) if isinstance(q, (int, float)) else [_lerp(s, x / 100) for x in q]


def _lerp(s: Sequence[float], q: float) -> float:
    """numpy's 'linear' method on a sorted sample: its virtual index (n - 1) q, and its two-sided lerp."""
    n = len(s)
    at = min(max((n - 1) * q, 0.0), n - 1.0)
    lo = math.floor(at)
    t, a, b = at - lo, s[lo], s[min(lo + 1, n - 1)]
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


# ---- summaries ---------------------------------------------------------------------------------------------------
def _array(values: Sequence[float]) -> np.ndarray:
    return np.asarray(_checked(values), dtype=float)


def _checked(values: Sequence[float]) -> list[float]:
    x = [float(v) for v in values]
    if not x:
        raise ValueError("cannot summarize an empty sample")
    if not all(map(math.isfinite, x)):
        raise ValueError("sample contains NaN or infinite values; a failed measurement must not be averaged in")
    return x


# Student's t quantiles of the two-sided 95 % interval for 1..100 degrees of freedom, the numbers scipy.special.stdtrit
# gives (tests/test_stats.py compares each): `show` prints a ratio of sums with the mean's interval, and importing
# scipy for it was 0.3 s of the command's time.
T95 = (
    12.706204736174694, 4.302652729749462, 3.1824463052837078, 2.7764451051977934, 2.5705818356363146,
    2.4469118511449786, 2.364624251592784, 2.306004135204166, 2.262157162798205, 2.228138851986274, 2.200985160091639,
    2.1788128296672284, 2.1603686564627913, 2.144786687917804, 2.131449545559776, 2.1199052992212546,
    2.1098155778333156, 2.1009220402410382, 2.0930240544083087, 2.085963447265864, 2.0796138447276795,
    2.0738730679040254, 2.0686576104190486, 2.0638985616280245, 2.0595385527532972, 2.0555294386428735,
    2.0518305164802846, 2.0484071417952454, 2.045229642132703, 2.0422724563012378, 2.039513446396408,
    2.0369333434601016, 2.0345152974493383, 2.0322445093177186, 2.030107928250343, 2.0280940009804502,
    2.0261924630291093, 2.0243941639119694, 2.022690920036761, 2.021075390306273, 2.019540970441376,
    2.0180817028184443, 2.016692199227824, 2.0153675744437636, 2.014103388880846, 2.012895598919429,
    2.0117405137297655, 2.010634757624232, 2.0095752371292392, 2.008559112100761, 2.007583770315836,
    2.006646805061688, 2.0057459953178687, 2.0048792881880564, 2.0040447832891455, 2.003240718847872,
    2.002465459291007, 2.0017174841452356, 2.000995378088267, 2.0002978220142604, 1.999623584994939,
    1.9989715170333788, 1.998340542520741, 1.997729654317693, 1.9971379083920038, 1.9965644189523117,
    1.996008354025296, 1.9954689314298435, 1.9949454151072374, 1.994437111771186, 1.9939433678456255,
    1.9934635666618719, 1.992997125889855, 1.992543495180932, 1.9921021540022417, 1.9916726096446642,
    1.9912543953883846, 1.9908470688116906, 1.9904502102301285, 1.990063421254446, 1.9896863234569029,
    1.989318557136572, 1.9889597801751624, 1.9886096669757083, 1.9882679074772216, 1.98793420623902,
    1.9876082815890708, 1.9872898648311692, 1.986978699506281, 1.9866745407037683, 1.9863771544186177,
    1.98608631695113, 1.9858018143458227, 1.985523441866604, 1.9852510035054978, 1.984984311522457,
    1.9847231860139845, 1.9844674545084815, 1.9842169515864174, 1.9839715185235518,
)


@lru_cache(maxsize=1024)
def t_quantile(confidence: float, df: int) -> float:
    """Student's t quantile of a two-sided `confidence` interval. (scipy.special, not scipy.stats: the same
    function without the second of import that a report or `show` would pay for; the usual ones from T95.)"""
    if confidence == 0.95 and 1 <= df <= len(T95):
        return T95[df - 1]
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
        below = itertools.accumulate(math.comb(n, i) for i in range(n // 2))
        coverage = [1 - 2 * float(c / 2 ** n) for c in below]
    else:
        log_all = math.lgamma(n + 1) - n * math.log(2)
        pmf = (math.exp(log_all - math.lgamma(i + 1) - math.lgamma(n - i + 1)) for i in range(n // 2))
        coverage = [1 - 2 * c for c in itertools.accumulate(pmf)]
    ok = [k for k, c in enumerate(coverage) if c >= confidence]
    if not ok:
        return -1, coverage[0] if coverage else math.nan
    return ok[-1], coverage[ok[-1]]


def _quartiles(s: Sequence[float]) -> tuple[float, float, float]:
    """numpy's linear percentiles 25, 50 and 75 of a sorted sample, the same floats (its virtual index and its lerp,
    done in Python: np.percentile's dispatch was half of a simulated report's time over 3-10 trials)."""
    return _lerp(s, 0.25), _lerp(s, 0.5), _lerp(s, 0.75)


def _ci_median(s: Sequence[float], confidence: float) -> tuple[tuple[float, float], bool, float]:
    """The median's order-statistic interval from the sorted sample s."""
    n = len(s)
    if n < 2:
        return NAN_PAIR, False, math.nan
    k, coverage = median_ci_rank(n, confidence)
    if k < 0:
        return (float(s[0]), float(s[-1])), False, coverage
    return (float(s[k]), float(s[n - 1 - k])), True, coverage


def summarize(values: Sequence[float], confidence: float = 0.95) -> Summary:
    """Summary of one sample (one value per trial). Raises ValueError on an empty sample or NaN/infinite values."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = _checked(values)
    n = len(x)
    # in Python, not numpy: `show` summarises with no numpy import (80 ms); fsum is exact where numpy's sum rounds
    mean = math.fsum(x) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in x) / (n - 1)) if n > 1 else math.nan
    cv = std / abs(mean) if mean != 0 else math.nan
    s = sorted(x)
    q1, med, q3 = _quartiles(s)
    ci_median, exact, coverage = _ci_median(s, confidence)
    return Summary(n=n, mean=mean, std=std, cv=cv, median=med, q1=q1, q3=q3, iqr=q3 - q1,
                   min=float(s[0]), max=float(s[-1]), confidence=confidence, ci_median=ci_median,
                   ci_median_exact=exact, ci_median_coverage=coverage)


# ---- what an interval covers on a busy machine -------------------------------------------------------------------
NOISY_SHARE, NOISY_SHIFT, NOISY_CV = 0.25, 0.20, 0.02  # a quarter of trials 20 % lower, CV 2 % within each level


def noisy_trials(rng: np.random.Generator, size, share: float = NOISY_SHARE, shift: float = NOISY_SHIFT,
                 cv: float = NOISY_CV) -> np.ndarray:
    """Trial values as a shared 2-core machine gives them: most at 1 with CV 2 %, a `share` of them `shift` lower
    (other work took the CPU): bimodal, the levels 10 CVs apart."""
    return np.where(rng.random(size) < share, 1 - shift, 1.0) * (1 + rng.normal(0, cv, size))


@lru_cache(maxsize=64)
def t_coverage(n: int, confidence: float = 0.95, draws: int = 20000) -> float:
    """How often the Student-t interval of the mean of n trials covers the true mean on noisy_trials, measured by a
    seeded simulation (exact for normal trials; on bimodal ones three trials often all land on one level)."""
    if n < 2:
        return math.nan
    x = noisy_trials(np.random.default_rng(n), (draws, n))
    half = t_quantile(confidence, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    return float(np.mean(np.abs(x.mean(axis=1) - (1 - NOISY_SHARE * NOISY_SHIFT)) <= half))


def t_note(n: int) -> str:
    """What the 95 % intervals of a table (t, Welch, Fieller) cover on a busy machine at its smallest n ('' past 30
    trials). The t interval's coverage stands for all three: with one or both sides bimodal, Welch's and Fieller's
    intervals cover within 3 points of it at 3-10 trials (bench/coverage.py)."""
    if n < 2 or n > 30:
        return ""
    return (f"Its 95 % intervals assume normal trials: on a busy machine's bimodal trials (a quarter of them 20 % "
            f"lower) one covers about {t_coverage(n):.0%} at n = {n}, measured by seeded simulation.")


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


def bootstrap_ci(values: Sequence[float], statistic: Callable | None = None, confidence: float = 0.95,
                 n: int = BOOTSTRAP_N, seed: int = 0) -> tuple[float, float]:
    """Expanded percentile bootstrap interval of `statistic` (default: the median), resampling the values with replacement (seeded)."""
    x = _array(values)
    if x.size < 2:
        return NAN_PAIR
    rng = np.random.default_rng(seed)
    stats_ = _stat_rows(np.median if statistic is None else statistic, x[rng.integers(0, x.size, (n, x.size))])
    lo, hi = np.percentile(stats_, expanded_levels(x.size, confidence))
    return float(lo), float(hi)


def bootstrap_ci2(a: Sequence[float], b: Sequence[float], effect: Callable[[np.ndarray, np.ndarray], np.ndarray],
                  confidence: float = 0.95, n: int = BOOTSTRAP_N, seed: int = 0) -> tuple[float, float]:
    """Expanded percentile bootstrap of a two-sample effect, each sample resampled on its own (expanded for the
    smaller sample). `effect` gets two (n, size) arrays of resamples and returns n effects (nan ones are dropped)."""
    xa, xb = _array(a), _array(b)
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
NO_TEST = "too few trials for a test"
NO_SPREAD = "cannot tell (no spread)"
POWER = 0.8


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Welch t-test; nan where it is undefined: fewer than 2 values a side, or neither side varies while
    their means differ ([0, 0, 0] against [1, 1, 1]: the t statistic is infinite, and p = 0 would claim a certainty
    three trials cannot give; degenerate() names the reason). Two equal constant samples: p = 1."""
    xa, xb = _array(a), _array(b)
    if xa.size < 2 or xb.size < 2:
        return math.nan
    va, vb = xa.var(ddof=1) / xa.size, xb.var(ddof=1) / xb.size
    if va + vb == 0:
        return 1.0 if xa.mean() == xb.mean() else math.nan
    from scipy.special import stdtr  # Student's t CDF: what scipy's ttest_ind computes, without its overhead
    t = (xa.mean() - xb.mean()) / math.sqrt(va + vb)
    return float(min(1.0, 2 * stdtr(welch_df(va, vb, xa.size, xb.size), -abs(t))))


@lru_cache(maxsize=128)
def _splits(na: int, nb: int) -> np.ndarray | None:
    """Every way of choosing which na of the na + nb trials are a's, as a boolean mask per row; None past
    EXACT_SPLITS."""
    n = na + nb
    if math.comb(n, na) > EXACT_SPLITS:
        return None
    idx = np.array(list(itertools.combinations(range(n), na)), dtype=np.intp)
    mask = np.zeros((idx.shape[0], n), dtype=bool)
    mask[np.arange(idx.shape[0])[:, None], idx] = True
    return mask


def exact(na: int, nb: int) -> bool:
    """Whether na + nb trials are tested exactly (every split counted)."""
    return na >= 2 and nb >= 2 and math.comb(na + nb, na) <= EXACT_SPLITS


def _permuted(na: int, nb: int) -> bool:
    """Whether na + nb trials are tested by splits at all (every one, or RANDOM_SPLITS random ones)."""
    return na >= 2 and nb >= 2 and na + nb <= RANDOM_MAX


@lru_cache(maxsize=128)  # (a mask of 30 trials is 0.3 MB; a simulation's dozens of sizes thrashed 8, then 64)
def _random_splits(na: int, nb: int) -> np.ndarray:
    """RANDOM_SPLITS random choices of na of the na + nb trials, seeded and drawn without looking at any data (so
    each test's p is valid), the observed split first."""
    rng = np.random.default_rng(na * 100003 + nb)
    idx = np.argsort(rng.random((RANDOM_SPLITS, na + nb)), axis=1)[:, :na]
    mask = np.zeros((RANDOM_SPLITS + 1, na + nb), dtype=bool)
    mask[0, :na] = True
    mask[np.arange(1, RANDOM_SPLITS + 1)[:, None], idx] = True
    return mask


FLOAT_SPLITS_MAX = 40  # trials: up to here a test's splits are kept as floats (10,000 splits of 20 trials: 1.6 MB)


def _split_mask(na: int, nb: int) -> np.ndarray:
    """The test's splits (a row per split: which trials are a's), as floats up to FLOAT_SPLITS_MAX trials."""
    return _float_splits(na, nb) if na + nb <= FLOAT_SPLITS_MAX else _test_splits(na, nb)


def _test_splits(na: int, nb: int) -> np.ndarray:
    """Every split where they are few enough (exact), else the seeded random ones."""
    return _splits(na, nb) if exact(na, nb) else _random_splits(na, nb)


@lru_cache(maxsize=48)  # (a simulation's reports cycle through dozens of sizes: 16 thrashed)
def _float_splits(na: int, nb: int) -> np.ndarray:
    """The splits as a float mask: a boolean one is cast anew in every product."""
    return _test_splits(na, nb).astype(float)


def smallest_p(na: int, nb: int) -> float:
    """The smallest two-sided p the test can give with na and nb trials: 2 / C(na + nb, na) for the exact test with
    equal sides (a split and its mirror give the same |t|), 1 / C otherwise; 1 / (RANDOM_SPLITS + 1) with random
    splits; 0 for Welch's test."""
    if na < 2 or nb < 2:
        return 1.0
    if exact(na, nb):
        return (2.0 if na == nb else 1.0) / math.comb(na + nb, na)
    return 1 / (RANDOM_SPLITS + 1) if _permuted(na, nb) else 0.0


def _welch_t(sum_a, sq_a, na, sum_b, sq_b, nb) -> np.ndarray:
    """|Welch's t| from sums and sums of squares (arrays: one per split); a split with no spread and a difference
    is infinitely far out, one with neither is at 0."""
    # (in place, the same operations in the same order: a simulation makes ten thousand splits per test)
    ma, mb = sum_a / na, sum_b / nb
    va, vb = sq_a - sum_a * ma, sq_b - sum_b * mb
    for v, n in ((va, na), (vb, nb)):
        np.maximum(v, 0.0, out=v)
        v /= n - 1
        v /= n
    va += vb
    se = np.sqrt(va, out=va)
    d = np.subtract(mb, ma, out=mb)
    np.abs(d, out=d)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.divide(d, se, out=d)          # no spread and a difference: inf
    t[np.isnan(t)] = 0.0                     # neither (0 / 0)
    return t


def permutation_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided permutation p of |Welch's t|: the share of splits of the pooled trials into na and nb whose |t| is
    at least the observed one, over every split (exact) up to EXACT_SPLITS, else over RANDOM_SPLITS seeded random
    ones plus the observed split. Valid for any distribution when a and b are exchangeable under the null (Welch's
    t-test past 8 a side went over its level on bimodal trials: 1.1-1.4 times alpha / m). nan below 2 trials a side
    or past RANDOM_MAX trials."""
    xa, xb = _array(a), _array(b)
    if not _permuted(xa.size, xb.size):
        return math.nan
    mask = _split_mask(xa.size, xb.size)
    x = np.concatenate([xa, xb])
    spread = x.std()
    if spread == 0:
        return 1.0
    x = (x - x.mean()) / spread              # t is unchanged by shifting and scaling all trials: keeps sums exact
    sums = mask @ np.stack([x, x * x], axis=1)
    sum_a, sq_a = sums[:, 0], sums[:, 1]
    sum_b, sq_b = x.sum() - sum_a, (x * x).sum() - sq_a
    t = _welch_t(sum_a, sq_a, xa.size, sum_b, sq_b, xb.size)
    observed = t[0]                          # the first split is the observed one: a's trials first
    return float(np.mean(t >= observed * (1 - 1e-9) - 1e-12))


def _signed_t(xa: np.ndarray, xb: np.ndarray) -> np.ndarray:
    """Welch's t of a's mean over b's, signed, for every split of the test (the observed split first): a split with no
    spread and a difference is infinitely far out, one with neither is at 0."""
    mask = _split_mask(xa.size, xb.size)
    x = np.concatenate([xa, xb])
    x = (x - x.mean()) / (x.std() or 1.0)
    sum_a, sq_a = mask @ x, mask @ (x * x)
    sum_b, sq_b = x.sum() - sum_a, (x * x).sum() - sq_a
    ma, mb = sum_a / xa.size, sum_b / xb.size
    var = (np.maximum(sq_a - sum_a * ma, 0) / ((xa.size - 1) * xa.size)
           + np.maximum(sq_b - sum_b * mb, 0) / ((xb.size - 1) * xb.size))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (ma - mb) / np.sqrt(var)
    t[np.isnan(t)] = 0.0
    return t


def greater_p(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided permutation p that a's mean is above b's: the share of splits whose signed Welch t is at least the
    observed one (the splits of permutation_p). nan where the test has no splits."""
    xa, xb = _array(a), _array(b)
    if not _permuted(xa.size, xb.size):
        return math.nan
    t = _signed_t(xa, xb)
    return float(np.mean(t >= t[0] - 1e-9 * abs(t[0]) - 1e-12)) if np.isfinite(t[0]) else float(np.mean(t >= t[0]))


def smallest_one_sided_p(na: int, nb: int) -> float:
    """The smallest p greater_p can give: 1 / C(na + nb, na) exact, 1 / (RANDOM_SPLITS + 1) with random splits."""
    if not _permuted(na, nb):
        return 1.0
    return 1 / math.comb(na + nb, na) if exact(na, nb) else 1 / (RANDOM_SPLITS + 1)


def tie_p(a: Sequence[float], b: Sequence[float], margin: float, alpha: float = 0.05) -> float:
    """p of two one-sided tests (TOST) that a and b are a tie: their geometric means within a factor 1 + margin of
    each other. Each side is greater_p on the trials' logarithms shifted by log(1 + margin); the larger p is the
    test's. nan where the test cannot reach alpha at these n, or a value is not positive (no logarithm)."""
    xa, xb = _array(a), _array(b)
    if smallest_one_sided_p(xa.size, xb.size) >= alpha or min(xa.min(), xb.min()) <= 0:
        return math.nan
    la, lb, d = np.log(xa), np.log(xb), math.log1p(margin)
    return max(greater_p(la + d, lb), greater_p(lb + d, la))


def p_value(a: Sequence[float], b: Sequence[float]) -> float:
    """The pre-declared test's two-sided p: the permutation test of Welch's t (every split up to EXACT_SPLITS, else
    RANDOM_SPLITS random ones), Welch's t-test past RANDOM_MAX trials. nan where no test can judge (fewer than 2
    trials a side, or two constant samples that differ: degenerate())."""
    xa, xb = _array(a), _array(b)
    if xa.size < 2 or xb.size < 2 or degenerate(xa, xb) == NO_SPREAD:
        return math.nan
    return permutation_p(xa, xb) if _permuted(xa.size, xb.size) else welch_p(xa, xb)


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
    """b against a, on one value per trial: the pre-declared test's p (p_value), the ratio of the means with Fieller's
    95 % CI and their difference with Welch's 95 % CI. Significant means p < alpha; a printed family of comparisons
    then applies holm() to the p-values. Trials too few for the test to reach alpha at all (3 + 3) give no p and
    say NO_TEST. `seed` is kept for callers; nothing here is random."""
    sa, sb = summarize(a), summarize(b)
    why = degenerate(a, b) or (NO_TEST if smallest_p(sa.n, sb.n) >= alpha else None)
    p = math.nan if why else p_value(a, b)
    ratio = sb.mean / sa.mean if sa.mean != 0 else math.nan
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
    The test (p_value: the permutation test of Welch's t) is run on EVERY pair of groups and Holm-corrected over all k (k - 1) / 2 of them: the leader is
    picked from the data, so correcting only its own k - 1 comparisons lets an equal group fall out of the tie too
    often (5-8 % at 4 groups, 13 % at 9); over all pairs the family-wise error stays at alpha whichever group leads.
    A group whose adjusted p against the leader is >= alpha (or undefined) ties with it."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    if not groups:
        raise ValueError("best_of needs at least one group")
    sign = -1.0 if better == "higher" else 1.0
    means = {label: float(np.mean(_array(v))) for label, v in groups.items()}
    leader = min(groups, key=lambda label: sign * means[label])
    others = [g for g in groups if g != leader]
    labels = list(groups)
    pairs = [(x, y) for i, x in enumerate(labels) for y in labels[i + 1:]]
    p_all = dict(zip(pairs, holm([_family_p(groups[x], groups[y], alpha) for x, y in pairs])))
    comps = {g: compare(groups[leader], groups[g], alpha, better) for g in others}
    adjusted = {g: p_all.get((leader, g), p_all.get((g, leader), math.nan)) for g in others}
    ties = [g for g in others if not adjusted[g] < alpha]
    return Best(label=leader, better=better, ties=ties, comparisons=comps, p_adjusted=adjusted, family=len(pairs))


def _family_p(a: Sequence[float], b: Sequence[float], alpha: float) -> float:
    """p_value, or nan (left out of the family) when the test cannot reach alpha at these n."""
    return math.nan if smallest_p(len(a), len(b)) >= alpha else p_value(a, b)


# ---- what a test could have found ----------------------------------------------------------------------------
@lru_cache(maxsize=4096)
def _min_detectable(na: int, nb: int, cv: float, alpha: float, power: float) -> float:
    from scipy import optimize
    from scipy.special import nctdtr, stdtrit  # scipy.stats' t and nct, without their per-call dispatch
    se = cv * math.sqrt(1 / na + 1 / nb)
    # Welch's df is estimated from the data, between min(n) - 1 and na + nb - 2; the noncentral t at the midpoint
    # matched simulated Welch power within half a point at n = 3..10. At the exact test's attainable level it is
    # within 1 point of the simulated exact test at 4, 5 and 8 a side (bench/power.py).
    df = (min(na, nb) - 1 + na + nb - 2) / 2
    crit = float(stdtrit(df, 1 - alpha / 2))

    def gap(delta: float) -> float:
        near = 1.0 - float(nctdtr(df, delta / se, crit))
        near = min(1.0, max(0.0, near)) if math.isfinite(near) else 1.0
        return (near if math.isfinite(near) else 1.0) - power
    return float(optimize.brentq(gap, 1e-9, 60 * se))


def min_detectable(na: int, nb: int, cv: float, alpha: float = 0.05, power: float = POWER) -> float:
    """The smallest relative change of the mean that Welch's test at `alpha` finds with probability `power`, for two
    groups of na and nb trials whose trial values vary with coefficient of variation `cv` (noncentral t). At CV 5 %
    and alpha 0.05: about 17 % at n = 3 a side, 11 % at 5, 7 % at 10. Pass alpha / m for the first step of a Holm
    family of m tests. nan when either side has fewer than 2 trials or cv is not positive."""
    if na < 2 or nb < 2 or not cv > 0 or not math.isfinite(cv):
        return math.nan
    level = attainable(na, nb, alpha)
    if level <= 0:
        return math.nan
    return _min_detectable(int(na), int(nb), float(cv), float(level), float(power))


def attainable(na: int, nb: int, alpha: float) -> float:
    """The largest p-level at most alpha that the test can reach: the exact test's p-values are multiples of
    1 / C(na + nb, na) (2 / C with equal sides), so at 4 + 4 'p < 0.05' is 'p <= 0.029' and the change it finds is
    14.5 %, not Welch's 13 % (bench/power.py). alpha itself for Welch's test."""
    if not exact(na, nb):
        return alpha
    step = smallest_p(na, nb)
    return math.floor(alpha / step * (1 + 1e-9)) * step


def could_find(c: Comparison, alpha: float = 0.05, family: int = 1) -> str:
    """'x %' for a comparison that did not reject: the smallest change it finds 80 % of the time at the pooled CV
    of its two sides, at the level of a Holm family's first step (alpha / family: what the first row of a family of
    `family` tests must reach). Empty when that cannot be computed or no change can reach it (see unreachable)."""
    level = alpha / max(1, family)
    if smallest_p(c.a.n, c.b.n) >= level:
        return ""
    cvs = [s.cv for s in (c.a, c.b) if math.isfinite(s.cv)]
    m = min_detectable(c.a.n, c.b.n, float(np.sqrt(np.mean(np.square(cvs)))) if cvs else math.nan, level)
    return "" if not math.isfinite(m) else f"{m:.0%}"


def unreachable(na: int, nb: int, alpha: float = 0.05, family: int = 1) -> str:
    """Why no change at all is detectable with na + nb trials at alpha / family ('' when some is): the exact test's
    smallest p does not reach the level."""
    level = alpha / max(1, family)
    low = smallest_p(na, nb)
    if low < level:
        return ""
    where = f" (alpha {alpha:g} / {family} tests)" if family > 1 else ""
    return f"no change detectable with {na} + {nb} trials: the exact test's smallest p is {low:.2g}, the level " \
           f"{level:.2g}{where}"


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
STRATA_DRAWS = 4999  # random splits of a stratified permutation test too large to enumerate (seeded: repeatable)


def units(cells: Sequence[tuple[Sequence[float], Sequence[float]]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Independent units of matched cells: cells that share one baseline (several IPsec variants against one run
    without IPsec) are one unit, their b trials pooled against it; a shared baseline's noise would otherwise count
    once per cell as if independent (16 % false findings with three cells on one baseline, instead of 5 %)."""
    units: dict[tuple, tuple[np.ndarray, list[float]]] = {}
    for a, b in cells:
        xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if not xa.size or not xb.size or not (np.all(xa > 0) and np.all(xb > 0)):
            continue
        units.setdefault(tuple(xa.tolist()), (xa, []))[1].extend(xb.tolist())
    return [(xa, np.asarray(xb)) for xa, xb in units.values()]


def _split_logs(mask: np.ndarray, xa: np.ndarray, xb: np.ndarray) -> np.ndarray:
    """log(mean b / mean a) for each split of a unit's pooled trials (a mask row: which are a's)."""
    x = np.concatenate([xa, xb])
    sa = mask @ x
    return np.log((x.sum() - sa) / xb.size / (sa / xa.size))


@lru_cache(maxsize=32)
def _strata_draws(sizes: tuple[tuple[int, int], ...], draws: int, seed: int) -> tuple[np.ndarray, ...]:
    """`draws` seeded random splits of each unit (a float mask per unit: which trials are a's), drawn without looking
    at any data, so a family of tests of the same shape draws them once (a simulation's thousands of reports)."""
    rng = np.random.default_rng(seed)
    masks = []
    for na, nb in sizes:
        idx = rng.permuted(np.broadcast_to(np.arange(na + nb), (draws, na + nb)), axis=1)
        mask = np.zeros((draws, na + nb))
        mask[np.arange(draws)[:, None], idx[:, :na]] = 1.0
        masks.append(mask)
    return tuple(masks)


def _strata_logs(units, draws: int, seed: int = 0) -> tuple[float, np.ndarray, float]:
    """The observed sum over units of log(mean b / mean a), and the same sum for splits of each unit's pooled trials
    (every combination when there are at most EXACT_SPLITS in all, else `draws` random ones), and the smallest p
    those splits can give."""
    total = 1
    for xa, xb in units:
        total *= math.comb(xa.size + xb.size, xa.size)
    observed = float(sum(math.log(xb.mean() / xa.mean()) for xa, xb in units))
    if total > EXACT_SPLITS:
        masks = _strata_draws(tuple((xa.size, xb.size) for xa, xb in units), draws, seed)
        sums = sum(_split_logs(mask, xa, xb) for mask, (xa, xb) in zip(masks, units))
        return observed, sums, 1 / (1 + draws)
    sums = np.zeros(1)
    for xa, xb in units:
        logs = _split_logs(_splits(xa.size, xb.size), xa, xb)
        sums = (sums[:, None] + logs[None, :]).ravel()
    mirrored = all(xa.size == xb.size for xa, xb in units)  # swapping every unit's sides gives the same |sum|
    return observed, sums, (2 if mirrored else 1) / total


def cells_p(cells: Sequence[tuple[Sequence[float], Sequence[float]]],
            alpha: float = 0.05) -> tuple[float, float, str | None]:
    """One test of "b differs from a" over matched cells (each cell: a's and b's per-trial values): (p, the
    geometric-mean ratio b/a over the independent units, why it cannot judge). A stratified permutation test: the
    statistic is the sum over units of log(mean b / mean a), its null distribution comes from splitting each unit's
    own trials anew (exact when there are few enough splits, else 4999 seeded random ones), so the error rate holds
    for any distribution of trial values and any number of cells. Cells sharing a baseline are one unit (units).
    Never a verdict from one repetition: TOO_FEW when no unit has 2 trials a side; NO_TEST when the splits cannot
    reach p < alpha."""
    units_ = units(cells)
    if not units_:
        return math.nan, math.nan, TOO_FEW
    ratio = float(np.exp(np.mean([math.log(xb.mean() / xa.mean()) for xa, xb in units_])))
    if max(min(xa.size, xb.size) for xa, xb in units_) < 2:
        return math.nan, ratio, TOO_FEW
    if all(np.ptp(np.concatenate([xa, xb])) == 0 for xa, xb in units_):
        return (1.0, ratio, None) if ratio == 1 else (math.nan, ratio, NO_SPREAD)
    observed, sums, floor = _strata_logs(units_, STRATA_DRAWS)
    if floor >= alpha:
        return math.nan, ratio, NO_TEST
    exceed = int(np.sum(np.abs(sums) >= abs(observed) * (1 - 1e-9) - 1e-12))
    random_splits = floor == 1 / (1 + STRATA_DRAWS)  # the observed split is counted among the draws (valid p)
    return (float((1 + exceed) / (1 + sums.size)) if random_splits else float(exceed / sums.size)), ratio, None


def finding_words(p_adjusted: float, ratio: float, why: str | None, alpha: float = 0.05) -> str:
    """What one Holm-corrected finding may say: 'significant: higher/lower' or 'not significant: cannot tell'."""
    if why:
        return f"cannot tell ({why})" if why != NO_SPREAD else why
    if not p_adjusted < alpha:
        return f"not significant (Holm p = {p_adjusted:.2g})"
    return f"significant: {'higher' if ratio > 1 else 'lower'} (Holm p = {p_adjusted:.2g})"


CONTRAST_MIN_N = 5  # trials a group before a contrast of means is tested


@dataclass(frozen=True)
class Contrast:
    estimate: float                     # sum of weight * mean
    ci: tuple[float, float]             # Welch-Satterthwaite t interval
    p: float                            # two-sided; nan when it cannot be judged
    why: str | None = None


def contrast(terms: Sequence[tuple[float, Sequence[float]]], confidence: float = 0.95) -> Contrast:
    """A test of sum(w * mean(group)) = 0 over independent groups of per-trial values, e.g. whether one mechanism's
    cost (B+M minus B) exceeds another's: (IPsec - Reference) - (Reference - CS) has weights +1, -2, +1. Welch's
    approach: the variance sum(w^2 s^2 / n), with Hsu's conservative df (the smallest group's n - 1). Comparing two estimates by eye ("3.1 > 2.9 ms")
    says yes about half the time when they are equal; this test keeps its 5 %."""
    merged: dict[int, list] = {}
    for w, vals in terms:  # the same group twice (a scenario in both costs): its weights add
        key = id(vals)
        merged[key] = [merged.get(key, [0.0])[0] + w, vals]
    parts = [(w, _array(v)) for w, v in merged.values() if w != 0]
    est = float(sum(w * x.mean() for w, x in parts))
    if any(x.size < 2 for _, x in parts):
        return Contrast(est, NAN_PAIR, math.nan, TOO_FEW)
    small = any(x.size < CONTRAST_MIN_N for _, x in parts)
    var = [w * w * x.var(ddof=1) / x.size for w, x in parts]
    total = sum(var)
    if total == 0:
        return Contrast(est, (est, est), 1.0 if est == 0 else math.nan, None if est == 0 else NO_SPREAD)
    # Hsu's conservative df, the smallest group's n - 1, not Satterthwaite's: with a -2 weight on one group (S1's
    # shared Reference) a busy machine's bimodal trials gave Satterthwaite's tail 1.5-1.9 times alpha / 8 at 8-20
    # trials; Hsu's stays within it (0.35-1.01 times)
    df = float(min(x.size for _, x in parts) - 1)
    from scipy import stats as sps
    se = math.sqrt(total)
    half = float(sps.t.ppf((1 + confidence) / 2, df)) * se
    if small:  # Welch's contrast leans on normal trials; below 5 a group a busy machine's trials break it
        return Contrast(est, (est - half, est + half), math.nan, NO_TEST)
    return Contrast(est, (est - half, est + half), float(2 * sps.t.sf(abs(est) / se, df)))
