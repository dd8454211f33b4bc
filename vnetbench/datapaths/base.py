"""The datapath interface. A scenario names one element of each kind (switch, overlay, encryption, attach);
each element says whether this machine can run it (and with which implementation), then adds its steps to the
topology being built. A new datapath is one new module with one class decorated by @register."""
from __future__ import annotations

from abc import ABC
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from ..capabilities import Capabilities
    from ..matrix import Scenario
    from ..topology import Topology


class Options(BaseModel):
    """Options of an element, written in a spec as a mapping level: {type: ipsec, cipher: aes-128-gcm}."""
    model_config = ConfigDict(extra="forbid")


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

    def build(self, topo: "Topology") -> None:
        """Add this element's steps to the topology."""

    def teardown(self, topo: "Topology") -> None:
        """Steps needed before the namespaces are deleted (e.g. stop a daemon gracefully)."""

    def label(self) -> str:
        """The level as shown in tables: the name, plus options that differ from the defaults."""
        opts = self.options.model_dump(exclude_defaults=True)
        return self.name if not opts else f"{self.name}(" + ",".join(str(v) for v in opts.values()) + ")"


class Switch(Element):
    kind = "switch"

    def overlay_support(self, overlay: "Element", scenario: "Scenario", caps: "Capabilities") -> Availability:
        """Whether this switch can carry the given overlay, and how."""
        return Availability.no(f"{self.name} has no {overlay.name} support")

    def plug(self, topo: "Topology", host: str, ifname: str, tenant: int) -> None:
        """Connect a VM's host-side interface to this host's switch, in the tenant's network."""
        raise NotImplementedError


class Overlay(Element):
    kind = "overlay"
    overhead: ClassVar[int] = 0         # bytes of encapsulation over IPv4 (add 20 for an IPv6 underlay)
    kernel_kind: ClassVar[str | None] = None  # the `ip link add ... type X` device type, if the kernel can do it
    wire: ClassVar[str] = ""            # tcpdump filter that matches this overlay on the underlay


class Attach(Element):
    kind = "attach"


class Encryption(Element):
    kind = "encryption"

    def overhead_for(self, scenario: "Scenario") -> int:
        """Bytes this element's tunnel takes from the underlay MTU before the VM's packets (0 when the tunnel
        runs inside the VMs: it then lowers its own interface's MTU, not the VM's)."""
        return 0
