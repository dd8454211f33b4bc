#!/usr/bin/env python3
"""The card in rounds, simulated: tests/test_rounds.py's seeded loop (every claim kind, at the null and at its band's
edges, plus two claims where a verdict is right) over more cards, per trial distribution: the share of cards with any
wrong verdict (the card's promise: at most 5 %) and how often each right claim is decided.

    .venv/bin/python bench/rounds_sim.py [--cards 150] [--dist normal lognormal noisy] [--seed 26]

With the defaults it prints what the test suite asserts on (its seeds: [len(dist), 26], 150 cards).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the simulation is the test suite's (tests/test_rounds.py)

import test_rounds as sim  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cards", type=int, default=sim.CARDS)
    ap.add_argument("--dist", nargs="+", default=["normal", "lognormal", "noisy"])
    ap.add_argument("--seed", type=int, default=26)
    args = ap.parse_args()
    card = sim.spec()
    for dist in args.dist:
        began, rng = time.monotonic(), np.random.default_rng([len(dist), args.seed])
        got = [sim.play(rng, dist, card) for _ in range(args.cards)]
        wrong = np.array([[r.verdict in bad for r, (*_, bad) in zip(rows, sim.CLAIMS)] for rows in got])
        right = np.array([[r.verdict not in (sim.C, *bad) for r, (*_, bad) in zip(rows, sim.CLAIMS)] for rows in got])
        decided = ", ".join(f"{c[0]} {100 * d:.0f} %" for c, d in zip(sim.CLAIMS, right.mean(axis=0)))
        rows = ", ".join(f"{c[0]} {100 * w:.1f} %" for c, w in zip(sim.CLAIMS, wrong.mean(axis=0)) if w)
        print(f"{dist}: {args.cards} cards, any wrong verdict on {100 * wrong.any(axis=1).mean():.1f} % "
              f"({rows or 'none'}; {time.monotonic() - began:.0f} s); decided rightly: {decided}", flush=True)


if __name__ == "__main__":
    main()
