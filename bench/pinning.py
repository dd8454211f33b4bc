#!/usr/bin/env python3
"""What CPU pinning does to one TCP stream over a veth pair: two emulated hosts (namespaces on this machine's kernel,
`attach: host`: the hosts' own link), iperf3 for --seconds, --reps trials a level, unpinned (`none`), both ends on
CPU 0 (`{h1: 0, h2: 0}`) and each end on a CPU of its own (`{h1: 0, h2: 1}`) (`cpu_pinning` factor):

    .venv/bin/python bench/pinning.py [--rounds 3] [--reps 4] [--seconds 3]

Each round is one campaign (random order: the levels alternate); per level its median throughput and CPU per
Gbit/s (the machine's CPU seconds per gigabit delivered), each relative to `none`, the CPUs each end's processes were
read on (the trials' cpu_pinning record), and the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
from pathlib import Path

import runspec  # bench/ is this script's own folder on sys.path

LEVELS = ["none", "{h1: 0, h2: 0}", "{h1: 0, h2: 1}"]
SPEC = """name: pinning-bench
repetitions: {reps}
order: random
factors:
  attach: host
  cpu_pinning: [{levels}]
workloads: [{{type: iperf3, duration: {seconds}}}]
"""


def read_back(db: Path) -> dict[str, set[str]]:
    """cpu_pinning label -> the 'node CPUs' its trials' processes were read on."""
    out: dict[str, set[str]] = {}
    with sqlite3.connect(db) as c:
        labels = {idx: json.loads(lb)["cpu_pinning"] for idx, lb in c.execute("SELECT idx, labels FROM scenarios")}
        for idx, meta in c.execute("SELECT scenario, metadata FROM trials"):
            rec = json.loads(meta).get("cpu_pinning", {})
            out.setdefault(labels[idx], set()).update(f"{g['node']} {g['cpus']}" for g in rec.get("groups", []))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3)
    args = ap.parse_args()
    spec_text = SPEC.format(reps=args.reps, seconds=args.seconds, levels=", ".join(LEVELS))
    for r, db, before in runspec.rounds(spec_text, args.rounds):
        got, where = runspec.medians(db, "cpu_pinning"), read_back(db)
        print(f"round {r} (load average {before:.1f} before, {os.getloadavg()[0]:.1f} after):")
        print("\n".join(f"{ln}  read on: {', '.join(sorted(where.get(level, ())))}"
                        for ln, level in zip(runspec.relative("cpu_pinning", "none", got), got)), flush=True)


if __name__ == "__main__":
    main()
