"""What each interval vnetbench prints covers: the measured coverage of its 95 % intervals at n = 2 .. 10 trials a
group and at the card and full profiles' 11, 12, 15, 24 and 30, in three settings:

    normal    every group's trials normal, CV 5 %
    busy      every group's trials a busy machine's bimodal ones (stats.noisy_trials: a quarter of trials 20 % lower,
              CV 2 % per level; true mean 0.95 of the high level)
    one busy  a quiet baseline against a busy run: CS and Reference normal with CV 2 % (the busy machine's own
              noise), IPsec bimodal (only the two-group and three-group intervals)

The intervals (truth: the groups' true means, 0.95 x the scale for bimodal trials):

    mean      the Student-t interval of the mean (Summary.ci_mean)
    median    the exact order-statistic interval of the median (Summary.ci_median), beside the coverage it states
              (Summary.ci_median_coverage; below 6 trials it is min .. max and states less than 95 %); truth: the
              true median (the bimodal mixture's: where its CDF is 1/2)
    ratio     Fieller's interval of mean(IPsec) / mean(Reference), two independent groups (stats.ratio_ci), true
              means 1.5 and 1.2 (x 0.95 when bimodal)
    diff      Welch's interval of mean(IPsec) - mean(Reference) (stats.diff_ci)
    contrast  Fieller's interval of S1's (Reference - CS) / (IPsec - Reference) (stats.contrast_ratio), three groups
              with true means 1.0, 1.2, 1.5 (x 0.95 when bimodal)
    sums      the delta-method interval of a ratio of sums (dataset.ratio_of_sums: CPU per Gbit over trials), one
              group: each trial's work (Gbit) drawn as IPsec's trials, its CPU seconds normal around 1 (CV 5 %, 2 %
              when the machine is busy: a busy trial's CPU is not lower, its work is); truth: E[CPU] / E[work]
An interval that does not exist (Fieller's when the denominator cannot be told from 0: unbounded) covers; the share
of such draws is printed. The mean's and median's intervals are computed for every draw at once (checked against
summarize() on the first draws); the others by vnetbench's own functions, draw by draw. Last, stats.t_coverage(n),
which the S3 / S4 / S5 tables print in their notes, is checked against this measurement (within 0.02).

    .venv/bin/python bench/coverage.py                         # 100000 draws (mean, median, sums), 10000 (others)
    .venv/bin/python bench/coverage.py --n 3 5 --loop-draws 2000
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import optimize
from scipy.special import ndtr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vnetbench.results import dataset, stats  # noqa: E402

CV, QUIET_CV = 0.05, stats.NOISY_CV
MEANS = (1.0, 1.2, 1.5)                 # CS, Reference, IPsec (S1's shape); ratio and diff are IPsec against Reference
NUM, DEN = (-1, 1, 0), (0, -1, 1)       # (Reference - CS) / (IPsec - Reference)
NOISY_MEAN = 1 - stats.NOISY_SHARE * stats.NOISY_SHIFT
TOLERANCE = 0.02                        # stats.t_coverage must agree with the measurement this closely
SETTINGS = {                            # each group's trials: CS, Reference, IPsec
    "normal": ("normal", "normal", "normal"),
    "busy": ("noisy", "noisy", "noisy"),
    "one busy": ("quiet", "quiet", "noisy"),
}
TITLES = {"normal": f"normal trials, CV {CV:.0%}",
          "busy": "a busy machine's bimodal trials (stats.noisy_trials) in every group",
          "one busy": f"CS and Reference normal with CV {QUIET_CV:.0%} (quiet), IPsec bimodal (busy)"}


def draw(rng: np.random.Generator, dist: str, shape, scale: float = 1.0) -> np.ndarray:
    """Trial values of a group whose high level (normal: mean) is `scale`."""
    if dist in ("normal", "quiet"):
        return scale * (1 + rng.normal(0, CV if dist == "normal" else QUIET_CV, shape))
    return scale * stats.noisy_trials(rng, shape)


def true_mean(dist: str, scale: float = 1.0) -> float:
    return scale * (NOISY_MEAN if dist == "noisy" else 1.0)


def noisy_median() -> float:
    """The median of stats.noisy_trials: where the mixture's CDF is 1/2."""
    share, shift, cv = stats.NOISY_SHARE, stats.NOISY_SHIFT, stats.NOISY_CV

    def cdf(x: float) -> float:
        return share * ndtr((x / (1 - shift) - 1) / cv) + (1 - share) * ndtr((x - 1) / cv) - 0.5
    return float(optimize.brentq(cdf, 0.5, 1.5, xtol=1e-14))


def true_median(dist: str) -> float:
    return 1.0 if dist == "normal" else noisy_median()


def t_cover(x: np.ndarray, truth: float, confidence: float = 0.95) -> np.ndarray:
    """Whether each row's Student-t interval of the mean (Summary.ci_mean) covers `truth`."""
    n = x.shape[1]
    half = stats.t_quantile(confidence, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    return np.abs(x.mean(axis=1) - truth) <= half


def t_intervals(x: np.ndarray, confidence: float = 0.95) -> np.ndarray:
    n = x.shape[1]
    half = stats.t_quantile(confidence, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    return np.stack([x.mean(axis=1) - half, x.mean(axis=1) + half], axis=1)


def median_intervals(x: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, float]:
    """Every row's exact order-statistic interval of the median (Summary.ci_median) and the coverage it states."""
    n = x.shape[1]
    s = np.sort(x, axis=1)
    k, stated = stats.median_ci_rank(n, confidence)
    k = max(k, 0)  # too few trials: min .. max, stating its own (lower) coverage
    return s[:, [k, n - 1 - k]], stated


def checked(x: np.ndarray, rows: int = 50) -> None:
    """The vectorized intervals are summarize()'s on the first rows."""
    t, med = t_intervals(x[:rows]), median_intervals(x[:rows])[0]
    for i, row in enumerate(x[:rows]):
        s = stats.summarize(row)
        assert np.allclose(s.ci_mean, t[i], rtol=1e-12), (s.ci_mean, t[i])
        assert np.allclose(s.ci_median, med[i], rtol=0), (s.ci_median, med[i])


def sums_cover(rng: np.random.Generator, dist: str, draws: int, n: int) -> float:
    """How often the delta-method interval of sum(CPU) / sum(work) (dataset.ratio_of_sums) covers E[CPU] / E[work]."""
    work = draw(rng, dist, (draws, n), MEANS[2])
    cpu = 1 + rng.normal(0, CV if dist == "normal" else QUIET_CV, (draws, n))
    total = work.sum(axis=1, keepdims=True)
    r = cpu.sum(axis=1, keepdims=True) / total
    shares = r + (cpu - r * work) * n / total
    half = stats.t_quantile(0.95, n - 1) * shares.std(axis=1, ddof=1) / math.sqrt(n)
    for i in range(20):  # the vectorized interval is ratio_of_sums'
        s = dataset.ratio_of_sums(stats.summarize(list(cpu[i] / work[i])), zip(cpu[i], work[i]))
        assert np.allclose(s.ci_mean, (r[i, 0] - half[i], r[i, 0] + half[i]), rtol=1e-9), (s.ci_mean, r[i], half[i])
    return float(np.mean(np.abs(r[:, 0] - 1 / true_mean(dist, MEANS[2])) <= half))


def covers(ci: tuple[float, float], truth: float) -> tuple[bool, bool]:
    """(covers, unbounded): a (nan, nan) interval is unbounded and covers."""
    if math.isnan(ci[0]):
        return True, True
    return ci[0] <= truth <= ci[1], False


def measure(setting: str, n: int, draws: int, loop_draws: int, seed: int) -> dict[str, float]:
    dists = SETTINGS[setting]
    rng = np.random.default_rng([seed, n, list(SETTINGS).index(setting)])
    out: dict[str, float] = {}
    if len(set(dists)) == 1:  # one kind of trials: the one-group intervals too
        dist = dists[0]
        x = draw(rng, dist, (draws, n))
        checked(x)
        out["mean"] = float(np.mean(t_cover(x, true_mean(dist))))
        med, stated = median_intervals(x)
        m = true_median(dist)
        out["median"] = float(np.mean((med[:, 0] <= m) & (m <= med[:, 1])))
        out["median stated"] = stated
    mu = [true_mean(d, scale) for d, scale in zip(dists, MEANS)]
    truths = {"ratio": mu[2] / mu[1], "diff": mu[2] - mu[1],
              "contrast": sum(w * x for w, x in zip(NUM, mu)) / sum(w * x for w, x in zip(DEN, mu))}
    hits = dict.fromkeys(truths, 0)
    unbounded = {"ratio": 0, "contrast": 0}
    groups = [draw(rng, d, (loop_draws, n), scale) for d, scale in zip(dists, MEANS)]
    for i in range(loop_draws):
        cells = [stats.summarize(g[i]) for g in groups]
        for key, ci in (("ratio", stats.ratio_ci(cells[1], cells[2])), ("diff", stats.diff_ci(cells[1], cells[2])),
                        ("contrast", stats.contrast_ratio(cells, NUM, DEN)[1])):
            hit, open_ = covers(ci, truths[key])
            hits[key] += hit
            if key in unbounded:
                unbounded[key] += open_
    out.update({k: v / loop_draws for k, v in hits.items()})
    out["sums"] = sums_cover(rng, dists[2], draws, n)
    out.update({f"{k} unbounded": v / loop_draws for k, v in unbounded.items()})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[2, 3, 4, 5, 6, 8, 10, 11, 12, 15, 24, 30],
                    help="trials a group (the profiles run 3 to 10; the card and full profiles 11, 12, 15, 24, 30)")
    ap.add_argument("--draws", type=int, default=100000, help="draws for the mean's and the median's intervals")
    ap.add_argument("--loop-draws", type=int, default=10000, help="draws for the ratio, difference and contrast")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    start = time.monotonic()
    results = {}
    for setting in SETTINGS:
        print(f"\nCoverage of vnetbench's 95 % intervals, {TITLES[setting]}; mean and median over {a.draws} draws, "
              f"the others over {a.loop_draws} (unbounded Fieller intervals count as covering: their share in brackets)")
        print(f"{'n':>3}  {'t (mean)':>8}  {'median (stated)':>15}  {'Fieller ratio':>14}  {'Welch diff':>10}  "
              f"{'contrast ratio':>14}  {'sums (delta)':>12}")
        for n in a.n:
            r = results[setting, n] = measure(setting, n, a.draws, a.loop_draws, a.seed)
            ratio = f"{r['ratio']:.3f}" + (f" ({r['ratio unbounded']:.0%})" if r["ratio unbounded"] else "")
            contrast = f"{r['contrast']:.3f}" + (f" ({r['contrast unbounded']:.0%})" if r["contrast unbounded"]
                                                 else "")
            mean = f"{r['mean']:.3f}" if "mean" in r else "—"
            median = f"{r['median']:.3f} ({r['median stated']:.3f})" if "median" in r else "—"
            print(f"{n:>3}  {mean:>8}  {median:>15}  {ratio:>14}  {r['diff']:>10.3f}  {contrast:>14}  "
                  f"{r['sums']:>12.3f}", flush=True)
    print("\nstats.t_coverage(n) (printed in the S3 / S4 / S5 table notes) against the bimodal trials' measured t "
          "coverage above:")
    bad = []
    for n in a.n:
        ours, theirs = results["busy", n]["mean"], stats.t_coverage(n)
        ok = abs(ours - theirs) <= TOLERANCE
        bad += [] if ok else [n]
        print(f"  n = {n:>2}: t_coverage {theirs:.3f}, measured {ours:.3f}: {'agrees' if ok else 'DIFFERS'}")
    print(f"({time.monotonic() - start:.0f} s)")
    if bad:
        sys.exit(f"stats.t_coverage differs from the measurement by more than {TOLERANCE} at n = {bad}")


if __name__ == "__main__":
    main()
