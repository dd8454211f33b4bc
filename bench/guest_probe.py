#!/usr/bin/env python3
"""What asking a guest what it offers costs on a machine that has not asked yet (run as root from the repo): the
guest probe of guests/probe.py (`capabilities()`) with an empty probe cache, --rounds times, each in a process of
its own, with the seconds of each of its parts (boot, kernel features, tools, the OVS check that waits for the guest
kernel's 10.5th second) from the probe's start:

    .venv/bin/python bench/guest_probe.py [--rounds N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# one probe, in a fresh process (nothing cached in memory either), with an empty cache directory
ONE = r"""
import functools, os, sys, time
from vnetbench.guests import base, probe as guest_probe
from vnetbench.hosts.lab import preflight
T0 = time.monotonic()
parts = {}
def timed(owner, name, label):
    orig = getattr(owner, name)
    @functools.wraps(orig)
    def run(*a, **k):
        began = time.monotonic() - T0
        try:
            return orig(*a, **k)
        finally:
            parts[label] = (began, time.monotonic() - T0)
    setattr(owner, name, run)
timed(base.Fleet, "boot", "boot")
timed(guest_probe, "probe_kernel", "kernel")
timed(preflight, "tools", "tools")
timed(guest_probe, "ovs_forwards", "ovs")
caps = guest_probe.capabilities()
total = time.monotonic() - T0
assert caps is not None and caps.kernel["ovs-kernel-datapath"].ok, caps
print(total, *(f"{k}={a:.2f}-{b:.2f}" for k, (a, b) in parts.items()))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    totals = []
    for r in range(args.rounds):
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="vnetbench-probe-cache-") as cache:
            env = {**os.environ, "VNETBENCH_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
            out = subprocess.run([sys.executable, "-c", ONE], env=env, cwd=ROOT, capture_output=True, text=True,
                                 check=True, timeout=300).stdout.split()
        totals.append(float(out[0]))
        print(f"round {r + 1}: {totals[-1]:.2f} s (load {load:.2f} -> {os.getloadavg()[0]:.2f}); seconds from the "
              f"probe's start: {' '.join(out[1:])}", flush=True)
    print(f"guest probe, empty cache: median {statistics.median(totals):.2f} s of {args.rounds}")


if __name__ == "__main__":
    main()
