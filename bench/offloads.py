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
import os

import runspec  # bench/ is this script's own folder on sys.path

LEVELS = ["on", "{tso: off, gso: off, gro: off}", "{tso: off, gso: off}", "{gro: off}"]
SPEC = """name: offloads-bench
repetitions: {reps}
factors:
  overlay: vxlan
  placement: cross-host
  offloads: [{levels}]
workloads: [{{type: iperf3, duration: {seconds}}}]
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=2)
    args = ap.parse_args()
    spec_text = SPEC.format(reps=args.reps, seconds=args.seconds, levels=", ".join(LEVELS))
    for r, db, before in runspec.rounds(spec_text, args.rounds):
        print(f"round {r} (load average {before:.1f} before, {os.getloadavg()[0]:.1f} after):")
        print("\n".join(runspec.relative("offloads", "on", runspec.medians(db, "offloads"))), flush=True)


if __name__ == "__main__":
    main()
