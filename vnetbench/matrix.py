"""From an experiment's factors to the list of scenarios: the product of levels, minus `exclude`, plus
`include`, each scenario either runnable (with the implementation of every element) or skipped with the reason."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from . import datapaths, workloads
from .capabilities import Capabilities
from .datapaths.base import Availability, Element
from .spec import CHOICES, DEFAULT_LEVELS, ELEMENT_FACTORS, TOPOLOGY_FACTORS, Experiment, Problem
from .workloads.base import Workload

MTU_RANGE = (1280, 9000)
PAIRS_RANGE = (1, 64)
HOPS_RANGE = (0, 8)


@dataclass
class Scenario:
    index: int
    levels: dict[str, Any]                   # factor -> level as written (scalar, or mapping for elements)
    labels: dict[str, str]                   # factor -> level as shown
    elements: dict[str, Element]             # kind -> element
    workloads: list[Workload]
    workload_ids: list[int]                  # index of each workload in the spec (stable trial identity)
    hosts: int
    tenants: int
    underlay_rate: int | None
    skip: str | None = None
    implementation: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.labels.items())

    def __getitem__(self, factor: str) -> Any:
        return self.levels[factor]

    @property
    def overhead(self) -> int:
        """Bytes of encapsulation between the VM MTU and the underlay MTU (the underlay is always IPv4)."""
        return self.elements["overlay"].overhead + self.elements["encryption"].overhead_for(self)

    @property
    def underlay_mtu(self) -> int:
        mtu = self.levels["mtu"]
        return mtu + self.overhead if self.levels["mtu_policy"] == "raise-underlay" else mtu

    @property
    def vm_mtu(self) -> int:
        mtu = self.levels["mtu"]
        return mtu - self.overhead if self.levels["mtu_policy"] == "lower-vm" else mtu


def _levels(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _workload_fields(exp: Experiment) -> dict[str, list[int]]:
    """Workload parameter name -> indices of the spec's workloads that have it."""
    reg = workloads.load_all()
    out: dict[str, list[int]] = {}
    for i, wl in enumerate(exp.workloads):
        cls = reg.get(wl.get("type"))
        for name in (cls.Params.model_fields if cls else ()):
            if name != "type" and name not in wl:
                out.setdefault(name, []).append(i)
    return out


def _selector_factors(exp: Experiment) -> set[str]:
    """Factors of the user's own (e.g. `attack: [off, on]`) that only choose which workloads run, via `when`."""
    return {f for wl in exp.workloads if isinstance(wl.get("when"), dict) for f in wl["when"]
            if f not in TOPOLOGY_FACTORS} & set(exp.factors)


def make_element(kind: str, level: Any) -> Element:
    """A level is a name or a mapping {type: name, option: value...}. Raises ValueError with the fix."""
    reg = datapaths.load_all()[kind]
    opts = dict(level) if isinstance(level, dict) else {"type": level}
    name = opts.pop("type", None)
    if name not in reg:
        raise ValueError(f"'{name}' is not a known {kind}; allowed: {', '.join(sorted(reg))}")
    cls = reg[name]
    try:
        return cls(cls.Options.model_validate(opts))
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(p) for p in e["loc"])
        allowed = ", ".join(cls.Options.model_fields) or "none"
        if e["type"] == "extra_forbidden":
            raise ValueError(f"{name} has no option '{where}'; its options: {allowed}") from None
        raise ValueError(f"{name} option '{where}': {e['msg'].removeprefix('Value error, ')}") from None


def _check_level(factor: str, level: Any) -> str | None:
    if factor in ELEMENT_FACTORS:
        try:
            make_element(factor, level)
        except ValueError as exc:
            return str(exc)
    elif factor in CHOICES and level not in CHOICES[factor]:
        return f"'{level}' is not allowed; use one of: {', '.join(map(str, CHOICES[factor]))}"
    elif factor == "pairs" and not (isinstance(level, int) and PAIRS_RANGE[0] <= level <= PAIRS_RANGE[1]):
        return f"'{level}' is not allowed; pairs is a whole number from {PAIRS_RANGE[0]} to {PAIRS_RANGE[1]}"
    elif factor == "mtu" and not (isinstance(level, int) and MTU_RANGE[0] <= level <= MTU_RANGE[1]):
        return f"'{level}' is not allowed; mtu is a whole number of bytes from {MTU_RANGE[0]} to {MTU_RANGE[1]}"
    elif factor == "hops" and not (isinstance(level, int) and not isinstance(level, bool)
                                   and HOPS_RANGE[0] <= level <= HOPS_RANGE[1]):
        return f"'{level}' is not allowed; hops is a whole number of routers from {HOPS_RANGE[0]} to {HOPS_RANGE[1]}"
    return None


def check(exp: Experiment) -> list[Problem]:
    """Every problem of the factors, rules and workloads, each with its location."""
    problems: list[Problem] = []
    reg = workloads.load_all()
    wfields = _workload_fields(exp)
    for i, wl in enumerate(exp.workloads):
        kind = wl.get("type")
        if kind not in reg:
            problems.append(Problem(("workloads", i, "type"),
                                    f"'{kind}' is not a workload; allowed: {', '.join(sorted(reg))}"))
            continue
        try:
            reg[kind].Params.model_validate(params_of(wl))
        except ValidationError as exc:
            problems += [_param_problem(("workloads", i), kind, e, reg[kind]) for e in exc.errors()]
        sel = wl.get("pairs")
        if sel is not None and not (isinstance(sel, list) and sel and all(isinstance(i, int) and i >= 1 for i in sel)):
            problems.append(Problem(("workloads", i, "pairs"), "write a list of pair numbers, e.g. [1] or [2, 3]"))
        if not isinstance(wl.get("background", False), bool):
            problems.append(Problem(("workloads", i, "background"), "write true or false"))
        target = wl.get("target_pair")
        if target is not None and (isinstance(target, bool) or not isinstance(target, int) or target < 1):
            problems.append(Problem(("workloads", i, "target_pair"),
                                    "write one pair number whose server every selected pair sends to, e.g. 1"))
        when = wl.get("when", {})
        if not isinstance(when, dict):
            problems.append(Problem(("workloads", i, "when"), "write a mapping factor: level (or list of levels)"))
            continue
        for factor in when:
            if factor not in TOPOLOGY_FACTORS and factor not in exp.factors:
                problems.append(Problem(("workloads", i, "when", factor),
                                        "not a factor of this experiment: list its levels under `factors`"))
    wfields = _workload_fields(exp)
    selectors = _selector_factors(exp)
    for factor, value in exp.factors.items():
        if factor in selectors and factor not in wfields:
            continue  # any levels will do: they are only matched by `when`
        if factor not in TOPOLOGY_FACTORS and factor not in wfields:
            pinned = [wl.get("type") for wl in exp.workloads if factor in wl]
            allowed = ", ".join([*TOPOLOGY_FACTORS, *sorted(wfields)])
            problems.append(Problem(("factors", factor),
                                    f"every workload with this parameter sets it itself ({', '.join(pinned)}); remove "
                                    "it there or here" if pinned else f"unknown factor; allowed: {allowed}"))
            continue
        for j, level in enumerate(_levels(value)):
            loc = ("factors", factor, j) if isinstance(value, list) else ("factors", factor)
            msg = _check_level(factor, level) if factor in TOPOLOGY_FACTORS else _check_param(exp, wfields, factor, level)
            if msg:
                problems.append(Problem(loc, msg))
    for rules in ("exclude", "include"):
        for i, rule in enumerate(getattr(exp, rules)):
            for factor in rule:
                if factor not in TOPOLOGY_FACTORS and factor not in wfields and factor not in selectors:
                    problems.append(Problem((rules, i, factor), "not a factor of this experiment"))
    return problems


def _param_problem(loc: tuple, kind: str, e: dict, cls: type[Workload]) -> Problem:
    where = tuple(e["loc"])
    if e["type"] == "extra_forbidden":
        allowed = ", ".join(f for f in cls.Params.model_fields if f != "type")
        return Problem(loc + where, f"{kind} has no parameter '{where[-1]}'; its parameters: {allowed}")
    return Problem(loc + where, e["msg"].removeprefix("Value error, "))


def _check_param(exp: Experiment, wfields: dict[str, list[int]], factor: str, level: Any) -> str | None:
    reg = workloads.load_all()
    for i in wfields[factor]:
        wl = exp.workloads[i]
        try:
            reg[wl["type"]].Params.model_validate({**params_of(wl), factor: level})
        except ValidationError as exc:
            return f"level {level!r} is not valid for {wl['type']}: {exc.errors()[0]['msg']}"
    return None


# Keys of a workload entry that say where and when it runs, not how the tool runs.
PLACEMENT_KEYS = ("when", "pairs", "background", "target_pair")


def params_of(wl: dict) -> dict:
    return {k: v for k, v in wl.items() if k not in PLACEMENT_KEYS}


def _label(level: Any) -> str:
    if isinstance(level, dict):
        rest = [str(v) for k, v in level.items() if k != "type"]
        return f"{level.get('type')}({','.join(rest)})" if rest else str(level.get("type"))
    return str(level)


def _matches(rule: dict[str, Any], labels: dict[str, str], levels: dict[str, Any]) -> bool:
    for factor, want in rule.items():
        options = want if isinstance(want, list) else [want]
        if not any(levels.get(factor) == w or labels.get(factor) == _label(w) for w in options):
            return False
    return True


def expand(exp: Experiment, caps: Capabilities | None) -> list[Scenario]:
    """All scenarios in run order; with caps=None availability is not checked (used by unit tests)."""
    factor_levels = {f: _levels(exp.factors.get(f, DEFAULT_LEVELS[f])) for f in TOPOLOGY_FACTORS}
    factor_levels |= {f: _levels(v) for f, v in exp.factors.items() if f not in TOPOLOGY_FACTORS}
    names = list(factor_levels)
    combos = [dict(zip(names, values)) for values in itertools.product(*factor_levels.values())]
    combos = [c for c in combos if not any(_matches(r, {k: _label(v) for k, v in c.items()}, c) for r in exp.exclude)]
    for rule in exp.include:
        extra = {f: factor_levels[f][0] for f in names} | rule
        combos.append(extra)
    scenarios: list[Scenario] = []
    seen: set[str] = set()
    for levels in combos:
        sc = _scenario(exp, len(scenarios) + 1, levels, factor_levels)
        if sc.key in seen:
            continue
        seen.add(sc.key)
        if caps is not None:
            _decide(sc, factor_levels, caps)
        scenarios.append(sc)
    return scenarios


def _scenario(exp: Experiment, index: int, levels: dict[str, Any], factor_levels: dict[str, list]) -> Scenario:
    reg = workloads.load_all()
    elements = {kind: make_element(kind, levels[kind]) for kind in ELEMENT_FACTORS}
    labels = {k: _label(v) for k, v in levels.items()}
    wls, ids = [], []
    for i, wl in enumerate(exp.workloads):
        if not _matches(wl.get("when", {}), labels, levels):
            continue
        cls = reg[wl["type"]]
        # A parameter the entry sets itself is pinned for that entry (a flood stays UDP whatever `protocol` says).
        overrides = {k: v for k, v in levels.items() if k in cls.Params.model_fields and k != "type" and k not in wl}
        wls.append(cls(cls.Params.model_validate({**params_of(wl), **overrides}), wl.get("pairs"),
                       wl.get("background", False), wl.get("target_pair")))
        ids.append(i)
    cross = levels["placement"] == "cross-host"
    hosts = exp.hosts or (2 if cross or any(p == "cross-host" for p in factor_levels["placement"]) else 1)
    return Scenario(index=index, levels=levels, labels=labels,
                    elements=elements, workloads=wls, workload_ids=ids, hosts=hosts, tenants=exp.tenants,
                    underlay_rate=exp.underlay.rate)


def _decide(sc: Scenario, factor_levels: dict[str, list], caps: Capabilities) -> None:
    """Skip with a reason, or record what implementation each element will use."""
    reason = _structural(sc, factor_levels) or _workload_fit(sc)
    if reason:
        sc.skip = reason
        return
    if sc.levels.get("kernel") == "guest":  # checked against what the guest's own kernel and tools offer
        from .guests import machine
        guest = machine.capabilities()
        if guest is None:
            sc.skip = f"kernel guest: {machine.support().reason or 'a guest did not boot (see vnetbench doctor)'}"
            return
        caps = guest
        sc.implementation["kernel"] = guest.tools["kernel"].detail
    for wl in sc.workloads:
        if not caps.tool(wl.tool):
            sc.skip = f"workload {wl.kind}: {caps.missing_tool(wl.tool)}"
            return
    switch = sc.elements["switch"]
    checks: dict[str, Availability] = {kind: el.check(sc, caps) for kind, el in sc.elements.items()}
    if sc.levels["attach"] == "switch":
        checks["overlay"] = switch.overlay_support(sc.elements["overlay"], sc, caps)
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
    if sc.levels["placement"] == "same-host":
        if hops != factor_levels["hops"][0]:
            return f"same-host traffic crosses no router; it is measured once, under hops={factor_levels['hops'][0]}"
        return None
    if sc.hosts != 2:
        return f"router hops are built between exactly two hosts, and this experiment has {sc.hosts}"
    if sc.levels["attach"] == "direct":
        return ("a direct (SR-IOV-like) attachment puts the VMs on the hosts' L2 network, which the routers split; "
                "use attach switch with an overlay that tunnels over IP (e.g. vxlan), or attach host")
    if sc.levels["attach"] == "switch" and sc.elements["overlay"].name in ("none", "vlan"):
        return (f"with overlay {sc.labels['overlay']} the VMs share the hosts' L2 network, which the routers split; "
                f"use an overlay that tunnels over IP (e.g. vxlan), or attach host")
    return None


def _structural(sc: Scenario, factor_levels: dict[str, list]) -> str | None:
    attach, placement = sc.levels["attach"], sc.levels["placement"]
    if sc.hosts < 2 and placement == "cross-host":
        return "cross-host placement needs hosts >= 2"
    if attach in ("host", "direct"):
        what = "host-to-host traffic" if attach == "host" else "a direct (SR-IOV-like) attachment"
        if sc.labels["overlay"] != "none":
            return f"{what} bypasses the virtual switch and carries no overlay; it is measured under overlay=none"
        if sc.labels["switch"] != _label(factor_levels["switch"][0]):
            return f"{what} does not use the switch; it is measured once, under switch={_label(factor_levels['switch'][0])}"
    first_scope = factor_levels["encryption_scope"][0]
    if sc.labels["encryption"] == "none" and sc.levels["encryption_scope"] != first_scope:
        return f"without encryption the scope does not matter; measured once, under encryption_scope={first_scope}"
    if attach == "host" and placement == "same-host":
        return "host-to-host needs two hosts; attach=host is measured with placement=cross-host"
    if reason := _hops_problem(sc, factor_levels):
        return reason
    if sc.levels["ip_version"] == 6 and sc.vm_mtu < 1280:
        return f"IPv6 needs an MTU of at least 1280 but the VM MTU would be {sc.vm_mtu}; raise mtu or use mtu_policy raise-underlay"
    if sc.vm_mtu < 576:
        return f"the VM MTU would be {sc.vm_mtu}; raise mtu"
    return None
