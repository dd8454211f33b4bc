"""From an experiment's factors to the list of scenarios: the product of levels, minus `exclude`, plus
`include`, each scenario either runnable (with the implementation of every element) or skipped with the reason.
The scenarios are plain data (scenario.py); the elements checked here are made from their levels through the
datapath registry and not kept (a topology makes its own from the same levels)."""
from __future__ import annotations

import itertools
import json
import os
from typing import Any

from .. import hosts  # where the hosts are: each backend refuses what it cannot run, and says whose kernel checks
from .. import datapaths, workloads
from ..capabilities import Capabilities
from ..core import pinning
from ..core.scenario import DEFAULT_LEVELS, ELEMENT_FACTORS, TOPOLOGY_FACTORS, Scenario, as_list, label, placement_hosts
from ..datapaths.base import Availability, Element
from .model import Experiment

__all__ = ["Scenario", "expand", "params_of", "PLACEMENT_KEYS"]


# Keys of a workload entry that say where and when it runs, not how the tool runs.
PLACEMENT_KEYS = ("when", "pairs", "background", "target_pair", "name")


def params_of(wl: dict) -> dict:
    return {k: v for k, v in wl.items() if k not in PLACEMENT_KEYS}


Rule = list[tuple[str, list, set[str]]]  # (factor, the levels it names, their labels)


def _rule(rule: dict[str, Any]) -> Rule:
    """A `when` or exclude rule with its levels' labels made once (a matrix tests each rule on every combination)."""
    out = []
    for factor, want in rule.items():
        options = want if isinstance(want, list) else [want]
        out.append((factor, options, {label(w) for w in options}))
    return out


def _matches(rule: dict[str, Any] | Rule, labels: dict[str, str], levels: dict[str, Any]) -> bool:
    for factor, options, option_labels in (_rule(rule) if isinstance(rule, dict) else rule):
        if labels.get(factor) not in option_labels and not any(levels.get(factor) == w for w in options):
            return False
    return True


def _by_index(rules: list[Rule], factor_levels: dict[str, list], level_labels: list[list[str]]) -> list[list]:
    """Each exclude rule as what _matches would say of every level on its own: [(factor's position, the indices of
    its levels the rule matches)], a combination excluded when its every pick is among them. A rule naming a factor
    the experiment lacks matches as _matches does there (the level None); one that can never match is dropped.
    A matrix of S3's size tests every rule on each of its 10,000 combinations (2 dicts each, before)."""
    names = list(factor_levels)
    out = []
    for rule in rules:
        conds, never = [], False
        for factor, options, option_labels in rule:
            if factor in factor_levels:
                j = names.index(factor)
                conds.append((j, frozenset(i for i, v in enumerate(factor_levels[factor])
                                           if level_labels[j][i] in option_labels or any(v == w for w in options))))
            elif not any(None == w for w in options):  # noqa: E711 (as _matches compares levels.get(factor))
                never = True
        if not never:
            out.append(conds)
    return out


def expand(exp: Experiment, caps: Capabilities | None, site: hosts.Hosts | None = None) -> list[Scenario]:
    """All scenarios in run order; with caps=None availability is not checked (used by unit tests). `site`: the
    place the run has (a lab's `hosts.Hosts`; this machine by default): each scenario is asked of the backend that
    will run it there, once."""
    site = site or hosts.Hosts()
    factor_levels = _factor_levels(exp)
    names = list(factor_levels)
    level_labels = [[label(v) for v in values] for values in factor_levels.values()]  # each level's once
    combos, excludes = [], _by_index([_rule(r) for r in exp.exclude], factor_levels, level_labels)
    for picks in itertools.product(*(range(len(values)) for values in factor_levels.values())):
        if any(all(picks[j] in ok for j, ok in rule) for rule in excludes):
            continue  # excluded: tested on the levels' indices, before a combination's dicts are made
        combo = {f: factor_levels[f][i] for f, i in zip(names, picks)}
        combos.append((combo, {f: level_labels[j][i] for j, (f, i) in enumerate(zip(names, picks))}))
    for rule in exp.include:
        extra = {f: factor_levels[f][0] for f in names} | rule
        combos.append((extra, {k: label(v) for k, v in extra.items()}))
    scenarios: list[Scenario] = []
    seen: set[str] = set()
    entries = _Entries(exp)
    for levels, labels in combos:
        elements = datapaths.elements(levels)
        sc = _scenario(exp, len(scenarios) + 1, levels, factor_levels, elements, labels, entries)
        if sc.key in seen:
            continue
        seen.add(sc.key)
        if caps is not None:
            backend = site.backend(sc)
            _decide(sc, elements, factor_levels, caps, backend)
            sc.skip = sc.skip or backend.check(sc)  # what the opened place lacks (a lab's hosts, NICs, VFs)
            sc.notes = sc.notes + backend.notes(sc)
        scenarios.append(sc)
    _run_once(exp, scenarios)
    return scenarios


def _measured_as(exp: Experiment, sc: Scenario) -> list[str | None]:
    """What each foreground workload's result depends on in this scenario (None for a background one): the
    topology, its own resolved parameters and placement, the levels of the factors its `when` names, and every
    background load beside it. Two scenarios with the same value measure the same thing for that workload (they
    differ only in factors it does not read, e.g. `protocol` for ping). The scenario's parts are made once for all
    its workloads."""
    dumped = [wl.params.model_dump(mode="json") for wl in sc.workloads]
    background = [(i, d, p) for i, wl, d, p in zip(sc.workload_ids, sc.workloads, dumped, sc.workload_params)
                  if wl.background]
    topology = sc.topology_key
    out: list[str | None] = []
    for k, wl in enumerate(sc.workloads):
        if wl.background:
            out.append(None)
            continue
        wid = sc.workload_ids[k]
        when = exp.workloads[wid].get("when", {})
        out.append(json.dumps([topology, {f: sc.labels.get(f) for f in sorted(when)}, wid, dumped[k],
                               sc.workload_params[k], background], sort_keys=True, default=str))
    return out


def _run_once(exp: Experiment, scenarios: list[Scenario]) -> None:
    """A workload that nothing distinguishes between two runnable scenarios runs in the first of them only, with a
    note in the others: factors it does not read do not multiply it (quick.yaml's ping ran under both `protocol`
    rows). A scenario left without a foreground workload is skipped, naming where its workloads run."""
    first: dict[str, Scenario] = {}
    for sc in scenarios:
        if sc.skip:
            continue
        kept, moved = [], []
        for k, (wl, measured) in enumerate(zip(sc.workloads, _measured_as(exp, sc))):
            where = None if measured is None else first.setdefault(measured, sc)
            if where is None or where is sc:
                kept.append(k)
                continue
            differ = [f for f in sc.labels if sc.labels[f] != where.labels[f]]
            moved.append(f"workload {sc.workload_ids[k] + 1} ({wl.kind}) runs in scenario {where.index} only: "
                         f"it does not read {', '.join(differ)}")
        if not moved:
            continue
        sc.notes += moved
        sc.workloads, sc.workload_params, sc.workload_ids = ([x[k] for k in kept] for x in
                                                             (sc.workloads, sc.workload_params, sc.workload_ids))
        if not any(not wl.background for wl in sc.workloads):
            sc.skip = "; ".join(moved)


def _factor_levels(exp: Experiment) -> dict[str, list]:
    levels = {f: as_list(exp.factors.get(f, DEFAULT_LEVELS[f])) for f in TOPOLOGY_FACTORS}
    return levels | {f: as_list(v) for f, v in exp.factors.items() if f not in TOPOLOGY_FACTORS}


class _Entries:
    """What expand needs of each workload entry, worked out once per matrix rather than once per scenario (S3's
    780 scenarios read the same entries 780 times): its `when` rule and, once it is selected, its class, the
    factors that set its parameters, its own parameters and its placement keys."""

    def __init__(self, exp: Experiment):
        self.exp, self.reg = exp, workloads.load_all()
        # a `when` that is not a mapping is passed as it is, to fail in _matches as it always did
        self.when = [_rule(w) if isinstance(w := wl.get("when", {}), dict) else w for wl in exp.workloads]
        self._made: dict[int, tuple] = {}

    def of(self, i: int) -> tuple:
        """(class, the parameter names a level may set, params_of(entry), its placement keys)."""
        if i not in self._made:
            wl = self.exp.workloads[i]
            cls = self.reg[wl["type"]]
            # A parameter the entry sets itself is pinned for that entry (a flood stays UDP whatever `protocol` says).
            settable = frozenset(k for k in cls.Params.model_fields if k != "type" and k not in wl)
            self._made[i] = (cls, settable, params_of(wl), {k: wl[k] for k in PLACEMENT_KEYS if k in wl and k != "when"})
        return self._made[i]


def _scenario(exp: Experiment, index: int, levels: dict[str, Any], factor_levels: dict[str, list],
              elements: dict[str, Element], labels: dict[str, str], prepared: _Entries) -> Scenario:
    wls, entries, ids = [], [], []
    for i, wl in enumerate(exp.workloads):
        if not _matches(prepared.when[i], labels, levels):
            continue
        cls, settable, own, placement = prepared.of(i)
        params = {**own, **{k: v for k, v in levels.items() if k in settable}}
        wls.append(cls(cls.Params.model_validate(params), wl.get("pairs"), wl.get("background", False),
                       wl.get("target_pair"), wl.get("name")))
        entries.append(params | placement)
        ids.append(i)
    # as many hosts as the spec says, else as the most demanding placement of the experiment needs
    hosts = exp.hosts or max(placement_hosts(p) for p in [levels["placement"], *factor_levels["placement"]])
    sc = Scenario(index=index, levels=levels, labels=labels, workload_params=entries, workload_ids=ids,
                  hosts=hosts, tenants=exp.tenants, underlay_rate=exp.underlay.rate,
                  underlay_impairment=exp.underlay.impairment(), workloads=wls)
    _overheads(sc, elements)
    return sc


def _overheads(sc: Scenario, elements: dict[str, Element]) -> None:
    """The bytes each element takes from the MTU (the encryption's depends on the overlay's, and on the
    implementation its check() chose: worked out again once it has)."""
    sc.overheads["overlay"] = elements["overlay"].overhead
    sc.overheads["encryption"] = elements["encryption"].overhead_for(sc)


def _decide(sc: Scenario, elements: dict[str, Element], factor_levels: dict[str, list], caps: Capabilities,
            backend: hosts.Backend) -> None:
    """Skip with a reason, or record what implementation each element will use."""
    reason = _structural(sc, factor_levels) or _workload_fit(sc) or _pinned_guests(sc)
    if reason:
        sc.skip = reason
        return
    if reason := backend.refuse(sc, caps):
        sc.skip = reason
        return
    caps = backend.capabilities(sc, caps)  # a guest's kernel's, where the datapaths run in one
    if sc.underlay_impairment and not caps.has("netem"):
        hint = "; kernel: guest runs it in a guest's own kernel" if sc.levels.get("kernel") == "shared" else ""
        sc.skip = (f"underlay {', '.join(k.split('_')[0] for k in sc.underlay_impairment)}: "
                   f"{caps.missing_kernel('netem')}{hint}")
        return
    for wl in sc.workloads:
        if not caps.tool(wl.tool):
            sc.skip = f"workload {wl.kind}: {caps.missing_tool(wl.tool)}"
            return
    if _leave_out_unsupported(sc, caps):
        return
    switch = elements["switch"]
    checks: dict[str, Availability] = {kind: el.check(sc, caps) for kind, el in elements.items()}
    if (in_vms := backend.check_encryption(sc, elements["encryption"], caps)) is not None:
        checks["encryption"] = in_vms  # vm-to-vm encryption in guest VMs: their own kernels' xfrm
    _overheads(sc, elements)
    if sc.levels["attach"] == "switch":
        checks["overlay"] = switch.overlay_support(elements["overlay"], sc, caps)
    unused = () if sc.levels["attach"] == "switch" else ("switch", "overlay")  # direct/host bypass the switch
    for kind in ELEMENT_FACTORS:
        if kind in unused:
            sc.implementation[kind] = "none"
            continue
        avail = checks[kind]
        if not avail.ok:
            sc.skip = f"{kind} {sc.labels[kind]}: {avail.reason}"
            return
        sc.implementation[kind] = avail.implementation
        sc.notes += list(avail.notes)
    if reason := _offloads(sc, caps) or _steering(sc) or _irq_affinity(sc, backend) or _pinning(sc, caps, backend):
        sc.skip = reason
        return
    _leave_out_oversized(sc, elements["encryption"])
    _leave_out_refused(sc)


def _offloads(sc: Scenario, caps: Capabilities) -> str | None:
    """An `offloads` level needs ethtool where the datapaths run, and must not undo what a datapath needs: Open
    vSwitch's userspace datapath does not complete partial checksums, so its VMs send with tx off (ovs.py)."""
    level = sc.levels.get("offloads", "on")
    if not isinstance(level, dict):
        return None
    if not caps.tool("ethtool"):
        return f"offloads {sc.labels['offloads']}: {caps.missing_tool('ethtool')}"
    if level.get("tx") == "on" and sc.implementation.get("switch", "").startswith("ovs-netdev"):
        return ("offloads tx on: the Open vSwitch userspace datapath does not complete partial checksums, so its VM "
                "NICs run with tx off (with tx on, TCP would not cross it)")
    sc.notes.append(f"offloads {sc.labels['offloads']}: set with ethtool -K on every device the run creates (VM NICs, "
                    f"the hosts' VM ports, bridges, tunnel devices, the emulated underlay), read back before each trial "
                    f"(build/offloads.py)")
    impl = sc.implementation
    makers = [who for who, made in (("Open vSwitch", impl.get("switch", "").startswith("ovs")),
                                    ("wireguard-go", "wireguard-go" in impl.get("encryption", "")),
                                    ("strongSwan's libipsec", "libipsec" in impl.get("encryption", ""))) if made]
    if makers:  # made by a daemon, not by a line of the run's: build/offloads.py cannot name them
        sc.notes.append(f"offloads: the devices {' and '.join(makers)} make{'s' * (len(makers) == 1)} "
                        f"{'itself' if len(makers) == 1 else 'themselves'} keep the kernel's defaults")
    return None


def _steering(sc: Scenario) -> str | None:
    """A `steering` level is written to the queues of the devices the run creates (build/steering.py): say so."""
    if isinstance(sc.levels.get("steering"), dict):
        sc.notes.append(f"steering {sc.labels['steering']}: written to the queues (rps_cpus, xps_cpus) of every "
                        f"device the run creates, read back before each trial (build/steering.py)")
    return None


def _irq_affinity(sc: Scenario, backend) -> str | None:
    """An `irq_affinity` level pins a real NIC's interrupts: only a lab's hosts have one the run may use."""
    if sc.levels.get("irq_affinity", "default") == "default" or backend.real_nics:
        return None
    return (f"irq_affinity {sc.labels['irq_affinity']}: irq_affinity needs a lab's real NIC (--testbed); the "
            f"{backend.name} backend's hosts are namespaces or guests of this machine, whose NICs take no interrupts")


def _pinned_guests(sc: Scenario) -> str | None:
    """Guests are pinned whole, here (build/pinning.py): a guest VM (vm_kernel) takes its CPUs, or its host's; a host
    guest (kernel guest-per-host, qemu) its host's, with the VMs inside it. One guest for every host (kernel: guest)
    cannot give hosts CPUs of their own, nor can a VM inside a host guest have its own."""
    level, kernel = sc.levels.get("cpu_pinning", pinning.NONE), sc.levels.get("kernel", "shared")
    if level == pinning.NONE or kernel == "shared":
        return None
    if kernel == "guest":
        return (f"cpu_pinning {sc.labels['cpu_pinning']}: with kernel: guest every host runs in one guest (one "
                f"process here); pin with kernel: guest-per-host or qemu, a guest per host")
    if isinstance(level, dict) and (vms := [n for n in level if "v" in n]):
        return (f"cpu_pinning {sc.labels['cpu_pinning']}: {vms[0]} runs inside its host's guest (kernel: {kernel}), "
                f"which is pinned whole: name the host")
    return None


def _pinning(sc: Scenario, caps: Capabilities, backend: hosts.Backend) -> str | None:
    """A `cpu_pinning` level needs taskset, hosts whose processes are this kernel's or a testbed host's (a guest's
    are not pinned yet), and CPUs the machine has: a spec may name CPUs of a bigger machine, whose scenarios skip
    here. Nodes a level names that this scenario does not have are noted."""
    level, shown = sc.levels.get("cpu_pinning", pinning.NONE), sc.labels.get("cpu_pinning", pinning.NONE)
    if level == pinning.NONE:
        return None
    if not caps.tool("taskset"):
        return f"cpu_pinning {shown}: {caps.missing_tool('taskset')}"
    local = backend.name != "testbed"
    if not local and sc.levels.get("vm_kernel", "shared") != "shared":
        return f"cpu_pinning {shown}: guest VMs on testbed hosts are not pinned yet"
    if level == pinning.SPREAD and not local:
        return "cpu_pinning spread: round robin over one machine's CPUs; on a testbed name each host's CPUs"
    if isinstance(level, dict):
        if missing := [n for n in level if n not in sc.node_labels]:
            sc.notes.append(f"cpu_pinning: this scenario has no node {', '.join(missing)}")
        have = set(os.sched_getaffinity(0))
        for node, cpus in level.items():
            if local and (lack := [c for c in pinning.cpus(cpus) if c not in have]):
                return (f"cpu_pinning {shown}: CPU {pinning.as_text(lack)} of {node} is not one this machine lets the "
                        f"run use ({pinning.as_text(sorted(have))})")
    guests = sc.levels.get("kernel", "shared") != "shared" or sc.levels.get("vm_kernel", "shared") != "shared"
    whole = "; a guest is pinned whole here (its kernel, its vCPU threads), not what runs in it" if guests else ""
    sc.notes.append(f"cpu_pinning {shown}: the workload tools and daemons of each pinned node run under taskset -c "
                    f"(a VM not named takes its host's CPUs){whole}; their CPUs are read back in each trial "
                    f"(build/pinning.py)")
    return None


IP_MAX = 65535  # IPv4's total length and IPv6's payload length are 16-bit fields


def _leave_out_oversized(sc: Scenario, enc: Element) -> None:
    """A datagram the sender's own kernel encrypts (xfrm end to end, or host to host without VMs) is transformed
    whole and fragmented after: with ESP/AH added it must still fit in one IP packet, or the kernel refuses to send
    it (S1's 65507-byte ping through ESP: 65400 bytes passed, 65450 did not, as computed here). Such a workload is
    left out of the scenario, saying why in its notes; with no foreground workload left, the scenario is skipped."""
    if "kernel-xfrm" not in sc.implementation.get("encryption", "") or \
            (enc.host_to_host(sc) and sc.levels["attach"] != "host"):
        return
    six, tunnel = sc.levels["ip_version"] == 6, enc.options.mode == "tunnel"

    def sent(size: int) -> int:  # IPv4 total length, or IPv6 payload length, after the transform
        return enc.outer_size((40 if six and tunnel else 20) + size) - (20 if six and not tunnel else 0)
    kept = []
    for wl, params, wid in zip(sc.workloads, sc.workload_params, sc.workload_ids):
        size = wl.largest_datagram()
        if size and sent(size) > IP_MAX:
            fit = next(s for s in range(size, 0, -1) if sent(s) <= IP_MAX)
            why = (f"workload {wid + 1} ({wl.kind}, {size - 8}-byte payloads) left out: the sender's kernel encrypts "
                   f"a datagram whole before fragmenting it, and with {sent(size) - size - (0 if six else 20)} bytes "
                   f"of {sc.labels['encryption']} it exceeds IPv{6 if six else 4}'s {IP_MAX}-byte "
                   f"{'payload' if six else 'packet'}; at most {fit - 8}-byte payloads fit")
            sc.notes.append(why)
        else:
            kept.append((wl, params, wid))
    _keep(sc, kept)


def _leave_out_refused(sc: Scenario) -> None:
    """A workload that cannot measure this scenario's levels (Workload.refuse) is left out, saying why."""
    kept = []
    for wl, params, wid in zip(sc.workloads, sc.workload_params, sc.workload_ids):
        if why := wl.refuse(sc.labels):
            sc.notes.append(f"workload {wid + 1} ({wl.kind}) left out: {why}")
        else:
            kept.append((wl, params, wid))
    _keep(sc, kept)


def _leave_out_unsupported(sc: Scenario, caps: Capabilities) -> bool:
    """A workload needing a kernel feature the scenario's kernel lacks (Workload.kernel_features) is left out with
    the kernel's reason, the others run; True when no foreground workload is left (the scenario is skipped)."""
    kept = []
    for wl, params, wid in zip(sc.workloads, sc.workload_params, sc.workload_ids):
        if missing := next((f for f in wl.kernel_features() if not caps.has(f)), None):
            sc.notes.append(f"workload {wid + 1} ({wl.kind}) left out: {caps.missing_kernel(missing)}")
        else:
            kept.append((wl, params, wid))
    _keep(sc, kept)
    return sc.skip is not None


def _keep(sc: Scenario, kept: list) -> None:
    """The scenario keeps only these (workload, params, id)s; skipped, with the last note, if no foreground is left."""
    if len(kept) < len(sc.workloads):
        sc.workloads, sc.workload_params, sc.workload_ids = (list(x) for x in zip(*kept)) if kept else ([], [], [])
        if not any(not wl.background for wl in sc.workloads):
            sc.skip = sc.notes[-1]


def _workload_fit(sc: Scenario) -> str | None:
    if not any(not wl.background for wl in sc.workloads):
        return "no foreground workload's `when` selects this scenario"
    for wl in sc.workloads:
        if wl.only_pairs and max(wl.only_pairs) > sc.levels["pairs"]:
            return f"workload {wl.kind} runs on pair {max(wl.only_pairs)} but the scenario has {sc.levels['pairs']} pairs"
        if wl.target_pair is not None:
            if wl.target_pair > sc.levels["pairs"]:
                return f"workload {wl.kind} targets pair {wl.target_pair} but the scenario has {sc.levels['pairs']} pairs"
            # Pair k is in tenant (k - 1) % tenants + 1 (topology); tenants are separate networks unless attach=host.
            tenant = lambda k: (k - 1) % sc.tenants + 1  # noqa: E731
            others = [k for k in (wl.only_pairs or range(1, sc.levels["pairs"] + 1))
                      if tenant(k) != tenant(wl.target_pair)]
            if others and sc.levels["attach"] != "host":
                return (f"workload {wl.kind}: pair {others[0]} (tenant {tenant(others[0])}) cannot reach the server of "
                        f"pair {wl.target_pair} (tenant {tenant(wl.target_pair)}): tenants are separate networks")
    return None


def _hops_problem(sc: Scenario, factor_levels: dict[str, list]) -> str | None:
    """Routers split the hosts' L2 network: only traffic between the hosts' own addresses crosses them."""
    hops = sc.levels.get("hops", 0)
    if not hops:
        return None
    if not sc.crosses_hosts:
        if hops != factor_levels["hops"][0]:
            return f"same-host traffic crosses no router; it is measured once, under hops={factor_levels['hops'][0]}"
        return None
    if sc.hosts != 2:
        return f"router hops are built between exactly two hosts, and this experiment has {sc.hosts}"
    if sc.levels["attach"] == "direct":
        return ("a direct (SR-IOV-like) attachment puts the VMs on the hosts' L2 network, which the routers split; "
                "use attach switch with an overlay that tunnels over IP (e.g. vxlan), or attach host")
    if sc.levels["attach"] == "switch" and sc.element("overlay") in ("none", "vlan"):
        return (f"with overlay {sc.labels['overlay']} the VMs share the hosts' L2 network, which the routers split; "
                f"use an overlay that tunnels over IP (e.g. vxlan), or attach host")
    return None


def _structural(sc: Scenario, factor_levels: dict[str, list]) -> str | None:
    attach, placement = sc.levels["attach"], sc.levels["placement"]
    if sc.hosts < placement_hosts(placement):
        return f"{label(placement)} placement needs hosts >= {placement_hosts(placement)}"
    if attach in ("host", "direct"):
        what = "host-to-host traffic" if attach == "host" else "a direct (SR-IOV-like) attachment"
        if sc.labels["overlay"] != "none":
            return f"{what} bypasses the virtual switch and carries no overlay; it is measured under overlay=none"
        if sc.labels["switch"] != label(factor_levels["switch"][0]):
            return f"{what} does not use the switch; it is measured once, under switch={label(factor_levels['switch'][0])}"
    first_scope = factor_levels["encryption_scope"][0]
    if sc.labels["encryption"] == "none" and sc.levels["encryption_scope"] != first_scope:
        return f"without encryption the scope does not matter; measured once, under encryption_scope={first_scope}"
    if attach == "host" and not sc.crosses_hosts:
        return "host-to-host needs two hosts; attach=host is measured with placement=cross-host"
    if reason := _hops_problem(sc, factor_levels):
        return reason
    if sc.levels["ip_version"] == 6 and sc.vm_mtu < 1280:
        return f"IPv6 needs an MTU of at least 1280 but the VM MTU would be {sc.vm_mtu}; raise mtu or use mtu_policy raise-underlay"
    if sc.vm_mtu < 576:
        return f"the VM MTU would be {sc.vm_mtu}; raise mtu"
    return None
