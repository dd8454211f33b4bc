"""`kernel: guest-per-host`: each emulated host is a guest with its own kernel; its VMs are namespaces inside it, and
its switch, overlays, encryption and underlay shaping run in that guest's kernel.

The guests are a testbed like any other (hosts/testbed.py: TestbedSite): h1..hN are machines reached over SSH, each with an
underlay NIC (`<prefix>-u` inside the guest) on one data segment, a bridge in the run's guest namespace
(`<prefix>-gn`, see guests.base) joining the guests' taps. Unlike a real testbed host, a guest is the run's own
(`owns_hosts`): for each scenario its NIC goes into the host's namespace of the run, where the topology gives it the
host's address, MTU and rate (tbf), as with emulated hosts. So what a real testbed refuses runs here: the OVS kernel
datapath with tunnel overlays (its tunnel vports next to the underlay address), host-to-host encryption (xfrm in the
host's namespace protects its tunnels), host-to-host IPv6. Daemons' files (OVS databases, charon's configs, xfrm
batches with keys) are written into each guest's own /run over SSH, like a testbed host's.

What stays in the single-guest mode (`kernel: guest`), and why: routers between the hosts (`hops`; a router would be
one more guest, or a namespace on the segment, neither built yet). WireGuard runs in neither with UML guests: their
kernel has no wireguard device, and wireguard-go is refused by the guest probe (guests/probe.py); qemu host guests
(`kernel: qemu`, hosts/qemu_per_host.py) have it in their cloud kernel.
"""
from __future__ import annotations

import shlex
import shutil
from dataclasses import replace
from functools import partial
from typing import Callable

from ..hosts.lab import clean as lab_clean
from ..hosts.lab import testbed as tb
from ..hosts.lab.site import HostProbe, TestbedSite
from ..hosts.steps import PLAN_PREFIX
from ..probes.hypervisor import HypervisorProbe
from ..probes.interfaces import InterfaceProbe
from ..probes.procstat import SystemProbe
from ..system.executor import _COPIED
from ..system.ledger import Ledger
from . import DEFAULT_KIND, ssh
from .base import Fleet, GuestError

SEGMENT = "underlay"
DATA_NET = "10.252.0"
MEM_MB = 512  # one host's switch, daemons and its VMs' tools


class GuestHostSite(TestbedSite):
    """One guest per emulated host, booted in parallel; h<i> is guest i, its underlay address 10.252.0.<i>."""

    owns_hosts = True

    def __init__(self, ledger: Ledger | None, hosts: int, kind: str = DEFAULT_KIND, boot_timeout: float = 60,
                 why_not: Callable[[object], str | None] = lambda sc: None, plan: bool = False):
        """plan: nothing booted; the executors are those `plan` shows (ledger None)."""
        self.why_not = why_not  # what the guests' kernel refuses (guests.probe knows it: it probes the guest)
        self.fleet = Fleet(Ledger(PLAN_PREFIX) if plan else ledger, kind, boot_timeout=boot_timeout)
        self.nic_name = f"{self.fleet.prefix}-u"
        for i in range(1, hosts + 1):
            self.fleet.add(f"h{i}", nics=[(self.nic_name, SEGMENT)], mem_mb=MEM_MB, share_run=True)
        if not plan:
            try:
                self.fleet.boot()
            except GuestError:
                self.fleet.teardown()
                shutil.rmtree(self.fleet.dir, ignore_errors=True)
                raise
        execs = [ssh.plan_executor(self.fleet, g) if plan else g.executor for g in self.fleet.guests.values()]
        bed = tb.Testbed("guests", [tb.Host(f"guest-h{i}", ex.target, self.nic_name, f"{DATA_NET}.{i}",
                                            facts={"kernel": self.fleet.kind.support().kernel})
                                    for i, ex in enumerate(execs, 1)])
        super().__init__(bed, None if plan else ledger)
        self._exec = {h.name: ex for h, ex in zip(bed.hosts, execs)}
        for ex in self._exec.values():  # a testbed host's files (daemons' configs, keys) live in its own /run
            ex.own_files = True

    @property
    def hosts(self) -> int:
        return len(self.bed.hosts)

    @property
    def boot_s(self) -> list[float]:
        return [g.boot_s for g in self.fleet.guests.values()]

    # ---- what a scenario needs -------------------------------------------------------------------------------
    def check(self, sc) -> str | None:
        if sc.hosts > self.hosts:
            return f"the scenario needs {sc.hosts} hosts; {self.hosts} host guests were booted"
        return self.why_not(sc)

    # ---- build: the guest's NIC is the host's, for the scenario ----------------------------------------------
    def underlay(self, topo) -> None:
        """Each guest's underlay NIC goes into its host's namespace of the run (TestbedPlacement.owned): the host's
        address, tunnels, xfrm, daemons and host-to-host traffic are there, as with emulated hosts. The NIC is set
        to the scenario's MTU and shaped to its underlay (netem, tbf): the guests are the run's own, so this is the emulated
        underlay, not a real host's NIC."""
        sc, nic = topo.sc, self.nic_name
        for h in topo.hosts:
            topo.ip(topo.root_of(h.label), self._move(h.netns))
            topo.ip(h.label, f"link set {nic} mtu {int(sc.underlay_mtu)} up")
            if qdiscs := sc.underlay_qdiscs(nic):
                topo.batch("tc", h.label, *qdiscs)

    def _move(self, netns: str) -> str:
        return f"link set dev {self.nic_name} netns {netns}"

    def guard(self, topo, place, waves) -> None:
        """A real host's guard, but for the one line that lends the guest's NIC to the host's namespace."""
        mine = {self._move(h.netns) for h in topo.hosts}
        super().guard(topo, place, [[replace(st, lines=[ln for ln in st.lines if ln not in mine]) for st in wave]
                                    for wave in waves])

    def teardown(self, topo, place) -> None:
        """The NIC back in the guest's root namespace first (a deleted namespace gives a device back only later,
        asynchronously), without the scenario's shaping (the next one may not ask for it), then the real host's
        teardown."""
        q, nic = shlex.quote, shlex.quote(self.nic_name)
        self._parallel({h.label: (self.executor(h.label), f"tc -n {q(h.netns)} qdisc del dev {nic} root 2>/dev/null; "
                                                          f"ip -n {q(h.netns)} link set dev {nic} netns 1 2>/dev/null; "
                                                          f"true") for h in topo.hosts})
        super().teardown(topo, place)

    def touch(self, labels: list[str], run: bool = True) -> dict[str, str]:
        """The run's directory in each guest; no testbed-host record in the local ledger: the guests themselves
        are recorded (guests.base) and everything in them dies with them."""
        new = [lb for lb in dict.fromkeys(labels) if self.host(lb).name not in self._touched]
        if not new:
            return {}
        scripts = {lb: lab_clean.owner_script(self.ledger.prefix) for lb in new}
        self._touched |= {self.host(lb).name for lb in new}
        if run:
            self._parallel({lb: (self.executor(lb), script) for lb, script in scripts.items()})
            return {}
        return scripts

    def executor(self, label: str):
        return self._exec[self.host(label).name]

    def nic_counters(self) -> dict[str, dict[str, int]]:
        """rx/tx bytes of each guest's underlay NIC, read inside the guest (its own kernel's counters), in the host's
        namespace of the run while a scenario has it."""
        out = {}
        for i, h in enumerate(self.bed.hosts, 1):
            f = f"/sys/class/net/{shlex.quote(self.nic_name)}/statistics"
            ns = shlex.quote(f"{self.ledger.prefix}-h{i}")
            text = self._exec[h.name].run_script(
                f"ip netns exec {ns} cat {f}/rx_bytes {f}/tx_bytes 2>/dev/null || cat {f}/rx_bytes {f}/tx_bytes",
                timeout=30).stdout.split()
            out[f"h{i}"] = {"rx_bytes": int(text[0]), "tx_bytes": int(text[1])}
        return out

    def probes(self, topo) -> list:
        """As on a testbed, but window totals only (a reading at each end of the window, no series): every reading
        is a command over SSH, which costs a one-CPU UML guest ~90 ms of its CPU (measured: 105 ms per read of
        /proc/stat, the guest 84 % busy meanwhile). With the series (/proc/stat every 0.25 s, counters every 1 s)
        a single TCP stream host to host carried 1.09 Gbit/s, 1.55 with /proc/stat every 1 s, 4.17 without."""
        out = []
        for h in topo.hosts:
            name, machine = self.name(h.label), self.executor(h.label)
            out += [HostProbe(SystemProbe(machine, interval=None), name),
                    HostProbe(InterfaceProbe(h.exec, interval=None), name)]  # the NIC is in the host's namespace
        # what running each host guest costs this machine (its emulator's processes, read here, not over SSH)
        guests = [self.fleet.guests[h.label] for h in topo.hosts if h.label in self.fleet.guests]
        return out + [HypervisorProbe({g.label: partial(self.fleet.kind.host_cpu, self.fleet, g) for g in guests})]

    def environment(self) -> dict:
        return {h.name: {"nic": h.nic, "address": h.address, **h.facts} for h in self.bed.hosts}

    def close(self) -> None:
        super().close()
        targets = {ex.target for ex in self._exec.values()}  # a later fleet's guests have none of its copied modules
        _COPIED.difference_update({k for k in _COPIED if k[0] in targets})
        self.fleet.teardown()
        shutil.rmtree(self.fleet.dir, ignore_errors=True)  # its keys: a later fleet of the run makes its own
