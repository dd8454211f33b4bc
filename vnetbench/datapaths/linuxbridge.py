"""The Linux bridge: one bridge per tenant on each host; overlays are kernel devices enslaved to it."""
from __future__ import annotations

from . import register
from .base import Availability, Switch


@register
class LinuxBridge(Switch):
    name = "linuxbridge"
    summary = "Linux kernel bridge; overlays as kernel tunnel devices"

    def check(self, scenario, caps):
        if not caps.has("bridge"):
            return Availability.no(caps.missing_kernel("bridge"))
        return Availability(True, "linux-bridge")

    def overlay_support(self, overlay, scenario, caps):
        if overlay.name == "none":
            return Availability(True, "flat")
        kind = overlay.kernel_kind
        if kind is None or not caps.has(kind):
            return Availability.no(f"the Linux bridge needs the kernel's {kind or overlay.name} device: "
                                   f"{caps.missing_kernel(kind or overlay.name)}")
        return Availability(True, f"kernel-{overlay.name}")

    def bridge(self, topo, tenant: int) -> str:
        # Without an overlay every tenant shares the flat provider network: one bridge holds the uplink.
        return topo.ifname("br0" if topo.sc.labels["overlay"] == "none" else f"br{tenant}")

    def build(self, topo):
        flat = topo.sc.labels["overlay"] == "none"
        for host in topo.hosts:
            tenants = [0] if flat else range(1, topo.sc.tenants + 1)
            for t in tenants:
                br = self.bridge(topo, t)
                topo.ip(host.label, f"link add {br} type bridge forward_delay 0", f"link set {br} up")
            if flat and len(topo.hosts) > 1:
                topo.ip(host.label, f"link set {topo.uplink(host.label)} master {self.bridge(topo, 0)}")
                topo.underlay_address(host.label, self.bridge(topo, 0))
            else:
                topo.underlay_address(host.label, topo.ifname("u"))

    def plug(self, topo, host, ifname, tenant):
        topo.ip(host, f"link set {ifname} mtu {topo.sc.vm_mtu} master {self.bridge(topo, tenant)} up")

    def tunnel_port(self, topo, host: str, tenant: int, dev: str) -> None:
        """Enslave an overlay device (created by the overlay element) to the tenant's bridge."""
        topo.ip(host, f"link set {dev} mtu {topo.sc.vm_mtu} master {self.bridge(topo, tenant)} up")
