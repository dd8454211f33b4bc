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
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from ...guests import vms
from ...system.executor import REMOTE_STATE_DIR
from .. import register, underlay
from ..base import Backend, Placement
from ..steps import Node, comment
from . import clean as lab_clean
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


@register
class TestbedBackend(Backend):
    """Real hosts over SSH, from a testbed file (`--testbed`)."""

    name = "testbed"

    def __init__(self, ledger=None, testbed=None):
        super().__init__(ledger, testbed)
        self.site = TestbedSite(testbed, ledger)

    @classmethod
    def clean(cls, testbed, running, dry_run):
        return lab_clean.clean_testbed(testbed, running, dry_run)

    def check(self, sc) -> str | None:
        why = self.site.check(sc) or self.own_kernels(sc)
        return f"testbed: {why}" if why else None

    @staticmethod
    def own_kernels(sc) -> str | None:
        """A testbed's hosts run their own kernels: guests of this machine are not its hosts or VMs."""
        if sc.levels.get("kernel", "shared") != "shared":
            return f"kernel {sc.levels['kernel']} boots guests on this machine; a testbed's hosts run their own kernels"
        if vms.parse(sc.levels.get("vm_kernel", "shared")).type != "shared":
            return "vm_kernel guest boots guests on this machine; a testbed's VMs are namespaces on its hosts"
        return None

    def notes(self, sc) -> list[str]:
        return self.site.notes(sc)

    def environment(self) -> dict:
        return self.site.environment()

    def open(self, sc) -> TestbedPlacement:
        return TestbedPlacement(self.site)

    def plan(self, sc) -> TestbedPlacement:
        return TestbedPlacement(self.site if self.ledger is None else TestbedSite(self.testbed, None))

    def disconnect(self) -> None:
        self.site.close()
