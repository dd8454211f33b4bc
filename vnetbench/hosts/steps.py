"""What a topology and its placement share: a node, a step, the labels and names every place uses, and the
placement's contract with the topology (PlacementHost: what a placement may ask of the topology it builds, as
datapaths/base.py: Builder is for elements). Plain data and text: imports nothing of a place."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ..core.strict import one_line
from ..system.executor import Executor

ROOT = ""  # node label of the machine's root namespace (only namespaces are added there)
BATCH_TOOLS = ("ip", "tc", "bridge")
UNDERLAY_NET = "10.250.0"
PLAN_PREFIX = "vb0000"


@dataclass
class Node:
    label: str            # h1, h1v3, tor
    role: str             # host | vm | switch | router | machine | guest
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


class PlacementHost(Protocol):
    """What a placement (hosts/*) may use of the topology it places. tests/test_seam.py holds hosts/ and guests/ to
    it: a placement asks the topology for nodes, names and steps, and runs the steps it is handed; it never reaches
    into the topology's own state."""
    sc: Any
    prefix: str
    ledger: Any
    nodes: dict[str, Node]
    pairs: list
    daemons: dict[str, Any]

    @property
    def hosts(self) -> list[Node]: ...
    @property
    def vms(self) -> list[Node]: ...
    @property
    def hops(self) -> int: ...
    def ns(self, label: str) -> str: ...
    def ifname(self, short: str) -> str: ...
    def host_ip(self, host: str) -> str: ...
    def nic(self, host: str) -> str: ...
    def nic_node(self, host: str) -> str: ...
    def root_of(self, label: str) -> str: ...
    def mac(self, label: str) -> str | None: ...
    def executor(self, label: str) -> Executor: ...
    def ip(self, node: str, *lines: str) -> None: ...
    def batch(self, tool: str, node: str, *lines: str) -> None: ...
    def run(self, node: str, argv: list[str]) -> None: ...
    def call(self, node: str, what: str, fn: Callable[[], None]) -> None: ...
    def record(self, kind: str, name: str, host: str = "") -> None: ...
    def flush_records(self) -> None: ...
    def take_records(self) -> list[tuple[str, str, str]]: ...
    def run_wave(self, wave: list[Step]) -> None: ...
    def run_step(self, step: Step) -> None: ...
    def ran(self, steps: list[Step]) -> None: ...
    def daemon_pids(self) -> dict[str, int]: ...


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
