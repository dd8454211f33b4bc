"""What n buys: the smallest change of the mean that vnetbench's test finds 80 % of the time.

The test is vnetbench's own (stats.p_value): up to 8 trials a side the exact permutation test of Welch's t (every
split of the pooled trials counted), past that the same test over 9999 seeded random splits, on one value per trial, at alpha 0.05 for
one comparison; in a printed family of m tests Holm's first step is at alpha / m (the worst case for a single real
change among nulls). Where the exact test's smallest p (stats.smallest_p) does not reach that level no change can be
found: "none" (3 + 3 trials: the smallest p is 0.1).

For each n (trials per side) this simulates trial values with a relative change d of the mean between the two sides
and finds, by bisection on d (to 0.1 %, the same simulated trials at every d), the smallest d that the test rejects
in >= 80 % of runs. The exact test is vectorized: for a (runs x 2n) matrix of trial values, the sums and sums of
squares of side a over every split are two matrix products with the masks of stats._splits, in chunks of runs.
--dist normal: normal trials with CV --cv, side b shifted by d (the same spread on both sides, what the noncentral t
assumes); --dist noisy: a busy machine's bimodal trials (stats.noisy_trials: a quarter 20 % lower, CV 2 % per level;
CV about 9.3 % in all), side b multiplied by 1 + d. Beside it, the same from the noncentral t (stats.min_detectable,
what `compare` prints), at the distribution's CV.

    .venv/bin/python bench/power.py                 # CV 5 %, n = 3, 4, 5, 8, 10, families of 1 and 10
    .venv/bin/python bench/power.py --dist noisy --n 4 5 8 10 --family 1 10 --runs 5000
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy.special import stdtr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vnetbench.results import stats  # noqa: E402

CHUNK = 2_000_000  # runs x splits held at once (a few arrays of this many floats: tens of MB)
STEP = 0.001       # bisection stops when the bracket is this narrow (0.1 % of the mean)


def welch_p(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Welch's two-sided p of every row pair (the formula of stats.welch_p, vectorized)."""
    na, nb = a.shape[1], b.shape[1]
    va, vb = a.var(axis=1, ddof=1) / na, b.var(axis=1, ddof=1) / nb
    t = (a.mean(axis=1) - b.mean(axis=1)) / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    return 2 * stdtr(df, -np.abs(t))


def permutation_p(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The permutation p of |Welch's t| of every row pair (stats.permutation_p, vectorized): the share of the
    splits (every one, or the seeded random ones) of each row's pooled trials whose |t| is at least the observed one. With equal sides a split and its
    mirror give the same |t|, so only the splits that keep trial 0 on side a are counted (half of them: the same
    share)."""
    na, nb = a.shape[1], b.shape[1]
    if not stats._permuted(na, nb):
        raise ValueError(f"{na} + {nb} trials are past the permutation test")
    mask = stats._splits(na, nb) if stats.exact(na, nb) else stats._random_splits(na, nb)
    if na == nb and stats.exact(na, nb):
        mask = mask[mask[:, 0]]
    m = mask.astype(float).T                                     # (trials, splits); split 0 is the observed one
    x = np.concatenate([a, b], axis=1)
    x = x - x.mean(axis=1, keepdims=True)                        # t is unchanged by shifting and scaling a row
    x = x / x.std(axis=1, keepdims=True)
    total, total_sq = x.sum(axis=1, keepdims=True), (x * x).sum(axis=1, keepdims=True)
    out = np.empty(x.shape[0])
    rows = max(1, CHUNK // m.shape[1])
    for i in range(0, x.shape[0], rows):
        xs, sl = x[i:i + rows], slice(i, i + rows)
        sum_a, sq_a = xs @ m, (xs * xs) @ m
        t = stats._welch_t(sum_a, sq_a, na, total[sl] - sum_a, total_sq[sl] - sq_a, nb)
        observed = t[:, :1]
        out[sl] = np.mean(t >= observed * (1 - 1e-9) - 1e-12, axis=1)
    return out


def test_p(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """vnetbench's test (stats.p_value) on every row pair."""
    return permutation_p(a, b) if stats._permuted(a.shape[1], b.shape[1]) else welch_p(a, b)


def draw(rng: np.random.Generator, dist: str, cv: float, shape) -> np.ndarray:
    """Trial values around 1 (normal, CV `cv`) or stats.noisy_trials (true mean 0.95)."""
    return 1 + rng.normal(0, cv, shape) if dist == "normal" else stats.noisy_trials(rng, shape)


def noisy_cv() -> float:
    """The CV of stats.noisy_trials, from its two levels: E[x^2] / E[x]^2 - 1."""
    share, shift, cv = stats.NOISY_SHARE, stats.NOISY_SHIFT, stats.NOISY_CV
    mean = 1 - share * shift
    second = ((1 - share) + share * (1 - shift) ** 2) * (1 + cv * cv)
    return math.sqrt(second / mean ** 2 - 1)


class Power:
    """The rejection rate at any change d, on one fixed set of simulated trials (common random numbers: the
    rate rises with d without the noise of new draws)."""

    def __init__(self, n: int, dist: str, cv: float, runs: int, seed: int):
        rng = np.random.default_rng(seed)
        self.a, self.b, self.dist = draw(rng, dist, cv, (runs, n)), draw(rng, dist, cv, (runs, n)), dist
        self.evaluations = 0

    def __call__(self, d: float, level: float) -> float:
        self.evaluations += 1
        b = self.b + d if self.dist == "normal" else self.b * (1 + d)
        return float(np.mean(test_p(self.a, b) < level))


def smallest_change(power: Power, level: float, guess: float, target: float = stats.POWER) -> float:
    """The smallest d (to STEP) with power(d) >= target, by bisection; the bracket starts at 1.5 x guess."""
    lo, hi = 0.0, max(1.5 * guess, 4 * STEP) if math.isfinite(guess) else 0.1
    while power(hi, level) < target:
        lo, hi = hi, 2 * hi
        if hi > 10:
            return math.nan
    while hi - lo > STEP:
        mid = (lo + hi) / 2
        if power(mid, level) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def check(n: int, seed: int = 0) -> None:
    """The vectorized test gives stats.p_value's p on a few random pairs."""
    rng = np.random.default_rng(seed)
    a, b = stats.noisy_trials(rng, (20, n)), stats.noisy_trials(rng, (20, n)) * 1.1
    ours = test_p(a, b)
    theirs = np.array([stats.p_value(x, y) for x, y in zip(a, b)])
    assert np.allclose(ours, theirs, rtol=1e-9, atol=1e-12), (n, ours, theirs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cv", type=float, default=0.05, help="the trials' CV (--dist normal)")
    ap.add_argument("--dist", choices=("normal", "noisy"), default="normal")
    ap.add_argument("--n", type=int, nargs="+", default=[3, 4, 5, 8, 10])
    ap.add_argument("--family", type=int, nargs="+", default=[1, 10], help="tests in the printed family (Holm)")
    ap.add_argument("--runs", type=int, default=10000, help="simulated runs per n (the exact test at 8 + 8 "
                    "counts 6435 splits a run)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    cv = a.cv if a.dist == "normal" else noisy_cv()
    what = f"normal trials, CV {cv:.0%}" if a.dist == "normal" else \
        f"a busy machine's bimodal trials (stats.noisy_trials, CV {cv:.1%})"
    print(f"vnetbench's test ({stats.TEST}), {what}, power 80 %, {a.runs} simulated runs at each n; "
          f"'none': the exact test's smallest p does not reach the level")
    print(f"{'trials per side':>15}  " + "  ".join(f"{f'family of {m}':>24}" for m in a.family))
    print(f"{'':>15}  " + "  ".join(f"{'simulated / noncentral t':>24}" for _ in a.family))
    start = time.monotonic()
    for n in a.n:
        if stats._permuted(n, n):
            check(n)
        power = Power(n, a.dist, cv, a.runs, a.seed)
        cells = []
        for m in a.family:
            level = 0.05 / m
            nct = stats.min_detectable(n, n, cv, level)
            if stats.smallest_p(n, n) >= level:
                sim = "none"
            else:
                sim = f"{smallest_change(power, level, nct):.1%}"
            cells.append(f"{sim:>11} / {nct:>10.1%}")
        print(f"{n:>15}  " + "  ".join(f"{c:>24}" for c in cells), flush=True)
    print(f"({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
