"""`kernel: guest-per-host`: each emulated host is a guest with its own kernel (guests/hostsite.py), reached over SSH
like a testbed host; its VMs are namespaces inside it. The placement is the testbed's, on hosts that are the run's
own (their NIC moves into the host's namespace, as with emulated hosts); `plan` shows the guests' boot as a step and
their executors without booting them.
"""
from __future__ import annotations

from ..guests import DEFAULT_KIND
from ..guests import probe as guest_probe
from ..guests import vms
from ..guests.base import GuestError
from ..guests.hostsite import MEM_MB, GuestHostSite
from . import register
from .base import Backend, Placement, Unavailable
from .lab.placement import TestbedPlacement


class HostGuestsPlacement(TestbedPlacement):
    def __init__(self, site: GuestHostSite, boot: str = ""):
        super().__init__(site)
        self.boot = boot

    def arrange(self, topo, waves):
        """A machine's batches (its namespaces, the veths into them) ahead of its host's in each wave: the host's
        batch may bring up a VM port that the machine's makes (OVS with a tunnel overlay sets the host's address
        before the VMs are attached)."""
        def mine_first(step) -> bool:
            return getattr(topo.nodes.get(step.node), "role", None) != "machine"
        return [sorted(wave, key=mine_first) for wave in waves]

    def prelude(self, topo) -> None:
        if self.boot:
            topo.call("h1", self.boot, lambda: None)

    def describe(self, topo) -> list[str]:
        return [f"kernel: guest-per-host: each host is a guest of the run "
                f"({topo.sc.implementation.get('kernel', 'guest')}), reached over SSH; it runs its batches below as one script (then pings its pairs' servers), "
                f"all hosts at once"]


@register
class GuestPerHost(Backend):
    """One guest per emulated host, booted at the first such scenario and kept while the scenarios need no more
    hosts than it has (each topology sets the underlay to its MTU and rate)."""

    name = "guest-per-host"
    kernel = "guest-per-host"

    def __init__(self, ledger=None, testbed=None):
        super().__init__(ledger, testbed)
        self.site: GuestHostSite | None = None

    @classmethod
    def refuse(cls, sc, caps) -> str | None:
        if why := vms.decide(sc):
            return why
        guest = guest_probe.capabilities()
        if guest is None:
            return (f"kernel {sc.levels['kernel']}: "
                    f"{guest_probe.support().reason or 'a guest did not boot (see vnetbench doctor)'}")
        if why := guest_probe.why_not_per_host(sc):
            return f"kernel guest-per-host: {why}"
        sc.implementation["kernel"] = guest.tools["kernel"].detail + " per host"
        return None

    @classmethod
    def capabilities(cls, sc, caps):
        return guest_probe.capabilities()

    def wants_guests(self, sc) -> bool:
        return True

    def notes(self, sc) -> list[str]:
        if not isinstance(sc.levels.get("offloads"), dict):
            return []
        return [f"kernel guest-per-host: offloads {sc.labels['offloads']} are set on the run's devices in each host "
                f"guest; the guest's own NIC, which its kernel made, keeps its offloads (build/offloads.py)"]

    def has_guests(self) -> bool:
        return self.site is not None

    @staticmethod
    def boot_text(n: int) -> str:
        return (f"boot (or reuse) {n} {DEFAULT_KIND} host guests h1..h{n} ({MEM_MB} MB each) on one "
                f"underlay segment")

    def open(self, sc) -> Placement:
        if self.site is not None and self.site.hosts < sc.hosts:
            self.close()
        if self.site is None:
            try:
                self.site = GuestHostSite(self.ledger, sc.hosts, DEFAULT_KIND,
                                          why_not=guest_probe.why_not_per_host)
            except GuestError as exc:
                raise Unavailable(f"guest did not come up: {exc}") from None
        return HostGuestsPlacement(self.site, self.boot_text(self.site.hosts))

    def plan(self, sc) -> Placement:
        site = GuestHostSite(None, sc.hosts, DEFAULT_KIND, plan=True)
        return HostGuestsPlacement(site, self.boot_text(sc.hosts))

    def close(self) -> None:
        if self.site is not None:
            self.site.close()
            self.site = None
