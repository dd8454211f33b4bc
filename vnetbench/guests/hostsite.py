"""`kernel: guest-per-host`: each emulated host is a guest with its own kernel; its VMs are namespaces inside it, and
its switch, overlays and encryption run in that guest's kernel.

The guests are a testbed like any other (sites.TestbedSite): h1..hN are machines reached over SSH, each with an
underlay NIC (`<prefix>-u` inside the guest) on one data segment, a bridge in the run's guest namespace
(`<prefix>-gn`, see guests.base) joining the guests' taps. The guests are the run's own, so unlike a real testbed
host their NIC's MTU and egress rate (tbf) are set for each scenario. The run's directory is shared into every guest
at the same path, so daemons' configs and logs written by the build are seen on both sides.

What stays in the single-guest mode (`kernel: guest`), and why: routers between the hosts (`hops`; a router would be
one more guest, or a namespace on the segment, neither built yet); OVS, IPsec and WireGuard (their daemons' files
over SSH are another helper's work on sites.TestbedSite, which this site inherits when it lands).
"""
from __future__ import annotations

import shlex
import shutil

from .. import testbed as tb
from ..ledger import Ledger
from ..probes.interfaces import InterfaceProbe
from ..probes.procstat import SystemProbe
from ..sites import HostProbe, TestbedSite
from .base import Fleet, GuestError

SEGMENT = "underlay"
DATA_NET = "10.252.0"
MEM_MB = 512  # one host's switch, daemons and its VMs' tools


def why_not(sc) -> str | None:
    """Why a scenario cannot run with one guest per host (None: it can)."""
    if sc.levels.get("hops", 0):
        return "routers between host guests are not built yet (kernel: guest runs them)"
    for kind, names in {"switch": {"ovs"}, "encryption": {"ipsec", "wireguard"}}.items():
        if sc.labels.get(kind, "").split("(")[0] in names:
            return (f"{sc.labels[kind]} keeps its daemons' files on this machine; over SSH it is not supported yet "
                    f"(kernel: guest runs it)")
    if sc.levels.get("ip_version") == 6 and sc.labels.get("attach") == "host":
        return "host-to-host over IPv6: the host guests' underlay has IPv4 addresses only"
    return None


class GuestHostSite(TestbedSite):
    """One guest per emulated host, booted in parallel; h<i> is guest i, its underlay address 10.252.0.<i>."""

    def __init__(self, ledger: Ledger, hosts: int, backend: str = "uml", boot_timeout: float = 60):
        self.fleet = Fleet(ledger, backend, boot_timeout=boot_timeout)
        self.nic_name = f"{ledger.prefix}-u"
        for i in range(1, hosts + 1):
            self.fleet.add(f"h{i}", nics=[(self.nic_name, SEGMENT)], mem_mb=MEM_MB, share_run=True)
        try:
            self.fleet.boot()
        except GuestError:
            self.fleet.teardown()
            shutil.rmtree(self.fleet.dir, ignore_errors=True)
            raise
        bed = tb.Testbed("guests", [tb.Host(f"guest-h{i}", g.executor.target, self.nic_name, f"{DATA_NET}.{i}",
                                            facts={"kernel": self.fleet.backend.support().kernel})
                                    for i, g in enumerate(self.fleet.guests.values(), 1)])
        super().__init__(bed, ledger)
        self._exec = {h.name: g.executor for h, g in zip(bed.hosts, self.fleet.guests.values())}
        self._nic: tuple[int, str | None] | None = None
        self._parallel({f"h{i}": (self._exec[h.name], f"ip addr add {h.address}/24 dev {shlex.quote(h.nic)}")
                        for i, h in enumerate(bed.hosts, 1)})

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
        return why_not(sc)

    def prepare(self, sc) -> None:
        """Each guest's underlay NIC at the scenario's MTU, shaped to its rate (tbf) or not: the guests are the
        run's own, so this is the emulated underlay, not a real host's NIC."""
        want = (sc.underlay_mtu, sc.underlay_rate)
        if self._nic == want:
            return
        nic = shlex.quote(self.nic_name)
        script = f"ip link set {nic} mtu {int(sc.underlay_mtu)} up; tc qdisc del dev {nic} root 2>/dev/null; true"
        if sc.underlay_rate:
            from ..units import parse_rate
            rate = int(parse_rate(sc.underlay_rate))
            burst = max(rate // 8 // 1000, 2 * sc.underlay_mtu)  # 1 ms at the rate, at least two frames
            script += f"; tc qdisc add dev {nic} root tbf rate {rate}bit burst {burst} latency 50ms"
        self._parallel({f"h{i}": (self._exec[h.name], script) for i, h in enumerate(self.bed.hosts, 1)})
        self._nic = want

    def touch(self, labels: list[str], run: bool = True) -> dict[str, str]:
        """The run's directory in each guest; no testbed-host record in the local ledger: the guests themselves
        are recorded (guests.base) and everything in them dies with them."""
        new = [lb for lb in dict.fromkeys(labels) if self.host(lb).name not in self._touched]
        if not new:
            return {}
        scripts = {lb: tb.owner_script(self.ledger.prefix) for lb in new}
        self._touched |= {self.host(lb).name for lb in new}
        if run:
            self._parallel({lb: (self.executor(lb), script) for lb, script in scripts.items()})
            return {}
        return scripts

    def executor(self, label: str):
        return self._exec[self.host(label).name]

    def nic_counters(self) -> dict[str, dict[str, int]]:
        """rx/tx bytes of each guest's underlay NIC, read inside the guest (its own kernel's counters)."""
        out = {}
        for i, h in enumerate(self.bed.hosts, 1):
            text = self._exec[h.name].run_script(
                f"cat /sys/class/net/{shlex.quote(self.nic_name)}/statistics/rx_bytes "
                f"/sys/class/net/{shlex.quote(self.nic_name)}/statistics/tx_bytes", timeout=30).stdout.split()
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
                    HostProbe(InterfaceProbe(h.exec, interval=None), name),
                    HostProbe(InterfaceProbe(machine, interval=None), name, only=self.nic(h.label))]
        return out

    def environment(self) -> dict:
        return {h.name: {"nic": h.nic, "address": h.address, **h.facts} for h in self.bed.hosts}

    def close(self) -> None:
        super().close()
        self.fleet.teardown()
        shutil.rmtree(self.fleet.dir, ignore_errors=True)  # its keys: a later fleet of the run makes its own
