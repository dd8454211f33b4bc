#!/usr/bin/env python3
"""What a guest with its own kernel costs here (run as root from the repo):

  (a) boot time of one guest: process start to its sshd answering over SSH (median of --rounds single boots)
  (b) boot time of 8 guests started at once (the slowest one; median of --rounds/2 rounds)
  (c) memory per guest: proportional set size of its host address spaces, after boot (median)
  (d) TCP throughput of the same path, shared kernel vs guest kernels: iperf3 between two namespaces joined by a
      veth, and between two guests joined by their vector taps and a bridge; means of --rounds alternating runs

    .venv/bin/python bench/guests.py [--rounds N] [--seconds S]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vnetbench.guests import kind_class  # noqa: E402
from vnetbench.guests.base import Fleet  # noqa: E402
from vnetbench.system.ledger import Ledger  # noqa: E402


def boot(n: int) -> tuple[list[float], list[float]]:
    """(boot seconds, memory MB) of n guests booted at once."""
    led = Ledger.create()
    fleet = Fleet(led, boot_timeout=60)
    for i in range(n):
        fleet.add(f"g{i + 1}", nics=[("eth1", "ul")])
    try:
        fleet.boot()
        time.sleep(0.5)
        return [g.boot_s for g in fleet.guests.values()], [fleet.memory_mb(g) for g in fleet.guests.values()]
    finally:
        fleet.teardown()
        led.remove_all()


def iperf(client_wrap: list[str], server_wrap: list[str], addr: str, seconds: int) -> float:
    server = subprocess.Popen([*server_wrap, "iperf3", "-s", "-1", "-p", "5301"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = subprocess.run([*client_wrap, "iperf3", "-c", addr, "-p", "5301", "-t", str(seconds), "-J"],
                             capture_output=True, text=True, timeout=seconds + 30).stdout
        return json.loads(out)["end"]["sum_received"]["bits_per_second"]
    finally:
        server.kill()
        server.wait()


def throughput(rounds: int, seconds: int) -> tuple[list[float], list[float]]:
    led = Ledger.create()
    a, b = f"{led.prefix}-a", f"{led.prefix}-b"
    led.record_many([{"kind": "netns", "name": a}, {"kind": "netns", "name": b}])
    fleet = Fleet(led, boot_timeout=60)
    for h in ("h1", "h2"):
        fleet.add(h, nics=[("eth1", "ul")])
    shared, guest = [], []
    try:
        batch = (f"netns add {a}\nnetns add {b}\nlink add {led.prefix}-v netns {a} type veth peer name "
                 f"{led.prefix}-v netns {b}\n")
        subprocess.run(["ip", "-batch", "-"], input=batch, text=True, check=True)
        for ns, ip in ((a, "10.9.0.1"), (b, "10.9.0.2")):
            subprocess.run(["ip", "-n", ns, "-batch", "-"], text=True, check=True,
                           input=f"link set lo up\nlink set {led.prefix}-v up\naddr add {ip}/24 dev {led.prefix}-v\n")
        fleet.boot()
        g1, g2 = fleet.guests["h1"].executor, fleet.guests["h2"].executor
        g1.run(["ip", "addr", "add", "10.9.0.1/24", "dev", "eth1"])
        g2.run(["ip", "addr", "add", "10.9.0.2/24", "dev", "eth1"])
        g1.run(["ping", "-c", "1", "-W", "3", "10.9.0.2"])
        for _ in range(rounds):
            shared.append(iperf(["ip", "netns", "exec", a], ["ip", "netns", "exec", b], "10.9.0.2", seconds))
            guest.append(iperf(g1.wrap([]), g2.wrap([]), "10.9.0.2", seconds))
        return shared, guest
    finally:
        fleet.teardown()
        led.remove_all()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=int, default=5)
    args = ap.parse_args()
    print(f"backend uml, kernel {kind_class('uml').support().kernel}")
    singles, mems = [], []
    for _ in range(args.rounds):
        t, m = boot(1)
        singles += t
        mems += m
        time.sleep(0.5)
    print(f"(a) boot, one guest: median {statistics.median(singles):.2f} s "
          f"(min {min(singles):.2f}, max {max(singles):.2f}, n={len(singles)})  target <= 2.5 s")
    eights = []
    for _ in range(max(1, args.rounds // 2)):
        t, m = boot(8)
        eights.append(max(t))
        mems += m
        time.sleep(1)
    print(f"(b) boot, 8 guests at once (slowest): median {statistics.median(eights):.2f} s "
          f"(min {min(eights):.2f}, max {max(eights):.2f}, n={len(eights)})  target <= 6 s")
    print(f"(c) memory per guest (PSS of its host address spaces): median {statistics.median(mems):.1f} MB "
          f"(max {max(mems):.1f}, n={len(mems)})  target <= 80 MB")
    shared, guest = throughput(args.rounds, args.seconds)
    ms, mg = statistics.mean(shared), statistics.mean(guest)
    print(f"(d) TCP throughput, one stream: shared kernel (veth) {ms / 1e9:.2f} Gbit/s, guest kernels (vector taps "
          f"+ bridge) {mg / 1e9:.2f} Gbit/s, ratio guest/shared {mg / ms:.3f} (means of {len(shared)})")


if __name__ == "__main__":
    main()
