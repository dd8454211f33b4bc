"""A scenario becomes namespaces and devices: emulated hosts joined by an underlay, VMs attached to them.

Elements (datapaths/) add *steps* — iproute2 batch lines per node, commands, daemons — to an ordered list.
`plan` prints that list as a shell script; `build` records every object in the ledger, then executes it,
running independent batches of different namespaces at once. In a wave of many namespaces (hundreds of VMs), the
batches made only of a VM's lines (link set, addr add) are sent as the same netlink requests from this process
instead of one `ip -n NS -batch -` each (netlink.py): `plan` prints them as that batch, which does the same. All
devices live inside the run's namespaces, so deleting the namespaces removes them; nothing is created in the root
namespace.

Where the hosts are is the topology's `site`: by default emulated hosts (namespaces) on this machine; with a
testbed (sites.TestbedSite), real machines over SSH. There a host's switch, tunnels and VM ports live in a namespace
of the run on that machine (`<prefix>-h1`), created from its root namespace (node `m1`), where only the run's
namespaces are added and its devices created straight into them: the machine's own interfaces, addresses and routes
are never touched, and deleting the run's namespaces removes everything. Datapath elements never know which site:
they add lines for a node label and ask the topology for what differs (`nic`, `nic_node`, `uplink`, `veth`,
`tunnel`, a node's `netns`). The methods an element may call are the builder interface (datapaths/base.py:
Builder); a topology makes its own elements from the scenario's levels, and they reach one another only through it.
"""
from __future__ import annotations

import re
import resource
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from . import datapaths, netlink
from .capabilities import local_installed
from .datapaths.base import BuildError, Tunnel
from .executor import REMOTE_STATE_DIR, CommandError, Executor, LocalExecutor, NetnsExecutor
from .guests.base import TAP_MTU, VM_NIC
from .ledger import Ledger, kill_pids, pids_in_namespaces
from .scenario import Scenario
from .strict import one_line
from .workloads.base import Endpoint, Pair

ROOT = ""  # node label of the machine's root namespace (only namespaces are added there)
BATCH_TOOLS = ("ip", "tc", "bridge")
UNDERLAY_NET = "10.250.0"
PLAN_PREFIX = "vb0000"
NETLINK_MIN_BATCHES = 16  # namespaces in one wave from which their batches go over netlink (netlink.py)


@dataclass
class Node:
    label: str            # h1, h1v3, tor
    role: str             # host | vm | switch
    host: str | None      # the host a VM lives on
    exec: Executor
    tenant: int | None = None
    netns: str | None = None  # its network namespace (None: a real host's own root namespace)
    v4: str | None = None  # the address workloads target
    v6: str | None = None
    guest: str | None = None  # a VM with a kernel of its own: the node of its guest's root namespace (vm_kernel)


@dataclass
class Step:
    node: str
    tool: str                              # ip | tc | bridge | run | daemon | call
    lines: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)
    name: str = ""                         # daemon label
    ready: Callable[[], None] | None = None  # waits until a daemon answers
    env: dict | None = None
    fn: Callable[[], None] | None = None   # a call step's action


class Topology:
    def __init__(self, scenario: Scenario, ledger: Ledger | None, prefix: str | None = None, site=None,
                 machine: Executor | None = None, vm_guests: dict | None = None):
        self.sc = scenario
        # This topology's own elements, made from the scenario's levels, each with the implementation checked.
        self.elements = datapaths.elements(scenario.levels, scenario.implementation)
        self.site = site  # None: emulated hosts on this machine
        self.machine = machine  # where the emulated hosts' namespaces live: None = this machine; else a guest
        self.vm_guests = vm_guests or {}  # VM label -> guests.vms.GuestVm: the VMs with a kernel of their own
        self.known_macs: dict[str, str] = {}  # VM label -> its veth, on a testbed where its MAC is topo.mac(label)
        self._guest_nics: dict[str, str] = {}  # guest VM label -> its NIC's name in its namespace
        self.ledger = ledger
        self.prefix = prefix or (ledger.prefix if ledger else PLAN_PREFIX)
        self.nodes: dict[str, Node] = {}
        self.pairs: list[Pair] = []
        self.steps: list[Step] = []
        self.daemons: dict[str, subprocess.Popen] = {}
        self._records: list[tuple[str, str, str]] = []
        self._built = False
        self._layout()

    # ---- names -------------------------------------------------------------------------------------------
    def ns(self, label: str) -> str:
        return f"{self.prefix}-{label}"

    def ifname(self, short: str) -> str:
        name = f"{self.prefix}-{short}"
        assert len(name) <= 15, name
        return name

    @property
    def hosts(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.role == "host"]

    @property
    def vms(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.role == "vm"]

    @property
    def hops(self) -> int:
        """Routers between h1 and h2 (the `hops` factor); 0: the hosts share one link."""
        return self.sc.levels.get("hops", 0) if self.sc.hosts == 2 else 0

    @property
    def run_underlay(self) -> bool:
        """On a testbed: the hosts talk through the run's own macvlans of their NICs (site.run_underlay)."""
        return bool(self.site) and getattr(self.site, "run_underlay", lambda sc: False)(self.sc)

    def host_ip(self, host: str) -> str:
        if self.site:
            return self.site.underlay_ip(host)[0] if self.run_underlay else self.site.address(host)
        if self.hops and host == "h2":  # across routers: the last link's subnet, 10.250.<hops>.0/24
            return f"10.250.{self.hops}.2"
        return f"{UNDERLAY_NET}.{int(host[1:])}"

    def _host_v6(self, h: int) -> str:
        return f"fd00:250:{self.hops}::2" if self.hops and h == 2 else f"fd00:250::{h}"

    def transport_ip(self, host: str) -> str:
        """The address other hosts send overlay traffic to: the underlay address, unless a host-to-host
        encryption element puts the hosts' traffic through a tunnel of its own."""
        return self.elements["encryption"].transport_ip(self, host) or self.host_ip(host)

    def workdir(self, label: str) -> str:
        """A node's directory for its daemons' files, on the machine the node is on: under the local ledger's work
        directory, or on a testbed host under that host's run directory."""
        if self.site:
            return f"{REMOTE_STATE_DIR}/{self.prefix}/work/{label}"
        base = self.ledger.work if self.ledger else "/run/vnetbench/" + PLAN_PREFIX + "/work"
        return f"{base}/{label}"

    def _by_machine(self, labels: list[str]) -> dict[str, list[str]]:
        """Node labels grouped by the node whose executor reaches their machine's files (ROOT here)."""
        out: dict[str, list[str]] = {}
        for label in labels:
            out.setdefault(self.root_of(label), []).append(label)
        return out

    def make_dirs(self, labels: list[str], mode: str | None = "700") -> None:
        """A step that makes the nodes' directories (one command per machine)."""
        for where, mine in self._by_machine(labels).items():
            self.run(where, ["mkdir", "-p", *(["-m", mode] if mode else []), *[self.workdir(n) for n in mine]])

    def remove_dirs(self, labels: list[str]) -> None:
        """A step that removes the nodes' directories with everything in them (one command per machine)."""
        for where, mine in self._by_machine(labels).items():
            self.run(where, ["rm", "-rf", "--", *[self.workdir(n) for n in mine]])

    def write_file(self, label: str, name: str, text: str, mode: int = 0o600) -> str:
        """Write a file into a node's directory, on its machine (a secret goes on stdin, never in an argv)."""
        path = f"{self.workdir(label)}/{name}"
        self.executor(label).write_file(path, text, mode)
        return path

    # ---- steps -------------------------------------------------------------------------------------------
    def record(self, kind: str, name: str, host: str = ROOT) -> None:
        self._records.append((kind, name, host))

    def batch(self, tool: str, node: str, *lines: str) -> None:
        last = self.steps[-1] if self.steps else None
        if last and last.tool == tool and last.node == node:
            last.lines.extend(lines)
        else:
            self.steps.append(Step(node, tool, list(lines)))

    def ip(self, node: str, *lines: str) -> None:
        self.batch("ip", node, *lines)

    def run(self, node: str, argv: list[str]) -> None:
        self.steps.append(Step(node, "run", argv=argv))

    def daemon(self, node: str, name: str, argv: list[str], ready: Callable[[], None] | None = None,
               env: dict | None = None) -> None:
        self.record("process", name, node)
        self.steps.append(Step(node, "daemon", argv=argv, name=name, ready=ready, env=env))

    def call(self, node: str, what: str, fn: Callable[[], None]) -> None:
        """A Python action at build time, shown by `plan` as a comment: e.g. writing a config or a key generated
        for this run (a secret must never be in an argv or a batch line: `plan` prints those)."""
        self.steps.append(Step(node, "call", name=what, fn=fn))

    def executor(self, label: str) -> Executor:
        if label == ROOT:
            return self.machine or LocalExecutor(self.ledger)
        return self.nodes[label].exec

    # ---- between elements: each asks the topology, never another element -----------------------------------
    def plug(self, host: str, ifname: str, tenant: int) -> None:
        """Connect a VM's host-side interface to the host's switch, in the tenant's network."""
        self.elements["switch"].plug(self, host, ifname, tenant)

    def tunnel_port(self, host: str, tenant: int, dev: str) -> None:
        """Connect an overlay's tunnel device to the host's switch, in the tenant's network."""
        self.elements["switch"].tunnel_port(self, host, tenant, dev)

    def overlay_tunnel(self, host: str, tenant: int) -> Tunnel | None:
        """The overlay's tunnel for a tenant on a host, as plain data (None: the overlay does not tunnel)."""
        return self.elements["overlay"].tunnel(self, host, tenant)

    def add_tunnel(self, host: str, tunnel: Tunnel) -> None:
        """Create a tunnel as a kernel device of the host (see `tunnel` for where it is made)."""
        self.tunnel(host, tunnel.ip_link())

    def flood(self, host: str, tunnel: Tunnel) -> None:
        """Head-end replication: broadcast and unknown frames of the tunnel go to every remote in its flood list."""
        for remote in tunnel.flood:
            self.batch("bridge", host, f"fdb append 00:00:00:00:00:00 dev {tunnel.dev} dst {remote}")

    # ---- names that depend on the site ---------------------------------------------------------------------
    def tool_path(self, label: str, tool: str, default: str) -> str:
        """Where a tool (found by capabilities.INSTALLED_SCRIPT, e.g. charon) is on the machine running a node's
        steps: each testbed host may keep it elsewhere."""
        where = getattr(self.site, "tool_path", None)
        found = where(self, label, tool) if where else None
        found = found if found is not None else local_installed().get(tool)  # a guest sees this machine's files
        return found.detail if found is not None and found.ok else default

    def nic(self, host: str) -> str:
        """The host's underlay NIC: the emulated one, or the testbed's (whose settings are never changed)."""
        return self.site.nic(host) if self.site else self.ifname("u")

    def nic_node(self, host: str) -> str:
        """The node whose namespace holds the host's NIC (where macvlans of it are made)."""
        return self.root_of(host) if self.site and not self.owned_hosts else host

    @property
    def owned_hosts(self) -> bool:
        """A site whose hosts are the run's own (guests.hostsite): as with emulated hosts, a host's NIC and underlay
        address are in its namespace, where its tunnels are made."""
        return bool(getattr(self.site, "owns_hosts", False))

    def tunnel(self, host: str, *lines: str) -> None:
        """Create a host's tunnel devices (`link add NAME type vxlan ...`). On a real host the device is created
        from the machine's root namespace straight into the host's namespace: its socket uses the machine's
        underlay address, the device itself is the run's alone."""
        if not self.site or self.owned_hosts or self.run_underlay:  # run_underlay: the host's endpoints are there
            self.ip(host, *lines)
            return
        ns = self.nodes[host].netns
        if not hasattr(self, "_vni_offset"):
            # The previous scenario's tunnels die with its namespaces asynchronously while their sockets still hold
            # their VNIs on the machine: each topology takes VNIs of its own.
            self._vni_offset = self.site.vni_offset()
        lines = tuple(re.sub(r" id (\d+) ", lambda m: f" id {int(m.group(1)) + self._vni_offset} ", ln) for ln in lines)
        self.ip(self.root_of(host), *[re.sub(r"^link add (\S+) ", rf"link add \1 netns {ns} ", ln) for ln in lines])

    def uplink(self, host: str) -> str:
        """The device a host's flat (no overlay) bridge takes as its port to the provider network: the emulated NIC
        itself; on a real host, a source-mode macvlan of the NIC that receives the frames of the other hosts' VMs
        (the NIC itself is never enslaved, and keeps its address)."""
        if not self.site or self.owned_hosts:
            return self.ifname("u")
        dev = self.ifname("fl")
        others = [vm for vm in self.vms if vm.host != host]
        self.ip(self.nic_node(host), f"link add {dev} link {self.nic(host)} netns {self.nodes[host].netns} "
                                     f"type macvlan mode source")
        self.ip(host, *[f"link set {dev} type macvlan macaddr add {self.mac(vm.label)}" for vm in others],
                f"link set {dev} up")
        return dev

    def direct_nic(self, vm: Node, dev: str) -> None:
        """A VM's NIC straight on its host's NIC: a macvlan of it, or on a testbed whose NIC offers one, a free SR-IOV
        virtual function moved into the VM (the implementation says which)."""
        if self.site and self.sc.implementation.get("attach") == "sriov-vf":
            self.site.attach_vf(self, vm, dev)
            return
        self.ip(self.nic_node(vm.host), f"link add {dev} link {self.nic(vm.host)} netns {vm.netns} type macvlan mode bridge")

    def underlay_mac(self, host: str) -> str | None:
        """The MAC of a host's run-owned underlay macvlan on a testbed (run_underlay), known to every host beforehand
        (an OVS bridge that owns it takes it); None where the underlay is not the run's own."""
        if not self.run_underlay:
            return None
        p = self.prefix[2:6]
        return f"02:75:{p[:2]}:{p[2:]}:{self.mac_serial:02x}:{int(host[1:]):02x}"

    @property
    def mac_serial(self) -> int:
        """This build's number in the run's MACs: a MAC never moves from one host to another within a run (the lab
        switch would send its frames to the old host until the new one speaks: TCP stalled at 0 bytes)."""
        if not hasattr(self, "_mac_serial"):
            self._mac_serial = self.site.mac_serial()
        return self._mac_serial

    def mac(self, label: str) -> str:
        """A VM's MAC on a testbed (locally administered, with the run's prefix and the build's number in it)."""
        n = list(self.nodes).index(label)
        p = self.prefix[2:6]
        return f"06:{self.mac_serial:02x}:{p[:2]}:{p[2:]}:{n // 256:02x}:{n % 256:02x}"
    def root_of(self, label: str) -> str:
        """The node whose namespace creates this node's namespace and links: this machine's root namespace, or
        on a testbed the VM's host (a real host's own root namespace)."""
        node = self.nodes[label]
        if node.guest:
            return node.guest
        if not self.site:
            return ROOT
        return "m" + (node.host if node.role == "vm" else label)[1:]

    def veth(self, a: str, a_if: str, b: str, b_if: str) -> None:
        """A veth between two nodes (on a testbed they are on one machine: a VM and its host)."""
        na, nb = self.nodes[a], self.nodes[b]
        if na.guest:
            return self._guest_port(na, a_if, nb, b_if)
        mac = f" address {self.mac(a)}" if self.site and na.role == "vm" else ""
        if mac:
            self.known_macs[a] = a_if  # a VM whose MAC is known before it exists (the testbed's ping check uses it)
        self.ip(self.root_of(a), f"link add {a_if} netns {na.netns}{mac} type veth peer name {b_if} netns {nb.netns}")

    def _guest_port(self, vm: Node, vm_if: str, host: Node, port: str) -> None:
        """A guest VM's port on its host, as a Xen vif: a veth from the bridge of the guest's tap (in the run's
        guest namespace) into the host's namespace; inside the guest, its NIC moves into the VM's namespace."""
        g = self.vm_guests[vm.label]
        gn_end = self.ifname(f"g{vm.label.split('v')[1]}")
        self.ip(ROOT, f"link add {gn_end} netns {g.netns} type veth peer name {port} netns {host.netns}")
        self.ip("gn", f"link set {gn_end} mtu {TAP_MTU} master {g.bridge} up")
        if self.sc.implementation.get("switch", "").startswith("ovs-netdev"):
            # OVS's userspace datapath takes no partial checksums: the vif completes them (the guest's own NIC is a
            # vector tap: the `ethtool -K` ovs.py runs inside the guest was not enough); without it no TCP crossed
            self.run("gn", ["ethtool", "-K", gn_end, "tx", "off"])
        self.ip(vm.guest, f"link set {g.nic} netns {vm.netns}")
        self.ip(vm.label, f"link set {g.nic} name {vm_if}")
        self._guest_nics[vm.label] = vm_if

    # ---- layout ------------------------------------------------------------------------------------------
    def _add(self, label: str, role: str, host: str | None = None, tenant: int | None = None) -> Node:
        if self.site and role == "machine":  # a real machine's own root namespace
            node = Node(label, role, None, self.site.executor(f"h{label[1:]}"), netns=None)
        elif self.site:
            where = self.site.executor(host or label)
            node = Node(label, role, host, where.in_netns(self.ns(label), f"{self.site.name(host or label)}:{label}"),
                        tenant, netns=self.ns(label))
        elif label in self.vm_guests:  # a VM with its own kernel: a namespace of the run inside its guest
            g = self.vm_guests[label]
            if "gn" not in self.nodes:
                self.nodes["gn"] = Node("gn", "guestnet", None, NetnsExecutor(g.netns, self.ledger))
            root = self.nodes[f"g{label}"] = Node(f"g{label}", "guest", None, g.executor)
            node = Node(label, role, host, g.executor.in_netns(self.ns(label), label), tenant, netns=self.ns(label),
                        guest=root.label)
        elif self.machine is not None:
            node = Node(label, role, host, self.machine.in_netns(self.ns(label), label), tenant, netns=self.ns(label))
        else:
            node = Node(label, role, host, NetnsExecutor(self.ns(label), self.ledger), tenant, netns=self.ns(label))
        self.nodes[label] = node
        return node

    def _layout(self) -> None:
        """Decide nodes, addresses and pairs (no steps yet)."""
        sc = self.sc
        for h in range(1, sc.hosts + 1) if self.site else ():
            self._add(f"m{h}", "machine")
        for h in range(1, sc.hosts + 1):
            node = self._add(f"h{h}", "host")
            node.v4, node.v6 = self.host_ip(node.label), self._host_v6(h)
            if self.site and self.run_underlay and self.site.bed.run_subnet:
                node.v6 = self.site.underlay_ip6(node.label)
        if sc.hosts > 2 and not self.site:
            self._add("tor", "switch")
        for k in range(1, self.hops + 1):
            self._add(f"r{k}", "router")
        for k in range(1, sc["pairs"] + 1):
            tenant = (k - 1) % sc.tenants + 1
            client_host, server_host = (f"h{h}" for h in sc.pair_hosts(k))
            if sc["attach"] == "host":
                client, server = self.nodes[client_host], self.nodes[server_host]
            else:
                client = self._vm(client_host, tenant)
                server = self._vm(server_host, tenant)
            self.pairs.append(Pair(k, self._endpoint(client), self._endpoint(server),
                                   {"tenant": tenant, "client": client.label, "server": server.label}))

    def _vm(self, host: str, tenant: int) -> Node:
        n = len(self.vms) + 1
        node = self._add(f"{host}v{n}", "vm", host, tenant)
        # A tenant's VMs share a /16 (10.<100+tenant>.0.0): the first 254 keep the addresses of the /24 they had.
        node.v4, node.v6 = f"10.{100 + tenant}.{n // 256}.{n % 256}", f"fd00:{100 + tenant}::{n}"
        return node

    def _endpoint(self, node: Node) -> Endpoint:
        addr = node.v6 if self.sc["ip_version"] == 6 else node.v4
        if self.site and node.role == "host" and not self.owned_hosts and not self.run_underlay:  # the machines
            return Endpoint(self.site.executor(node.label), addr, node.label)
        return Endpoint(node.exec, addr, node.label)

    # ---- the common part of every topology: namespaces, underlay, VM interfaces ----------------------------
    def emit(self) -> "Topology":
        """Fill the step list (idempotent); used by both plan and build."""
        if self.steps:
            return self
        spaces = [n for n in self.nodes.values() if n.netns]
        for node in spaces:
            self.record("netns", node.netns, self.root_of(node.label))
            self.ip(self.root_of(node.label), f"netns add {node.netns}")
        for node in spaces:
            self.ip(node.label, "link set lo up")
        if not self.site:
            self._underlay()
        elif self.owned_hosts:
            self.site.underlay(self)
        elif self.run_underlay:
            self._run_nics()
        els = self.elements
        els["switch"].build(self) if self.sc["attach"] == "switch" else None
        els["attach"].build(self)
        els["overlay"].build(self)
        els["encryption"].build(self)
        return self

    def _underlay(self) -> None:
        mtu = self.sc.underlay_mtu
        up = self.ifname("u")
        if len(self.hosts) == 2 and self.hops:
            self._routers(mtu)
        elif len(self.hosts) == 2:
            self.ip(ROOT, f"link add {up} netns {self.ns('h1')} type veth peer name {up} netns {self.ns('h2')}")
        elif len(self.hosts) == 1:  # a NIC with nothing behind it, so direct attachments have a parent
            self.ip(ROOT, f"link add {up} netns {self.ns('h1')} type veth peer name {self.ifname('x')} netns {self.ns('h1')}")
            self.ip("h1", f"link set {self.ifname('x')} mtu {mtu} up")
        else:
            # The bridge first, so its ports' ifindexes differ from their peers' (each `u`, index 2 in its host):
            # a veth whose index equals its peer's gets its carrier through the kernel's linkwatch, which delays
            # such an event by up to 1 s, and the bridge forwards through that port only after it (every build
            # with 3 or more hosts lost its first ping to that second).
            tor = self.ifname("tor")
            self.ip(ROOT, f"link add {tor} netns {self.ns('tor')} type bridge")
            self.ip("tor", f"link set {tor} mtu {mtu} up")
            for h in self.hosts:
                port = self.ifname(f"p{h.label[1:]}")
                self.ip(ROOT, f"link add {up} netns {h.exec.name} type veth peer name {port} netns {self.ns('tor')}")
                self.ip("tor", f"link set {port} mtu {mtu} master {tor} up")
        for h in self.hosts:
            self.ip(h.label, f"link set {up} mtu {mtu} up")
            if qdiscs := self.sc.underlay_qdiscs(up):
                self.batch("tc", h.label, *qdiscs)

    def _run_nics(self) -> None:
        """On a testbed, the run's own underlay: a macvlan of each host's NIC in the run's host namespace (the NIC
        and the host's addresses untouched); underlay_address gives it an address from the testbed's run_subnet."""
        for h in self.hosts:
            self.ip(self.nic_node(h.label), f"link add {self.ifname('u')} link {self.nic(h.label)} netns {h.netns} "
                                            f"address {self.underlay_mac(h.label)} type macvlan mode bridge")
            self.ip(h.label, f"link set {self.ifname('u')} mtu {self.sc.underlay_mtu} up")
            if qdiscs := self.sc.underlay_qdiscs(self.ifname("u")):  # the run's own device: it may be shaped
                self.batch("tc", h.label, *qdiscs)

    def _routers(self, mtu: int) -> None:
        """h1 - r1 - ... - rN - h2: link k (0..N) is the subnet 10.250.k.0/24 (fd00:250:k::/64), its west end .1
        and its east end .2. Each router forwards and has a route to every subnet beyond its neighbours; the hosts
        get a default route (underlay_address). The hosts' NICs keep their name (u); a router's are w and e."""
        n, up = self.hops, self.ifname("u")
        for k in range(n + 1):
            west, wdev = ("h1", up) if k == 0 else (f"r{k}", self.ifname("e"))
            east, edev = ("h2", up) if k == n else (f"r{k + 1}", self.ifname("w"))
            self.ip(ROOT, f"link add {wdev} netns {self.ns(west)} type veth peer name {edev} netns {self.ns(east)}")
        for k in range(1, n + 1):
            w, e = self.ifname("w"), self.ifname("e")
            lines = [f"link set {w} mtu {mtu} up", f"link set {e} mtu {mtu} up",
                     f"addr add 10.250.{k - 1}.2/24 dev {w}", f"addr add fd00:250:{k - 1}::2/64 dev {w} nodad",
                     f"addr add 10.250.{k}.1/24 dev {e}", f"addr add fd00:250:{k}::1/64 dev {e} nodad"]
            for j in range(n + 1):
                if j < k - 1:
                    lines += [f"route add 10.250.{j}.0/24 via 10.250.{k - 1}.1 dev {w} onlink",
                              f"route add fd00:250:{j}::/64 via fd00:250:{k - 1}::1 dev {w} onlink"]
                elif j > k:
                    lines += [f"route add 10.250.{j}.0/24 via 10.250.{k}.2 dev {e} onlink",
                              f"route add fd00:250:{j}::/64 via fd00:250:{k}::2 dev {e} onlink"]
            self.ip(f"r{k}", *lines)
        for k in range(1, n + 1):
            self.run(f"r{k}", ["sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"])

    def underlay_address(self, host: str, dev: str) -> None:
        """Put a host's underlay address on dev (the NIC itself, or a bridge that owns it). Across routers
        (hops), the host also gets a default route to its neighbouring router. A real host has its address
        already: nothing is changed there."""
        if self.site and not self.owned_hosts:
            if self.run_underlay:
                ip, plen = self.site.underlay_ip(host)
                self.ip(host, f"addr add {ip}/{plen} dev {dev}", f"addr add {self.nodes[host].v6}/64 dev {dev} nodad",
                        f"link set {dev} up")
                # The other hosts' endpoints by their MACs, for the topology's life: every build of a run has the
                # same addresses, and a previous build's endpoint, still dying, answered ARP for its address (the
                # next build's TCP then stalled: 2 of 5 lab runs; the VMs had this too, see known_macs).
                for peer in self.hosts:
                    if peer.label != host:
                        mac = self.underlay_mac(peer.label)
                        self.ip(host, f"neigh replace {self.site.underlay_ip(peer.label)[0]} lladdr {mac} dev {dev} "
                                      f"nud permanent",
                                f"neigh replace {peer.v6} lladdr {mac} dev {dev} nud permanent")
            return
        self.ip(host, f"addr add {self.host_ip(host)}/24 dev {dev}",
                f"addr add {self.nodes[host].v6}/64 dev {dev} nodad")
        if self.hops and host in ("h1", "h2"):
            k = 0 if host == "h1" else self.hops
            end = 2 if host == "h1" else 1  # the router's end of the host's link
            self.ip(host, f"link set {dev} up", f"route add default via 10.250.{k}.{end} dev {dev} onlink",
                    f"route add default via fd00:250:{k}::{end} dev {dev} onlink")

    def vm_address(self, vm: Node, dev: str) -> None:
        self.ip(vm.label, f"link set {dev} mtu {self.sc.vm_mtu} up",
                f"addr add {vm.v4}/16 dev {dev}", f"addr add {vm.v6}/64 dev {dev} nodad")

    # ---- execution ---------------------------------------------------------------------------------------
    def build(self) -> "Topology":
        raise_file_limit()
        self.emit()
        self._built = True
        self._execute()
        if not getattr(self, "verified", False):  # a testbed checks in each host's build script
            self.verify()
        return self

    def _flush_records(self) -> None:
        if self.site:
            self.site.flush(self, self._records)
            self._records.clear()
            return
        if self.ledger and self._records:
            self.ledger.record_many([{"kind": k, "name": n, "host": h} for k, n, h in self._records])
        self._records.clear()

    def waves(self) -> list[list[Step]]:
        """The steps as a person would batch them: one root batch (namespaces, then the links between them),
        then, between commands and daemons, one batch per node and tool. Hosts go before VMs (a host creates
        its VMs' macvlans), and tc/bridge go after ip. The batches of one wave run at once."""
        root = [ln for st in self.steps if st.node == ROOT and st.tool == "ip" for ln in st.lines]
        root.sort(key=lambda ln: not ln.startswith("netns add"))  # stable: keeps the order within each kind
        waves: list[list[Step]] = [[Step(ROOT, "ip", root)]] if root else []
        region: list[Step] = []
        for st in self.steps:
            if st.node == ROOT and st.tool == "ip":
                continue
            if st.tool in BATCH_TOOLS:
                region.append(st)
            else:
                waves += self._merge(region) + [[st]]
                region = []
        return waves + self._merge(region)

    def _merge(self, region: list[Step]) -> list[list[Step]]:
        merged: dict[tuple[str, str], Step] = {}
        for st in region:
            merged.setdefault((st.tool, st.node), Step(st.node, st.tool)).lines.extend(st.lines)
        vm = {n.label for n in self.vms}
        # a testbed machine's root namespace first, as ROOT's lines are here: it only creates devices into the others
        machine = {n.label for n in self.nodes.values() if n.role == "machine"}
        order = [lambda s: s.tool == "ip" and s.node in machine,
                 lambda s: s.tool == "ip" and s.node not in vm and s.node not in machine,
                 lambda s: s.tool == "ip" and s.node in vm, lambda s: s.tool != "ip"]
        return [w for w in ([s for s in merged.values() if pick(s)] for pick in order) if w]

    def _execute(self) -> None:
        waves = self.waves()
        try:
            if self.site:
                self.site.execute(self, waves)  # each host's batches as one script, all hosts at once
                return
            for wave in waves:
                self._flush_records()
                self._run_wave(wave)
        except (CommandError, RuntimeError) as exc:  # a host that stopped answering, a refused line
            if isinstance(exc, BuildError):
                raise
            raise BuildError(str(exc)) from None

    def _run_wave(self, wave: list[Step]) -> None:
        if len(wave) == 1 or wave[0].tool not in BATCH_TOOLS:
            for step in wave:
                self._run_step(step)
            return
        wave, over_netlink = self._netlink_part(wave)

        def one(step: Step) -> str | None:  # each batch in one process, all at once (over a machine's agent too)
            try:
                self.executor(step.node).batch(step.tool, step.lines)
            except CommandError as exc:
                return str(exc)
            return None
        errors = []
        if wave:
            with ThreadPoolExecutor(max_workers=len(wave)) as pool:
                errors = [e for e in pool.map(one, wave) if e]
        errors += netlink.apply_many(over_netlink) if over_netlink else []
        if errors:
            raise BuildError("; ".join(errors))

    def _netlink_part(self, wave: list[Step]) -> tuple[list[Step], list[tuple[str, list]]]:
        """A wave of many namespaces' ip batches: those netlink.parse understands (a VM's lines) are applied from this
        process (netlink.py says why), the rest run as `ip -batch` processes. A small wave stays with the processes:
        importing pyroute2 costs more than a few of them."""
        if len(wave) < NETLINK_MIN_BATCHES or self.site or self.machine is not None or not netlink.available():
            return wave, []
        rest, over = [], []
        for step in wave:
            ex = self.executor(step.node)
            ops = netlink.parse(step.lines) if step.tool == "ip" and type(ex) is NetnsExecutor else None
            if ops is None:
                rest.append(step)
            else:
                over.append((ex.netns, ops))
        return rest, over

    def _run_step(self, step: Step) -> None:
        where = self.executor(step.node)
        try:
            if step.tool in BATCH_TOOLS:
                where.batch(step.tool, step.lines)
            elif step.tool == "run":
                where.run(step.argv)
            elif step.tool == "call":
                try:
                    step.fn()
                except (OSError, subprocess.SubprocessError) as exc:
                    raise BuildError(f"[{where.name}] {step.name}: {exc}") from None
            else:
                self.daemons[step.name] = where.spawn(step.argv, label=step.name, env=step.env,
                                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                if step.ready:
                    step.ready()
        except CommandError as exc:
            raise BuildError(str(exc)) from None

    def verify(self, attempts: int = 3) -> None:
        """Every pair must pass traffic before anything is measured (this also warms up ARP/ND)."""
        pending = list(self.pairs)
        for attempt in range(attempts):
            wait_s = 2 * 2 ** attempt  # 2, 4, 8 s: hundreds of first ARP exchanges on a busy machine take longer
            if self.site:  # one round trip per pair, all at once, nothing left running on the hosts
                pending = self._remote_pings(pending)
            else:
                # no pipes: only the exit status counts, and 500 pairs' pipes would pass a 1024-file limit
                procs = [(p, p.client.node.spawn(["ping", "-n", "-c", "1", "-W", str(wait_s), p.server.addr],
                                                 label=f"verify-ping-{p.index}", stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL)) for p in pending]
                pending = [p for p, proc in procs if proc.wait(timeout=wait_s + 30) != 0]
            if not pending:
                return
            time.sleep(0.2 * (attempt + 1))
        p = pending[0]
        more = f" (and {len(pending) - 1} more pairs)" if len(pending) > 1 else ""
        raise BuildError(f"pair {p.index} ({p.client.label} -> {p.server.label} {p.server.addr}){more}: no reply to "
                         f"ping after {attempts} tries: this topology does not pass traffic")

    def _remote_pings(self, pairs: list[Pair]) -> list[Pair]:
        def ok(p: Pair) -> bool:
            return p.client.node.run(["ping", "-n", "-c", "1", "-W", "2", p.server.addr], check=False,
                                     timeout=10).returncode == 0
        try:
            with ThreadPoolExecutor(max_workers=len(pairs)) as pool:
                return [p for p, good in zip(pairs, pool.map(ok, pairs)) if not good]
        except CommandError as exc:  # a host stopped answering
            raise BuildError(str(exc)) from None

    def daemon_pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.daemons.items() if proc.poll() is None}

    def teardown(self) -> None:
        """Stop what runs, delete the namespaces (and with them every device), forget them in the ledger."""
        teardown_steps: list[Step] = []
        saved, self.steps = self.steps, teardown_steps
        for el in self.elements.values():
            el.teardown(self)
        self.steps = saved
        for step in teardown_steps:
            try:
                self._run_step(step)
            except BuildError:
                pass  # the namespace goes anyway; a failed graceful stop must not block the rest
        namespaces = [n.netns for n in self.nodes.values() if n.netns and not n.guest]
        for proc in self.daemons.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.daemons.values():
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.site:
            self.site.teardown(self)
            if self.ledger:
                self.ledger.forget_many([("process", name) for name in self.daemons])
            return
        self._release_guests()
        if self.machine is not None:  # a guest: the same, inside it
            q = " ".join(map(shlex.quote, namespaces))
            try:  # by its agent, with no process started per namespace (3-7 s of a teardown in a busy guest)
                if not self.machine.drop_namespaces(namespaces):
                    self.machine.run_script(f"for n in {q}; do ip netns pids $n | xargs -r kill -9; done; "
                                            f"for n in {q}; do ip netns del $n; done; true", timeout=60, check=False)
            except CommandError:
                pass  # the guest is gone: nothing of it is left either
        else:
            kill_pids(pids_in_namespaces(namespaces))
            subprocess.run(["ip", "-force", "-batch", "-"], input="".join(f"netns del {n}\n" for n in namespaces),
                           capture_output=True, text=True)
        if self.ledger:
            self.ledger.forget_many([("process", name) for name in self.daemons] +
                                    [("netns", n) for n in namespaces] +
                                    [("netns", n.netns) for n in self.nodes.values() if n.guest])

    def _release_guests(self) -> None:
        """Each guest VM's namespace goes (its processes first), its NIC back to the guest's root namespace under
        its own name, so the guest serves the next topology. A guest that does not answer is left to its fleet."""
        q = shlex.quote

        def release(vm: Node) -> None:
            ns, dev = q(vm.netns), q(self._guest_nics.get(vm.label, VM_NIC))
            try:
                self.nodes[vm.guest].exec.run_script(
                    f"ip netns pids {ns} 2>/dev/null | xargs -r kill -9; "
                    f"ip -n {ns} link set {dev} down 2>/dev/null; ip -n {ns} link set {dev} name {VM_NIC} 2>/dev/null; "
                    f"ip -n {ns} link set {VM_NIC} netns 1 2>/dev/null; ip netns del {ns} 2>/dev/null; true",
                    timeout=30, check=False)
            except CommandError:
                pass
        guests = [n for n in self.nodes.values() if n.guest]
        if guests:  # the ports' veths now, not when the host's namespace is gone (asynchronously, after the
            # next topology may have asked for the same names)
            subprocess.run(["ip", "-n", self.nodes["gn"].exec.netns, "-force", "-batch", "-"], capture_output=True,
                           text=True, input="".join(f"link del {self.ifname('g' + vm.label.split('v')[1])}\n"
                                                    for vm in guests))
            with ThreadPoolExecutor(max_workers=len(guests)) as pool:
                list(pool.map(release, guests))

    # ---- plan --------------------------------------------------------------------------------------------
    def script(self) -> str:
        """The steps as a shell script a person can read or replay: every value is quoted, escaped in a comment,
        or inside a quoted here-document whose end marker no line of it can be."""
        self.emit()
        out: list[str] = []
        for step in (st for wave in self.waves() for st in wave):
            where = self.executor(step.node)
            if step.tool in BATCH_TOOLS:
                out.append(heredoc(shlex.join(where.batch_argv(step.tool)), step.lines))
            elif step.tool == "call":
                out.append(comment(step.name))
            else:
                out.append(shlex.join(where.wrap(step.argv)) + (" &" if step.tool == "daemon" else ""))
        return "\n".join(out)


def raise_file_limit() -> None:
    """A trial reads every pair's tool through pipes (two files each, in this process): with hundreds of pairs a soft
    limit of 1024 open files (a common default) would refuse them, so take the hard limit the system allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass  # keep the soft limit: a trial past it fails with its own message


def comment(text: str) -> str:
    """A shell comment that stays one line whatever the text holds (a newline in it would start a command)."""
    return "# " + one_line(text)


def heredoc(command: str, lines: list[str]) -> str:
    """command <<'MARK' ... MARK, quoted so nothing in it expands, with a marker that is none of its lines."""
    body = "\n".join(lines).split("\n")  # lines as the shell reads them
    mark, n = "EOF", 0
    while mark in body:
        n += 1
        mark = f"EOF{n}"
    return "\n".join([f"{command} <<'{mark}'", *body, mark])
