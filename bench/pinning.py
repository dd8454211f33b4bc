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
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEVELS = ["none", "{h1: 0, h2: 0}", "{h1: 0, h2: 1}"]
SPEC = """name: pinning-bench
repetitions: {reps}
order: random
factors:
  attach: host
  cpu_pinning: [{levels}]
workloads: [{{type: iperf3, duration: {seconds}}}]
"""


def medians(db: Path) -> dict[str, tuple[float, float]]:
    """cpu_pinning label -> (median throughput in Gbit/s, median CPU seconds per Gbit) over the trials."""
    out = subprocess.run([sys.executable, "-m", "vnetbench", "show", "1", "--db", str(db), "--json", "-m",
                          "throughput_bps", "-m", "cpu_s_per_gbit"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    got: dict[str, dict[str, float]] = {}
    for r in json.loads(out)["rows"]:
        if not r["role"] and r["stat"] is None:
            got.setdefault(str(r["levels"]["cpu_pinning"]), {})[r["metric"]] = statistics.median(
                t["value"] for t in r["trials"])
    return {k: (v["throughput_bps"] / 1e9, v["cpu_s_per_gbit"]) for k, v in got.items()}


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
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            spec, db = Path(d) / f"r{r}.yaml", Path(d) / f"r{r}.db"
            spec.write_text(spec_text)
            before = os.getloadavg()[0]
            subprocess.run([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(db), "--no-progress"],
                           cwd=ROOT, capture_output=True, check=False)
            got, where = medians(db), read_back(db)
            base = got.get("none")
            print(f"round {r + 1} (load average {before:.1f} before, {os.getloadavg()[0]:.1f} after):")
            for level, (gbit, cost) in got.items():
                rel = f" ({gbit / base[0]:.2f} x, {cost / base[1]:.2f} x)" if base else ""
                print(f"  cpu_pinning {level:<16} {gbit:6.2f} Gbit/s  {cost:.3f} CPU s/Gbit{rel}  "
                      f"read on: {', '.join(sorted(where.get(level, ())))}", flush=True)


if __name__ == "__main__":
    main()
