"""`kernel: guest`: the scenario's emulated hosts, VMs and routers are namespaces inside one guest with its own kernel
(guests/probe.py: booted at the first such scenario of a run, reused by the next), reached over SSH. The topology's
steps are those of namespaces here, each run by the guest's executor; `plan` shows them with the executor of a guest
not booted, after the guest's boot as a step.
"""
from __future__ import annotations

import shlex

from ..guests import DEFAULT_KIND
from ..guests import probe as guest_probe
from ..guests import ssh, vms
from ..guests.base import Fleet, GuestError
from ..probes.interfaces import InterfaceProbe
from ..probes.procstat import StreamedSystemProbe
from ..system.executor import CommandError, Executor
from ..system.ledger import Ledger
from . import register
from .base import Backend, Placement, Unavailable, in_guest_teardown
from .steps import PLAN_PREFIX, ROOT, Node, comment


class GuestPlacement(Placement):
    """Namespaces of the run inside one guest (its executor runs every step)."""

    netlink = False
    pins_inside = False  # one guest for every host: cpu_pinning refuses it (experiment/matrix.py)

    def __init__(self, ledger: Ledger | None, guest: Executor, boot: str = "", shown: list[str] | None = None):
        super().__init__(ledger)
        self.guest, self.boot = guest, boot  # the executor of the guest whose kernel the hosts share
        self.shown = shown or []  # the boot's command lines

    def node(self, topo, label, role, host, tenant) -> Node:
        return Node(label, role, host, self.guest.in_netns(topo.ns(label), label), tenant, netns=topo.ns(label))

    def root_executor(self, topo) -> Executor:
        return self.guest

    def prelude(self, topo) -> None:
        if self.boot:
            topo.call(ROOT, self.boot, lambda: None, self.shown)

    def teardown(self, topo, namespaces) -> None:
        try:  # by its agent, with no process started per namespace (3-7 s of a teardown in a busy guest)
            if not self.guest.drop_namespaces(namespaces):
                self.guest.run_script(in_guest_teardown(namespaces), timeout=60, check=False)
        except CommandError:
            pass  # the guest is gone: nothing of it is left either

    def probes(self, topo) -> list:
        # the guest kernel's interface counters at the window's two ends (a command over SSH per reading would take
        # a third of a one-CPU guest: procstat.py)
        return [InterfaceProbe(h.exec, interval=None) for h in topo.hosts]

    def guest_probes(self, topo) -> list:
        return [StreamedSystemProbe(self.guest)]  # the guest kernel's own /proc/stat, streamed by one reader in it

    def describe(self, topo) -> list[str]:
        return [f"kernel: guest: every command below runs inside a {topo.sc.implementation.get('kernel', 'guest')} "
                f"guest booted for the run, over SSH"]

    def shown_teardown(self, topo) -> list[str]:
        names = [n.netns for n in topo.nodes.values() if n.netns]
        return [comment("teardown, inside the guest"),
                shlex.join(self.guest.wrap(["sh", "-c", in_guest_teardown(names)]))]


@register
class Guest(Backend):
    """One guest with its own kernel for the run's `kernel: guest` scenarios."""

    name = "guest"
    kernel = "guest"

    def __init__(self, ledger=None, testbed=None):
        super().__init__(ledger, testbed)
        self.guest = guest_probe.SharedGuest(ledger) if ledger is not None else None

    @classmethod
    def refuse(cls, sc, caps) -> str | None:
        if why := vms.decide(sc):
            return why
        guest = guest_probe.capabilities()  # checked against what a guest's kernel offers
        if guest is None:
            return (f"kernel {sc.levels['kernel']}: "
                    f"{guest_probe.support().reason or 'a guest did not boot (see vnetbench doctor)'}")
        sc.implementation["kernel"] = guest.tools["kernel"].detail
        return None

    @classmethod
    def capabilities(cls, sc, caps):
        return guest_probe.capabilities()

    @classmethod
    def info(cls) -> dict:
        return guest_probe.info()

    def wants_guests(self, sc) -> bool:
        return True

    def has_guests(self) -> bool:
        return self.guest is not None and self.guest.fleet is not None

    @staticmethod
    def boot_text() -> str:
        return (f"boot (or reuse) the run's {DEFAULT_KIND} guest m1 ({guest_probe.MEM_MB} MB, the run's "
                f"directory mounted at the same path)")

    def open(self, sc) -> Placement:
        try:
            guest = self.guest.executor()
            return GuestPlacement(self.ledger, guest, self.boot_text(), self.guest.fleet.shown_boot())
        except GuestError as exc:
            raise Unavailable(f"guest did not come up: {exc}") from None

    def plan(self, sc) -> Placement:
        fleet = Fleet(Ledger(PLAN_PREFIX), DEFAULT_KIND)
        g = fleet.add("m1", mem_mb=guest_probe.MEM_MB, share_run=True)
        return GuestPlacement(None, ssh.plan_executor(fleet, g), self.boot_text(), fleet.shown_boot())

    def close(self) -> None:
        if self.guest is not None:
            self.guest.close()
