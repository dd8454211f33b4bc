"""Seeded null data for the error-rate tests and bench/power.py: trial values with CV about 5 % around 100."""
from __future__ import annotations

import numpy as np

DISTRIBUTIONS = ("normal", "lognormal", "two-level")


def draw(rng: np.random.Generator, dist: str, size, mean: float = 100.0, cv: float = 0.05) -> np.ndarray:
    """normal; lognormal (the same CV, right-skewed); two-level: each trial lands on one of two levels 1.4 CV apart
    (a placement that flips between runs: bimodal throughput) plus noise of 0.71 CV around each level. With levels
    much further apart than their noise (3.5x), three trials that all land on one level look like a real
    difference: Welch's tail at n = 3 is then anti-conservative (12 % family-wise over 8 Holm-corrected rows)."""
    if dist == "normal":
        return rng.normal(mean, cv * mean, size)
    if dist == "lognormal":
        sigma = np.sqrt(np.log1p(cv * cv))
        return mean * rng.lognormal(-sigma * sigma / 2, sigma, size)
    if dist == "two-level":
        level = np.where(rng.random(size) < 0.5, -1.0, 1.0) * 0.7 * cv * mean
        return mean + level + rng.normal(0, 0.71 * cv * mean, size)
    raise ValueError(dist)
