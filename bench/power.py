"""What n buys: the smallest change of the mean that vnetbench's test finds 80 % of the time.

The test is Welch's two-sided t-test on one value per trial (stats.compare), at alpha 0.05 for one comparison; in a
printed family of m tests Holm's first step is at alpha / m (the worst case for a single real change among nulls).
For each n (trials per side) and CV (the spread of the trial values), this simulates normal trial values with a
relative change d between the two sides and finds the smallest d (0.5 % steps) that the test rejects in >= 80 % of
runs; beside it, the same from the noncentral t distribution (stats.min_detectable, what `compare` prints).

    .venv/bin/python bench/power.py                 # CV 5 %, n = 3, 5, 10, families of 1 and 10
    .venv/bin/python bench/power.py --cv 0.02 --n 3 4 5 6 8 10 20 --family 1 8 --runs 20000
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.special import stdtr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vnetbench import stats  # noqa: E402


def welch_p(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Welch's two-sided p of every row pair (the formula of stats.welch_p, vectorized)."""
    na, nb = a.shape[1], b.shape[1]
    va, vb = a.var(axis=1, ddof=1) / na, b.var(axis=1, ddof=1) / nb
    t = (a.mean(axis=1) - b.mean(axis=1)) / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    return 2 * stdtr(df, -np.abs(t))


def smallest_change(n: int, cv: float, alpha: float, runs: int, seed: int, power: float = stats.POWER) -> float:
    rng = np.random.default_rng(seed)
    noise_a = rng.normal(0, cv, (runs, n))
    noise_b = rng.normal(0, cv, (runs, n))
    for step in range(1, 400):
        d = step * 0.005
        if (welch_p(1 + noise_a, 1 + d + noise_b) < alpha).mean() >= power:
            return d
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cv", type=float, default=0.05)
    ap.add_argument("--n", type=int, nargs="+", default=[3, 5, 10])
    ap.add_argument("--family", type=int, nargs="+", default=[1, 10], help="tests in the printed family (Holm)")
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    print(f"Welch's two-sided t-test on per-trial values, CV {a.cv:.0%}, power 80 %, {a.runs} simulated runs each")
    print(f"{'trials per side':>15}  " + "  ".join(f"{f'family of {m}':>24}" for m in a.family))
    print(f"{'':>15}  " + "  ".join(f"{'simulated / noncentral t':>24}" for _ in a.family))
    for n in a.n:
        cells = []
        for m in a.family:
            alpha = 0.05 / m
            sim = smallest_change(n, a.cv, alpha, a.runs, a.seed)
            nct = stats.min_detectable(n, n, a.cv, alpha)
            cells.append(f"{sim:>11.1%} / {nct:>10.1%}")
        print(f"{n:>15}  " + "  ".join(f"{c:>24}" for c in cells))


if __name__ == "__main__":
    main()
