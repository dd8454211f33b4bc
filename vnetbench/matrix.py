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
from .spec import (CHOICES, DEFAULT_LEVELS, ELEMENT_FACTORS, TOPOLOGY_FACTORS, Experiment, Problem,
                   pydantic_message)
from .workloads.base import Workload

MTU_RANGE = (1280, 9000)
PAIRS_RANGE = (1, 64)
HOPS_RANGE = (0, 8)
MAX_SCENARIOS = 10_000   # combinations of all factors' levels (before exclude); a run of more would take weeks
MAX_PORT = 65535


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
        cls = reg.get(wl.get("type")) if isinstance(wl.get("type"), str) else None
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
    if not isinstance(name, str) or name not in reg:
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
        raise ValueError(f"{name} option '{where}': {pydantic_message(e)}") from None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # true is 1 to Python, not to a user


def _check_level(factor: str, level: Any) -> str | None:
    if factor in ELEMENT_FACTORS:
        try:
            make_element(factor, level)
        except ValueError as exc:
            return str(exc)
    elif factor in CHOICES and level not in CHOICES[factor]:
        return f"'{level}' is not allowed; use one of: {', '.join(map(str, CHOICES[factor]))}"
    elif factor == "pairs" and not (_whole(level) and PAIRS_RANGE[0] <= level <= PAIRS_RANGE[1]):
        return f"'{level}' is not allowed; pairs is a whole number from {PAIRS_RANGE[0]} to {PAIRS_RANGE[1]}"
    elif factor == "mtu" and not (_whole(level) and MTU_RANGE[0] <= level <= MTU_RANGE[1]):
        return f"'{level}' is not allowed; mtu is a whole number of bytes from {MTU_RANGE[0]} to {MTU_RANGE[1]}"
    elif factor == "hops" and not (_whole(level) and HOPS_RANGE[0] <= level <= HOPS_RANGE[1]):
        return f"'{level}' is not allowed; hops is a whole number of routers from {HOPS_RANGE[0]} to {HOPS_RANGE[1]}"
    return None


def check(exp: Experiment, declared: dict[str, list] | None = None, complete: bool = True) -> list[Problem]:
    """Every problem of the factors, rules and workloads, each with its location. `declared`: levels the spec
    gives a factor elsewhere (in a profile not chosen), so a `when` for them is not a typo; None: do not look for
    levels that match nothing. The checks that expand the matrix run only on a `complete` experiment (every field
    valid) without other problems."""
    problems = _check_workloads(exp) + _check_factors(exp) + _check_rules(exp, declared)
    if complete and not problems:
        problems += _check_size(exp)
    if complete and not problems:
        problems += _check_pairs(exp)
    if complete and not problems:
        scenarios = expand(exp, None)
        if not scenarios:
            return [Problem(("exclude",), "these rules exclude every combination of the factors: nothing would run")]
        problems += _check_ports(exp, scenarios)
    return problems


def _check_workloads(exp: Experiment) -> list[Problem]:
    problems: list[Problem] = []
    reg = workloads.load_all()
    for i, wl in enumerate(exp.workloads):
        kind = wl.get("type")
        if not isinstance(kind, str) or kind not in reg:
            what = f"'{kind}' is not a workload" if isinstance(kind, str) else "write the workload's type"
            problems.append(Problem(("workloads", i, "type"), f"{what}; allowed: {', '.join(sorted(reg))}"))
            continue
        try:
            reg[kind].Params.model_validate(params_of(wl))
        except ValidationError as exc:
            problems += [_param_problem(("workloads", i), kind, e, reg[kind]) for e in exc.errors()]
        sel = wl.get("pairs")
        if sel is not None and not (isinstance(sel, list) and sel and all(_whole(k) and k >= 1 for k in sel)):
            problems.append(Problem(("workloads", i, "pairs"), "write a list of pair numbers, e.g. [1] or [2, 3]"))
        if not isinstance(wl.get("background", False), bool):
            problems.append(Problem(("workloads", i, "background"), "write true or false"))
        target = wl.get("target_pair")
        if target is not None and not (_whole(target) and target >= 1):
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
    return problems


def _check_factors(exp: Experiment) -> list[Problem]:
    problems: list[Problem] = []
    wfields = _workload_fields(exp)
    selectors = _selector_factors(exp)
    for factor, value in exp.factors.items():
        if isinstance(value, list) and not value:
            problems.append(Problem(("factors", factor), "no levels: write one level, or a list of at least one"))
            continue
        if factor in selectors and factor not in wfields:
            continue  # any levels will do: they are only matched by `when`
        if factor not in TOPOLOGY_FACTORS and factor not in wfields:
            pinned = [str(wl.get("type")) for wl in exp.workloads if factor in wl]
            allowed = ", ".join([*TOPOLOGY_FACTORS, *sorted(wfields)])
            problems.append(Problem(("factors", factor),
                                    f"every workload with this parameter sets it itself ({', '.join(pinned)}); remove "
                                    "it there or here" if pinned else f"unknown factor; allowed: {allowed}"))
            continue
        for j, level in enumerate(_levels(value)):
            loc = ("factors", factor, j) if isinstance(value, list) else ("factors", factor)
            if msg := _check_any_level(exp, wfields, factor, level):
                problems.append(Problem(loc, msg))
    return problems


def _check_any_level(exp: Experiment, wfields: dict[str, list[int]], factor: str, level: Any) -> str | None:
    if factor in TOPOLOGY_FACTORS:
        return _check_level(factor, level)
    return _check_param(exp, wfields, factor, level) if factor in wfields else None


def _known_levels(exp: Experiment, declared: dict[str, list]) -> dict[str, list]:
    """Every level a factor can take in this experiment: its factor levels (a topology factor the spec does not
    name has its default), the levels `include` adds, and those `declared` elsewhere (other profiles)."""
    known = {f: _levels(exp.factors.get(f, DEFAULT_LEVELS[f])) for f in TOPOLOGY_FACTORS}
    known |= {f: _levels(v) for f, v in exp.factors.items() if f not in TOPOLOGY_FACTORS}
    for rule in exp.include:
        for f, v in rule.items():
            known.setdefault(f, []).extend(_levels(v))
    for f, levels in declared.items():
        known.setdefault(f, []).extend(levels)
    return known


def _has_level(levels: list, want: Any) -> bool:
    return any(lv == want and type(lv) is type(want) or _label(lv) == _label(want) and not isinstance(want, bool)
               for lv in levels)


def _check_rules(exp: Experiment, declared: dict[str, list] | None) -> list[Problem]:
    """A `when` or `exclude` level that no factor has matches nothing: a typo that would silently drop (or keep)
    scenarios. An `include` level must be a valid level (it may be one the factor does not list)."""
    problems: list[Problem] = []
    wfields, selectors = _workload_fields(exp), _selector_factors(exp)
    known = _known_levels(exp, declared or {})
    for rules in ("exclude", "include"):
        for i, rule in enumerate(getattr(exp, rules)):
            if not rule and rules == "exclude":
                problems.append(Problem((rules, i), "an empty rule matches every scenario: name the levels to leave out"))
            for factor, want in rule.items():
                if factor not in TOPOLOGY_FACTORS and factor not in wfields and factor not in selectors:
                    problems.append(Problem((rules, i, factor), "not a factor of this experiment"))
                elif factor not in known:
                    problems.append(Problem((rules, i, factor), "not a factor of this experiment: list its levels "
                                                                "under `factors`"))
                elif rules == "include":
                    problems += [Problem((rules, i, factor), msg) for level in _levels(want)
                                 if (msg := _check_any_level(exp, wfields, factor, level))]
                elif declared is not None:
                    problems += _unknown_levels((rules, i, factor), factor, want, known)
    for i, wl in enumerate(exp.workloads if declared is not None else ()):
        when = wl.get("when", {})
        for factor, want in (when.items() if isinstance(when, dict) else ()):
            if factor in known:
                problems += _unknown_levels(("workloads", i, "when", factor), factor, want, known)
    return problems


def _unknown_levels(loc: tuple, factor: str, want: Any, known: dict[str, list]) -> list[Problem]:
    """A rule's value for one factor matches nothing when none of its options is a level (a list may name levels
    that only other profiles use)."""
    levels, options = known[factor], _levels(want)
    if any(_has_level(levels, w) for w in options):
        return []
    what = f"{options[0]!r} is not a level" if len(options) == 1 else f"none of {', '.join(map(repr, options))} is a level"
    hint = " (YAML reads on, off, yes and no as true/false: quote the level)" if any(isinstance(w, bool) for w in options) else ""
    return [Problem(loc, f"{what} of {factor} in this experiment, so this matches nothing; its levels: "
                         f"{', '.join(dict.fromkeys(_label(lv) for lv in levels))}{hint}")]


def _check_size(exp: Experiment) -> list[Problem]:
    n = len(exp.include)
    product = 1
    for f in dict.fromkeys((*TOPOLOGY_FACTORS, *exp.factors)):
        product *= len(_levels(exp.factors.get(f, DEFAULT_LEVELS.get(f))))
    n += product
    if n > MAX_SCENARIOS:
        return [Problem(("factors",), f"the factors' levels make {n} combinations; at most {MAX_SCENARIOS} can be "
                                      "planned: use fewer levels")]
    return []


def _check_pairs(exp: Experiment) -> list[Problem]:
    """A workload on (or to) a pair that no scenario has would never run: every scenario would skip it."""
    most = max(_known_levels(exp, {})["pairs"])
    problems = []
    for i, wl in enumerate(exp.workloads):
        for key, asked in (("pairs", max(wl.get("pairs") or [0])), ("target_pair", wl.get("target_pair") or 0)):
            if asked > most:
                problems.append(Problem(("workloads", i, key), f"pair {asked} does not exist: this experiment has at "
                                                               f"most {most} pairs (factor `pairs`)"))
    return problems


def _check_ports(exp: Experiment, scenarios: list[Scenario]) -> list[Problem]:
    """Servers that would listen on the same port of the same machine at the same time (a background workload
    runs alongside every other one), or on a port past 65535; one problem per pair of workloads."""
    found: dict[tuple, Problem] = {}
    for sc in scenarios:
        listening: dict[tuple, tuple[int, Workload]] = {}
        for wid, wl in zip(sc.workload_ids, sc.workloads):
            entry = exp.workloads[wid]
            loc = ("workloads", wid, "port") if "port" in entry else ("workloads", wid)
            if (wl.target_pair or 0) > sc.levels["pairs"]:
                continue  # the scenario skips this workload's pairs (_workload_fit)
            chosen = [k for k in (wl.only_pairs or range(1, sc.levels["pairs"] + 1)) if k <= sc.levels["pairs"]]
            ports = [p for k in chosen for p in wl.listen_ports(k)]
            if ports and max(ports) > MAX_PORT:
                found.setdefault((wid,), Problem(loc, (
                    f"{wl.kind} would listen on ports {min(ports)} to {max(ports)} ({len(chosen)} pairs"
                    f"{_processes(wl)}), past {MAX_PORT}: set port to at most {wl.params.port - (max(ports) - MAX_PORT)}")))
                continue
            for k in chosen:
                ports = wl.listen_ports(k)
                # With attach host every pair's server is the same host; otherwise each pair has its own server VM.
                server = "the server host" if sc.levels["attach"] == "host" else f"pair {wl.target_pair or k}'s server"
                for port in ports:
                    other = listening.setdefault((server, port), (wid, wl))
                    if other[0] != wid and (wl.background or other[1].background):
                        found.setdefault((other[0], wid), Problem(loc, (
                            f"{wl.kind}{' (background)' if wl.background else ''} would listen on port {port} of "
                            f"{server} while {other[1].kind} (workloads[{other[0]}]"
                            f"{', background' if other[1].background else ''}) listens there too, in scenario "
                            f"{sc.key}: give one of them another `port`")))
    return list(found.values())


def _processes(wl: Workload) -> str:
    n = len(wl.listen_ports(1))
    return f" x {n} processes each" if n > 1 else ""


def _param_problem(loc: tuple, kind: str, e: dict, cls: type[Workload]) -> Problem:
    where = tuple(e["loc"])
    if e["type"] == "extra_forbidden":
        allowed = ", ".join(f for f in cls.Params.model_fields if f != "type")
        return Problem(loc + where, f"{kind} has no parameter '{where[-1]}'; its parameters: {allowed}")
    return Problem(loc + where, pydantic_message(e))


def _check_param(exp: Experiment, wfields: dict[str, list[int]], factor: str, level: Any) -> str | None:
    reg = workloads.load_all()
    for i in wfields[factor]:
        wl = exp.workloads[i]
        try:
            reg[wl["type"]].Params.model_validate({**params_of(wl), factor: level})
        except ValidationError as exc:
            return f"level {level!r} is not valid for {wl['type']}: {pydantic_message(exc.errors()[0])}"
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
    factor_levels = _factor_levels(exp)
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


def _factor_levels(exp: Experiment) -> dict[str, list]:
    levels = {f: _levels(exp.factors.get(f, DEFAULT_LEVELS[f])) for f in TOPOLOGY_FACTORS}
    return levels | {f: _levels(v) for f, v in exp.factors.items() if f not in TOPOLOGY_FACTORS}


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
    if sc.levels.get("kernel") in ("guest", "guest-per-host"):  # checked against what a guest's kernel offers
        from .guests import machine
        guest = machine.capabilities()
        if guest is None:
            sc.skip = (f"kernel {sc.levels['kernel']}: "
                       f"{machine.support().reason or 'a guest did not boot (see vnetbench doctor)'}")
            return
        caps = guest
        sc.implementation["kernel"] = guest.tools["kernel"].detail
        if sc.levels["kernel"] == "guest-per-host":
            from .guests.hostsite import why_not
            if why := why_not(sc):
                sc.skip = f"kernel guest-per-host: {why}"
                return
            sc.implementation["kernel"] += " per host"
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
