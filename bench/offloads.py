#!/usr/bin/env python3
"""What segmentation and receive offloads are worth over VXLAN: one-stream TCP between two VMs on two emulated hosts
(Linux bridge + kernel VXLAN, namespaces on this machine's kernel), iperf3 for --seconds, --reps trials a level, with
the kernel's offloads (`on`), all three off, segmentation only off, receive only off (`offloads` factor):

    .venv/bin/python bench/offloads.py [--rounds 3] [--reps 6] [--seconds 2]

Each round is one campaign (random order); per level its median throughput and CPU per Gbit/s (the machine's CPU
seconds per gigabit delivered, cpu_s_per_gbit), each relative to `on`, and the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEVELS = ["on", "{tso: off, gso: off, gro: off}", "{tso: off, gso: off}", "{gro: off}"]
SPEC = """name: offloads-bench
repetitions: {reps}
factors:
  overlay: vxlan
  placement: cross-host
  offloads: [{levels}]
workloads: [{{type: iperf3, duration: {seconds}}}]
"""


def medians(db: Path) -> dict[str, tuple[float, float]]:
    """offloads label -> (median throughput in Gbit/s, median CPU seconds per Gbit) over the trials."""
    out = subprocess.run([sys.executable, "-m", "vnetbench", "show", "1", "--db", str(db), "--json", "-m",
                          "throughput_bps", "-m", "cpu_s_per_gbit"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    got: dict[str, dict[str, float]] = {}
    for r in json.loads(out)["rows"]:
        if not r["role"] and r["stat"] is None:
            got.setdefault(str(r["levels"]["offloads"]), {})[r["metric"]] = statistics.median(
                t["value"] for t in r["trials"])
    return {k: (v["throughput_bps"] / 1e9, v["cpu_s_per_gbit"]) for k, v in got.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=2)
    args = ap.parse_args()
    spec_text = SPEC.format(reps=args.reps, seconds=args.seconds, levels=", ".join(LEVELS))
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            spec, db = Path(d) / f"r{r}.yaml", Path(d) / f"r{r}.db"
            spec.write_text(spec_text)
            before = os.getloadavg()[0]
            subprocess.run([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(db), "--no-progress"],
                           cwd=ROOT, capture_output=True, check=False)
            got = medians(db)
            base = got.get("on")
            print(f"round {r + 1} (load average {before:.1f} before, {os.getloadavg()[0]:.1f} after):")
            for level, (gbit, cost) in got.items():
                rel = f" ({gbit / base[0]:.2f} x, {cost / base[1]:.2f} x)" if base else ""
                print(f"  offloads {level:<18} {gbit:6.2f} Gbit/s  {cost:.3f} CPU s/Gbit{rel}", flush=True)


if __name__ == "__main__":
    main()
