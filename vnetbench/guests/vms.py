"""The `vm_kernel` factor: VMs with a kernel of their own. A VM that is a guest (User-Mode Linux, or qemu) has its own
/proc/stat (its CPU, interrupts and context switches, probed apart from the host's), its own xfrm and its own
scheduler; the rest of the topology (hosts, switches, other VMs) stays as it is.

How a guest VM meets its host is its kind's (`GuestKind.port`, undone by `unport`). A UML guest's, as a Xen vif: the
guest's data NIC is a tap on a bridge of its own (a data segment in the run's guest namespace `<prefix>-gn`); a veth
from that bridge into the host's namespace is the VM's port, which the host's switch enslaves like any VM's veth. A
qemu guest's, as a cloud compute node's: its data tap itself, moved into the host's namespace as the port (qemu.py).
Inside the guest the VM lives in a namespace of the run that holds the guest's NIC (moved in at build, moved back at
teardown), so a teardown inside the guest is the namespace's deletion, as everywhere else, and the guest is reused by
the next topology: booted once per run for the VMs a scenario wants, rebooted only when a scenario wants other VMs.

A level is `shared`, `guest` (the default kind, guests.DEFAULT_KIND), a guest kind's name (`uml`, `qemu`), or
`{type: guest, kind: uml, pairs: [1, 2], side: server}` (only those pairs' VMs, on that side). The kind is chosen
here only (`kind`), and the VM's port on its host's switch is the kind's (`GuestVm.port`).

VM-to-VM encryption between guest VMs runs in their own kernels (their xfrm; a charon in each guest for IKE): it is
checked against the guest kernel's capabilities (`check_encryption`), and a tunnel with one end in a namespace VM
(that is, in this machine's kernel) runs only if this kernel offers the same implementation.
"""
from __future__ import annotations

import shlex
import shutil
from typing import Literal

from pydantic import Field, ValidationError

from ..core.strict import Strict, pydantic_message
from ..datapaths.base import Availability
from ..system.ledger import Ledger
from . import DEFAULT_KIND, kind_class, kinds, probe
from .base import VM_NIC, Fleet, GuestError

MEM_MB = 256
NIC = VM_NIC
BOOT_TIMEOUT_S = 60.0


class VmKernel(Strict):
    type: str = "shared"   # shared | guest | a guest kind's name
    kind: str | None = Field(None, description="the guest kind (default: guests.DEFAULT_KIND)")
    pairs: list[int] | None = Field(None, min_length=1, description="only the VMs of these pairs (default: every pair)")
    side: Literal["client", "server", "both"] = Field("both", description="only the pairs' client or server VMs")
    vcpus: int | None = Field(None, ge=1, le=64, description="each guest VM's vCPUs (default 1; a UML guest has one)")
    memory: int | None = Field(None, ge=64, le=65536, description=f"each guest VM's memory in MB (default {MEM_MB})")


def parse(level) -> VmKernel:
    """A level as written (a name or a mapping); ValueError with the fix."""
    opts = dict(level) if isinstance(level, dict) else {"type": level}
    try:
        vk = VmKernel.model_validate(opts)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            raise ValueError(f"vm_kernel has no option '{where}'; its options: type, kind, pairs, side, vcpus, "
                             f"memory") from None
        raise ValueError(f"vm_kernel option '{where}': {pydantic_message(e)}") from None
    if vk.type in kinds():
        vk = vk.model_copy(update={"type": "guest", "kind": vk.kind or vk.type})
    if vk.type not in ("shared", "guest"):
        raise ValueError(f"'{vk.type}' is not allowed; use shared, guest or a guest kind ({', '.join(kinds())})")
    if vk.kind is not None and vk.kind not in kinds():
        raise ValueError(f"vm_kernel kind '{vk.kind}' is no guest kind; known: {', '.join(kinds())}")
    if vk.pairs and any(isinstance(p, bool) or p < 1 for p in vk.pairs):
        raise ValueError("vm_kernel option 'pairs': pair numbers start at 1")
    if vk.type == "shared" and (vk.pairs or vk.side != "both" or vk.kind or vk.vcpus or vk.memory):
        raise ValueError("vm_kernel: kind, pairs, side, vcpus and memory choose guest VMs; they need type: guest")
    return vk


def kind(sc) -> str | None:
    """The one choice of a VM's kind: the guest kind of the scenario's guest VMs, None when its VMs are namespaces."""
    vk = parse(sc.levels.get("vm_kernel", "shared"))
    return None if vk.type == "shared" else vk.kind or DEFAULT_KIND


def sizing(sc) -> tuple[int, int]:
    """(vCPUs, memory in MB) of each of the scenario's guest VMs."""
    vk = parse(sc.levels.get("vm_kernel", "shared"))
    return vk.vcpus or 1, vk.memory or MEM_MB


def fleet_for(sc, ledger: Ledger) -> Fleet:
    """The scenario's guest VMs as a fleet not yet booted: run and plan make it here alike."""
    vcpus, mem = sizing(sc)
    fleet = Fleet(ledger, kind(sc), boot_timeout=BOOT_TIMEOUT_S)
    fleet.kind.vcpus = vcpus
    for label in wanted(sc):
        fleet.add(label, nics=[(NIC, segment(label))], mem_mb=mem, share_run=True)
    return fleet


def problem(level) -> str | None:
    try:
        parse(level)
    except ValueError as exc:
        return str(exc)
    return None


def wanted(sc) -> list[str]:
    """The labels of the scenario's VMs that are guests (h2v2, ...), in topology order."""
    vk = parse(sc.levels.get("vm_kernel", "shared"))
    if vk.type != "guest" or sc.levels.get("attach") != "switch":
        return []
    out = []
    for k in range(1, sc.levels["pairs"] + 1):
        if vk.pairs and k not in vk.pairs:
            continue
        for side, label in zip(("client", "server"), sc.pair_vms(k)):
            if vk.side in (side, "both") and label not in out:
                out.append(label)
    return out


def structural(sc) -> str | None:
    """Why a scenario's guest VMs cannot be, wherever its hosts are (None: they can, or it has none)."""
    vk = parse(sc.levels.get("vm_kernel", "shared"))
    if vk.type != "guest":
        return None
    if sc.levels.get("attach") != "switch":
        return (f"vm_kernel guest: a guest VM is plugged into its host's switch; attach {sc.levels['attach']} has "
                f"{'no VM' if sc.levels.get('attach') == 'host' else 'no switch port'} (use attach switch)")
    if sc.levels.get("kernel", "shared") != "shared":
        return "vm_kernel guest: the hosts already run in a guest kernel (kernel guest); use one or the other"
    if vk.pairs and max(vk.pairs) > sc.levels["pairs"]:
        return f"vm_kernel guest: pair {max(vk.pairs)} is a guest but the scenario has {sc.levels['pairs']} pairs"
    return None


def decide(sc) -> str | None:
    """Why a scenario with guest VMs cannot run here (None: it can); notes the VM kernel's implementation."""
    vk = parse(sc.levels.get("vm_kernel", "shared"))
    if vk.type != "guest":
        return None
    if why := structural(sc):
        return why
    cls = kind_class(kind(sc))
    sup = cls.support()
    if not sup.ok:
        return f"vm_kernel guest: {sup.reason}"
    vcpus, mem = sizing(sc)
    if vcpus > cls.max_vcpus:
        return (f"vm_kernel guest: a {cls.name} guest has at most {cls.max_vcpus} vCPU"
                f"{'s' if cls.max_vcpus > 1 else ''}; vcpus {vcpus} needs kind qemu")
    vk = parse(sc.levels["vm_kernel"])
    sized = f"{vcpus} vCPU{'s' if vcpus > 1 else ''}, {mem} MB: " if vk.vcpus or vk.memory else ""
    sc.implementation["vm_kernel"] = f"{sup.kernel} ({sized}{', '.join(wanted(sc))})"
    return None


def notes(sc) -> list[str]:
    """What a reader of the scenario's rows must know of its guest VMs' kind (a TCG guest's emulated CPU), and that
    their hosts' switch is still this machine's kernel's."""
    if not wanted(sc):
        return []
    out = list(kind_class(kind(sc)).support().notes)
    if sc.implementation.get("switch", "").startswith("ovs-netdev"):
        out.append(f"vm_kernel {kind(sc)}: the VMs have kernels of their own, their hosts do not: the hosts' OVS runs "
                   f"on this machine's kernel, here with OVS's userspace datapath; `kernel: qemu` makes the hosts "
                   f"qemu guests, whose kernel has OVS's kernel datapath")
    return out


def encrypting_vms(sc) -> list[str]:
    """The VMs whose kernels hold a vm-to-vm tunnel's ends (both VMs of every pair), [] without one."""
    if sc.labels.get("encryption", "none") == "none" or sc.levels.get("encryption_scope") != "vm-to-vm":
        return []
    return list(dict.fromkeys(label for k in range(1, sc.levels["pairs"] + 1) for label in sc.pair_vms(k)))


def check_encryption(sc, element, caps):
    """vm-to-vm encryption whose ends are guest VMs is checked against the guests' kernel (its xfrm, as the guest
    probe found it), not the machine's; an end that is not a guest has the machine's kernel, which must offer the
    same implementation (kernel xfrm at both ends: an IKE peer in userspace libipsec encapsulates ESP in UDP, a
    kernel peer does not). None: not such a scenario (the matrix's own check stands)."""
    guests = set(wanted(sc))
    ends = encrypting_vms(sc) if guests else []
    if not guests.intersection(ends):
        return None
    caps_g = probe.capabilities(kind(sc))
    if caps_g is None:
        return Availability.no(f"its ends are guest VMs whose kernel could not be probed: "
                               f"{probe.support(kind(sc)).reason or 'a guest did not boot (see vnetbench doctor)'}")
    kernel = caps_g.tools["kernel"].detail
    shared = [vm for vm in ends if vm not in guests]
    if shared:
        here = element.check(sc, caps)
        why = here.reason if not here.ok else None
        if here.ok and not here.implementation.startswith(("kernel-", "kernel ")):
            why = (f"there it would be {here.implementation}, not a kernel's xfrm as in the guest: the two ends "
                   f"would run different IPsec implementations")
        if why:
            return Availability.no(f"{', '.join(shared)} {'is' if len(shared) == 1 else 'are'} not a guest VM, so "
                                   f"{'its' if len(shared) == 1 else 'their'} end of the tunnel is in this machine's "
                                   f"kernel: {why}; make both VMs of every pair guests (vm_kernel side: both)")
    avail = element.check(sc, caps_g)  # last: the element keeps the guest kernel's implementation
    if not avail.ok:
        return Availability.no(f"in the guest VMs' kernel ({kernel}): {avail.reason}")
    where = f"{kernel} in the guest VMs" + (f" and this machine's kernel in {', '.join(shared)}" if shared else "")
    return Availability(True, f"{kernel} + {avail.implementation}",
                        notes=(f"the tunnel's ends run in the VMs' own kernels: {where}", *avail.notes))


def segment(label: str) -> str:
    return f"vm-{label}"


def release_script(netns: str, dev: str) -> str:
    """Inside a guest, at teardown: its VM namespace's processes killed, its NIC back in the guest's root namespace
    under its own name (the guest serves the next topology), the namespace deleted."""
    ns, dev = shlex.quote(netns), shlex.quote(dev)
    return (f"ip netns pids {ns} 2>/dev/null | xargs -r kill -9; "
            f"ip -n {ns} link set {dev} down 2>/dev/null; ip -n {ns} link set {dev} name {NIC} 2>/dev/null; "
            f"ip -n {ns} link set {NIC} netns 1 2>/dev/null; ip netns del {ns} 2>/dev/null; true")


class VmGuests:
    """The run's guest VMs: booted (all at once) when a scenario first wants them, kept while the next scenarios
    want the same VMs, rebooted when they want others, torn down at the end of the run."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.fleet: Fleet | None = None
        self.key: tuple = ()   # what the booted fleet is: the guest kind, vCPUs and memory, then the VMs' labels

    def for_scenario(self, sc) -> dict[str, "GuestVm"]:
        """label -> the guest standing for that VM (booting them if needed); GuestError with a console's tail."""
        labels = tuple(wanted(sc))
        if not labels:
            return {}
        if (kind(sc), *sizing(sc), *labels) != self.key:
            self.close()
            self.fleet, self.key = fleet_for(sc, self.ledger), (kind(sc), *sizing(sc), *labels)
            try:
                self.fleet.boot()
            except GuestError:
                self.close()
                raise
        return {label: GuestVm(self.fleet, label) for label in labels}

    def close(self) -> None:
        if self.fleet is not None:
            self.fleet.teardown()
            shutil.rmtree(self.fleet.dir, ignore_errors=True)  # its keys: a later fleet of the run makes its own
        self.fleet, self.key = None, ()


class GuestVm:
    """What a topology needs of one guest VM: its executor, its NIC, and the run-namespace bridge of its tap."""

    def __init__(self, fleet: Fleet, label: str, executor=None, gn: str = "gn"):
        self.fleet, self.label = fleet, label
        self.guest = fleet.guests[label]
        self.executor = executor or self.guest.executor  # given: `plan`'s, for a guest not booted
        self.gn = gn  # the topology's node of the run's guest namespace holding its taps (one per lab host there)
        self.nic = NIC
        self.netns = fleet.netns
        self.bridge = fleet.bridge(segment(label))
        self.kernel = fleet.kind.support().kernel

    def port(self, topo, a, a_if: str, b, b_if: str) -> None:
        """This VM's port on its host (node b, end b_if), as its kind wires it: the switch's port and the VM's NIC
        are made in one place, so they cannot disagree."""
        self.fleet.kind.port(topo, self, a, a_if, b, b_if)

    def unport(self, topo, b, b_if: str) -> list[tuple[str, str]]:
        """What takes this VM's port apart at teardown: (namespace, `ip` line)s, as its kind says."""
        return self.fleet.kind.unport(topo, self, b, b_if)
