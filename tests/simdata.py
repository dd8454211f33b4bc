"""Seeded null data for the error-rate tests and bench/power.py: trial values with CV about 5 % around 100, and a
noisy machine's bimodal trials (noisy())."""
from __future__ import annotations

import numpy as np

DISTRIBUTIONS = ("normal", "lognormal", "two-level", "noisy")
NOISY_SHARE, NOISY_SHIFT, NOISY_CV = 0.25, 0.20, 0.02  # a busy 2-core machine: a quarter of trials 20 % lower


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
    if dist == "noisy":
        return noisy(rng, size, mean)
    raise ValueError(dist)


def true_mean(dist: str, mean: float = 100.0) -> float:
    """The mean the draws of `dist` scatter around (the noisy mixture's low share pulls it down)."""
    return mean * (1 - NOISY_SHARE * NOISY_SHIFT) if dist == "noisy" else mean


def true_median(dist: str, mean: float = 100.0, cv: float = 0.05) -> float:
    """The median of the draws of `dist` (a value claim is decided on the median)."""
    if dist == "lognormal":
        return mean * np.exp(-np.log1p(cv * cv) / 2)
    if dist != "noisy":
        return mean
    from scipy.optimize import brentq
    from scipy.stats import norm
    low, high = mean * (1 - NOISY_SHIFT), mean

    def below(x: float) -> float:   # the mixture's CDF less one half
        return (NOISY_SHARE * norm.cdf(x, low, NOISY_CV * low) + (1 - NOISY_SHARE) * norm.cdf(x, high, NOISY_CV * high)
                - 0.5)
    return float(brentq(below, low, high * 1.2))


def noisy(rng: np.random.Generator, size, mean: float = 100.0, share: float = NOISY_SHARE,
          shift: float = NOISY_SHIFT, cv: float = NOISY_CV) -> np.ndarray:
    """A noisy machine's trials: most at `mean` with CV 2 %, a `share` of them `shift` lower (other work took the
    CPU), each level with the same CV: a real bimodal mixture, the levels 10 CVs apart at a 20 % shift."""
    low = rng.random(size) < share
    return np.where(low, mean * (1 - shift), mean) * (1 + rng.normal(0, cv, size))
