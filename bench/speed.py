#!/usr/bin/env python3
"""How much does vnetbench itself cost? Prints three ratios measured in one run (run as root from the repo):

  (a) throughput vnetbench reports on a plain veth pair / iperf3 run by hand on the same pair, alternating
  (b) build + teardown of a 2-host, 2-pair bridge+VXLAN topology: vnetbench vs a hand-written `ip -batch` script
  (c) build + teardown of 64 VMs on one bridge: vnetbench vs a hand-written `ip -batch` script

    .venv/bin/python bench/speed.py [--rounds N] [--seconds S]
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

from vnetbench.capabilities import detect  # noqa: E402
from vnetbench.system.ledger import Ledger  # noqa: E402
from vnetbench.experiment.matrix import expand  # noqa: E402
from vnetbench.experiment.spec import loads  # noqa: E402
from vnetbench.build.topology import Topology  # noqa: E402


# The kernel frees deleted namespaces asynchronously; the next `netns add` waits for that work. Pause (untimed)
# so neither side pays for the other's teardown.
SETTLE_S = 0.5


def scenario(factors: str, hosts: int | None = None):
    text = f"name: bench\nfactors: {{{factors}}}\nworkloads: [{{type: iperf3, duration: 1}}]\n"
    if hosts:
        text += f"hosts: {hosts}\n"
    (sc,) = expand(loads(text).experiment, detect())
    assert sc.skip is None, sc.skip
    return sc


def timed_vnetbench(sc, ledger: Ledger) -> float:
    t0 = time.perf_counter()
    topo = Topology(sc, ledger)
    topo.emit()
    topo._execute()  # build without the ping check: the hand script does not ping either
    topo.teardown()
    return time.perf_counter() - t0


def hand_script(sc, ledger: Ledger) -> list[tuple[list[str], str]]:
    """The same topology as plain sequential `ip -batch` invocations, as a person would write them."""
    topo = Topology(sc, None, prefix=ledger.prefix)
    topo.emit()
    calls = []
    for step in (st for wave in topo.waves() for st in wave):  # one batch per namespace, run one after another
        ex = topo.executor(step.node)
        calls.append(([step.tool, *ex.ip()[1:], "-batch", "-"], "\n".join(step.lines) + "\n"))
    names = [n.exec.name for n in topo.nodes.values()]
    ledger.record_many([{"kind": "netns", "name": n} for n in names])  # so `vnetbench clean` covers a crash
    calls.append((["ip", "-batch", "-"], "".join(f"netns del {n}\n" for n in names)))
    return calls


def timed_hand(calls) -> float:
    t0 = time.perf_counter()
    for argv, text in calls:
        subprocess.run(argv, input=text, text=True, check=True, capture_output=True)
    return time.perf_counter() - t0


def compare_build(label: str, sc, rounds: int) -> tuple[float, float]:
    ledger, hand_ledger = Ledger.create(), Ledger.create()
    hand = hand_script(sc, hand_ledger)
    ours, theirs = [], []
    try:
        for _ in range(rounds):  # alternate so drift on a shared machine hits both equally
            ours.append(timed_vnetbench(sc, ledger))
            time.sleep(SETTLE_S)
            theirs.append(timed_hand(hand))
            time.sleep(SETTLE_S)
    finally:
        ledger.remove_all()
        hand_ledger.remove_all()
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"({label}) build+teardown: vnetbench {a:.3f} s, hand-written ip -batch {b:.3f} s, "
          f"ratio {a / b:.2f} (medians of {rounds})")
    return a, b


def hand_iperf3(server, client, addr: str, seconds: float) -> float:
    srv = server.spawn(["iperf3", "-s", "-1", "-p", "5299"])
    time.sleep(0.3)
    out = client.run(["iperf3", "-c", addr, "-p", "5299", "-t", str(seconds), "-J"], timeout=seconds + 20).stdout
    srv.wait(timeout=10)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"]


def compare_throughput(rounds: int, seconds: float) -> None:
    sc = scenario(f"attach: host, placement: cross-host, protocol: tcp")
    for wl in sc.workloads:
        wl.params.duration = seconds
    ledger = Ledger.create()
    topo = Topology(sc, ledger).build()
    ours, theirs = [], []
    try:
        pair = topo.pairs[0]
        for _ in range(rounds):
            samples = sc.workloads[0].run(topo.pairs)
            ours.append(next(s.value for s in samples if s.metric == "throughput_bps"))
            theirs.append(hand_iperf3(pair.server.node, pair.client.node, pair.server.addr, seconds))
    finally:
        topo.teardown()
        ledger.remove_all()
    a, b = statistics.mean(ours), statistics.mean(theirs)
    print(f"(a) veth pair TCP throughput: vnetbench {a / 1e9:.2f} Gbit/s, iperf3 by hand {b / 1e9:.2f} Gbit/s, "
          f"ratio {a / b:.3f} (means of {rounds} alternating {seconds:g} s runs)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput run")
    args = ap.parse_args()
    compare_throughput(max(3, args.rounds // 2), args.seconds)
    compare_build("b: 2 hosts, 2 pairs, bridge+VXLAN", scenario("overlay: vxlan, placement: cross-host, pairs: 2"),
                  args.rounds)
    compare_build("c: 64 VMs on one bridge", scenario("overlay: none, placement: same-host, pairs: 32", hosts=1),
                  args.rounds)


if __name__ == "__main__":
    main()
