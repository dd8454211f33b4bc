"""Every printed family's false-mark rate on a noisy machine's trials: an independent run, with its own seeds and more
repetitions, of the null simulations of tests/test_noisy_verdicts.py (the same code: compare's tables of 8, 13 and 48
rows, S1's Tables II-IV and findings, S3's findings with shared baselines and its tables, the S4 card's direction
rows, S5's findings, tenant table, growth row and VM table).

Each simulated report draws every group from one distribution (nothing differs): simdata.noisy's bimodal mixture,
a `share` of the trials `shift` lower and CV 2 % within each level. A false mark is any significant verdict the
family prints; the table gives the share of reports with one (at most 0.05 is the family's promise).

    .venv/bin/python bench/noisy_verdicts.py            # 500 reports a cell (250 on the other mixtures): 14 min
    .venv/bin/python bench/noisy_verdicts.py --reps 300 --only compare S5 --n 5 10 --mix-n 10
    .venv/bin/python bench/noisy_verdicts.py --only compare --n --mix 0.4 0.1 --mix-n 10 --mix-reps 4000
    .venv/bin/python bench/noisy_verdicts.py --tail 9 10 20   # Welch's tail on each mixture, vectorized: ~40 s

--tail answers why a family built on Welch's t-test (past 8 trials a side) can leave its level: for each mixture and
n it draws --tail-draws null pairs and prints how often Welch's p falls below alpha / m, as a multiple of alpha / m
(1.00: nominal; above: the test marks more often than it says), for the first Holm levels of families of m tests.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the simulations are the test suite's (tests/test_noisy_verdicts.py)

from power import welch_p  # noqa: E402  (bench/ is this script's own folder on sys.path)
from test_noisy_verdicts import ALPHA, MIXES, NOISY, SIMULATIONS, Mix, above_alpha, rates  # noqa: E402

SEED = 424242  # this run's own draws: the tests seed theirs apart
FLAG = 0.01  # (!) beside a rate above 5 % beyond its simulation error: a one-sided binomial test at this level


def tail(mixes: list[Mix], ns: list[int], draws: int, ms=(1, 4, 8, 13, 48)) -> list[str]:
    lines = ["| mixture | n | " + " | ".join(f"alpha / {m}" for m in ms) + " |", "|---" * (len(ms) + 2) + "|"]
    rng = np.random.default_rng(SEED)
    for mix in mixes:
        for n in ns:
            p = np.concatenate([welch_p(mix(rng, (chunk, n), 1.0), mix(rng, (chunk, n), 1.0))
                                for chunk in [min(draws, 250_000)] * max(1, draws // 250_000)])
            lines.append(f"| {mix} | {n} | " + " | ".join(f"{np.mean(p < ALPHA / m) / (ALPHA / m):.2f}" for m in ms)
                         + " |")
    return lines + ["", f"Welch's p below alpha / m on {p.size:,} null pairs a row, as a multiple of alpha / m."]


def seed_of(sim: int, n: int, mix: int) -> int:
    return SEED + 100_000 * sim + 1000 * mix + n


def table(results: dict[tuple[str, int], float], ns: list[int], reps: dict[tuple[str, int], int]) -> list[str]:
    families = list(dict.fromkeys(f for f, _ in results))
    lines = ["| family | " + " | ".join(f"n = {n}" for n in ns) + " |", "|---" * (len(ns) + 1) + "|"]
    for f in families:
        cells = []
        for n in ns:
            r = results.get((f, n))
            flag = r is not None and above_alpha(r, reps[(f, n)], FLAG)
            cells.append("—" if r is None else f"{100 * r:.1f} %" + (" (!)" if flag else ""))
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    counts = sorted(set(reps.values()))
    error = 2 * (ALPHA * (1 - ALPHA) / min(counts)) ** 0.5
    lines.append("")
    lines.append(f"Reports per cell: {', '.join(map(str, counts))} (a family at 5 % reads 5 ± {100 * error:.1f} %, "
                 f"two standard errors). (!): above 5 % beyond that error (one-sided binomial test at "
                 f"{100 * FLAG:g} %).")
    return lines


def run(mix: Mix, mix_index: int, ns: list[int], reps: int, only: list[str]) -> tuple[dict, dict]:
    results, counts = {}, {}
    for k, (name, sim) in enumerate(SIMULATIONS.items()):
        if only and name not in only:
            continue
        for n in ns:
            start = time.monotonic()
            got = rates(sim, n, reps, seed_of(k, n, mix_index), mix)
            for family, rate in got.items():
                results[(family, n)], counts[(family, n)] = rate, reps
            print(f"  {mix}, {name}, n = {n}: {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    return results, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=500, help="simulated reports per family and n (default 500)")
    ap.add_argument("--n", type=int, nargs="*", default=[3, 4, 5, 8, 10],
                    help="trials (rounds) per group on the noisy machine's mixture; none: skip it")
    ap.add_argument("--mix-n", type=int, nargs="*", default=[5, 10],
                    help="n for the other mixtures (share 0.1-0.4 x shift 0.1-0.3); none: skip them")
    ap.add_argument("--mix-reps", type=int, default=None, help="reports per cell for the other mixtures "
                                                                 "(default: --reps / 2)")
    ap.add_argument("--mix", type=float, nargs=2, action="append", metavar=("SHARE", "SHIFT"),
                    help="another mixture instead of the four corners (repeatable)")
    ap.add_argument("--only", nargs="*", default=[], choices=list(SIMULATIONS), help="these simulations only")
    ap.add_argument("--tail", type=int, nargs="+", metavar="N",
                    help="only Welch's tail at these n, on the noisy mixture and the others (see above)")
    ap.add_argument("--tail-draws", type=int, default=2_000_000, help="null pairs per mixture and n (--tail)")
    args = ap.parse_args()
    begin = time.monotonic()
    if args.tail:
        mixes = [Mix(share, shift) for share, shift in args.mix] if args.mix else [NOISY, *MIXES]
        print("\n".join(tail(mixes, args.tail, args.tail_draws)))
        return
    if args.n:
        print(f"## The noisy machine's mixture ({NOISY}), every group equal\n")
        results, counts = run(NOISY, 0, args.n, args.reps, args.only)
        print("\n".join(table(results, args.n, counts)), flush=True)
    if args.mix_n:
        reps = args.mix_reps or max(1, args.reps // 2)
        mixes = [Mix(share, shift) for share, shift in args.mix] if args.mix else MIXES
        for i, mix in enumerate(mixes, 1):
            print(f"\n## Other mixture: {mix}\n")
            results, counts = run(mix, i, args.mix_n, reps, args.only)
            print("\n".join(table(results, args.mix_n, counts)), flush=True)
    print(f"\n{time.monotonic() - begin:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
