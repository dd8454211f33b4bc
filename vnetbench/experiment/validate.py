"""Checking an experiment against the registries: the names of datapaths, workloads and factors, their options
and parameters, and the cross-checks between them (rules that match nothing, pairs that no scenario has, servers
that would share a port). Every problem is one `Problem` at a location of the spec, rendered as one line
`file:line: field: what, allowed`. spec.loads calls `check` once the file has the right shape."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .. import datapaths, workloads
from ..core import pinning, yamlread
from ..core.scenario import (CHOICES, DEFAULT_LEVELS, ELEMENT_FACTORS, TOPOLOGY_FACTORS, Scenario, as_list, label,
                             offloads_problem, placement_hosts, placement_problem)
from ..core.strict import CONTROL, pydantic_message
from ..core.tuning import irq_affinity_problem, steering_problem
from ..datapaths.base import Element
from ..guests import vms
from ..workloads.base import Workload
from .matrix import expand, params_of
from .model import Experiment

MTU_RANGE = (1280, 9000)
PAIRS_RANGE = (1, 500)  # 2 VMs a pair: gc_thresh3 (1024 neighbour entries, all namespaces) and BR_MAX_PORTS
HOPS_RANGE = (0, 8)
MAX_SCENARIOS = 10_000   # combinations of all factors' levels (before exclude); a run of more would take weeks
MAX_PORT = 65535


@dataclass(frozen=True)
class Problem:
    loc: tuple
    message: str

    def render(self, source: str, lines: dict[tuple, int]) -> str:
        field = yamlread.dotted(self.loc) or "(top level)"
        line = _nearest_line(self.loc, lines)
        where = f"{source}:{line}" if line else source
        return f"{where}: {field}: {self.message}"


def _nearest_line(loc: tuple, lines: dict[tuple, int]) -> int | None:
    for cut in range(len(loc), -1, -1):
        if loc[:cut] in lines and cut > 0:
            return lines[loc[:cut]]
    return None


def make_element(kind: str, level: Any) -> Element:
    """A level is a name or a mapping {type: name, option: value...}. Raises ValueError with the fix."""
    name = level.get("type") if isinstance(level, dict) else level
    try:
        return datapaths.element(kind, level)
    except KeyError:
        reg = datapaths.load_all()[kind]
        raise ValueError(f"'{name}' is not a known {kind}; allowed: {', '.join(sorted(reg))}") from None
    except ValidationError as exc:
        cls = datapaths.load_all()[kind][name]
        e = exc.errors()[0]
        where = ".".join(str(p) for p in e["loc"])
        allowed = ", ".join(cls.Options.model_fields) or "none"
        if e["type"] == "extra_forbidden":
            raise ValueError(f"{cls.name} has no option '{where}'; its options: {allowed}") from None
        raise ValueError(f"{cls.name} option '{where}': {pydantic_message(e)}") from None


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


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # true is 1 to Python, not to a user


def _check_level(factor: str, level: Any) -> str | None:
    if factor in ELEMENT_FACTORS:
        try:
            make_element(factor, level)
        except ValueError as exc:
            return str(exc)
    elif factor == "vm_kernel":
        return vms.problem(level)
    elif factor == "offloads":
        return offloads_problem(level)
    elif factor == "steering":
        return steering_problem(level)
    elif factor == "irq_affinity":
        return irq_affinity_problem(level)
    elif factor in CHOICES and level not in CHOICES[factor]:
        return f"'{level}' is not allowed; use one of: {', '.join(map(str, CHOICES[factor]))}"
    elif factor == "pairs" and not (_whole(level) and PAIRS_RANGE[0] <= level <= PAIRS_RANGE[1]):
        return (f"'{level}' is not allowed; pairs is a whole number from {PAIRS_RANGE[0]} to {PAIRS_RANGE[1]} (two VMs "
                f"a pair: the kernel's neighbour table, shared by every namespace, holds 1024 entries and a Linux "
                f"bridge 1024 ports)")
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
    problems = _check_workloads(exp) + _check_adaptive(exp) + _check_factors(exp) + _check_rules(exp, declared)
    if complete and not problems:
        problems += _check_size(exp)
    if complete and not problems:
        problems += _check_pairs(exp)
    if complete and not problems:
        scenarios = expand(exp, None)
        if not scenarios:
            return [Problem(("exclude",), "these rules exclude every combination of the factors: nothing would run")]
        problems += _check_ports(exp, scenarios) + _check_pinned_nodes(exp, scenarios)
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
        name = wl.get("name")
        if name is not None and not (isinstance(name, str) and name.strip() and name.isprintable() and len(name) <= 60):
            problems.append(Problem(("workloads", i, "name"), "write a short name for tables, e.g. name: bulk tcp "
                                    "(printable text, at most 60 characters)"))
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


def _check_adaptive(exp: Experiment) -> list[Problem]:
    """An adaptive `metric:` every foreground workload gives one value per trial of: another would never stop a
    scenario for the reason it says."""
    metric = getattr(exp.repetitions, "metric", None)
    if metric is None:
        return []
    reg = workloads.load_all()
    kinds = [str(wl.get("type")) for wl in exp.workloads if not wl.get("background") and wl.get("type") in reg]
    lacking = [k for k in dict.fromkeys(kinds) if metric not in reg[k].metrics]
    if not lacking:
        return []
    gives = "; ".join(f"{k} gives {', '.join(sorted(reg[k].metrics))}" for k in lacking)
    return [Problem(("repetitions", "metric"), f"'{metric}' is not a per-trial metric of {' or '.join(lacking)} "
                                               f"(every workload that runs trials must give it); {gives}")]


def _check_factors(exp: Experiment) -> list[Problem]:
    problems: list[Problem] = []
    wfields = _workload_fields(exp)
    selectors = _selector_factors(exp)
    for factor, value in exp.factors.items():
        if CONTROL.search(factor):
            problems.append(Problem(("factors", factor), "a factor's name is printable text, without control "
                                                         "characters (a newline, a terminal escape)"))
            continue
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
        for j, level in enumerate(as_list(value)):
            loc = ("factors", factor, j) if isinstance(value, list) else ("factors", factor)
            if factor == "cpu_pinning":  # one line for each bad node or CPU list of a level
                problems += [Problem(loc + where, msg) for where, msg in pinning.problems(level)]
                continue
            if msg := _check_any_level(exp, wfields, factor, level):
                problems.append(Problem(loc, msg))
    return problems


def _check_any_level(exp: Experiment, wfields: dict[str, list[int]], factor: str, level: Any) -> str | None:
    if factor == "placement" and isinstance(level, dict):
        if (msg := placement_problem(level)) or not exp.hosts or placement_hosts(level) <= exp.hosts:
            return msg
        return f"host {placement_hosts(level)} does not exist: hosts is {exp.hosts}; raise hosts or name hosts 1 to {exp.hosts}"
    if factor in TOPOLOGY_FACTORS:
        return _check_level(factor, level)
    return _check_param(exp, wfields, factor, level) if factor in wfields else None


def _knownas_list(exp: Experiment, declared: dict[str, list]) -> dict[str, list]:
    """Every level a factor can take in this experiment: its factor levels (a topology factor the spec does not
    name has its default), the levels `include` adds, and those `declared` elsewhere (other profiles)."""
    known = {f: as_list(exp.factors.get(f, DEFAULT_LEVELS[f])) for f in TOPOLOGY_FACTORS}
    known |= {f: as_list(v) for f, v in exp.factors.items() if f not in TOPOLOGY_FACTORS}
    for rule in exp.include:
        for f, v in rule.items():
            known.setdefault(f, []).extend(as_list(v))
    for f, levels in declared.items():
        known.setdefault(f, []).extend(levels)
    return known


def _has_level(levels: list, want: Any) -> bool:
    return any(lv == want and type(lv) is type(want) or label(lv) == label(want) and not isinstance(want, bool)
               for lv in levels)


def _check_rules(exp: Experiment, declared: dict[str, list] | None) -> list[Problem]:
    """A `when` or `exclude` level that no factor has matches nothing: a typo that would silently drop (or keep)
    scenarios. An `include` level must be a valid level (it may be one the factor does not list)."""
    problems: list[Problem] = []
    wfields, selectors = _workload_fields(exp), _selector_factors(exp)
    known = _knownas_list(exp, declared or {})
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
                    problems += [Problem((rules, i, factor), msg) for level in as_list(want)
                                 if (msg := _check_any_level(exp, wfields, factor, level))]
                elif declared is not None:
                    problems += _unknownas_list((rules, i, factor), factor, want, known)
    for i, wl in enumerate(exp.workloads if declared is not None else ()):
        when = wl.get("when", {})
        for factor, want in (when.items() if isinstance(when, dict) else ()):
            if factor in known:
                problems += _unknownas_list(("workloads", i, "when", factor), factor, want, known)
    return problems


def _unknownas_list(loc: tuple, factor: str, want: Any, known: dict[str, list]) -> list[Problem]:
    """A rule's value for one factor matches nothing when none of its options is a level (a list may name levels
    that only other profiles use)."""
    levels, options = known[factor], as_list(want)
    if any(_has_level(levels, w) for w in options):
        return []
    what = f"{options[0]!r} is not a level" if len(options) == 1 else f"none of {', '.join(map(repr, options))} is a level"
    hint = " (YAML reads on, off, yes and no as true/false: quote the level)" if any(isinstance(w, bool) for w in options) else ""
    return [Problem(loc, f"{what} of {factor} in this experiment, so this matches nothing; its levels: "
                         f"{', '.join(dict.fromkeys(label(lv) for lv in levels))}{hint}")]


def _check_size(exp: Experiment) -> list[Problem]:
    n = len(exp.include)
    product = 1
    for f in dict.fromkeys((*TOPOLOGY_FACTORS, *exp.factors)):
        product *= len(as_list(exp.factors.get(f, DEFAULT_LEVELS.get(f))))
    n += product
    if n > MAX_SCENARIOS:
        return [Problem(("factors",), f"the factors' levels make {n} combinations; at most {MAX_SCENARIOS} can be "
                                      "planned: use fewer levels")]
    return []


def _check_pairs(exp: Experiment) -> list[Problem]:
    """A workload on (or to) a pair that no scenario has would never run: every scenario would skip it."""
    most = max(_knownas_list(exp, {})["pairs"])
    problems = []
    for i, wl in enumerate(exp.workloads):
        for key, asked in (("pairs", max(wl.get("pairs") or [0])), ("target_pair", wl.get("target_pair") or 0)):
            if asked > most:
                problems.append(Problem(("workloads", i, key), f"pair {asked} does not exist: this experiment has at "
                                                               f"most {most} pairs (factor `pairs`)"))
    return problems


def _check_pinned_nodes(exp: Experiment, scenarios: list[Scenario]) -> list[Problem]:
    """A node a cpu_pinning level names must be in the topology of some scenario with that level (h3 with two hosts,
    a VM of a pair no scenario has, would pin nothing): one problem per node."""
    value = exp.factors.get("cpu_pinning")
    problems = []
    for j, level in enumerate(as_list(value)):
        if not isinstance(level, dict):
            continue
        loc = ("factors", "cpu_pinning", j) if isinstance(value, list) else ("factors", "cpu_pinning")
        having = [sc for sc in scenarios if sc.levels.get("cpu_pinning") == level]
        if not having:
            continue  # excluded by a rule: nothing of it runs
        nodes = list(dict.fromkeys(n for sc in having for n in sc.node_labels))
        for node in level:
            if node not in nodes:
                problems.append(Problem(loc + (node,), f"no scenario with this level has a node {node}; its "
                                                       f"scenarios' nodes: {', '.join(nodes)}"))
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


