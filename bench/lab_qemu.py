#!/usr/bin/env python3
"""What a qemu guest VM on a lab host costs (hosts/lab/vms.py), on the emulated lab (tests/testlab.py) (run as root
from the repo):

  boot    from the fleet's start on the host (network, initramfs, files, virtiofsd, qemu) to the guest's sshd answering
          through its host: one guest on one host, then one guest on each of two hosts at once
  memory  proportional set size of the guest's qemu and virtiofsd after boot (the lab's hosts are this machine)
  rtt     a command's round trip into the guest through its host: its agent over the proxied SSH connection

Everything is the run's own (a ledger of its own, removed at the end with the lab).

    PYTHONPATH=. python bench/lab_qemu.py [--rounds N]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from testlab import Lab  # noqa: E402
from vnetbench.guests import vms  # noqa: E402
from vnetbench.guests.base import _pss_kb  # noqa: E402
from vnetbench.hosts.lab import preflight, testbed  # noqa: E402
from vnetbench.hosts.lab.site import TestbedSite  # noqa: E402
from vnetbench.hosts.lab.vms import LabFleet, offer_of  # noqa: E402
from vnetbench.hosts.base import at_once  # noqa: E402
from vnetbench.system.ledger import Ledger  # noqa: E402


def boot(site: TestbedSite, ledger: Ledger, hosts: list[str]) -> tuple[float, list[LabFleet]]:
    fleets = []
    for k, host in enumerate(hosts, 1):
        fleet = LabFleet(ledger, site, host, offer_of(site, host), k)
        fleet.add(f"{host}v{k}", nics=[(vms.NIC, vms.segment(f"{host}v{k}"))])
        fleets.append(fleet)
    t0 = time.monotonic()
    at_once(LabFleet.boot, fleets)
    return time.monotonic() - t0, fleets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    lab = Lab(Path(tempfile.mkdtemp(prefix="vb-lab-")), 2).create()
    ledger = Ledger.create()
    try:
        bed = testbed.load(lab.dir / "testbed.yaml")
        preflight.preflight(bed)
        site = TestbedSite(bed, ledger)
        for r in range(args.rounds):
            for hosts in (["h1"], ["h1", "h2"]):
                took, fleets = boot(site, ledger, hosts)
                g = next(iter(fleets[0].guests.values()))
                pids = [g.proc.pid, *(p.pid for p in fleets[0].helpers[g.label])]
                pss = sum(_pss_kb(p) for p in pids) / 1024
                rtts = []
                for _ in range(20):
                    t = time.monotonic()
                    g.executor.run(["true"])
                    rtts.append(time.monotonic() - t)
                print(f"round {r + 1}: {len(hosts)} host(s): boot {took:.2f} s (guests: "
                      f"{', '.join(f'{x.boot_s:.2f}' for f in fleets for x in f.guests.values())} s); "
                      f"qemu + virtiofsd PSS {pss:.0f} MB; agent `true` through the host "
                      f"{statistics.median(rtts) * 1e3:.1f} ms (median of 20)", flush=True)
                at_once(LabFleet.teardown, fleets)
    finally:
        site.close()
        ledger.remove_all()
        lab.destroy()


if __name__ == "__main__":
    main()
