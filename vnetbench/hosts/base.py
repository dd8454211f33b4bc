"""The host backend interface: where a scenario's hosts are, and what a topology asks of that place.

A `Backend` (one per module in hosts/, registered by name like the datapaths) says whether it can run a scenario
(`refuse`: a reason, shown as a skip), what the kernel there offers (`capabilities`), and opens a `Placement` for one
topology (booting or reusing guests, connecting to hosts); `plan` opens the same placement without booting or
connecting, so `vnetbench plan` prints the steps `run` executes. A placement answers the topology's questions that
depend on the place: each node's executor, a link between two nodes (a veth here, a vif for a guest VM), the
underlay, how a wave of steps runs, the ping check, the probes, and teardown. State of one topology on its place
(VF leases, MAC serials, VNI offsets) lives on the placement.

`Placement` itself is the plain case: emulated hosts as network namespaces on this machine's kernel. Other
placements override what differs; the topology never asks which one it has.
"""
from __future__ import annotations

import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..probes.interfaces import InterfaceProbe
from ..probes.process import ProcessProbe
from ..probes.procstat import SystemProbe
from ..system.executor import Executor, LocalExecutor, NetnsExecutor
from ..system.ledger import Ledger, delete_namespaces, surviving
from . import underlay
from .steps import PLAN_PREFIX, ROOT, UNDERLAY_NET, Node, Step, comment, heredoc


class Unavailable(RuntimeError):
    """A placement could not be opened (a guest did not come up): the scenario fails with this reason."""


class Placement:
    """Emulated hosts as namespaces of the run on this machine's kernel (the base of every placement)."""

    remote = False       # the hosts are other machines (a testbed): the profiler stays here
    netlink = True       # a large wave's VM batches may go over netlink from this process (netlink.py)

    def __init__(self, ledger: Ledger | None = None):
        self.ledger = ledger
        # VMs whose MAC this placement set before they existed (label -> device): each VM gets permanent neighbour
        # entries for its pair's peer (topology._peer_neighbours). None: the placement's own check sets them.
        self.local_macs: dict[str, str] | None = {}
        self._index: dict[str, int] = {}
        self._left: set[str] = set()   # namespaces that outlived their delete

    # ---- layout ----------------------------------------------------------------------------------------------
    def machines(self, topo) -> list[str]:
        """Nodes of machines' own root namespaces to add before the hosts (a testbed's m1..mN)."""
        return []

    def emulated_underlay(self, topo) -> bool:
        """Whether the underlay is emulated here (a switch namespace joins 3+ hosts; routers for hops)."""
        return True

    def node(self, topo, label: str, role: str, host: str | None, tenant: int | None) -> Node:
        return Node(label, role, host, NetnsExecutor(topo.ns(label), topo.ledger), tenant, netns=topo.ns(label))

    def host_ip(self, topo, host: str) -> str:
        if topo.hops and host == "h2":  # across routers: the last link's subnet, 10.250.<hops>.0/24
            return f"10.250.{topo.hops}.2"
        return f"{UNDERLAY_NET}.{int(host[1:])}"

    def host_v6(self, topo, host: str) -> str:
        h = int(host[1:])
        return f"fd00:250:{topo.hops}::2" if topo.hops and h == 2 else f"fd00:250::{h}"

    def endpoint_exec(self, topo, node: Node) -> Executor:
        return node.exec

    # cpu_pinning (build/pinning.py): whether a node's processes are pinned where they run (taskset in a namespace
    # here or on a testbed host), or not at all because the nodes run inside guests (the guests are pinned instead)
    pins_inside = True

    def guests(self, topo) -> dict[str, tuple]:
        """node label -> (fleet, guest) of each node that is a guest of this machine of its own (a guest VM, a host
        guest): cpu_pinning pins that guest's processes here (its kernel, qemu's vCPU threads)."""
        return {}

    def root_of(self, topo, node: Node) -> str:
        """The node whose namespace creates this node's namespace and links."""
        return node.guest or ROOT

    def root_executor(self, topo) -> Executor:
        return LocalExecutor(topo.ledger)

    def workdir(self, topo, label: str) -> str:
        base = topo.ledger.work if topo.ledger else "/run/vnetbench/" + PLAN_PREFIX + "/work"
        return f"{base}/{label}"

    def tool_path(self, topo, label: str, tool: str):
        """The Feature saying where a tool is for a node (None: as on this machine)."""
        return None

    # ---- links and underlay ------------------------------------------------------------------------------
    def link(self, topo, a: Node, a_if: str, b: Node, b_if: str) -> None:
        """A link between two nodes: a veth."""
        topo.ip(topo.root_of(a.label), f"link add {a_if} netns {a.netns}{self._vm_mac(topo, a, a_if)} type veth peer "
                                       f"name {b_if} netns {b.netns}")

    def nic(self, topo, host: str) -> str:
        return topo.ifname("u")

    def nic_node(self, topo, host: str) -> str:
        return host

    def uplink(self, topo, host: str) -> str:
        return topo.ifname("u")

    def tunnel(self, topo, host: str, lines: tuple[str, ...]) -> None:
        topo.ip(host, *lines)

    def direct_nic(self, topo, vm: Node, dev: str) -> None:
        topo.ip(topo.nic_node(vm.host), f"link add {dev} link {topo.nic(vm.host)} netns {vm.netns}"
                                        f"{self._vm_mac(topo, vm, dev)} type macvlan mode bridge")

    def _vm_mac(self, topo, node: Node, dev: str) -> str:
        """' address MAC' for a VM whose MAC this placement sets (noted with its device), else ''."""
        if node.role != "vm" or self.local_macs is None:
            return ""
        self.local_macs[node.label] = dev
        return f" address {self.mac(topo, node.label)}"

    def run_underlay(self, topo) -> bool:
        return False

    def underlay(self, topo) -> None:
        underlay.build(topo)

    def underlay_address(self, topo, host: str, dev: str) -> None:
        underlay.address(topo, host, dev)

    def underlay_mac(self, topo, host: str) -> str | None:
        return None

    def mac(self, topo, label: str, serial: int = 0) -> str | None:
        """A VM's MAC: locally administered, with the run's prefix, the build's number (`serial`: here each build has
        namespaces of its own, 0) and the node's place in the topology in it."""
        if label not in self._index:
            self._index = {lb: n for n, lb in enumerate(topo.nodes)}
        n, p = self._index[label], topo.prefix[2:6]
        return f"06:{serial:02x}:{p[:2]}:{p[2:]}:{n // 256:02x}:{n % 256:02x}"

    # ---- running ----------------------------------------------------------------------------------------
    def prelude(self, topo) -> None:
        """Steps before the topology's own (a guest's boot, shown by plan)."""

    def arrange(self, topo, waves: list[list[Step]]) -> list[list[Step]]:
        """The waves in the order this placement runs them (and plan shows them)."""
        return waves

    def flush(self, topo, records: list[tuple[str, str, str]]) -> None:
        if self.ledger and records:
            self.ledger.record_many([{"kind": k, "name": n, "host": h} for k, n, h in records])

    def execute(self, topo, waves: list[list[Step]]) -> bool:
        """Run the waves in order (records flushed before each); True when the placement checked the pairs too."""
        for wave in waves:
            topo.flush_records()
            topo.run_wave(wave)
        return False

    def pings(self, topo, pairs: list, wait_s: float) -> list:
        """One ping per pair, all at once; returns the pairs that got no reply."""
        # no pipes: only the exit status counts, and 500 pairs' pipes would pass a 1024-file limit
        procs = [(p, p.client.node.spawn(["ping", "-n", "-c", "1", "-W", str(wait_s), p.server.addr],
                                         label=f"verify-ping-{p.index}", stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)) for p in pairs]
        return [p for p, proc in procs if proc.wait(timeout=wait_s + 30) != 0]

    def teardown(self, topo, namespaces: list[str]) -> None:
        """Delete the topology's namespaces (every device with them), their processes first."""
        delete_namespaces(namespaces)
        # one that outlived its delete stays recorded, for the run's own clean-up and `clean` (they were forgotten
        # regardless: two 256-pair runs left 500 namespaces that no ledger knew)
        self._left = surviving(namespaces)

    def forget(self, topo, namespaces: list[str]) -> None:
        if self.ledger:
            self.ledger.forget_many([("process", name) for name in topo.daemons] +
                                    [("netns", n) for n in namespaces if n not in self._left] +
                                    [("netns", n.netns) for n in topo.nodes.values() if n.guest])

    # ---- measuring --------------------------------------------------------------------------------------
    def probes(self, topo) -> list:
        return [SystemProbe(LocalExecutor()), ProcessProbe(LocalExecutor(), topo.daemon_pids()),
                *[InterfaceProbe(h.exec) for h in topo.hosts]]

    def irq_in_force(self, topo) -> dict | None:
        """A trial's record of the IRQ affinity the scenario set on real NICs (a lab's: hosts/lab/irq.py); None."""
        return None

    def guest_probes(self, topo) -> list:
        """Probes of kernels of their own, started after the others (a reader in a slow guest)."""
        return []

    def tag(self, topo, samples: list) -> list:
        return samples

    def describe(self, topo) -> list[str]:
        """Comments `plan` prints before the steps (where they run)."""
        return []

    def shown_teardown(self, topo) -> list[str]:
        """What `plan` prints as the teardown."""
        return [comment("teardown"), heredoc("ip -force -batch -", [f"netns del {n.netns}" for n in topo.nodes.values()
                                                                   if n.netns and not n.guest])]


class Backend:
    """A place for scenarios' hosts: refuses what it cannot run, opens a placement per topology, closes."""

    name = ""
    kernel = "shared"   # the `kernel` level it serves (the SSH testbed is chosen by --testbed instead)
    real_nics = False   # its hosts have real NICs whose interrupts an `irq_affinity` level may pin (a lab's)

    def __init__(self, ledger: Ledger | None = None, testbed=None):
        self.ledger, self.testbed = ledger, testbed

    @classmethod
    def refuse(cls, sc, caps) -> str | None:
        """Why the scenario cannot run here (None: it can), from the capabilities of where it would run; may note
        the implementation (sc.implementation)."""
        return None

    @classmethod
    def capabilities(cls, sc, caps):
        """What the kernel the scenario's datapaths run in offers (this machine's by default)."""
        return caps

    @classmethod
    def check_encryption(cls, sc, element, caps):
        """An encryption check of its own (None: the matrix's stands)."""
        return None

    @classmethod
    def info(cls) -> dict | None:
        """What `doctor` shows of this backend beyond this machine's capabilities (None: nothing)."""
        return None

    @classmethod
    def clean(cls, testbed, running: set[str], dry_run: bool) -> tuple[list[str], list[str], list[str]]:
        """`clean` of what runs left where this backend puts them beyond this machine's ledger: (removed, left
        alone, pending)."""
        return [], [], []

    def check(self, sc) -> str | None:
        """Why this opened backend cannot run a scenario the matrix allowed (a testbed with too few hosts)."""
        return None

    def notes(self, sc) -> list[str]:
        return []

    def environment(self) -> dict | None:
        return None

    def wants_guests(self, sc) -> bool:
        """Whether the scenario's placement has guests of the run (one kind of guests at a time: they share the
        run's guest namespace and keys)."""
        return False

    def has_guests(self) -> bool:
        return False

    def open(self, sc) -> Placement:
        """The placement of one topology of the scenario (booting guests or connecting); Unavailable if it
        cannot be had."""
        return Placement(self.ledger)

    def plan(self, sc) -> Placement:
        """The same placement for `plan`: nothing booted, connected or created."""
        return Placement(None)

    def close(self) -> None:
        """Guests down (the run is ending, or another kind of guests is wanted)."""

    def disconnect(self) -> None:
        """Connections to other machines closed (last, after the run's ledger has cleaned them)."""


def in_guest_teardown(namespaces: list[str]) -> str:
    """The script deleting namespaces inside a machine (their processes first)."""
    q = " ".join(map(shlex.quote, namespaces))
    return (f"for n in {q}; do ip netns pids $n | xargs -r kill -9; done; "
            f"for n in {q}; do ip netns del $n; done; true")


def at_once(fn: Callable, items: list) -> list:
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(fn, items))
