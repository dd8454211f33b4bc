#!/usr/bin/env python3
"""Two distribution-free intervals for a scorecard ratio row, on a busy cell beside a quiet one, with the true ratio
on an edge of the row's band (either verdict is then wrong): the one the scorecard decides on (each cell's exact
order-statistic interval of its median at the square root of the level: scorecard._median_ratio_ci) and
Hodges-Lehmann's factor with Moses' interval (the median of the trials' pairwise ratios; every factor Mann-Whitney's
exact test does not reject), which is narrower but estimates another quantity when the cells' shapes differ.

    .venv/bin/python bench/ratio_intervals.py [--cells 4000] [--level 0.95]

The cells are tests/simdata.py's: the busy one a noisy machine's mixture (a quarter of its trials 20 % lower, CV 2 %
within each level) scaled so that its median is the row's level, the quiet one normal with CV 2 %; the band is a
claim of 2.0 with tolerance 0.25, the true medians' ratio at 1.6 or 2.5. Prints each method's share of wrong
verdicts (the interval wholly inside or wholly outside the band) and its median width, per n and busy cell.
"""
from __future__ import annotations

import argparse
import math
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from simdata import noisy, true_median  # noqa: E402
from vnetbench.results import scorecard  # noqa: E402


@lru_cache(maxsize=None)
def u_cdf(n: int, m: int) -> np.ndarray:
    """P(U <= u): Mann-Whitney's U of n trials against m, every order equally likely (the largest trial is a's,
    adding m to U, or b's)."""
    row = [np.ones(1) for _ in range(m + 1)]
    for i in range(1, n + 1):
        cur = [np.ones(1)]
        for j in range(1, m + 1):
            counts = np.zeros(i * j + 1)
            counts[j:j + row[j].size] += row[j]
            counts[:cur[j - 1].size] += cur[j - 1]
            cur.append(counts)
        row = cur
    return np.cumsum(row[m]) / row[m].sum()


def moses(a: np.ndarray, b: np.ndarray, level: float) -> tuple[float, float]:
    d = np.sort(np.subtract.outer(np.log(a), np.log(b)).ravel())
    k = int((u_cdf(a.size, b.size) <= (1 - level) / 2).sum())
    return (math.exp(d[k - 1]), math.exp(d[d.size - k])) if k else (math.nan, math.nan)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=4000, help="simulated pairs of cells per case (default 4000)")
    ap.add_argument("--level", type=float, default=0.95, help="the intervals' level (default 0.95)")
    args = ap.parse_args()
    rng, median = np.random.default_rng(5), true_median("noisy", 1.0)
    band = (2.0 / 1.25, 2.0 * 1.25)
    methods = {"medians' product": lambda a, b: scorecard._median_ratio_ci([list(a), list(b)], args.level),
               "Hodges-Lehmann / Moses": lambda a, b: moses(a, b, args.level)}
    print(f"{'n':>3} {'busy':>4} {'true':>5}  " + "  ".join(f"{m + ': wrong, width':>34}" for m in methods))
    for n in (4, 6, 12, 24):
        for busy in "ab":
            for true in band:
                wrong = {m: 0 for m in methods}
                width = {m: [] for m in methods}
                for _ in range(args.cells):
                    la, lb = 100.0 * true, 100.0
                    a = noisy(rng, n, la / median) if busy == "a" else rng.normal(la, 0.02 * la, n)
                    b = noisy(rng, n, lb / median) if busy == "b" else rng.normal(lb, 0.02 * lb, n)
                    for m, ci in methods.items():
                        lo, hi = ci(a, b)
                        if math.isfinite(lo):
                            wrong[m] += (band[0] <= lo and hi <= band[1]) or hi < band[0] or lo > band[1]
                            width[m].append(math.log(hi / lo))
                cols = [f"{100 * wrong[m] / args.cells:>6.2f} %, {np.median(width[m]) if width[m] else math.nan:>7.3f}"
                        for m in methods]
                print(f"{n:>3} {busy:>4} {true:>5.2f}  " + "  ".join(f"{c:>34}" for c in cols), flush=True)


if __name__ == "__main__":
    main()
