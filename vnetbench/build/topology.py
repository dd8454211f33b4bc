"""A scenario becomes namespaces and devices: emulated hosts joined by an underlay, VMs attached to them.

Elements (datapaths/) add *steps* — iproute2 batch lines per node, commands, daemons — to an ordered list.
`plan` prints that list as a shell script; `build` records every object in the ledger, then executes it,
running independent batches of different namespaces at once. In a wave of several namespaces (the hosts, the VMs),
the batches made only of a VM's or a bridge's lines (link set, addr add, a bridge and its ports) are sent as the same
netlink requests from this process instead of one `ip -n NS -batch -` each (netlink.py): `plan` prints them as that
batch, which does the same. All devices live inside the run's namespaces, so deleting the namespaces removes them;
nothing is created in the root namespace.

Where the hosts are is the topology's `placement` (hosts/base.py), opened by a host backend: by default emulated
hosts (namespaces) on this machine; or in a guest's kernel, one guest per host, real machines over SSH. The topology
asks the placement what depends on the place (each node's executor, a link, the underlay, how a wave runs, the ping
check, teardown) and never which placement it has. Datapath elements never know either: they add lines for a node
label and ask the topology for what differs (`nic`, `nic_node`, `uplink`, `veth`, `tunnel`, a node's `netns`). The methods an element may call are the builder interface (datapaths/base.py:
Builder); a topology makes its own elements from the scenario's levels, and they reach one another only through it.
"""
from __future__ import annotations

import os
import resource
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from .. import datapaths
from . import offloads, pinning, steering
from ..capabilities import local_installed
from ..core.scenario import Scenario
from ..datapaths.base import BuildError, Tunnel
from ..hosts.base import Placement
from ..hosts.steps import BATCH_TOOLS, PLAN_PREFIX, ROOT, Node, Step, comment, heredoc
from ..system import netlink
from ..system.executor import CommandError, Executor, NetnsExecutor
from ..system.ledger import Ledger
from ..workloads.base import Endpoint, Pair

__all__ = ["BATCH_TOOLS", "PLAN_PREFIX", "ROOT", "Node", "Step", "Topology", "BuildError", "comment", "heredoc"]
NETLINK_MIN_BATCHES = 2  # namespaces in one wave from which their batches go over netlink (netlink.py)
# `ip -batch` processes of one wave at once: each `ip -n` copies the mount table under one kernel lock, so more than a
# few per CPU only queue there (at 64 pairs, 2 to 8 at once built no slower than 128), each with a thread and three pipes
PROCESS_WORKERS = 4 * (os.cpu_count() or 1)


class Topology:
    def __init__(self, scenario: Scenario, ledger: Ledger | None, prefix: str | None = None,
                 placement: Placement | None = None):
        self.sc = scenario
        # This topology's own elements, made from the scenario's levels, each with the implementation checked.
        self.elements = datapaths.elements(scenario.levels, scenario.implementation)
        self.placement = placement or Placement(ledger)  # where the hosts are (hosts/): namespaces here by default
        self.ledger = ledger
        self.prefix = prefix or (ledger.prefix if ledger else PLAN_PREFIX)
        self.nodes: dict[str, Node] = {}
        self.pairs: list[Pair] = []
        self.steps: list[Step] = []
        self.executed: list[Step] = []  # the steps as they were run, in order (plan prints the same: tests compare)
        self.vm_nics: list[tuple[str, str]] = []  # (VM label, its NIC) as vm_address was given them
        self.daemons: dict[str, subprocess.Popen] = {}
        self.pin_watch = pinning.Watch()  # the processes started in the nodes, for each trial's read-back
        self.pinned_guests: list[list[int]] = []  # the guests' processes cpu_pinning set (restored at teardown)
        self.pin_asked: dict[str, str] = {}  # node -> the CPUs cpu_pinning gives it (build/pinning.py assigned)
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
        """The hosts talk through underlay endpoints of the run's own on machines that are not (a testbed's)."""
        return self.placement.run_underlay(self)

    def host_ip(self, host: str) -> str:
        return self.placement.host_ip(self, host)

    def transport_ip(self, host: str) -> str:
        """The address other hosts send overlay traffic to: the underlay address, unless a host-to-host
        encryption element puts the hosts' traffic through a tunnel of its own."""
        return self.elements["encryption"].transport_ip(self, host) or self.host_ip(host)

    def workdir(self, label: str) -> str:
        """A node's directory for its daemons' files, on the machine the node is on: under the local ledger's work
        directory, or on a testbed host under that host's run directory."""
        return self.placement.workdir(self, label)

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

    def call(self, node: str, what: str, fn: Callable[[], None], shown: Sequence[str] = ()) -> None:
        """A Python action at build time, shown by `plan` as a comment: e.g. writing a config or a key generated
        for this run (a secret must never be in an argv or a batch line: `plan` prints those). `shown`: the command
        lines the action starts (a guest's emulator), which `plan` prints after the comment."""
        self.steps.append(Step(node, "call", lines=list(shown), name=what, fn=fn))

    def executor(self, label: str) -> Executor:
        if label == ROOT:
            return self.placement.root_executor(self)
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

    # ---- names that depend on the placement ----------------------------------------------------------------
    def tool_path(self, label: str, tool: str, default: str) -> str:
        """Where a tool (found by capabilities.INSTALLED_SCRIPT, e.g. charon) is on the machine running a node's
        steps: each testbed host may keep it elsewhere."""
        found = self.placement.tool_path(self, label, tool)
        found = found if found is not None else local_installed().get(tool)  # a guest sees this machine's files
        return found.detail if found is not None and found.ok else default

    def nic(self, host: str) -> str:
        """The host's underlay NIC: the emulated one, or the testbed's (whose settings are never changed)."""
        return self.placement.nic(self, host)

    def nic_node(self, host: str) -> str:
        """The node whose namespace holds the host's NIC (where macvlans of it are made)."""
        return self.placement.nic_node(self, host)

    def tunnel(self, host: str, *lines: str) -> None:
        """Create a host's tunnel devices (`link add NAME type vxlan ...`), where the placement makes them (on a
        real host: from its root namespace straight into the host's namespace of the run)."""
        self.placement.tunnel(self, host, lines)

    def uplink(self, host: str) -> str:
        """The device a host's flat (no overlay) bridge takes as its port to the provider network."""
        return self.placement.uplink(self, host)

    def direct_nic(self, vm: Node, dev: str) -> None:
        """A VM's NIC straight on its host's NIC: a macvlan of it (or, where the placement offers one, a VF)."""
        self.placement.direct_nic(self, vm, dev)

    def underlay_mac(self, host: str) -> str | None:
        """The MAC of a host's run-owned underlay endpoint where the placement sets it (else None)."""
        return self.placement.underlay_mac(self, host)

    def mac(self, label: str) -> str | None:
        """A VM's MAC where the placement sets it (a testbed's), else None."""
        return self.placement.mac(self, label)

    def root_of(self, label: str) -> str:
        """The node whose namespace creates this node's namespace and links: this machine's root namespace, a
        guest VM's guest, or on a testbed the VM's host (a real host's own root namespace)."""
        return self.placement.root_of(self, self.nodes[label])

    def veth(self, a: str, a_if: str, b: str, b_if: str) -> None:
        """A link between two nodes (a VM and its host, or two hosts): a veth, or a guest VM's vif."""
        self.placement.link(self, self.nodes[a], a_if, self.nodes[b], b_if)

    # ---- layout ------------------------------------------------------------------------------------------
    def _add(self, label: str, role: str, host: str | None = None, tenant: int | None = None) -> Node:
        node = self.placement.node(self, label, role, host, tenant)
        self.nodes[label] = node
        return node

    def _layout(self) -> None:
        """Decide nodes, addresses and pairs (no steps yet)."""
        sc = self.sc
        for label in self.placement.machines(self):
            self._add(label, "machine")
        for h in range(1, sc.hosts + 1):
            node = self._add(f"h{h}", "host")
            node.v4, node.v6 = self.host_ip(node.label), self.placement.host_v6(self, node.label)
        if sc.hosts > 2 and self.placement.emulated_underlay(self):
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
        return Endpoint(self.placement.endpoint_exec(self, node), addr, node.label)

    # ---- the common part of every topology: namespaces, underlay, VM interfaces ----------------------------
    def emit(self) -> "Topology":
        """Fill the step list (idempotent); used by both plan and build."""
        if self.steps:
            return self
        self.placement.prelude(self)
        spaces = [n for n in self.nodes.values() if n.netns]
        for node in spaces:
            self.record("netns", node.netns, self.root_of(node.label))
            self.ip(self.root_of(node.label), f"netns add {node.netns}")
        for node in spaces:
            self.ip(node.label, "link set lo up")
        pinning.add_steps(self)  # first: a node's CPUs are tried before any process starts there
        self.placement.underlay(self)
        els = self.elements
        els["switch"].build(self) if self.sc["attach"] == "switch" else None
        els["attach"].build(self)
        els["overlay"].build(self)
        els["encryption"].build(self)
        offloads.add_steps(self)  # last: on every device the steps above create
        steering.add_steps(self)
        return self

    def underlay_address(self, host: str, dev: str) -> None:
        """Put a host's underlay address on dev (the NIC itself, or a bridge that owns it), where the placement
        gives the host one (a real host has its address already: nothing is changed there)."""
        self.placement.underlay_address(self, host, dev)

    def vm_address(self, vm: Node, dev: str) -> None:
        self.vm_nics.append((vm.label, dev))
        self.ip(vm.label, f"link set {dev} mtu {self.sc.vm_mtu} up",
                f"addr add {vm.v4}/16 dev {dev}", f"addr add {vm.v6}/64 dev {dev} nodad",
                *self._peer_neighbours(vm, dev))

    def _peer_neighbours(self, vm: Node, dev: str) -> list[str]:
        """A VM knows the MAC of its pair's other VM (permanent neighbour entries, IPv4 and IPv6), so the pair's
        traffic makes no ARP/ND entry. The kernel's neighbour table is one for the whole machine, every namespace
        included, and refuses a new entry past net.ipv4.neigh.default.gc_thresh3 (1024 by default) while its entries
        are fresh; permanent entries are not counted. A 256-pair run made about 520 entries of its own (two per pair);
        beside another such run the table was full and the last pair's ARP failed (no reply to the ping check, and
        no retry helped while the other run's entries stayed fresh). On a testbed the ping check sets these entries
        (sites.py); a VM with a kernel of its own has its own table and NIC."""
        known = self.placement.local_macs
        if known is None or vm.label not in known:
            return []
        if not hasattr(self, "_peers"):
            self._peers: dict[str, list[str]] = {}
            for p in self.pairs:
                a, b = p.meta["client"], p.meta["server"]
                if a != b:
                    self._peers.setdefault(a, []).append(b)
                    self._peers.setdefault(b, []).append(a)
        lines = []
        for label in dict.fromkeys(self._peers.get(vm.label, [])):
            peer = self.nodes[label]
            if peer.role == "vm" and label in known and peer.tenant == vm.tenant:
                mac = self.mac(label)
                lines += [f"neigh replace {peer.v4} lladdr {mac} dev {dev} nud permanent",
                          f"neigh replace {peer.v6} lladdr {mac} dev {dev} nud permanent"]
        return lines

    # ---- execution ---------------------------------------------------------------------------------------
    def build(self) -> "Topology":
        raise_file_limit()
        self.emit()
        self._built = True
        if not self._execute():  # a testbed checks in each host's build script
            self.verify()
        return self

    def flush_records(self) -> None:
        """Write what the next steps create to the ledger first (the placement says which ledger)."""
        records, self._records = list(self._records), []
        if records:
            self.placement.flush(self, records)

    def take_records(self) -> list[tuple[str, str, str]]:
        """The records not yet written (a placement writes them with its own build script)."""
        records, self._records = list(self._records), []
        return records

    def waves(self) -> list[list[Step]]:
        """The steps as a person would batch them: one root batch (namespaces, then the links between them),
        then, between commands and daemons, one batch per node and tool. Hosts go before VMs (a host creates
        its VMs' macvlans), and tc/bridge go after ip. The batches of one wave run at once."""
        root = [ln for st in self.steps if st.node == ROOT and st.tool == "ip" for ln in st.lines]
        root.sort(key=lambda ln: not ln.startswith("netns add"))  # stable: keeps the order within each kind
        # the placement's prelude (a guest's boot) before anything else
        k = next((i for i, st in enumerate(self.steps) if st.tool != "call"), len(self.steps))
        waves: list[list[Step]] = [[st] for st in self.steps[:k]] + ([[Step(ROOT, "ip", root)]] if root else [])
        region: list[Step] = []
        for st in self.steps[k:]:
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

    def _execute(self) -> bool:
        waves = self.placement.arrange(self, self.waves())
        try:
            return self.placement.execute(self, waves)
        except (CommandError, RuntimeError) as exc:  # a host that stopped answering, a refused line
            if isinstance(exc, BuildError):
                raise
            raise BuildError(str(exc)) from None

    def ran(self, steps: list[Step]) -> None:
        """Steps are being run (the placement's own build scripts say so too)."""
        self.executed.extend(steps)

    def run_wave(self, wave: list[Step]) -> None:
        """Run one wave here (its batches at once); a placement's `execute` calls it."""
        if len(wave) == 1 or wave[0].tool not in BATCH_TOOLS:
            for step in wave:
                self.run_step(step)
            return
        self.ran(wave)
        wave, over_netlink = self._netlink_part(wave)

        def one(step: Step) -> str | None:  # each batch in one process, all at once (over a machine's agent too)
            try:
                self.executor(step.node).batch(step.tool, step.lines)
            except CommandError as exc:
                return str(exc)
            return None
        errors = []
        if wave:
            with ThreadPoolExecutor(max_workers=min(len(wave), PROCESS_WORKERS)) as pool:
                errors = [e for e in pool.map(one, wave) if e]
        errors += netlink.apply_many(over_netlink) if over_netlink else []
        if errors:
            raise BuildError("; ".join(errors))

    def _netlink_part(self, wave: list[Step]) -> tuple[list[Step], list[tuple[str, list]]]:
        """A wave of several namespaces' ip batches: those netlink.parse understands (a VM's lines, a host's bridge)
        are applied from this process (netlink.py says why: a socket per namespace costs less than one `ip`
        process), the rest run as `ip -batch` processes."""
        if len(wave) < NETLINK_MIN_BATCHES or not self.placement.netlink:
            return wave, []
        rest, over = [], []
        for step in wave:
            ex = self.executor(step.node)
            ops = netlink.parse(step.lines) if step.tool == "ip" and type(ex) is NetnsExecutor else None
            if ops is None:
                rest.append(step)
            else:
                over.append((ex.netns, ops))
        if over and not netlink.available():  # pyroute2 imported here, by the first wave that has batches for it
            return wave, []
        return rest, over

    def run_step(self, step: Step) -> None:
        """Run one step through its node's executor."""
        self.ran([step])
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
                self.pin_watch.daemon(step.node, step.name, where, self.daemons[step.name].pid)
                if step.ready:
                    step.ready()
        except CommandError as exc:
            raise BuildError(str(exc)) from None

    def verify(self, attempts: int = 3) -> None:
        """Every pair must pass traffic before anything is measured (this also warms up ARP/ND)."""
        pending = list(self.pairs)
        for attempt in range(attempts):
            wait_s = 2 * 2 ** attempt  # 2, 4, 8 s: hundreds of first ARP exchanges on a busy machine take longer
            try:
                pending = self.placement.pings(self, pending, wait_s)
            except CommandError as exc:  # a host stopped answering
                raise BuildError(str(exc)) from None
            if not pending:
                return
            time.sleep(0.2 * (attempt + 1))
        p = pending[0]
        more = f" (and {len(pending) - 1} more pairs)" if len(pending) > 1 else ""
        raise BuildError(f"pair {p.index} ({p.client.label} -> {p.server.label} {p.server.addr}){more}: no reply to "
                         f"ping after {attempts} tries: this topology does not pass traffic")

    def daemon_pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.daemons.items() if proc.poll() is None}

    def teardown(self) -> None:
        """Stop what runs, delete the namespaces (and with them every device), forget them in the ledger."""
        teardown_steps: list[Step] = []
        saved, self.steps = self.steps, teardown_steps
        pinning.restore(self)  # the guests outlive the topology: every CPU back
        for el in self.elements.values():
            el.teardown(self)
        self.steps = saved
        for step in teardown_steps:
            try:
                self.run_step(step)
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
        self.placement.teardown(self, namespaces)
        self.placement.forget(self, namespaces)

    # ---- plan --------------------------------------------------------------------------------------------
    def script(self) -> str:
        """The steps as a shell script a person can read or replay: every value is quoted, escaped in a comment,
        or inside a quoted here-document whose end marker no line of it can be."""
        self.emit()
        out: list[str] = []
        for step in (st for wave in self.placement.arrange(self, self.waves()) for st in wave):
            where = self.executor(step.node)
            if step.tool in BATCH_TOOLS:
                out.append(heredoc(shlex.join(where.batch_argv(step.tool)), step.lines))
            elif step.tool == "call":
                out += [comment(step.name), *step.lines]
            else:
                argv = where.pinned(step.argv) if step.tool == "daemon" else step.argv
                out.append(shlex.join(where.wrap(argv)) + (" &" if step.tool == "daemon" else ""))
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
