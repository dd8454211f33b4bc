"""The experiment file: what a user writes, validated into one problem per line before anything is built."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .units import parse_rate

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

# Factors that shape the topology; every other factor must be a parameter of a workload in the spec.
TOPOLOGY_FACTORS = {
    "switch": "the virtual switch on each host (a datapath name)",
    "overlay": "how VM traffic crosses between hosts (a datapath name)",
    "encryption": "encryption of VM or host traffic (a datapath name)",
    "encryption_scope": "vm-to-vm (end to end between the VMs of a pair) or host-to-host (a gateway tunnel)",
    "attach": "how a VM is connected: switch, direct (SR-IOV-like macvlan) or host (no VM)",
    "placement": "same-host or cross-host: where the two VMs of a pair live",
    "pairs": "number of client/server VM pairs running at once",
    "mtu": "MTU of the underlay (the hosts' NICs), bytes",
    "ip_version": "4 or 6: the address family the workloads use",
    "mtu_policy": "lower-vm (cloud default: VM MTU = MTU - tunnel overhead) or raise-underlay",
    "hops": "routers between the two hosts: 0 = one link; N = N router namespaces, hosts in different subnets",
    "kernel": "shared (every host and VM on this machine's kernel) or guest (they run in a guest with its own "
              "kernel, User-Mode Linux here, which has the datapaths this kernel may lack)",
}
ELEMENT_FACTORS = ("switch", "overlay", "encryption", "attach")
DEFAULT_LEVELS: dict[str, Any] = {
    "switch": "linuxbridge", "overlay": "none", "encryption": "none", "encryption_scope": "vm-to-vm", "attach": "switch",
    "placement": "cross-host", "pairs": 1, "mtu": 1500, "ip_version": 4, "mtu_policy": "lower-vm",
    "hops": 0, "kernel": "shared",
}
CHOICES = {
    "placement": ("same-host", "cross-host"),
    "ip_version": (4, 6),
    "encryption_scope": ("vm-to-vm", "host-to-host"),
    "mtu_policy": ("lower-vm", "raise-underlay"),
    "kernel": ("shared", "guest"),
}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Underlay(Strict):
    rate: int | None = Field(None, description="egress rate limit of each host NIC in bit/s ('10gbit', '1G'); none = unlimited")

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> Any:
        return None if v is None else parse_rate(v)


class Experiment(Strict):
    """An experiment file. Every factor may be one level or a list of levels; the matrix is their product."""
    name: str = Field(description="campaign name: letters, digits, '-', '_', '.'")
    description: str = ""
    repetitions: int = Field(3, ge=1, le=1000, description="how many times each scenario's workloads run")
    hosts: int | None = Field(None, ge=1, le=16, description="emulated physical hosts; default 2 if any pair is cross-host, else 1")
    tenants: int = Field(1, ge=1, le=8, description="tenant networks sharing the hosts; pairs are spread over them")
    underlay: Underlay = Underlay()
    factors: dict[str, Any] = Field(default_factory=dict, description="factor -> level or list of levels")
    exclude: list[dict[str, Any]] = Field(default_factory=list, description="combinations to leave out (all keys must match)")
    include: list[dict[str, Any]] = Field(default_factory=list, description="extra combinations added to the product")
    workloads: list[dict[str, Any]] = Field(min_length=1, description="tools run in every trial, in order")
    cooldown: float = Field(0.0, ge=0, le=60, description="seconds to wait between trials")
    analysis: str | None = Field(None, description="study analysis the report adds (s1..s5), see `vnetbench suites`")
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict,
                                                description="named overrides merged over this file, chosen with --profile")
    profile: str | None = Field(None, description="the profile this spec was expanded with (set by vnetbench)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("use 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit")
        return v


@dataclass(frozen=True)
class Problem:
    loc: tuple
    message: str

    def render(self, source: str, lines: dict[tuple, int]) -> str:
        field = _dotted(self.loc) or "(top level)"
        line = _nearest_line(self.loc, lines)
        where = f"{source}:{line}" if line else source
        return f"{where}: {field}: {self.message}"


class SpecError(Exception):
    def __init__(self, lines: list[str]):
        self.lines = lines
        super().__init__("\n".join(lines))


@dataclass
class LoadedSpec:
    experiment: Experiment
    text: str
    source: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


SUITES_DIR = Path(__file__).parent / "suites"


def suite_path(name: str) -> Path:
    return SUITES_DIR / f"{name}.yaml"


def load(path: str | Path, profile: str | None = None) -> LoadedSpec:
    """A spec file, or a built-in suite written `suite:NAME`."""
    if str(path).startswith("suite:"):
        name = str(path)[len("suite:"):]
        if not suite_path(name).exists():
            known = ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.yaml")))
            raise SpecError([f"{path}: no such suite; built-in suites: {known}"])
        path = suite_path(name)
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError([f"{path}: cannot read the file: {exc.strerror}"]) from None
    return loads(text, str(path), profile)


def merge(base: Any, over: Any) -> Any:
    """Deep merge of mappings; anything else in `over` replaces what `base` had."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: merge(base.get(k), v) for k, v in over.items()}}
    return over


def loads(text: str, source: str = "<spec>", profile: str | None = None) -> LoadedSpec:
    try:
        data = yaml.safe_load(text)
        lines = _line_index(yaml.compose(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise SpecError([f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}"]) from None
    if not isinstance(data, dict):
        raise SpecError([f"{source}: the file must be a mapping with at least `name` and `workloads`"])
    if profile is not None:
        data, text = _apply_profile(data, profile, source)
    problems: list[Problem] = []
    try:
        exp = Experiment.model_validate(data)
    except ValidationError as exc:
        problems += [Problem(tuple(e["loc"]), _message(e)) for e in exc.errors()]
        exp = _lenient(data)
    if exp is not None:
        from .matrix import check  # the factor and workload checks need the datapath and workload registries
        seen = {p.loc[:1] for p in problems}
        problems += [p for p in check(exp) if p.loc[:1] not in seen]
    if problems:
        raise SpecError([p.render(source, lines) for p in problems])
    return LoadedSpec(exp, text, source)


def _apply_profile(data: dict, profile: str, source: str) -> tuple[dict, str]:
    """The spec with one profile merged in; the text stored with the campaign is the merged spec, so a
    resume or a re-run repeats exactly what ran."""
    profiles = data.get("profiles") or {}
    if not isinstance(profiles, dict) or profile not in profiles:
        names = ", ".join(profiles) if isinstance(profiles, dict) and profiles else "none defined"
        raise SpecError([f"{source}: profiles: no profile '{profile}'; this file has: {names}"])
    merged = merge({k: v for k, v in data.items() if k != "profiles"}, profiles[profile] or {})
    merged["profile"] = profile
    return merged, yaml.safe_dump(merged, sort_keys=False)


def _lenient(data: dict) -> Experiment | None:
    """The parts of a spec that have the right shape, so the factor and workload checks can still report
    their problems when some other field is wrong: the user gets every problem in one go."""
    factors, wls = data.get("factors", {}), data.get("workloads", [])
    if not isinstance(factors, dict) or not isinstance(wls, list) or not all(isinstance(w, dict) for w in wls):
        return None
    rules = {k: v for k in ("exclude", "include") if isinstance(v := data.get(k, []), list)
             and all(isinstance(r, dict) for r in v)}
    return Experiment.model_construct(factors=factors, workloads=wls, **{"exclude": [], "include": []} | rules)


def _message(err: dict) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = ", ".join(Experiment.model_fields)
        return f"unknown field; allowed here: {allowed}"
    if kind == "missing":
        return "required field is missing"
    msg = err["msg"]
    return msg.removeprefix("Value error, ")


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line_index(node: yaml.Node | None, path: tuple = ()) -> dict[tuple, int]:
    """Map every key path of the YAML document to its line number, so errors can point at the line."""
    index: dict[tuple, int] = {}
    if node is None:
        return index
    index[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = path + (key.value,)
            index.update(_line_index(value, sub))
            index[sub] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            index.update(_line_index(item, path + (i,)))
    return index


def _nearest_line(loc: tuple, lines: dict[tuple, int]) -> int | None:
    for cut in range(len(loc), -1, -1):
        if loc[:cut] in lines and cut > 0:
            return lines[loc[:cut]]
    return None


def schema() -> dict:
    return Experiment.model_json_schema()
