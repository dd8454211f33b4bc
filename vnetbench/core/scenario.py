"""A scenario: one combination of the experiment's factor levels, as plain data (printed by `plan`, compared,
stored with the campaign). It names its datapath elements by their levels; the element objects are made from
those levels through the datapath registry by whoever checks or builds them (matrix, topology), never kept here.

This module is also the one place the topology factors are declared (their names, defaults and choices):
spec, validate, matrix and topology all read them from here. It imports only a leaf (strict's one_line).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .strict import one_line

BURST_MIN = 64 * 1024      # bytes: tbf's bucket is at least this (a smaller one throttles below the rate)


def tbf_burst(rate: float) -> int:
    """The bucket (bytes) the underlay's tbf gets: 1 ms at the rate, at least BURST_MIN (guards count it in the
    throughput ceiling)."""
    return int(max(rate // 8 // 1000, BURST_MIN))


# Factors that shape the topology; every other factor must be a parameter of a workload in the spec.
TOPOLOGY_FACTORS = {
    "switch": "the virtual switch on each host (a datapath name)",
    "overlay": "how VM traffic crosses between hosts (a datapath name)",
    "encryption": "encryption of VM or host traffic (a datapath name)",
    "encryption_scope": "vm-to-vm (end to end between the VMs of a pair) or host-to-host (a gateway tunnel)",
    "attach": "how a VM is connected: switch, direct (SR-IOV-like macvlan) or host (no VM)",
    "placement": "where the two VMs of each pair live: same-host (both on h1), cross-host (client on h1, server on "
                 "h2), spread (pairs dealt over all hosts, client and server on neighbouring hosts) or pack (each "
                 "pair on one host, pairs filling the hosts in turn); {type: per-pair, hosts: [[1, 2], [3, 3]]} "
                 "names each pair's client and server host",
    "pairs": "number of client/server VM pairs running at once",
    "mtu": "MTU of the underlay (the hosts' NICs), bytes",
    "ip_version": "4 or 6: the address family the workloads use",
    "mtu_policy": "lower-vm (cloud default: VM MTU = MTU - tunnel overhead) or raise-underlay",
    "hops": "routers between the two hosts: 0 = one link; N = N router namespaces, hosts in different subnets",
    "kernel": "shared (every host and VM on this machine's kernel) or guest (they run in a guest with its own "
              "kernel, User-Mode Linux here, which has the datapaths this kernel may lack), or guest-per-host (each "
              "emulated host is a guest of its own, its VMs namespaces inside it), or qemu (each emulated host a "
              "qemu guest with Debian's cloud kernel, whose WireGuard, OVS kernel datapath and tunnels run in it)",
    "vm_kernel": "shared (VMs are namespaces of the hosts' kernel) or guest (each VM a guest with its own kernel, "
                 "CPU counters and xfrm, on a tap into its host's switch), or a guest kind's name (uml); {type: "
                 "guest, kind: uml, pairs: [..], side: client|server|both} makes only those VMs guests",
    "offloads": "on (the kernel's defaults: nothing changed) or a mapping of offloads to on/off, e.g. {tso: off, gso: "
                "off, gro: off}, set with ethtool -K on every device the run creates (build/offloads.py)",
    "steering": "default (nothing changed) or {rps: CPUS, xps: CPUS} (CPU lists as taskset's, e.g. \"0-1\"): receive "
                "and transmit packet steering written to the queues of every device the run creates (build/steering.py)",
    "irq_affinity": "default (nothing changed) or a CPU list (\"0-1\"): the CPUs that take the interrupts of a lab "
                    "host's underlay NIC, restored at teardown and by clean (hosts/lab/irq.py)",
    "cpu_pinning": "none (nothing pinned), spread (each host's processes on a CPU of their own, round robin) or a "
                   "mapping from a node to CPUs, e.g. {h1: 0, h2: '1-2'}: the processes the run starts there (workload "
                   "tools, daemons; a host's VMs' too) run under taskset -c (build/pinning.py)",
}
NOT_APPLICABLE = "n/a"
ELEMENT_FACTORS = ("switch", "overlay", "encryption", "attach")
DEFAULT_LEVELS: dict[str, Any] = {
    "switch": "linuxbridge", "overlay": "none", "encryption": "none", "encryption_scope": "vm-to-vm", "attach": "switch",
    "placement": "cross-host", "pairs": 1, "mtu": 1500, "ip_version": 4, "mtu_policy": "lower-vm",
    "hops": 0, "kernel": "shared", "vm_kernel": "shared", "offloads": "on",
    "steering": "default", "irq_affinity": "default",
    "cpu_pinning": "none",
}
CHOICES = {
    "placement": ("same-host", "cross-host", "spread", "pack"),
    "ip_version": (4, 6),
    "encryption_scope": ("vm-to-vm", "host-to-host"),
    "mtu_policy": ("lower-vm", "raise-underlay"),
    "kernel": ("shared", "guest", "guest-per-host", "qemu"),
}


def placement_hosts(level: Any) -> int:
    """The hosts a placement needs at least: two for pairs that cross hosts, the highest named by a per-pair one."""
    if isinstance(level, dict):
        return max(h for pair in level["hosts"] for h in pair)
    return 2 if level in ("cross-host", "spread") else 1


def placement_problem(level: Any) -> str | None:
    """What is wrong with a per-pair placement (a mapping level), or None."""
    fix = "write {type: per-pair, hosts: [[1, 2], [3, 4]]}: each pair's client and server host, numbered from 1"
    if set(level) - {"type", "hosts"} or level.get("type") != "per-pair":
        return f"a placement mapping is per-pair only: {fix}"
    hosts = level.get("hosts")
    if not (isinstance(hosts, list) and hosts and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(h, int) and not isinstance(h, bool) and 1 <= h <= 16
                                                        for h in p) for p in hosts)):
        return f"hosts: {fix} (at most 16; pair k takes entry k, the list repeating)"
    return None


# The offloads an `offloads` level may name: short name -> (its `ethtool -K` keyword, the feature `ethtool -k` shows).
OFFLOADS = {"tso": ("tso", "tcp-segmentation-offload"), "gso": ("gso", "generic-segmentation-offload"),
            "gro": ("gro", "generic-receive-offload"), "lro": ("lro", "large-receive-offload"),
            "tx": ("tx", "tx-checksumming"), "rx": ("rx", "rx-checksumming"), "sg": ("sg", "scatter-gather"),
            **{n: (n, n) for n in ("tx-udp_tnl-segmentation", "tx-udp_tnl-csum-segmentation")}}
OFFLOADS_FIX = "write on (the kernel's defaults) or a mapping such as {tso: off, gso: off, gro: off}"


def _on_off(value: Any) -> str | None:
    """'on'/'off' from YAML's true/false (an unquoted on or off) or the words; None for anything else."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return value if value in ("on", "off") else None


def offloads_level(level: Any) -> Any:
    """An `offloads` level in one spelling: 'on', or {feature: 'on'|'off'} (YAML reads on/off as true/false). A level
    that is not valid is returned as written, for offloads_problem to name."""
    if _on_off(level) == "on":
        return "on"
    if isinstance(level, dict) and not offloads_problem(level):
        return {k: _on_off(v) for k, v in level.items()}
    return level


def offloads_problem(level: Any) -> str | None:
    """What is wrong with an `offloads` level, or None."""
    if isinstance(level, dict):
        if not level:
            return f"an empty mapping changes nothing: {OFFLOADS_FIX}"
        for k, v in level.items():
            if k not in OFFLOADS:
                return f"{one_line(repr(k))} is not an offload vnetbench sets; allowed: {', '.join(OFFLOADS)}"
            if _on_off(v) is None:
                return f"{k}: {one_line(repr(v))} is not allowed; write on or off"
        return None
    if _on_off(level) == "on":
        return None
    if _on_off(level) == "off":
        return f"off alone does not say which offloads: {OFFLOADS_FIX}"
    return f"{one_line(repr(level))} is not allowed; {OFFLOADS_FIX}"


def offloads_label(level: dict) -> str:
    """{tso: off, gso: off, gro: on} -> 'tso/gso off + gro on' (the features of each value, in the order written)."""
    by_value: dict[str, list[str]] = {}
    for k, v in level.items():
        by_value.setdefault(str(v), []).append(str(k))
    return " + ".join(f"{'/'.join(names)} {value}" for value, names in by_value.items())


# ---- steering: what a level may set (its label below; its parsing core/tuning.py) -------------------------------
STEERING = ("rps", "xps")  # the queues' rps_cpus / xps_cpus
# The nodes a `cpu_pinning` level may name (core/pinning.py), as the topology labels them: hosts h1.., VMs h1v1..,
# routers r1.., the switch tor.
NODE_RE = re.compile(r"h[1-9][0-9]*(v[1-9][0-9]*)?|r[1-9][0-9]*|tor")


def is_pinning(level: Any) -> bool:
    """Whether a mapping level is a cpu_pinning one (its keys name nodes), not an offloads or element mapping."""
    return isinstance(level, dict) and bool(level) and "type" not in level and \
        all(isinstance(k, str) and NODE_RE.fullmatch(k) for k in level)


def as_list(value: Any) -> list[Any]:
    """A factor's levels: a list as written, or the one level."""
    return list(value) if isinstance(value, list) else [value]


# Options shown with their name in a level's label: a bare number says nothing (`guest(qemu,vcpus=2,memory=512)`).
KEYED_OPTIONS = ("vcpus", "memory")


def label(level: Any) -> str:
    """A level as shown in tables: `vxlan`, or `ipsec(tunnel,aes-256-cbc)` for a mapping with options. A control
    character in the user's text (a newline, a terminal escape) is shown escaped, never obeyed by a terminal."""
    if is_pinning(level):
        return one_line(f"pin({','.join(f'{k}={v}' for k, v in level.items())})")  # {h1: '0', h2: '1'}
    if isinstance(level, dict) and "type" not in level and level and all(v in ("on", "off") for v in level.values()):
        return one_line(offloads_label(level))  # an `offloads` mapping
    if isinstance(level, dict) and level and set(level) <= set(STEERING):  # a `steering` mapping
        return one_line(" + ".join(f"{k} {v}" for k, v in level.items()))
    if isinstance(level, dict):
        rest = [f"{k}={v}" if k in KEYED_OPTIONS else str(v) for k, v in level.items() if k != "type"]
        return one_line(f"{level.get('type')}({','.join(rest)})" if rest else str(level.get("type")))
    return one_line(str(level))


def element_name(level: Any) -> Any:
    """The datapath name of an element level: `vxlan`, or the `type` of {type: ipsec, ...}."""
    return level.get("type") if isinstance(level, dict) else level


@dataclass
class Scenario:
    index: int
    levels: dict[str, Any]                   # factor -> level as written (scalar, or mapping for elements)
    labels: dict[str, str]                   # factor -> level as shown
    workload_params: list[dict]              # each selected workload's entry: type, parameters, pairs, background...
    workload_ids: list[int]                  # index of each workload in the spec (stable trial identity)
    hosts: int
    tenants: int
    underlay_rate: int | None
    # What netem adds on each host NIC: delay_s, jitter_s, loss_ratio (only those set).
    underlay_impairment: dict[str, float] = field(default_factory=dict)
    # Bytes of encapsulation each element takes between the VM MTU and the underlay MTU (the underlay is IPv4),
    # as the matrix worked them out with the implementation it chose.
    overheads: dict[str, int] = field(default_factory=dict)
    skip: str | None = None
    implementation: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # The Workload objects made from workload_params through the workload registry (what the runner runs):
    # derived from the data above, so not part of the scenario's identity.
    workloads: list = field(default_factory=list, compare=False, repr=False)

    @property
    def key(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.labels.items())

    @property
    def shown_labels(self) -> dict[str, str]:
        """The labels as stored and shown: a level that does not apply to this scenario reads `n/a` (host-to-host
        and direct attachments have no switch and no overlay; without encryption its scope means nothing), so a
        host-to-host campaign is not labelled `switch linuxbridge`. `labels` keep the level, which code reads."""
        unused = {"switch", "overlay"} if self.levels.get("attach") in ("host", "direct") else set()
        if self.labels.get("encryption") == "none":
            unused.add("encryption_scope")
        return {k: NOT_APPLICABLE if k in unused else v for k, v in self.labels.items()}

    @property
    def topology_key(self) -> str:
        """What the built topology depends on: scenarios with the same key run on one build (they differ only in
        their workloads' parameters, e.g. a message size)."""
        topo = {f: self.levels[f] for f in TOPOLOGY_FACTORS if f in self.levels}
        return json.dumps([topo, self.hosts, self.tenants, self.underlay_rate, self.underlay_impairment, self.overheads,
                           self.implementation],
                          sort_keys=True, default=str)

    def underlay_qdiscs(self, dev: str) -> list[str]:
        """tc batch lines that shape a host NIC to the underlay: netem (delay, jitter, loss) at the root and the
        rate (tbf) under it, or the rate alone. Burst: 1 ms at the rate, at least 64 KiB. netem's queue holds a
        delay's worth of packets at 100 Gbit/s (its default, 1000 packets, would drop at a few Gbit/s)."""
        imp, out, parent = self.underlay_impairment, [], "root"
        if imp:
            args = ""
            if imp.get("delay_s"):
                args += f" delay {imp['delay_s'] * 1e6:.0f}us" + (f" {imp['jitter_s'] * 1e6:.0f}us"
                                                                   if imp.get("jitter_s") else "")
            if imp.get("loss_ratio"):
                args += f" loss {imp['loss_ratio'] * 100:g}%"
            limit = max(1000, int(100e9 / 8 / 1500 * (imp.get("delay_s", 0) + imp.get("jitter_s", 0))))
            out.append(f"qdisc add dev {dev} root handle 1: netem limit {limit}{args}")
            parent = "parent 1: handle 2:"
        if self.underlay_rate:
            burst = tbf_burst(self.underlay_rate)
            out.append(f"qdisc add dev {dev} {parent} tbf rate {self.underlay_rate}bit burst {burst} latency 50ms")
        return out

    def pair_hosts(self, k: int) -> tuple[int, int]:
        """The hosts (numbers from 1) of pair k's client and server under the scenario's placement. spread deals the
        VMs round-robin over all hosts, so a pair's two VMs are on neighbouring hosts and every host gets its share;
        pack gives each host the next ceil(pairs / hosts) pairs, both VMs of a pair together; {type: per-pair, hosts:
        [[c, s], ...]} names them, entry k (counted from 1, the list repeating) for pair k."""
        placement, hosts = self.levels["placement"], max(1, self.hosts)
        if isinstance(placement, dict):
            client, server = placement["hosts"][(k - 1) % len(placement["hosts"])]
            return client, server
        if placement == "cross-host":
            return 1, 2
        if placement == "spread":
            return 2 * (k - 1) % hosts + 1, (2 * (k - 1) + 1) % hosts + 1
        if placement == "pack":
            host = (k - 1) // -(-self.levels["pairs"] // hosts) + 1
            return host, host
        return 1, 1

    def pair_vms(self, k: int) -> tuple[str, str]:
        """The labels of pair k's client and server VMs (h1v1, h2v2, ...): VMs are numbered as the pairs make them,
        the client's first (the topology's layout names them so)."""
        client, server = self.pair_hosts(k)
        return f"h{client}v{2 * k - 1}", f"h{server}v{2 * k}"

    @property
    def node_labels(self) -> list[str]:
        """The nodes the topology will have, as it labels them (build/topology.py _layout): hosts, the tor switch of
        more than two hosts, routers between two, and each pair's VMs (none with attach host)."""
        out = [f"h{h}" for h in range(1, self.hosts + 1)] + (["tor"] if self.hosts > 2 else [])
        out += [f"r{k}" for k in range(1, (self.levels.get("hops", 0) if self.hosts == 2 else 0) + 1)]
        if self.levels.get("attach") != "host":
            out += [vm for k in range(1, self.levels["pairs"] + 1) for vm in self.pair_vms(k)]
        return out

    @property
    def crosses_hosts(self) -> bool:
        """Whether the pairs' client and server are on different hosts (cross-host, spread)."""
        placement = self.levels["placement"]
        if isinstance(placement, dict):
            return any(c != s for c, s in placement["hosts"])
        return placement in ("cross-host", "spread")

    def __getitem__(self, factor: str) -> Any:
        return self.levels[factor]

    def element(self, kind: str) -> Any:
        """The datapath name chosen for an element kind (switch, overlay, encryption, attach)."""
        return element_name(self.levels[kind])

    @property
    def overhead(self) -> int:
        """Bytes of encapsulation between the VM MTU and the underlay MTU (the underlay is always IPv4)."""
        return sum(self.overheads.values())

    @property
    def underlay_mtu(self) -> int:
        mtu = self.levels["mtu"]
        return mtu + self.overhead if self.levels["mtu_policy"] == "raise-underlay" else mtu

    @property
    def vm_mtu(self) -> int:
        mtu = self.levels["mtu"]
        return mtu - self.overhead if self.levels["mtu_policy"] == "lower-vm" else mtu

    def to_dict(self) -> dict[str, Any]:
        """The scenario as plain data (JSON-serialisable when its levels are)."""
        return {"index": self.index, "levels": self.levels, "labels": self.labels,
                "workload_params": self.workload_params, "workload_ids": self.workload_ids, "hosts": self.hosts,
                "tenants": self.tenants, "underlay_rate": self.underlay_rate,
                "underlay_impairment": self.underlay_impairment, "overheads": self.overheads,
                "skip": self.skip, "implementation": self.implementation, "notes": self.notes}
