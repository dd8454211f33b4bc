#!/usr/bin/env python3
"""A study ten times the seeds: 512 VMs (256 pairs, placement spread) on 10 emulated hosts. Prints, measured in one
run with the two sides alternating (run as root from the repo):

  build      vnetbench's build (namespaces, underlay, bridges, VM ports and addresses) against a hand-written script
             of the same `ip` batches (one `ip -batch` for the root namespace, then one `ip -n NS -batch -` per
             namespace, one after another: what a person writes); vnetbench sends the namespaces' batches as the
             same netlink requests from its own process (vnetbench/system/netlink.py)
  check      the ping check every build ends with (one echo per pair, all at once)
  teardown   vnetbench's teardown against the hand script's (one `ip -batch` of `netns del`)
  trial      one trial of one short ping per pair (count 1), on the built topology
  1000       the cost of 1000 such trials extrapolated: built once and shared (consecutive trials of a scenario share
             its build), and rebuilt for every trial (the worst random order)

    .venv/bin/python bench/scale.py [--rounds N] [--pairs P] [--hosts H] [--processes]
"""
from __future__ import annotations

import argparse
import os
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

# The kernel frees deleted namespaces asynchronously (hundreds here); the next `netns add` waits for that work.
# Pause (untimed) so neither side pays for the other's teardown.
SETTLE_S = 3.0


def scenario(pairs: int, hosts: int):
    text = (f"name: scale\nhosts: {hosts}\nfactors: {{pairs: {pairs}, placement: spread}}\n"
            f"workloads: [{{type: ping, count: 1, interval: 0.2}}]\n")
    (sc,) = expand(loads(text).experiment, detect())
    assert sc.skip is None, sc.skip
    return sc


def ours(sc, trials: int) -> dict[str, float]:
    ledger = Ledger.create()
    topo = Topology(sc, ledger)
    out = {}
    try:
        t0 = time.perf_counter()
        topo.emit()
        topo._built = True
        topo._execute()  # the build without its ping check: the hand script does not ping either
        out["build"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        topo.verify()
        out["check"] = time.perf_counter() - t0
        runs = []
        for _ in range(trials):
            t0 = time.perf_counter()
            samples = sc.workloads[0].run(topo.pairs)
            runs.append(time.perf_counter() - t0)
            got = {s.metadata["pair"] for s in samples if s.metric == "rtt_s"}
            assert len(got) == len(topo.pairs), f"only {len(got)} of {len(topo.pairs)} pairs answered"
        out["trial"] = statistics.median(runs)
    finally:
        t0 = time.perf_counter()
        topo.teardown()
        out["teardown"] = time.perf_counter() - t0
        ledger.remove_all()
    return out


def hand_script(sc, prefix: str) -> tuple[list[tuple[list[str], str]], tuple[list[str], str], list[str]]:
    """The same topology as plain sequential `ip -batch` invocations, and its teardown."""
    topo = Topology(sc, None, prefix=prefix)
    topo.emit()
    calls = []
    for step in (st for wave in topo.waves() for st in wave):
        ex = topo.executor(step.node)
        calls.append(([step.tool, *ex.ip()[1:], "-batch", "-"], "\n".join(step.lines) + "\n"))
    names = [n.exec.name for n in topo.nodes.values()]
    return calls, (["ip", "-batch", "-"], "".join(f"netns del {n}\n" for n in names)), names


def hand(sc) -> dict[str, float]:
    ledger = Ledger.create()  # its prefix, so `vnetbench clean` covers a crash of this script
    build, teardown, names = hand_script(sc, ledger.prefix)
    ledger.record_many([{"kind": "netns", "name": n} for n in names])
    out = {}
    try:
        t0 = time.perf_counter()
        for argv, text in build:
            subprocess.run(argv, input=text, text=True, check=True, capture_output=True)
        out["build"] = time.perf_counter() - t0
    finally:
        t0 = time.perf_counter()
        subprocess.run(teardown[0], input=teardown[1], text=True, capture_output=True)
        out["teardown"] = time.perf_counter() - t0
        ledger.remove_all()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--trials", type=int, default=3, help="short-ping trials per round on vnetbench's build")
    ap.add_argument("--processes", action="store_true",
                    help="build every namespace's batch with its own ip process, as without netlink (for comparison)")
    args = ap.parse_args()
    if args.processes:
        from vnetbench.build import topology
        topology.NETLINK_MIN_BATCHES = 10 ** 9
    sc = scenario(args.pairs, args.hosts)
    a, b = [], []
    for r in range(args.rounds):  # alternate so drift on a shared machine hits both equally
        a.append(ours(sc, args.trials))
        time.sleep(SETTLE_S)
        b.append(hand(sc))
        time.sleep(SETTLE_S)
        print(f"round {r + 1}: vnetbench " + ", ".join(f"{k} {v:.2f} s" for k, v in a[-1].items()) +
              "; by hand " + ", ".join(f"{k} {v:.2f} s" for k, v in b[-1].items()), flush=True)

    def med(rows, key):
        return statistics.median(x[key] for x in rows)
    vms = 2 * args.pairs
    how = "one ip process per namespace" if args.processes else "hosts' and VMs' namespaces over netlink"
    print(f"\n{vms} VMs ({args.pairs} pairs, spread) on {args.hosts} hosts ({how}), medians of {args.rounds} alternating rounds, "
          f"load average {os.getloadavg()[0]:.1f}:")
    for key in ("build", "teardown"):
        print(f"  {key:9} vnetbench {med(a, key):6.2f} s   hand-written ip -batch {med(b, key):6.2f} s   "
              f"ratio {med(a, key) / med(b, key):.2f}")
    print(f"  check     {med(a, 'check'):6.2f} s (one echo per pair, every build)")
    print(f"  trial     {med(a, 'trial'):6.2f} s (one short ping per pair, count 1)")
    once = med(a, "build") + med(a, "check") + med(a, "teardown")
    shared = once + 1000 * med(a, "trial")
    rebuilt = 1000 * (once + med(a, "trial"))
    print(f"  1000 trials: built once and shared {shared:.0f} s ({shared / 60:.1f} min, of which the build "
          f"{once:.1f} s); rebuilt for every trial {rebuilt:.0f} s ({rebuilt / 3600:.1f} h)")


if __name__ == "__main__":
    main()
