"""Overlays: how a tenant's VM traffic crosses the underlay between hosts. Each is a small class; the switch
decides how to realise it (a kernel device here; OVS tunnel ports in the ovs switch)."""
from __future__ import annotations

from . import register
from .base import Availability, Overlay


@register
class NoOverlay(Overlay):
    name = "none"
    summary = "VMs share the provider network (flat), no encapsulation"


class KernelTunnel(Overlay):
    """An overlay the Linux bridge realises with one kernel device per tenant and host."""
    vni_base = 100

    def device_lines(self, topo, host: str, tenant: int, dev: str) -> list[str]:
        raise NotImplementedError

    def build(self, topo):
        if topo.sc["attach"] != "switch" or topo.sc.labels["switch"] != "linuxbridge" or len(topo.hosts) < 2:
            return
        switch = topo.sc.elements["switch"]
        for host in topo.hosts:
            for t in range(1, topo.sc.tenants + 1):
                dev = topo.ifname(f"{self.name[:2]}{t}")
                topo.tunnel(host.label, *self.device_lines(topo, host.label, t, dev))
                switch.tunnel_port(topo, host.label, t, dev)
            if len(topo.hosts) > 2:
                self.flood_list(topo, host.label)

    def flood_list(self, topo, host: str) -> None:
        """Head-end replication to every other host (no multicast in the underlay)."""


@register
class Vxlan(KernelTunnel):
    name = "vxlan"
    summary = "VXLAN, UDP port 4789, 50 bytes over IPv4"
    overhead = 50
    kernel_kind = "vxlan"
    wire = "udp port 4789"

    def device_lines(self, topo, host, tenant, dev):
        others = [h.label for h in topo.hosts if h.label != host]
        remote = f" remote {topo.transport_ip(others[0])}" if len(others) == 1 else ""
        return [f"link add {dev} type vxlan id {self.vni_base + tenant} local {topo.transport_ip(host)}{remote} "
                f"dstport 4789"]

    def flood_list(self, topo, host):
        for t in range(1, topo.sc.tenants + 1):
            dev = topo.ifname(f"{self.name[:2]}{t}")
            for other in topo.hosts:
                if other.label != host:
                    topo.batch("bridge", host, f"fdb append 00:00:00:00:00:00 dev {dev} dst {topo.transport_ip(other.label)}")


@register
class Gre(KernelTunnel):
    name = "gre"
    summary = "GRE (Ethernet over GRE with a key, IP protocol 47), 42 bytes over IPv4"
    # outer IPv4 20 + GRE 4 + key 4 + inner Ethernet 14 (measured on the wire with OVS; a keyed gretap is the same)
    overhead = 42
    kernel_kind = "gretap"
    wire = "ip proto 47"

    def device_lines(self, topo, host, tenant, dev):
        other = next(h.label for h in topo.hosts if h.label != host)
        return [f"link add {dev} type gretap local {topo.transport_ip(host)} remote {topo.transport_ip(other)} "
                f"key {self.vni_base + tenant}"]


@register
class Geneve(KernelTunnel):
    name = "geneve"
    summary = "Geneve, UDP port 6081, 50 bytes over IPv4"
    overhead = 50
    kernel_kind = "geneve"
    wire = "udp port 6081"

    def device_lines(self, topo, host, tenant, dev):
        other = next(h.label for h in topo.hosts if h.label != host)
        return [f"link add {dev} type geneve id {self.vni_base + tenant} remote {topo.transport_ip(other)}"]


@register
class Vlan(Overlay):
    name = "vlan"
    summary = "802.1Q VLAN tag per tenant on the provider network, 4 bytes on the wire, not taken from the MTU"
    # The tag lengthens the frame, not the IP packet: 802.1Q frames may be 4 bytes over the MTU (IEEE 802.3ac), so
    # the VM keeps the full MTU (measured: 1500- and 9000-byte DF pings pass over a 1500/9000 underlay with OVS).
    overhead = 0
    kernel_kind = "vlan"
    wire = "vlan"

    def check(self, scenario, caps):
        return Availability(True, "802.1q")
