#!/usr/bin/env python3
"""What receive packet steering does to one TCP stream over a veth path: two VMs on two emulated hosts (Linux bridge,
flat or VXLAN, namespaces on this machine's kernel), iperf3 for --seconds, --reps trials a level, with the kernel's
default (RPS off: each packet's receive path runs on the CPU that sent it into the veth) and RPS spreading to CPUs
0-1 on every device the run creates (`steering` factor):

    .venv/bin/python bench/steering.py [--overlay vxlan] [--rounds 3] [--reps 4] [--seconds 3]

Each round is one campaign, its trials in random order (the levels alternate); per level its median throughput and
CPU per Gbit/s (the machine's CPU seconds per gigabit delivered), each relative to `default`, and the load average.
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
SPEC = """name: steering-bench
repetitions: {reps}
order: random
factors:
  overlay: {overlay}
  placement: cross-host
  steering: [default, {{rps: "0-1", xps: "0-1"}}]
workloads: [{{type: iperf3, duration: {seconds}}}]
"""


def medians(db: Path) -> dict[str, tuple[float, float, int]]:
    """steering label -> (median throughput in Gbit/s, median CPU seconds per Gbit, trials)."""
    out = subprocess.run([sys.executable, "-m", "vnetbench", "show", "1", "--db", str(db), "--json", "-m",
                          "throughput_bps", "-m", "cpu_s_per_gbit"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    got: dict[str, dict[str, list[float]]] = {}
    for r in json.loads(out)["rows"]:
        if not r["role"] and r["stat"] is None:
            got.setdefault(str(r["levels"]["steering"]), {})[r["metric"]] = [t["value"] for t in r["trials"]]
    return {k: (statistics.median(v["throughput_bps"]) / 1e9, statistics.median(v["cpu_s_per_gbit"]),
                len(v["throughput_bps"])) for k, v in got.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--overlay", default="none")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3)
    args = ap.parse_args()
    spec_text = SPEC.format(reps=args.reps, seconds=args.seconds, overlay=args.overlay)
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            spec, db = Path(d) / f"r{r}.yaml", Path(d) / f"r{r}.db"
            spec.write_text(spec_text)
            before = os.getloadavg()[0]
            subprocess.run([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(db), "--no-progress"],
                           cwd=ROOT, capture_output=True, check=False)
            got = medians(db)
            base = got.get("default")
            print(f"round {r + 1} (load average {before:.1f} before, {os.getloadavg()[0]:.1f} after):")
            for level, (gbit, cost, n) in got.items():
                rel = f" ({gbit / base[0]:.2f} x, {cost / base[1]:.2f} x)" if base else ""
                print(f"  steering {level:<18} {gbit:6.2f} Gbit/s  {cost:.3f} CPU s/Gbit{rel}  ({n} trials)", flush=True)


if __name__ == "__main__":
    main()
