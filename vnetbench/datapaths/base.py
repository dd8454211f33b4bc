"""The datapath interface. A scenario names one element of each kind (switch, overlay, encryption, attach);
each element says whether this machine can run it (and with which implementation), then adds its steps to the
topology being built. A new datapath is one new module with one class decorated by @register.

Elements are made from a scenario's levels through the registry (`datapaths.elements`), once by the matrix to
check them and again by each topology that builds them; `adopt` hands the second the implementation the first
chose. An element never holds or calls another element: what it needs of the others it asks the builder.

The builder interface (`Builder` below; `topology.Topology` implements it for every site: emulated hosts,
testbed hosts over SSH, guests) is all an element may use of the topology. It adds steps for a node *label*
(h1, h1v2, r1, or "" for the machine that creates the namespaces) and never says where they run; a new host
backend implements these methods and no datapath changes:

  scenario data   sc (the plain-data Scenario), prefix, hosts, vms, pairs, nodes (label -> Node: role, host,
                  tenant, netns, v4, v6, exec)
  names           ifname(short), workdir(label), host_ip(host), transport_ip(host), nic(host), nic_node(host)
  executor(label) the node's Executor, for what a build-time call or a ready check runs there
  steps           ip(node, *lines), batch(tool, node, *lines), run(node, argv), daemon(node, name, argv, ready, env),
                  call(node, what, fn), record(kind, name, node); daemons (name -> process, for ready checks) and
                  steps (the list so far: OVS extends its last ip step)
  files           make_dirs(labels), remove_dirs(labels), write_file(label, name, text, mode): a node's directory
                  and its files, on the machine the node is on (a secret goes on stdin, never in an argv)
  site-dependent  veth(a, a_if, b, b_if), uplink(host), tunnel(host, *lines), underlay_address(host, dev),
                  vm_address(vm, dev), direct_nic(vm, dev)
  between elements
                  plug(host, ifname, tenant)        the switch connects a VM's port (attach -> switch)
                  tunnel_port(host, tenant, dev)    the switch enslaves an overlay's tunnel device (overlay -> switch)
                  overlay_tunnel(host, tenant)      the overlay's tunnel as plain data (`Tunnel`; switch -> overlay)
                  add_tunnel(host, tunnel)          create a tunnel as a kernel device on a host
                  flood(host, tunnel)               head-end replication of a tunnel to every remote in `flood`
"""
from __future__ import annotations

from abc import ABC
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from ..capabilities import Capabilities
    from ..core.scenario import Scenario


class BuildError(RuntimeError):
    """The topology could not be built (a refused step, a daemon that did not start): the scenario's trials fail
    with this message."""


class Refused(BuildError):
    """A level the place refuses (a device keeps another offload or mask, a NIC has no IRQ to pin, a node cannot run on
    the CPUs asked): the scenario is skipped with this reason, never failed (build/offloads.py, build/steering.py,
    hosts/lab/irq.py, build/pinning.py)."""


@dataclass(frozen=True)
class Tunnel:
    """One tenant's tunnel on one host, as its overlay defines it: plain data that a switch realises its own way
    (a kernel device, `ip_link`; or ports of its own)."""
    dev: str                      # the device name the overlay gives it
    kind: str                     # kernel device type: vxlan | gretap | geneve
    key: int                      # the tenant's VNI or GRE key
    local: str | None             # this host's transport address (None: the device is given none)
    remote: str | None            # the one remote endpoint (None: several, see flood)
    flood: tuple[str, ...] = ()   # remotes that broadcast and unknown frames are replicated to (no multicast)
    port: int | None = None       # UDP destination port (None: the kind's default, or not UDP)

    def ip_link(self) -> str:
        """The iproute2 line that creates this tunnel as a kernel device."""
        words = [f"link add {self.dev} type {self.kind}"]
        words += [f"id {self.key}"] if self.kind != "gretap" else []
        words += [f"local {self.local}"] if self.local else []
        words += [f"remote {self.remote}"] if self.remote else []
        words += [f"key {self.key}"] if self.kind == "gretap" else []
        words += [f"dstport {self.port}"] if self.port else []
        return " ".join(words)


class Builder(Protocol):
    """What an element may use of the topology it is built into (see the module docstring)."""
    sc: "Scenario"
    prefix: str
    nodes: dict[str, Any]
    pairs: list
    daemons: dict[str, Any]
    steps: list

    @property
    def hosts(self) -> list: ...
    @property
    def vms(self) -> list: ...
    def ifname(self, short: str) -> str: ...
    def workdir(self, label: str) -> str: ...
    def host_ip(self, host: str) -> str: ...
    def transport_ip(self, host: str) -> str: ...
    def nic(self, host: str) -> str: ...
    def nic_node(self, host: str) -> str: ...
    def executor(self, label: str) -> Any: ...
    def ip(self, node: str, *lines: str) -> None: ...
    def batch(self, tool: str, node: str, *lines: str) -> None: ...
    def run(self, node: str, argv: list[str]) -> None: ...
    def daemon(self, node: str, name: str, argv: list[str], ready: Callable[[], None] | None = None,
               env: dict | None = None) -> None: ...
    def call(self, node: str, what: str, fn: Callable[[], None]) -> None: ...
    def record(self, kind: str, name: str, host: str = "") -> None: ...
    def veth(self, a: str, a_if: str, b: str, b_if: str) -> None: ...
    def uplink(self, host: str) -> str: ...
    def tunnel(self, host: str, *lines: str) -> None: ...
    def underlay_address(self, host: str, dev: str) -> None: ...
    def vm_address(self, vm: Any, dev: str) -> None: ...
    def direct_nic(self, vm: Any, dev: str) -> None: ...
    def make_dirs(self, labels: list[str], mode: str | None = "700") -> None: ...
    def remove_dirs(self, labels: list[str]) -> None: ...
    def write_file(self, label: str, name: str, text: str, mode: int = 0o600) -> str: ...
    def plug(self, host: str, ifname: str, tenant: int) -> None: ...
    def tunnel_port(self, host: str, tenant: int, dev: str) -> None: ...
    def overlay_tunnel(self, host: str, tenant: int) -> Tunnel | None: ...
    def add_tunnel(self, host: str, tunnel: Tunnel) -> None: ...
    def flood(self, host: str, tunnel: Tunnel) -> None: ...
    def tool_path(self, label: str, tool: str, default: str) -> str: ...
    def underlay_mac(self, host: str) -> str | None: ...


class Options(BaseModel):
    """Options of an element, written in a spec as a mapping level: {type: ipsec, cipher: aes-128-gcm}."""
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built when first used, not at every import


@dataclass(frozen=True)
class Availability:
    ok: bool
    implementation: str = ""  # what really carries the packets, e.g. "linux-bridge", "kernel-vxlan", "ovs-netdev"
    reason: str = ""          # why not, in words a user can act on
    notes: tuple[str, ...] = ()  # differences a reader must know (e.g. "ESP is UDP-encapsulated")

    @classmethod
    def no(cls, reason: str) -> "Availability":
        return cls(False, reason=reason)


class Element(ABC):
    kind: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Options: ClassVar[type[Options]] = Options

    def __init__(self, options: Options | None = None):
        self.options = options or self.Options()

    def check(self, scenario: "Scenario", caps: "Capabilities") -> Availability:
        """Can this machine run this element in this scenario, and with what implementation?"""
        return Availability(True, self.name)

    def build(self, topo: "Builder") -> None:
        """Add this element's steps to the topology."""

    def teardown(self, topo: "Builder") -> None:
        """Steps needed before the namespaces are deleted (e.g. stop a daemon gracefully)."""

    def adopt(self, implementation: str) -> None:
        """Take the implementation the matrix's check() chose for this scenario (its `implementation` entry), so an
        element made afresh from the scenario's data builds what was checked."""

    def label(self) -> str:
        """The level as shown in tables: the name, plus options that differ from the defaults."""
        opts = self.options.model_dump(exclude_defaults=True)
        return self.name if not opts else f"{self.name}(" + ",".join(str(v) for v in opts.values()) + ")"


class Switch(Element):
    kind = "switch"

    def overlay_support(self, overlay: "Element", scenario: "Scenario", caps: "Capabilities") -> Availability:
        """Whether this switch can carry the given overlay, and how."""
        return Availability.no(f"{self.name} has no {overlay.name} support")

    def plug(self, topo: "Builder", host: str, ifname: str, tenant: int) -> None:
        """Connect a VM's host-side interface to this host's switch, in the tenant's network."""
        raise NotImplementedError

    def tunnel_port(self, topo: "Builder", host: str, tenant: int, dev: str) -> None:
        """Connect an overlay's tunnel device (made by the overlay element) to the tenant's network."""
        raise NotImplementedError(f"{self.name} makes its own tunnels")


class Overlay(Element):
    kind = "overlay"
    overhead: ClassVar[int] = 0         # bytes of encapsulation over IPv4 (add 20 for an IPv6 underlay)
    kernel_kind: ClassVar[str | None] = None  # the `ip link add ... type X` device type, if the kernel can do it
    wire: ClassVar[str] = ""            # tcpdump filter that matches this overlay on the underlay

    def tunnel(self, topo: "Builder", host: str, tenant: int) -> Tunnel | None:
        """The tenant's tunnel on this host, as plain data (None: this overlay does not tunnel)."""
        return None


class Attach(Element):
    kind = "attach"


class Encryption(Element):
    kind = "encryption"

    def overhead_for(self, scenario: "Scenario") -> int:
        """Bytes this element's tunnel takes from the underlay MTU before the VM's packets (0 when the tunnel
        runs inside the VMs: it then lowers its own interface's MTU, not the VM's)."""
        return 0

    def transport_ip(self, topo: "Builder", host: str) -> str | None:
        """The address the hosts' overlay tunnels use for this host, if this element moves them (None: the
        host's underlay address)."""
        return None
