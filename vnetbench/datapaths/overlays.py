"""Overlays: how a tenant's VM traffic crosses the underlay between hosts. Each is a small class; the switch
decides how to realise it (a kernel device here; OVS tunnel ports in the ovs switch)."""
from __future__ import annotations

from . import register
from .base import Availability, Overlay, Tunnel


@register
class NoOverlay(Overlay):
    name = "none"
    summary = "VMs share the provider network (flat), no encapsulation"


class KernelTunnel(Overlay):
    """An overlay that is one tunnel per tenant and host (`tunnel`, plain data). With the Linux bridge it builds
    them as kernel devices; other switches ask the topology for the tunnels and realise them their own way."""
    vni_base = 100

    def dev(self, topo, tenant: int) -> str:
        return topo.ifname(f"{self.name[:2]}{tenant}")

    def others(self, topo, host: str) -> list[str]:
        """The transport addresses of every other host."""
        return [topo.transport_ip(h.label) for h in topo.hosts if h.label != host]

    def build(self, topo):
        if topo.sc["attach"] != "switch" or topo.sc.element("switch") != "linuxbridge" or len(topo.hosts) < 2:
            return
        for host in topo.hosts:
            tunnels = [self.tunnel(topo, host.label, t) for t in range(1, topo.sc.tenants + 1)]
            for t, tun in enumerate(tunnels, 1):
                topo.add_tunnel(host.label, tun)
                topo.tunnel_port(host.label, t, tun.dev)
            for tun in tunnels:
                topo.flood(host.label, tun)


@register
class Vxlan(KernelTunnel):
    name = "vxlan"
    summary = "VXLAN, UDP port 4789, 50 bytes over IPv4"
    overhead = 50
    kernel_kind = "vxlan"
    wire = "udp port 4789"

    def tunnel(self, topo, host, tenant):
        others = self.others(topo, host)
        one = len(others) == 1  # more remotes: none on the device, head-end replication to each (no multicast)
        return Tunnel(self.dev(topo, tenant), "vxlan", self.vni_base + tenant, topo.transport_ip(host),
                      others[0] if one else None, flood=() if one else tuple(others), port=4789)


@register
class Gre(KernelTunnel):
    name = "gre"
    summary = "GRE (Ethernet over GRE with a key, IP protocol 47), 42 bytes over IPv4"
    # outer IPv4 20 + GRE 4 + key 4 + inner Ethernet 14 (measured on the wire with OVS; a keyed gretap is the same)
    overhead = 42
    kernel_kind = "gretap"
    wire = "ip proto 47"

    def tunnel(self, topo, host, tenant):
        return Tunnel(self.dev(topo, tenant), "gretap", self.vni_base + tenant, topo.transport_ip(host),
                      self.others(topo, host)[0])


@register
class Geneve(KernelTunnel):
    name = "geneve"
    summary = "Geneve, UDP port 6081, 50 bytes over IPv4"
    overhead = 50
    kernel_kind = "geneve"
    wire = "udp port 6081"

    def tunnel(self, topo, host, tenant):
        # no local address: the kernel's geneve device binds the wildcard (UDP port 6081, its default)
        return Tunnel(self.dev(topo, tenant), "geneve", self.vni_base + tenant, None, self.others(topo, host)[0])


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

    def build(self, topo):
        """Linux bridge: per tenant, an 802.1Q sub-interface of the host's NIC (tag 100 + tenant) is the tenant
        bridge's port to the provider network (OVS tags its own ports)."""
        if topo.sc["attach"] != "switch" or topo.sc.element("switch") != "linuxbridge" or len(topo.hosts) < 2:
            return
        for host in topo.hosts:
            for t in range(1, topo.sc.tenants + 1):
                dev = topo.ifname(f"vl{t}")
                topo.ip(topo.nic_node(host.label),
                        f"link add {dev} link {topo.nic(host.label)} netns {host.netns} type vlan id {100 + t}")
                topo.tunnel_port(host.label, t, dev)
