#!/usr/bin/env python3
"""Where a card's noise comes from: per cell of its claims, the CV of the trial values with every trial, without a
scenario's first trial after its build (a warm-up), and without the trials flagged noisy (other work on the machine);
how often a cell's first trial is its lowest or highest (by chance: 2 / n); an echo cell's CV with each trial read on
its median echo and on its fastest (the fastest ignores a machine whose speed moves within a trial); and drift: a
card in rounds with `order: sequential` runs each cell's trials of a round one after another, so the CV within such a
run beside the shift between a cell's runs (the later run's median over the first's) says whether the machine's speed
moved between them (a shift far beyond what the runs' own spread explains puts the time of a run into its cell).

    .venv/bin/python bench/card_noise.py /tmp/cards/s3.db [more.db ...]

Run on results of `bench/suites.py --profile card --keep DIR`. A warm-up that shows (first trials extreme far more
often than 2 / n, and the CV lower without them) is a fix the tool can make; noise that goes with the noisy flag is
the machine's.
"""
from __future__ import annotations

import argparse
import sqlite3
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
    for r in scorecard._listed(spec):
        if scorecard._setting(r) or r.get("uncheckable"):
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
            out.append((str(r.get("metric", "throughput_bps")), [(trials[i], values[i]) for i in order]))
    return out


def runs(tv: list, started: dict[int, float]) -> list[list[float]]:
    """A cell's trials split where the next one started more than three times the cell's median gap later."""
    tv = sorted(tv, key=lambda x: started.get(x[0].id, 0.0))
    gaps = [started.get(b[0].id, 0.0) - started.get(a[0].id, 0.0) for a, b in zip(tv, tv[1:])]
    if not gaps:
        return [[v for _, v in tv]]
    cut, out = 3 * statistics.median(gaps), [[tv[0][1]]]
    for gap, (_, v) in zip(gaps, tv[1:]):
        out.append([v]) if gap > cut else out[-1].append(v)
    return out


def sampling(rows: list) -> str:
    """For cells whose trial value is the median of many samples (a ping's echoes): the part of the trials' CV that
    the samples' own spread explains, the median's standard error 1.25 x robust SD / sqrt(k) over the median."""
    shares = []
    for metric, tv in rows:
        errors = []
        for t, v in tv:
            xs = [s["value"] for s in t.samples if s["metric"] == metric]
            if len(xs) >= 10 and v:
                q = statistics.quantiles(xs, n=4)
                errors.append(1.2533 * (q[2] - q[0]) / 1.349 / len(xs) ** 0.5 / abs(v))
        spread = cv([v for _, v in tv])
        if errors and spread == spread and spread > 0:
            shares.append(statistics.median(errors) / spread)
    if not shares:
        return ""
    return (f"; in {len(shares)} cells whose trial is a median of 10 or more samples, their own spread explains "
            f"{100 * min(shares):.0f}-{100 * max(shares):.0f} % of the trials' CV (median {100 * statistics.median(shares):.0f} %)")


def fastest(rows: list) -> str:
    """For the echo cells (rtt_s), per size class: the CV over a cell's trials of their medians beside that of their
    fastest echoes, each cell once (a cell a row reads on its median and another on its minimum is one cell)."""
    seen, by = set(), {}
    for metric, tv in rows:
        key = tuple(sorted(t.id for t, _ in tv))
        if metric != "rtt_s" or key in seen:
            continue
        seen.add(key)
        echoes = [xs for t, _ in tv if (xs := [s["value"] for s in t.samples if s["metric"] == metric])]
        size = "saturated" if (tv[0][0].params.get("ping_size") or 56) > 60000 else "small"
        by.setdefault(size, []).append((cv([statistics.median(xs) for xs in echoes]), cv([min(xs) for xs in echoes])))
    out = []
    for size, pairs in sorted(by.items()):
        meds, mins = ([p[i] for p in pairs if p[i] == p[i]] for i in (0, 1))
        if meds and mins:
            out.append(f"{size} echoes ({len(pairs)} cells): trials' medians CV {100 * statistics.median(meds):.1f} % "
                       f"({100 * min(meds):.0f}-{100 * max(meds):.0f}), their fastest echoes "
                       f"{100 * statistics.median(mins):.1f} % ({100 * min(mins):.0f}-{100 * max(mins):.0f})")
    return "; " + "; ".join(out) if out else ""


def drift(rows: list, db: Path) -> str:
    """The median CV within a cell's runs, and the median |shift| between its first and last run's medians."""
    with sqlite3.connect(db) as con:
        started = dict(con.execute("SELECT id, started FROM trials WHERE started IS NOT NULL"))
    within, shifts = [], []
    for _, tv in rows:
        split = [r for r in runs(tv, started) if len(r) >= 3]
        within += [cv(r) for r in split]
        if len(split) > 1 and statistics.median(split[0]):
            shifts.append(abs(statistics.median(split[-1]) / statistics.median(split[0]) - 1))
    if not shifts:
        return "no cell ran in more than one run of 3 or more trials"
    return (f"within a cell's run of trials median CV {100 * statistics.median(within):.1f} %; between its first "
            f"and last run the median moved by a median of {100 * statistics.median(shifts):.1f} % "
            f"({len(shifts)} cells, up to {100 * max(shifts):.0f} %)")


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
              f"or highest in {extreme} of {len(rows)} cells (by chance about {chance:.1f}); {drift(rows, db)}"
              f"{sampling(rows)}{fastest(rows)}")


if __name__ == "__main__":
    main()
