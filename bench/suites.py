#!/usr/bin/env python3
"""The five studies' quick (or card) profiles one after another, as a user runs them (run as root from the repo):

    .venv/bin/python bench/suites.py [--profile quick] [--suites s1,s2,s3,s4,s5] [--fresh]

For each suite: the wall time of `vnetbench run suite:sN --profile P` (the whole process: the guest probe when it is
not cached, boots, builds, trials, teardown), the load average before and after, its trials by status, and where the
campaign's time went from the stored trials: the share spent measuring (the tools' windows), the rest of the trials
(set-up, finish, probes), and what came before the first trial and between trials (builds, boots). --fresh first
removes the cached guest probe, as on a machine that never ran one. Each line ends with the card: its decided of
checkable claims and the median CV of their cells (`--profile card`: each study within its 15-minute budget). The goal: all five in at most 10 minutes
on an idle 2-core machine.
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def breakdown(db: Path) -> dict:
    """From the stored campaign: seconds before the first trial, in trials, measuring, between trials; trial counts."""
    with sqlite3.connect(db) as c:
        created, finished = c.execute("SELECT created, finished FROM campaigns").fetchone()
        rows = c.execute("SELECT started, finished, status, metadata FROM trials ORDER BY started").fetchall()
    if not rows:
        return {"campaign": finished - created, "trials": {}}
    phases = [json.loads(m or "{}").get("phases", {}) for *_, m in rows]
    in_trials = sum(f - s for s, f, *_ in rows)
    status: dict[str, int] = {}
    for *_, st, _ in rows:
        status[st] = status.get(st, 0) + 1
    return {"campaign": finished - created, "before_first": rows[0][0] - created, "in_trials": in_trials,
            "measuring": sum(p.get("measure", 0.0) for p in phases),
            "between": (rows[-1][1] - rows[0][0]) - in_trials, "after_last": finished - rows[-1][1],
            "trials": status}


def card(db: Path) -> str:
    """The campaign's scorecard in one line: decided of checkable claims, the median cell CV."""
    from vnetbench.results import scorecard
    from vnetbench.results.store import Store
    rows = scorecard.for_campaign(Store(db), 1)
    return scorecard.tally_line(rows) if rows else "no scorecard"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--suites", default="s1,s2,s3,s4,s5")
    ap.add_argument("--fresh", action="store_true", help="remove the cached guest probe first")
    ap.add_argument("--keep", type=Path, help="keep each suite's results file in this directory")
    args = ap.parse_args()
    if args.fresh:
        cache = Path(os.environ.get("VNETBENCH_CACHE_DIR", "/var/cache/vnetbench")) / "guest-probe.json"
        cache.unlink(missing_ok=True)
    total, lines = 0.0, []
    with tempfile.TemporaryDirectory(prefix="vb-suites-") as d:
        out = args.keep or Path(d)
        out.mkdir(parents=True, exist_ok=True)
        for name in args.suites.split(","):
            db = out / f"{name}.db"
            db.unlink(missing_ok=True)
            load0 = os.getloadavg()[0]
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "vnetbench", "run", f"suite:{name}", "--profile",
                                   args.profile, "--db", str(db), "--no-progress"], cwd=ROOT, capture_output=True,
                                  text=True)
            wall = time.perf_counter() - t0
            total += wall
            if proc.returncode not in (0, 1) or not db.exists():
                raise SystemExit(f"{name}: vnetbench exited {proc.returncode}: {proc.stderr[-1500:]}")
            b = breakdown(db)
            trials = ", ".join(f"{n} {s}" for s, n in sorted(b["trials"].items()))
            line = (f"{name} {args.profile}: {wall:.0f} s wall (load {load0:.1f} -> {os.getloadavg()[0]:.1f}); "
                    f"trials: {trials}")
            if "in_trials" in b:
                line += (f"; measuring {b['measuring']:.0f} s = {b['measuring'] / wall:.0%} of the wall time; the "
                         f"rest of the trials {b['in_trials'] - b['measuring']:.0f} s; before the campaign "
                         f"{wall - b['campaign']:.0f} s, before its first trial {b['before_first']:.0f} s, between "
                         f"trials {b['between']:.0f} s, after the last {b['after_last']:.0f} s")
            line += f"; card: {card(db)}" + "".join(f"; {x.strip()}" for x in proc.stdout.splitlines()
                                                    if x.strip().startswith(("round ", "after round ")))
            print(line, flush=True)
            lines.append(line)
    print(f"all {len(lines)}: {total:.0f} s ({total / 60:.1f} min)")


if __name__ == "__main__":
    main()
