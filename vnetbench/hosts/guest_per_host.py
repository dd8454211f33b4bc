"""`kernel: guest-per-host`: each emulated host is a guest with its own kernel (guests/hostsite.py), reached over SSH
like a testbed host; its VMs are namespaces inside it. The guests are of one kind (`kind`: UML here; a subclass
serving another level names another, e.g. hosts/qemu_per_host.py), whose probed kernel checks the scenario. The placement is the testbed's, on hosts that are the run's
own (their NIC moves into the host's namespace, as with emulated hosts); `plan` shows the guests' boot as a step and
their executors without booting them.
"""
from __future__ import annotations

from functools import partial

from ..guests import DEFAULT_KIND
from ..guests import probe as guest_probe
from ..guests import vms
from ..guests.base import GuestError
from ..guests.hostsite import MEM_MB, GuestHostSite
from . import register
from .base import Backend, Placement, Unavailable
from .lab.placement import TestbedPlacement


class HostGuestsPlacement(TestbedPlacement):
    def __init__(self, site: GuestHostSite, boot: str = "", level: str = "guest-per-host"):
        super().__init__(site)
        self.boot, self.level = boot, level  # level: the `kernel` level it serves, as describe names it

    def arrange(self, topo, waves):
        """A machine's batches (its namespaces, the veths into them) ahead of its host's in each wave: the host's
        batch may bring up a VM port that the machine's makes (OVS with a tunnel overlay sets the host's address
        before the VMs are attached)."""
        def mine_first(step) -> bool:
            return getattr(topo.nodes.get(step.node), "role", None) != "machine"
        return [sorted(wave, key=mine_first) for wave in waves]

    pins_inside = False  # every node runs inside a host's guest: cpu_pinning pins the guests

    def guests(self, topo) -> dict[str, tuple]:
        fleet = self.site.fleet
        return {label: (fleet, g) for label, g in fleet.guests.items() if label in topo.nodes}

    def prelude(self, topo) -> None:
        if self.boot:
            topo.call("h1", self.boot, lambda: None, self.site.fleet.shown_boot())

    def describe(self, topo) -> list[str]:
        return [f"kernel: {self.level}: each host is a guest of the run "
                f"({topo.sc.implementation.get('kernel', 'guest')}), reached over SSH; it runs its batches below as one script (then pings its pairs' servers), "
                f"all hosts at once"]


@register
class GuestPerHost(Backend):
    """One guest per emulated host, booted at the first such scenario and kept while the scenarios need no more
    hosts than it has (each topology sets the underlay to its MTU and rate)."""

    name = "guest-per-host"
    kernel = "guest-per-host"
    kind = DEFAULT_KIND  # the guest kind of every host guest (guests.kind_class)

    def __init__(self, ledger=None, testbed=None):
        super().__init__(ledger, testbed)
        self.site: GuestHostSite | None = None

    @classmethod
    def refuse(cls, sc, caps) -> str | None:
        if why := vms.decide(sc):
            return why
        # the kind's support first: the probe's answer is kept for the process, what is installed may change
        if not (sup := guest_probe.support(cls.kind)).ok:
            return f"kernel {cls.kernel}: {sup.reason}"
        guest = guest_probe.capabilities(cls.kind)
        if guest is None:
            return f"kernel {cls.kernel}: a guest did not boot (see vnetbench doctor)"
        if why := guest_probe.why_not_per_host(sc, cls.kind):
            return f"kernel {cls.kernel}: {why}"
        sc.implementation["kernel"] = guest.tools["kernel"].detail + " per host"
        return None

    @classmethod
    def capabilities(cls, sc, caps):
        return guest_probe.capabilities(cls.kind)

    def wants_guests(self, sc) -> bool:
        return True

    def notes(self, sc) -> list[str]:
        """What a reader of its rows must know: the guests' kind (a TCG guest's emulated CPU), and the NICs offloads
        leave alone."""
        kind = list(guest_probe.support(self.kind).notes)
        if not isinstance(sc.levels.get("offloads"), dict):
            return kind
        return kind + [f"kernel {self.name}: offloads {sc.labels['offloads']} are set on the run's devices in each host "
                f"guest; the guest's own NIC, which its kernel made, keeps its offloads (build/offloads.py)"]

    def has_guests(self) -> bool:
        return self.site is not None

    @classmethod
    def boot_text(cls, n: int) -> str:
        return (f"boot (or reuse) {n} {cls.kind} host guests h1..h{n} ({MEM_MB} MB each) on one "
                f"underlay segment")

    def open(self, sc) -> Placement:
        if self.site is not None and self.site.hosts < sc.hosts:
            self.close()
        if self.site is None:
            try:
                self.site = GuestHostSite(self.ledger, sc.hosts, self.kind,
                                          why_not=partial(guest_probe.why_not_per_host, kind=self.kind))
            except GuestError as exc:
                raise Unavailable(f"guest did not come up: {exc}") from None
        return HostGuestsPlacement(self.site, self.boot_text(self.site.hosts), self.kernel)

    def plan(self, sc) -> Placement:
        site = GuestHostSite(None, sc.hosts, self.kind, plan=True)
        return HostGuestsPlacement(site, self.boot_text(sc.hosts), self.kernel)

    def close(self) -> None:
        if self.site is not None:
            self.site.close()
            self.site = None
