#!/usr/bin/env python3
"""Where a card's noise comes from: per cell of its claims, the CV of the trial values with every trial, without a
scenario's first trial after its build (a warm-up), and without the trials flagged noisy (other work on the machine);
and how often a cell's first trial is its lowest or highest (by chance: 2 / n).

    .venv/bin/python bench/card_noise.py /tmp/cards/s3.db [more.db ...]

Run on results of `bench/suites.py --profile card --keep DIR`. A warm-up that shows (first trials extreme far more
often than 2 / n, and the CV lower without them) is a fix the tool can make; noise that goes with the noisy flag is
the machine's.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vnetbench.results import scorecard  # noqa: E402
from vnetbench.results.dataset import load  # noqa: E402
from vnetbench.results.store import Store  # noqa: E402


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / abs(statistics.fmean(values)) if len(values) > 2 and statistics.fmean(values) \
        else float("nan")


def cells(db: Path) -> list[tuple[str, list]]:
    """(a claim's cell, its trials in run order) for every measured cell of the card, each cell once."""
    data = load(Store(db), 1)
    spec = data.campaign.spec or {}
    base = dict(spec.get("scorecard_where") or {})
    seen, out = set(), []
    for r in spec.get("scorecard") or []:
        if not isinstance(r, dict) or "define" in r or set(r) == {"paper"} or r.get("uncheckable"):
            continue
        kind = str(r.get("kind", "ratio"))
        sels = (scorecard._contrast_cells(r, base) if kind == "contrast" else
                scorecard._plain_cells(r, base, kind))[0]
        got = scorecard._cells(data, sels, str(r.get("metric", "throughput_bps")), r.get("reduce"))
        for sel, trials, values in zip(sels, got.trials, got.values):
            key = (str(sorted(sel.items())), str(r.get("metric")), str(r.get("reduce")))
            if key in seen or len(values) < 4:
                continue
            seen.add(key)
            order = sorted(range(len(trials)), key=lambda i: (trials[i].repetition, trials[i].id))
            out.append((f"{r.get('id')}: {r.get('metric', 'throughput_bps')}",
                        [(trials[i], values[i]) for i in order]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", nargs="+", type=Path, help="results files of `bench/suites.py --profile card --keep DIR`")
    for db in ap.parse_args().db:
        rows = cells(db)
        every = [cv([v for _, v in tv]) for _, tv in rows]
        later = [cv([v for t, v in tv if t.repetition > 1]) for _, tv in rows]
        quiet = [cv([v for t, v in tv if not t.metadata.get("noisy")]) for _, tv in rows]
        extreme = sum(tv[0][1] in (min(v for _, v in tv), max(v for _, v in tv)) for _, tv in rows)
        chance = sum(2 / len(tv) for _, tv in rows)
        noisy = sum(bool(t.metadata.get("noisy")) for _, tv in rows for t, _ in tv)
        total = sum(len(tv) for _, tv in rows)

        def med(xs: list[float]) -> str:
            xs = [x for x in xs if x == x]
            return f"{100 * statistics.median(xs):.1f} %" if xs else "n/a"
        print(f"{db.name}: {len(rows)} cells; median CV {med(every)} with every trial, {med(later)} without each "
              f"cell's first, {med(quiet)} without the {noisy} of {total} trials flagged noisy; first trial lowest "
              f"or highest in {extreme} of {len(rows)} cells (by chance about {chance:.1f})")


if __name__ == "__main__":
    main()
