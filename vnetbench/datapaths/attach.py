"""How a VM meets the network: behind the host's virtual switch, directly on the host NIC (a macvlan
sub-interface, our stand-in for an SR-IOV virtual function), or no VM at all (host to host)."""
from __future__ import annotations

from . import register
from .base import Attach, Availability


@register
class SwitchAttach(Attach):
    name = "switch"
    summary = "VM on a veth plugged into the host's virtual switch"

    def check(self, scenario, caps):
        return Availability(True, "veth") if caps.has("veth") else Availability.no(caps.missing_kernel("veth"))

    def build(self, topo):
        vm_if = topo.ifname("e0")
        for vm in topo.vms:
            tap = topo.ifname(f"t{vm.label.split('v')[1]}")
            topo.record("link", tap, vm.host)
            topo.veth(vm.label, vm_if, vm.host, tap)
        for vm in topo.vms:
            topo.plug(vm.host, topo.ifname(f"t{vm.label.split('v')[1]}"), vm.tenant)
        for vm in topo.vms:
            topo.vm_address(vm, vm_if)


@register
class DirectAttach(Attach):
    name = "direct"
    summary = "VM on a macvlan of the host NIC: no virtual switch (an SR-IOV virtual function stand-in)"

    def check(self, scenario, caps):
        vfs = caps.kernel.get("sriov-vf")  # a testbed whose NICs have free SR-IOV virtual functions
        on = [h for k in range(1, scenario["pairs"] + 1) for h in scenario.pair_hosts(k)]
        need = max(on.count(h) for h in set(on))  # VMs on the busiest host
        if vfs is not None and vfs.ok and int(vfs.detail.split()[0]) >= need:
            return Availability(True, "sriov-vf", notes=(f"a free SR-IOV virtual function of the host NIC per VM "
                                                         f"({vfs.detail})",))
        return Availability(True, "macvlan") if caps.has("macvlan") else Availability.no(caps.missing_kernel("macvlan"))

    def build(self, topo):
        vm_if = topo.ifname("e0")
        for host in topo.hosts:
            topo.underlay_address(host.label, topo.ifname("u"))
        for vm in topo.vms:
            topo.direct_nic(vm, vm_if)
        for vm in topo.vms:
            topo.vm_address(vm, vm_if)


@register
class HostAttach(Attach):
    name = "host"
    summary = "no VM: host to host over the underlay (the studies' 'simple connection')"

    def build(self, topo):
        for host in topo.hosts:
            topo.underlay_address(host.label, topo.ifname("u"))
