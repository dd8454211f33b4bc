"""The SSH testbed backend (`--testbed`): a TestbedSite maps the scenario's hosts h1, h2, ... onto the testbed's real
machines, reached over SSH; a TestbedPlacement is one topology on them. The testbed file, preflight and `clean` of a
testbed's hosts are in testbed.py.

There a host's switch, tunnels and VM ports live in a namespace of the run on that machine (`<prefix>-h1`), created
from its root namespace (node `m1`), where only the run's namespaces are added and its devices created straight into
them: the machine's own interfaces, addresses and routes are never touched, and deleting the run's namespaces removes
everything.

On a real host vnetbench creates only objects named with the run's prefix (namespaces for VMs, bridges, tunnels,
a VLAN of the NIC for a flat network, macvlans of the NIC), records each in that host's own ledger
(/run/vnetbench/<prefix>/objects.jsonl) before creating it, and checks every batch line before anything is built:
a line that would touch a device not named with the prefix (other than naming the NIC as a macvlan/VLAN parent)
stops the build. The host's interfaces, addresses and routes are never changed; its NIC's MTU only where the
testbed file allows it (`allow_mtu`), and a free SR-IOV virtual function may be lent to a VM: both are recorded in
the host's ledger first and given back at teardown or by `clean`. The scenario's daemons (OVS, charon,
wireguard-go, nginx) run on the hosts with their files under the host's run directory (`Executor.write_file` & co).

With `vm_kernel: qemu` the guest VMs are qemu guests on their hosts (lab/vms.py): LabVmsPlacement adds their nodes
(the guest's root namespace, the VM's namespace inside it, and the run's guest namespace on each such host, whose
step moves a VM's tap into the host's namespace as its switch port).
"""
from __future__ import annotations

import re
import shlex
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from ...guests import vms as guest_vms
from ...guests.base import GuestError
from ...probes.hypervisor import HypervisorProbe
from ...probes.procstat import GuestSystemProbe
from ...system.executor import REMOTE_STATE_DIR, CommandError
from .. import register, underlay
from ..base import Backend, Placement, Unavailable, at_once
from ..steps import Node, comment
from . import clean as lab_clean
from . import irq
from . import vms as lab_vms
from .site import TestbedSite


class TestbedPlacement(Placement):
    """One topology on a testbed's hosts (or on the run's host guests: guests.hostsite, `owns_hosts`)."""

    remote = True
    netlink = False

    def __init__(self, site: TestbedSite):
        super().__init__(site.ledger)
        self.site = site
        self.vfs: dict = {}                   # VM label -> the SR-IOV virtual function lent to it
        self.known_macs: dict[str, str] = {}  # VM label -> its veth, whose MAC is mac(label)
        self.local_macs = None                # the hosts' ping check sets the pairs' neighbour entries
        self._mac_serial: int | None = None
        self._vni_offset: int | None = None

    def irq_in_force(self, topo) -> dict | None:
        return irq.in_force(self.site, topo, self.site.irqs)

    @property
    def owned(self) -> bool:
        """A site whose hosts are the run's own (guests.hostsite): as with emulated hosts, a host's NIC and underlay
        address are in its namespace, where its tunnels are made."""
        return self.site.owns_hosts

    # ---- layout ----------------------------------------------------------------------------------------------
    def machines(self, topo) -> list[str]:
        return [f"m{h}" for h in range(1, topo.sc.hosts + 1)]

    def emulated_underlay(self, topo) -> bool:
        return False

    def node(self, topo, label, role, host, tenant):
        if role == "machine":  # a real machine's own root namespace
            return Node(label, role, None, self.site.executor(f"h{label[1:]}"), netns=None)
        where = self.site.executor(host or label)
        return Node(label, role, host, where.in_netns(topo.ns(label), f"{self.site.name(host or label)}:{label}"),
                    tenant, netns=topo.ns(label))

    def run_underlay(self, topo) -> bool:
        return self.site.run_underlay(topo.sc)

    def host_ip(self, topo, host: str) -> str:
        return self.site.underlay_ip(host)[0] if self.run_underlay(topo) else self.site.address(host)

    def host_v6(self, topo, host: str) -> str:
        if self.run_underlay(topo) and self.site.bed.run_subnet:
            return self.site.underlay_ip6(host)
        return super().host_v6(topo, host)

    def endpoint_exec(self, topo, node):
        if node.role == "host" and not self.owned and not self.run_underlay(topo):  # the machines themselves
            return self.site.executor(node.label)
        return node.exec

    def root_of(self, topo, node) -> str:
        return "m" + (node.host if node.role == "vm" else node.label)[1:]

    def in_root(self, topo, label: str) -> bool:
        """Whether a node's lines run in a machine's own root namespace (the site's guard checks each of them)."""
        return topo.nodes[label].netns is None

    def workdir(self, topo, label: str) -> str:
        return f"{REMOTE_STATE_DIR}/{topo.prefix}/work/{label}"

    def tool_path(self, topo, label: str, tool: str):
        return self.site.tool_path(topo, label, tool)

    # ---- links and underlay ------------------------------------------------------------------------------
    def link(self, topo, a, a_if, b, b_if) -> None:
        mac = f" address {self.mac(topo, a.label)}" if a.role == "vm" else ""
        if mac:
            self.known_macs[a.label] = a_if  # a VM whose MAC is known before it exists (the ping check uses it)
        topo.ip(topo.root_of(a.label), f"link add {a_if} netns {a.netns}{mac} type veth peer name {b_if} "
                                       f"netns {b.netns}")

    def nic(self, topo, host: str) -> str:
        return self.site.nic(host)

    def nic_node(self, topo, host: str) -> str:
        return host if self.owned else topo.root_of(host)

    def tunnel(self, topo, host: str, lines) -> None:
        """On a real host the device is created from the machine's root namespace straight into the host's
        namespace: its socket uses the machine's underlay address, the device itself is the run's alone."""
        if self.owned or self.run_underlay(topo):  # the host's endpoints are in its namespace
            topo.ip(host, *lines)
            return
        ns = topo.nodes[host].netns
        if self._vni_offset is None:
            # The previous scenario's tunnels die with its namespaces asynchronously while their sockets still hold
            # their VNIs on the machine: each topology takes VNIs of its own.
            self._vni_offset = self.site.vni_offset()
        off = self._vni_offset
        lines = tuple(re.sub(r" id (\d+) ", lambda m: f" id {int(m.group(1)) + off} ", ln) for ln in lines)
        topo.ip(topo.root_of(host), *[re.sub(r"^link add (\S+) ", rf"link add \1 netns {ns} ", ln) for ln in lines])

    def uplink(self, topo, host: str) -> str:
        """On a real host, a source-mode macvlan of the NIC that receives the frames of the other hosts' VMs (the
        NIC itself is never enslaved, and keeps its address)."""
        if self.owned:
            return topo.ifname("u")
        dev = topo.ifname("fl")
        others = [vm for vm in topo.vms if vm.host != host]
        topo.ip(topo.nic_node(host), f"link add {dev} link {topo.nic(host)} netns {topo.nodes[host].netns} "
                                     f"type macvlan mode source")
        topo.ip(host, *[f"link set {dev} type macvlan macaddr add {self.mac(topo, vm.label)}" for vm in others],
                f"link set {dev} up")
        return dev

    def direct_nic(self, topo, vm, dev: str) -> None:
        """A macvlan of the NIC, or where the implementation says so, a free SR-IOV virtual function."""
        if topo.sc.implementation.get("attach") == "sriov-vf":
            self.site.attach_vf(topo, self, vm, dev)
            return
        super().direct_nic(topo, vm, dev)

    def underlay(self, topo) -> None:
        if self.owned:
            self.site.underlay(topo)
        elif self.run_underlay(topo):
            self._run_nics(topo)

    def _run_nics(self, topo) -> None:
        """The run's own underlay: a macvlan of each host's NIC in the run's host namespace (the NIC and the host's
        addresses untouched); underlay_address gives it an address from the testbed's run_subnet."""
        u = topo.ifname("u")
        for h in topo.hosts:
            topo.ip(topo.nic_node(h.label), f"link add {u} link {topo.nic(h.label)} netns {h.netns} "
                                            f"address {self.underlay_mac(topo, h.label)} type macvlan mode bridge")
            topo.ip(h.label, f"link set {u} mtu {topo.sc.underlay_mtu} up")
            if qdiscs := topo.sc.underlay_qdiscs(u):  # the run's own device: it may be shaped
                topo.batch("tc", h.label, *qdiscs)

    def underlay_address(self, topo, host: str, dev: str) -> None:
        if self.owned:
            underlay.address(topo, host, dev)
            return
        if not self.run_underlay(topo):
            return  # a real host has its address already: nothing is changed there
        ip, plen = self.site.underlay_ip(host)
        topo.ip(host, f"addr add {ip}/{plen} dev {dev}", f"addr add {topo.nodes[host].v6}/64 dev {dev} nodad",
                f"link set {dev} up")
        # The other hosts' endpoints by their MACs, for the topology's life: every build of a run has the same
        # addresses, and a previous build's endpoint, still dying, answered ARP for its address (the next build's
        # TCP then stalled: 2 of 5 lab runs; the VMs had this too, see known_macs).
        for peer in topo.hosts:
            if peer.label != host:
                mac = self.underlay_mac(topo, peer.label)
                topo.ip(host, f"neigh replace {self.site.underlay_ip(peer.label)[0]} lladdr {mac} dev {dev} "
                              f"nud permanent",
                        f"neigh replace {peer.v6} lladdr {mac} dev {dev} nud permanent")

    @property
    def mac_serial(self) -> int:
        """This build's number in the run's MACs: a MAC never moves from one host to another within a run (the lab
        switch would send its frames to the old host until the new one speaks: TCP stalled at 0 bytes)."""
        if self._mac_serial is None:
            self._mac_serial = self.site.mac_serial()
        return self._mac_serial

    def underlay_mac(self, topo, host: str) -> str | None:
        """The MAC of a host's run-owned underlay macvlan (run_underlay), known to every host beforehand (an OVS
        bridge that owns it takes it); None where the underlay is not the run's own."""
        if not self.run_underlay(topo):
            return None
        p = topo.prefix[2:6]
        return f"02:75:{p[:2]}:{p[2:]}:{self.mac_serial:02x}:{int(host[1:]):02x}"

    def mac(self, topo, label: str, serial: int = 0) -> str:
        """A VM's MAC with this build's number in it: a MAC never moves from one host to another within a run."""
        return super().mac(topo, label, self.mac_serial)

    # ---- running ----------------------------------------------------------------------------------------
    def flush(self, topo, records) -> None:
        self.site.flush(topo, records)

    def execute(self, topo, waves) -> bool:
        self.site.execute(topo, self, waves)  # each host's batches as one script, all hosts at once, pings at the end
        return True

    def pings(self, topo, pairs, wait_s):
        """One round trip per pair, all at once, nothing left running on the hosts."""
        def ok(p) -> bool:
            return p.client.node.run(["ping", "-n", "-c", "1", "-W", "2", p.server.addr], check=False,
                                     timeout=10).returncode == 0
        with ThreadPoolExecutor(max_workers=len(pairs)) as pool:
            return [p for p, good in zip(pairs, pool.map(ok, pairs)) if not good]

    def teardown(self, topo, namespaces) -> None:
        self.site.teardown(topo, self)

    def forget(self, topo, namespaces) -> None:
        if self.ledger:
            self.ledger.forget_many([("process", name) for name in topo.daemons])

    # ---- measuring --------------------------------------------------------------------------------------
    def probes(self, topo) -> list:
        return self.site.probes(topo)

    def tag(self, topo, samples):
        return self.site.tag(topo, samples)

    def describe(self, topo) -> list[str]:
        return ["on the testbed, each host runs its batches below as one script (then pings its pairs' servers), "
                "all hosts at once"]

    def shown_teardown(self, topo) -> list[str]:
        return [comment("teardown: on each host, the processes in the scenario's namespaces are killed and the "
                        "namespaces deleted")]


# ---- a topology with guest VMs on the lab's hosts (vm_kernel: qemu) ---------------------------------------------
class LabVmsPlacement(TestbedPlacement):
    """The testbed's placement, with guest VMs (label -> guests.vms.GuestVm) on their hosts."""

    def __init__(self, site: TestbedSite, vm_guests: dict[str, guest_vms.GuestVm], boot: str, shown: list[str]):
        super().__init__(site)
        self.vm_guests, self.boot, self.shown = vm_guests, boot, shown
        self.nics: dict[str, str] = {}   # guest VM -> its NIC's name in its namespace
        self.ports: dict[str, tuple] = {}  # guest VM -> its host's node and its port's name there
        self.inside: set[str] = set()    # nodes whose lines never run in a host's root namespace

    def node(self, topo, label, role, host, tenant):
        if label not in self.vm_guests:
            return super().node(topo, label, role, host, tenant)
        g = self.vm_guests[label]
        if g.gn not in topo.nodes:  # the run's guest namespace on the VM's host: it hands the VM's tap to the host
            topo.nodes[g.gn] = Node(g.gn, "machine", host, g.fleet.gn_ex)
        root = topo.nodes[f"g{label}"] = Node(f"g{label}", "guest", host, g.executor)
        self.inside |= {g.gn, root.label}
        return Node(label, role, host, g.executor.in_netns(topo.ns(label), label), tenant, netns=topo.ns(label),
                    guest=root.label)

    def root_of(self, topo, node) -> str:
        return node.guest or super().root_of(topo, node)

    def in_root(self, topo, label: str) -> bool:
        return label not in self.inside and super().in_root(topo, label)

    def prelude(self, topo) -> None:
        topo.call("h1", self.boot, lambda: None, self.shown)

    def link(self, topo, a, a_if, b, b_if) -> None:
        if not a.guest:
            return super().link(topo, a, a_if, b, b_if)
        self.vm_guests[a.label].port(topo, a, a_if, b, b_if)
        # the VM's MAC is the topology's, as a namespace VM's on a testbed (a flat network's uplink lets it in)
        topo.ip(a.label, f"link set {a_if} address {self.mac(topo, a.label)}")
        self.nics[a.label], self.ports[a.label] = a_if, (b, b_if)

    def execute(self, topo, waves) -> bool:
        """As on a testbed; a pair whose client is a guest VM is checked afterwards, from the guest (pings)."""
        checked = super().execute(topo, waves)
        return checked and not any(topo.nodes[p.meta["client"]].guest for p in topo.pairs)

    def teardown(self, topo, namespaces) -> None:
        """Each VM's tap back into the run's guest namespace on its host (deleting the host's namespace would take it
        from under qemu), each VM's namespace in its guest released, then the hosts' teardown."""
        by_host: dict[str, list[str]] = {}
        for label, (b, b_if) in self.ports.items():
            for ns, line in self.vm_guests[label].unport(topo, b, b_if):
                by_host.setdefault(self.site.host_of(topo, b.label), []).append(
                    shlex.join(["ip", "-n", ns, *line.split()]) + " 2>/dev/null")
        at_once(lambda item: _quiet(self.site.executor(item[0]), "; ".join(item[1]) + "; true"), list(by_host.items()))
        at_once(lambda vm: _quiet(topo.nodes[vm.guest].exec, guest_vms.release_script(vm.netns, self.nics.get(
            vm.label, guest_vms.NIC))), [n for n in topo.nodes.values() if n.guest])
        super().teardown(topo, namespaces)

    def probes(self, topo) -> list:
        # what running each guest VM costs its host: its qemu's and virtiofsd's threads, read on that host
        readers = {label: partial(vm.fleet.host_cpu, vm.guest) for label, vm in self.vm_guests.items()}
        return super().probes(topo) + [HypervisorProbe(readers)]

    def guest_probes(self, topo) -> list:
        return [GuestSystemProbe(vm.exec, vm.label) for vm in topo.vms if vm.guest]

    def describe(self, topo) -> list[str]:
        where = ", ".join(f"{label} on {self.site.name(topo.nodes[label].host)}" for label in self.vm_guests)
        return super().describe(topo) + [
            f"vm_kernel qemu: {where} are qemu guests on those hosts, reached over SSH through them; each one's port "
            f"on its host's switch is its qemu process's tap (virtio-net), moved into the host's namespace"]

    def shown_teardown(self, topo) -> list[str]:
        return [comment("teardown: each qemu VM's tap goes back into the run's guest namespace on its host, its "
                        "namespace in its guest is deleted")] + super().shown_teardown(topo)


def _quiet(ex, script: str) -> None:
    try:
        ex.run_script(script, timeout=30, check=False)
    except CommandError:
        pass  # the host or guest is gone: its fleet's teardown or `clean` removes the rest


def lab_placement(site: TestbedSite, guests: dict[str, guest_vms.GuestVm]) -> TestbedPlacement:
    """The placement of a topology on the lab: with its guest VMs on their hosts, if it has any."""
    if not guests:
        return TestbedPlacement(site)
    fleets = list(dict.fromkeys(vm.fleet for vm in guests.values()))
    sizes = sorted({(f.kind.vcpus_of(g), g.mem_mb) for f in fleets for g in f.guests.values()})
    each = "; ".join(f"{c} vCPU{'s' if c > 1 else ''} and {m} MB each" for c, m in sizes)
    boot = (f"boot (or reuse) {len(guests)} qemu guest VMs ({', '.join(guests)}; {each}) on their lab hosts "
            f"({', '.join(f.name for f in fleets)})")
    return LabVmsPlacement(site, guests, boot, [line for f in fleets for line in f.shown_boot()])


@register
class TestbedBackend(Backend):
    """Real hosts over SSH, from a testbed file (`--testbed`)."""

    name = "testbed"
    real_nics = True

    def __init__(self, ledger=None, testbed=None):
        super().__init__(ledger, testbed)
        self.site = TestbedSite(testbed, ledger)
        self.vms = lab_vms.LabVms(self.site, ledger) if ledger is not None else None  # qemu guest VMs on the hosts

    @classmethod
    def clean(cls, testbed, running, dry_run):
        return lab_clean.clean_testbed(testbed, running, dry_run)

    def check(self, sc) -> str | None:
        why = self.site.check(sc) or self.own_kernels(sc) or lab_vms.check(sc, self.site)
        return f"testbed: {why}" if why else None

    @staticmethod
    def own_kernels(sc) -> str | None:
        """A testbed's hosts run their own kernels: guests of this machine are not its hosts (its guest VMs are qemu
        guests on the hosts: lab/vms.py)."""
        if sc.levels.get("kernel", "shared") != "shared":
            return f"kernel {sc.levels['kernel']} boots guests on this machine; a testbed's hosts run their own kernels"
        return None

    def notes(self, sc) -> list[str]:
        return self.site.notes(sc) + lab_vms.notes(sc, self.site)

    def wants_guests(self, sc) -> bool:
        return bool(guest_vms.wanted(sc))

    def has_guests(self) -> bool:
        return bool(self.vms and self.vms.fleets)

    def environment(self) -> dict:
        return self.site.environment()

    def open(self, sc) -> TestbedPlacement:
        try:
            guests = self.vms.for_scenario(sc)  # the VMs that are qemu guests on their hosts (vm_kernel)
        except GuestError as exc:
            raise Unavailable(f"guest did not come up: {exc}") from None
        return lab_placement(self.site, guests)

    def plan(self, sc) -> TestbedPlacement:
        site = self.site if self.ledger is None else TestbedSite(self.testbed, None)
        return lab_placement(site, lab_vms.plan_guests(sc, site))

    def close(self) -> None:
        if self.vms is not None:
            self.vms.close()

    def disconnect(self) -> None:
        self.site.close()
