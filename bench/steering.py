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
import os

import runspec  # bench/ is this script's own folder on sys.path

SPEC = """name: steering-bench
repetitions: {reps}
order: random
factors:
  overlay: {overlay}
  placement: cross-host
  steering: [default, {{rps: "0-1", xps: "0-1"}}]
workloads: [{{type: iperf3, duration: {seconds}}}]
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--overlay", default="none")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3)
    args = ap.parse_args()
    spec_text = SPEC.format(reps=args.reps, seconds=args.seconds, overlay=args.overlay)
    for r, db, before in runspec.rounds(spec_text, args.rounds):
        print(f"round {r} (load average {before:.1f} before, {os.getloadavg()[0]:.1f} after):")
        print("\n".join(runspec.relative("steering", "default", runspec.medians(db, "steering"))), flush=True)


if __name__ == "__main__":
    main()
