"""`kernel: shared`: the emulated hosts, VMs and routers are network namespaces of the run on this machine's kernel.

VMs with a kernel of their own (`vm_kernel: guest`, guests/vms.py) are guests of the run; such a VM's port on its host
is its kind's (a UML guest's vif: a veth from the bridge of the guest's tap into the host's namespace; a qemu guest's
tap itself), not a veth into a VM namespace here, and inside the guest the VM is a namespace of the run holding the
guest's NIC. Both `run` and `plan` make the same steps for it: `plan` shows the guests' boot and their executors
without booting them.
"""
from __future__ import annotations

import subprocess
from functools import partial

from ..guests import ssh, vms
from ..guests.base import VM_NIC, GuestError
from ..probes.hypervisor import HypervisorProbe
from ..probes.procstat import GuestSystemProbe
from ..system.executor import CommandError, NetnsExecutor
from ..system.ledger import Ledger
from . import register
from .base import Backend, Placement, Unavailable, at_once
from .steps import PLAN_PREFIX, ROOT, Node


class NamespacesPlacement(Placement):
    """Namespaces here; the VMs that are guests (label -> guests.vms.GuestVm) reached over SSH."""

    def __init__(self, ledger: Ledger | None, vm_guests: dict | None = None, boot: str = "",
                 shown: list[str] | None = None):
        super().__init__(ledger)
        self.vm_guests = vm_guests or {}
        self.boot, self.shown = boot, shown or []  # what booting the guests was, and its command lines (the first step)
        self.nics: dict[str, str] = {}  # guest VM label -> its NIC's name in its namespace
        self.ports: dict[str, tuple[Node, str]] = {}  # guest VM label -> its host's node and its port's name there

    def node(self, topo, label, role, host, tenant) -> Node:
        if label not in self.vm_guests:
            return super().node(topo, label, role, host, tenant)
        g = self.vm_guests[label]  # a VM with its own kernel: a namespace of the run inside its guest
        if "gn" not in topo.nodes:
            # the guests' network namespace hands devices to the hosts (a qemu VM's tap): like a machine's root
            # namespace, its batches go ahead of the hosts' in each wave (build/topology.py: _merge)
            topo.nodes["gn"] = Node("gn", "machine", None, NetnsExecutor(g.netns, topo.ledger))
        root = topo.nodes[f"g{label}"] = Node(f"g{label}", "guest", None, g.executor)
        return Node(label, role, host, g.executor.in_netns(topo.ns(label), label), tenant, netns=topo.ns(label),
                    guest=root.label)

    def guests(self, topo) -> dict[str, tuple]:
        return {label: (vm.fleet, vm.guest) for label, vm in self.vm_guests.items()}

    def prelude(self, topo) -> None:
        if self.vm_guests:
            topo.call(ROOT, self.boot, lambda: None, self.shown)

    def link(self, topo, a, a_if, b, b_if) -> None:
        if not a.guest:
            return super().link(topo, a, a_if, b, b_if)
        self.vm_guests[a.label].port(topo, a, a_if, b, b_if)  # as its kind wires it (guests/base.py: port)
        self.nics[a.label] = a_if
        self.ports[a.label] = (b, b_if)

    def teardown(self, topo, namespaces) -> None:
        self._release(topo)
        super().teardown(topo, namespaces)

    def _release(self, topo) -> None:
        """Each guest VM's namespace goes (its processes first), its NIC back to the guest's root namespace under
        its own name, so the guest serves the next topology. A guest that does not answer is left to its fleet."""
        guests = [n for n in topo.nodes.values() if n.guest]
        if not guests:
            return

        def release(vm: Node) -> None:
            try:
                topo.nodes[vm.guest].exec.run_script(vms.release_script(vm.netns, self.nics.get(vm.label, VM_NIC)),
                                                     timeout=30, check=False)
            except CommandError:
                pass
        # the ports taken apart now, as their kind says (a vif's veth deleted, a qemu tap moved back to its guest),
        # not when the host's namespace is gone (asynchronously, after the next topology may have asked for the same
        # names; and with a qemu VM's tap in it)
        lines: dict[str, list[str]] = {}
        for vm in guests:
            if vm.label in self.ports:
                for ns, line in self.vm_guests[vm.label].unport(topo, *self.ports[vm.label]):
                    lines.setdefault(ns, []).append(line)
        for ns, batch in lines.items():
            subprocess.run(["ip", "-n", ns, "-force", "-batch", "-"], capture_output=True, text=True,
                           input="".join(f"{line}\n" for line in batch))
        at_once(release, guests)

    def probes(self, topo) -> list:
        # a VM with its own kernel also costs this machine its emulator's CPU: the hypervisor's side, per VM
        readers = {label: partial(vm.fleet.kind.host_cpu, vm.fleet, vm.guest) for label, vm in self.vm_guests.items()}
        return super().probes(topo) + ([HypervisorProbe(readers)] if readers else [])

    def guest_probes(self, topo) -> list:
        # a VM with its own kernel: its own CPU shares, interrupts and context switches, beside the host's
        return [GuestSystemProbe(vm.exec, vm.label) for vm in topo.vms if vm.guest]

    def describe(self, topo) -> list[str]:
        if not self.vm_guests:
            return []
        kind = next(iter(self.vm_guests.values())).fleet.kind
        return [f"vm_kernel guest: {', '.join(self.vm_guests)} run in {kind.name} guests with their own kernel, "
                f"reached over SSH; each one's port on its host is {kind.port_summary}"]


@register
class Namespaces(Backend):
    """This machine: namespaces on its kernel; guest VMs (vm_kernel) booted when a scenario wants them, kept while
    the next scenarios want the same VMs."""

    name = "namespaces"
    kernel = "shared"

    def __init__(self, ledger=None, testbed=None):
        super().__init__(ledger, testbed)
        self.vms = vms.VmGuests(ledger) if ledger is not None else None

    @classmethod
    def refuse(cls, sc, caps) -> str | None:
        return vms.decide(sc)

    @classmethod
    def check_encryption(cls, sc, element, caps):
        return vms.check_encryption(sc, element, caps)

    def notes(self, sc) -> list[str]:
        return vms.notes(sc)

    def wants_guests(self, sc) -> bool:
        return bool(vms.wanted(sc))

    def has_guests(self) -> bool:
        return self.vms is not None and self.vms.fleet is not None

    def open(self, sc) -> Placement:
        try:
            guests = self.vms.for_scenario(sc)  # the VMs with a kernel of their own (vm_kernel)
        except GuestError as exc:
            raise Unavailable(f"guest did not come up: {exc}") from None
        return self._placement(self.ledger, guests)

    def _placement(self, ledger, guests: dict) -> NamespacesPlacement:
        if not guests:
            return NamespacesPlacement(ledger)
        fleet = next(iter(guests.values())).fleet
        sizes = sorted({(fleet.kind.vcpus_of(g), g.mem_mb) for g in fleet.guests.values()})
        each = "; ".join(f"{c} vCPU{'s' if c > 1 else ''} and {m} MB each" for c, m in sizes)
        boot = (f"boot (or reuse) {len(guests)} {fleet.kind.name} guest VMs ({', '.join(guests)}; {each}) "
                f"on the run's guest network {fleet.netns}")
        return NamespacesPlacement(ledger, guests, boot, fleet.shown_boot())

    def plan(self, sc) -> Placement:
        labels = vms.wanted(sc)
        if not labels:
            return NamespacesPlacement(None)
        fleet = vms.fleet_for(sc, Ledger(PLAN_PREFIX))
        guests = {label: vms.GuestVm(fleet, label, ssh.plan_executor(fleet, fleet.guests[label])) for label in labels}
        return self._placement(None, guests)

    def close(self) -> None:
        if self.vms is not None:
            self.vms.close()
