#!/usr/bin/env python3
"""One guest per emulated host (`kernel: guest-per-host`) against one guest for every host (`kernel: guest`),
here (run as root from the repo):

  (a) boot of N host guests at once (GuestHostSite: fleet up over SSH and each underlay address set), N = 2, 4, 8
  (b) TCP throughput h1 -> h2, host to host and VM to VM over Linux bridge + VXLAN, in per-host guests (two guest
      kernels, each one CPU, joined by their vector taps) and in a single guest (both hosts' namespaces in one
      kernel on one CPU): `vnetbench run` of both levels, --rounds repetitions each, sequential order. The single
      guest's probes read its /proc/stat every 0.25 s over SSH (the runner's), the per-host guests' only at the ends
      of the window (guests/hostsite.py says why): part of the difference is that.

    .venv/bin/python bench/host_guests.py [--rounds N] [--seconds S] [--kernels guest,guest-per-host] [--sizes 2,4,8]

`--kernels guest-per-host,qemu` compares UML host guests with qemu ones (`kernel: qemu`, TCG here), booting each
kind's host guests for (a).
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vnetbench import hosts  # noqa: E402
from vnetbench.guests.hostsite import GuestHostSite  # noqa: E402
from vnetbench.system.ledger import Ledger  # noqa: E402

SPEC = """name: bench-host-guests
repetitions: {rounds}
order: sequential
factors: {{kernel: [{kernels}], attach: [host, switch], switch: linuxbridge, overlay: [none, vxlan],
          duration: {seconds}}}
exclude: [{{attach: host, overlay: vxlan}}, {{attach: switch, overlay: none}}]
workloads: [{{type: iperf3}}]
"""


def boot(n: int, kind: str) -> tuple[float, list[float]]:
    led = Ledger.create()
    t0 = time.monotonic()
    site = GuestHostSite(led, n, kind)
    try:
        return time.monotonic() - t0, site.boot_s
    finally:
        site.close()
        led.remove_all()


def throughput(rounds: int, seconds: int, kernels: list[str]) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as d:
        spec, db = Path(d) / "spec.yaml", Path(d) / "r.db"
        spec.write_text(SPEC.format(rounds=rounds, seconds=seconds, kernels=", ".join(kernels)))
        subprocess.run([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(db), "--no-progress"],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        with sqlite3.connect(db) as c:
            rows = c.execute("SELECT sc.labels, s.value, s.metadata FROM samples s JOIN trials t ON s.trial = t.id "
                             "JOIN scenarios sc ON sc.campaign = t.campaign AND sc.idx = t.scenario "
                             "WHERE s.metric = 'throughput_bps' AND t.status = 'ok'").fetchall()
    out: dict[str, list[float]] = {}
    for labels, value, meta in rows:
        if json.loads(meta).get("direction") == "forward":
            lb = json.loads(labels)
            out.setdefault(f"{lb['kernel']} {'host to host' if lb['attach'] == 'host' else 'VM to VM, VXLAN'}",
                           []).append(value)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--kernels", default="guest,guest-per-host", help="the kernel levels compared in (b)")
    ap.add_argument("--sizes", default="2,4,8", help="how many host guests (a) boots at once, per kind")
    a = ap.parse_args()
    kernels = a.kernels.split(",")
    print(f"load average before: {os.getloadavg()}")
    kinds = dict.fromkeys(getattr(hosts.choose({"kernel": k}), "kind", None) for k in kernels)  # per-host levels'
    for kind in [k for k in kinds if k]:
        for n in map(int, a.sizes.split(",")):
            total, each = boot(n, kind)
            print(f"(a) {n} {kind} host guests: up and addressed in {total:.2f} s (slowest guest's boot "
                  f"{max(each):.2f} s)")
    tput = throughput(a.rounds, a.seconds, kernels)
    for kernel, vals in sorted(tput.items()):
        print(f"(b) {kernel}: TCP h1 -> h2 {statistics.mean(vals) / 1e9:.2f} Gbit/s mean of {len(vals)} "
              f"({', '.join(f'{v / 1e9:.2f}' for v in vals)})")
    for path in ("host to host", "VM to VM, VXLAN"):
        first, second = (tput.get(f"{k} {path}") for k in kernels[:2])
        if first and second:
            print(f"(b) {path}: {kernels[1]} / {kernels[0]} {statistics.mean(second) / statistics.mean(first):.2f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
