#!/usr/bin/env python3
"""What driving hosts over SSH costs (run as root from the repo). It sets up the emulated SSH lab (tests/testlab.py:
machines with their own sshd, reached only over ssh), then measures:

  (a) the round trip of one remote command (`true`) over the shared connection (ControlMaster): median of N
  (b) build + teardown of the quick topology (2 hosts, Linux bridge + VXLAN, a VM on each, cross-host), over SSH on
      the lab vs locally in namespaces, alternating, medians of R rounds; the build includes the ping check

    .venv/bin/python bench/ssh.py [--commands N] [--rounds R]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the lab is a test fixture

from vnetbench.hosts.lab import testbed as tb  # noqa: E402

from vnetbench.hosts.lab import preflight
from vnetbench.capabilities import detect  # noqa: E402
from vnetbench.system.ledger import Ledger  # noqa: E402
from vnetbench.experiment.matrix import expand  # noqa: E402
from vnetbench.hosts.lab.placement import TestbedPlacement  # noqa: E402
from vnetbench.hosts.lab.site import TestbedSite  # noqa: E402
from vnetbench.experiment.spec import loads  # noqa: E402
from testlab import Lab  # noqa: E402
from vnetbench.build.topology import Topology  # noqa: E402

SETTLE_S = 0.5  # untimed pause between rounds: the kernel frees deleted namespaces asynchronously


def quick_scenario():
    text = ("name: bench\nfactors: {overlay: vxlan, attach: switch, placement: cross-host}\n"
            "workloads: [{type: ping, count: 1}]\n")
    (sc,) = expand(loads(text).experiment, detect())
    assert sc.skip is None, sc.skip
    return sc


def build_teardown(sc, ledger, site=None) -> float:
    t0 = time.perf_counter()
    topo = Topology(sc, ledger, placement=TestbedPlacement(site) if site else None)
    topo.build()
    topo.teardown()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vb-bench-") as tmp:
        os.environ["VNETBENCH_STATE_DIR"] = str(Path(tmp) / "state")
        lab = Lab(Path(tmp) / "lab", 2).create()
        try:
            bed = tb.load(lab.dir / "testbed.yaml")
            preflight.preflight(bed, probe_kernel=False)
            ledger = Ledger.create()
            site = TestbedSite(bed, ledger)
            ex = site.executor("h1")
            ex.run(["true"])
            rtt = []
            for _ in range(args.commands):
                t0 = time.perf_counter()
                ex.run(["true"])
                rtt.append(time.perf_counter() - t0)
            sc = quick_scenario()
            local, remote = [], []
            build_teardown(sc, ledger, site)  # warm-up: the first build also records the hosts
            for _ in range(args.rounds):
                local.append(build_teardown(sc, ledger))
                time.sleep(SETTLE_S)
                remote.append(build_teardown(sc, ledger, site))
                time.sleep(SETTLE_S)
            ledger.remove_all()
            site.close()
        finally:
            lab.destroy()
    med_rtt, med_l, med_r = statistics.median(rtt), statistics.median(local), statistics.median(remote)
    print(f"(a) one remote command over the shared connection: median {med_rtt * 1e3:.1f} ms "
          f"(p90 {statistics.quantiles(rtt, n=10)[-1] * 1e3:.1f} ms, n={len(rtt)}); target <= 10 ms")
    print(f"(b) build + teardown of the quick topology (2 hosts, bridge + VXLAN, cross-host, with the ping check): "
          f"over SSH {med_r:.3f} s, local {med_l:.3f} s, ratio {med_r / med_l:.2f} (medians of {args.rounds}); "
          f"target <= 2")
    print(f"    load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
