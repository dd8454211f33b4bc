"""The experiment file: what a user writes, validated into one problem per line before anything is built."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from . import yamlread
from .scenario import CHOICES, DEFAULT_LEVELS, ELEMENT_FACTORS, TOPOLOGY_FACTORS  # noqa: F401 (declared there)
from .strict import Strict, not_a_bool, one_line, pydantic_message  # noqa: F401 (shared by every input model)
from .catalog import METRICS
from .units import parse_duration, parse_percent, parse_rate, parse_span
from .validate import Problem, check

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Underlay(Strict):
    rate: int | None = Field(None, description="egress rate limit of each host NIC in bit/s ('10gbit', '1G'); none = unlimited")

    delay: float | None = Field(None, description="one-way delay each host NIC adds (netem), e.g. '10ms'")
    jitter: float | None = Field(None, description="variation of that delay (netem; needs delay), e.g. '1ms'")
    loss: float | None = Field(None, description="share of packets each host NIC drops at random (netem), e.g. '0.5%'")

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> Any:
        return None if v is None else parse_rate(v)

    @field_validator("delay", "jitter", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return None if v is None else parse_duration(v)

    @field_validator("loss", mode="before")
    @classmethod
    def _loss(cls, v: Any) -> Any:
        return None if v is None else parse_percent(v)

    @model_validator(mode="after")
    def _jitter_needs_delay(self) -> "Underlay":
        if self.jitter and not self.delay:
            raise ValueError("jitter varies the delay: give delay too (e.g. delay: 10ms, jitter: 1ms)")
        return self

    def impairment(self) -> dict[str, float]:
        """What netem adds on each host NIC (delay_s, jitter_s, loss_ratio), only what is set and non-zero."""
        return {k: v for k, v in (("delay_s", self.delay), ("jitter_s", self.jitter), ("loss_ratio", self.loss)) if v}


class Repetitions(Strict):
    """Adaptive repetitions, a two-stage rule (vnetbench.adaptive): a pilot of max(min, 8) trials plans how many
    trials the 95 % CI of the main metric's mean (one value per trial) needs to be within +-target of the mean (at
    least twice the pilot, at most `max`); the scenario runs that many."""
    min: int = Field(3, ge=2, le=1000, description="the least pilot (the pilot is at least 8 trials)")
    max: int = Field(30, ge=2, le=1000, description="repetitions no scenario goes past")
    target: float = Field(0.05, gt=0, lt=1, description="relative half-width of the 95 % CI of the mean to reach")
    metric: str | None = Field(None, description="the metric judged (default: each workload's main metric)")

    def __str__(self) -> str:
        return (f"{max(self.min, 8)}..{self.max} (adaptive, two-stage: a pilot plans the trials a 95% CI within "
                f"+-{self.target:.0%} needs)")

    @model_validator(mode="after")
    def _order(self) -> "Repetitions":
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be at least min ({self.min})")
        if self.metric is not None and self.metric not in METRICS:
            raise ValueError(f"metric: '{self.metric}' is not a metric; `vnetbench metrics` lists them")
        return self


class Rounds(Strict):
    """A scorecard's rounds (vnetbench.rounds): every cell runs to the first count, then only the cells of claims
    still undecided go on to the next count, and so on, while the next round fits in the budget. The card decides at
    each look on intervals and tests at alpha / (rows x looks): Bonferroni over the rows and the fixed schedule."""
    rounds: list[Annotated[int, Field(ge=2, le=1000)]] = Field(
        min_length=1, max_length=6, description="trials a cell at each look, increasing (e.g. [5, 10, 20])")
    budget: float = Field(900.0, gt=0, description="wall time no round starts past (e.g. 15m); the first round runs "
                                                    "whatever it takes")

    @field_validator("budget", mode="before")
    @classmethod
    def _budget(cls, v: Any) -> Any:
        return parse_span(v)

    @model_validator(mode="after")
    def _increasing(self) -> "Rounds":
        if any(b <= a for a, b in zip(self.rounds, self.rounds[1:])):
            raise ValueError(f"rounds must increase (trials a cell at each look), got {self.rounds}")
        return self

    @property
    def max(self) -> int:
        return self.rounds[-1]

    def __str__(self) -> str:
        return (f"rounds of {'/'.join(map(str, self.rounds))} trials a cell to the scorecard's open claims, "
                f"within {self.budget / 60:g} min")


class Experiment(Strict):
    """An experiment file. Every factor may be one level or a list of levels; the matrix is their product."""
    name: str = Field(description="campaign name: letters, digits, '-', '_', '.'")
    description: str = ""
    repetitions: Annotated[int, Field(ge=1, le=1000)] | Repetitions | Rounds = Field(
        3, description="how many times each scenario's workloads run, or {min, max, target, metric} to stop once the "
                       "CI is narrow enough, or {rounds: [5, 10, 20], budget: 15m} to give trials to undecided claims")
    order: Literal["random", "sequential"] = Field(
        "random", description="random: blocks of one repetition of every scenario, shuffled (seeded), scenarios "
                              "that share a topology next to each other; sequential: all repetitions of a "
                              "scenario, then the next")
    seed: int | None = Field(None, ge=0, description="seed of the random order (default: drawn and recorded)")
    hosts: int | None = Field(None, ge=1, le=16, description="emulated physical hosts; default 2 if any pair is cross-host, else 1")
    tenants: int = Field(1, ge=1, le=8, description="tenant networks sharing the hosts; pairs are spread over them")
    underlay: Underlay = Underlay()
    factors: dict[str, Any] = Field(default_factory=dict, description="factor -> level or list of levels")
    exclude: list[dict[str, Any]] = Field(default_factory=list, description="combinations to leave out (all keys must match)")
    include: list[dict[str, Any]] = Field(default_factory=list, description="extra combinations added to the product")
    workloads: list[dict[str, Any]] = Field(min_length=1, description="tools run in every trial, in order")
    cooldown: float = Field(0.0, ge=0, le=60, description="seconds to wait between trials")
    cpu_idle: Literal["poll", "os"] = Field(
        "poll", description="poll: idle CPUs poll while the run measures (a 0 us PM QoS request, released when the "
                            "run ends; a guest's halting vCPUs had made its throughput vary 40 %); os: leave the "
                            "machine's idle policy alone (vnetbench/wakeup.py)")
    warmup: int = Field(0, ge=0, le=5, description="trials of each workload run after each build and discarded "
                                                   "(a cell's first trial after a build was its lowest or highest "
                                                   "twice as often as chance: bench/card_noise.py)")
    analysis: str | None = Field(None, description="study analysis the report adds (s1..s5), see `vnetbench suites`")
    omits: list[str] = Field(default_factory=list, description="what this spec (or profile) leaves out of the study it "
                                                               "reproduces; the report shows it in the study's section")
    scorecard: list[dict[str, Any]] = Field(default_factory=list, description="the study's checkable claims as data: "
                                            "the report's reproduction scorecard (vnetbench/scorecard.py)")
    scorecard_where: dict[str, Any] = Field(default_factory=dict, description="selector merged into every scorecard cell")
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict,
                                                description="named overrides merged over this file, chosen with --profile")
    profile: str | None = Field(None, description="the profile this spec was expanded with (set by vnetbench)")

    @property
    def max_repetitions(self) -> int:
        r = self.repetitions
        return r if isinstance(r, int) else r.max

    @field_validator("repetitions", mode="before")
    @classmethod
    def _repetitions(cls, v: Any) -> Any:
        if isinstance(v, dict):
            model = Rounds if "rounds" in v else Repetitions
            try:
                return model.model_validate(v)
            except ValidationError as exc:
                raise ValueError("; ".join(_repetitions_message(e, model) for e in exc.errors())) from None
        if isinstance(v, bool):
            raise ValueError("write a whole number, not true/false (or {min: 3, max: 30, target: 0.05})")
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int):
            raise ValueError("Input should be a valid integer: a whole number from 1 to 1000, "
                             "or {min: 3, max: 30, target: 0.05}")
        if not 1 <= v <= 1000:
            raise ValueError("Input should be greater than or equal to 1" if v < 1 else
                             "Input should be less than or equal to 1000")
        return v

    @model_validator(mode="after")
    def _rounds_need_a_card(self) -> "Experiment":
        if isinstance(self.repetitions, Rounds) and not self.scorecard:
            raise ValueError("repetitions: rounds give trials to a scorecard's undecided claims, and this file has "
                             "no scorecard; write a number of repetitions or {min, max, target}")
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError("use 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit")
        return v


class SpecError(Exception):
    def __init__(self, lines: list[str]):
        self.lines = [one_line(line) for line in lines]
        super().__init__("\n".join(self.lines))


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
        if not NAME_RE.fullmatch(name) or not suite_path(name).is_file():
            known = ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.yaml")))
            raise SpecError([f"{path}: no such suite; built-in suites: {known}"])
        path = suite_path(name)
    path = Path(path)
    try:
        if path.is_dir():
            raise SpecError([f"{path}: is a directory; give the experiment file (a .yaml file)"])
        with path.open("rb") as fh:
            raw = fh.read(yamlread.MAX_BYTES + 1)  # bounded: /dev/zero or a huge file must not eat the memory
        text = yamlread.decode(raw)
    except OSError as exc:
        raise SpecError([f"{path}: cannot read the file: {exc.strerror or exc}"]) from None
    except yamlread.YamlProblem as exc:
        raise SpecError([_where(str(path), exc.line) + f": {exc.message}"]) from None
    return loads(text, str(path), profile)


def merge(base: Any, over: Any) -> Any:
    """Deep merge of mappings; anything else in `over` replaces what `base` had."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: merge(base.get(k), v) for k, v in over.items()}}
    return over


def loads(text: str, source: str = "<spec>", profile: str | None = None) -> LoadedSpec:
    try:
        doc = yamlread.read(text)
    except yamlread.YamlProblem as exc:
        raise SpecError([_where(source, exc.line) + f": {exc.message}"]) from None
    except yamlread.DuplicateKeys as exc:
        raise SpecError([_where(source, p.line) + f": {p.message}" for p in exc.problems]) from None
    data, lines = doc.data, doc.lines
    if data is None:
        raise SpecError([f"{source}: the file is empty; a spec is a mapping with at least `name` and `workloads`"])
    if not isinstance(data, dict):
        raise SpecError([f"{source}:{lines.get((), 1)}: the file must be a mapping with at least `name` and "
                         f"`workloads`, not a {_kind(data)}"])
    # A spec vnetbench expanded with a profile (stored with its campaign, read again by --resume) no longer lists
    # the other profiles' levels, so its `when`/`exclude` levels were checked when it was expanded.
    declared = _declared_levels(data) if profile is not None or not data.get("profile") else None
    if profile is not None:
        data, text, lines = _apply_profile(data, profile, source, lines)
    problems: list[Problem] = []
    try:
        exp = Experiment.model_validate(data)
    except ValidationError as exc:
        problems += [Problem(tuple(e["loc"]), _message(e)) for e in exc.errors()]
        exp = _lenient(data)
    if exp is not None:  # the factor and workload checks against the registries (validate.py)
        seen = {p.loc[:1] for p in problems}
        problems += [p for p in check(exp, declared, complete=not problems) if p.loc[:1] not in seen]
    if problems:
        raise SpecError([p.render(source, lines) for p in problems])
    return LoadedSpec(exp, text, source)


def _declared_levels(data: dict) -> dict[str, list]:
    """Every level the file gives each factor, in its own `factors` and in every profile's."""
    profiles = data.get("profiles")
    sections = [data, *(p for p in profiles.values() if isinstance(p, dict))] if isinstance(profiles, dict) else [data]
    out: dict[str, list] = {}
    for section in sections:
        factors = section.get("factors")
        for f, v in (factors.items() if isinstance(factors, dict) else ()):
            out.setdefault(f, []).extend(v if isinstance(v, list) else [v])
    return out


def _where(source: str, line: int | None) -> str:
    return f"{source}:{line}" if line else source


def _kind(value: Any) -> str:
    return {list: "list", str: "text", int: "number", float: "number", bool: "true/false"}.get(type(value), "value")


def _apply_profile(data: dict, profile: str, source: str, lines: dict[tuple, int]) -> tuple[dict, str, dict]:
    """The spec with one profile merged in; the text stored with the campaign is the merged spec, so a
    resume or a re-run repeats exactly what ran. Errors point at the profile's own lines where it set the value."""
    profiles = data.get("profiles") or {}
    at = _where(source, lines.get(("profiles",)))
    if not isinstance(profiles, dict) or profile not in profiles:
        names = ", ".join(map(str, profiles)) if isinstance(profiles, dict) and profiles else "none defined"
        raise SpecError([f"{at}: profiles: no profile '{profile}'; this file has: {names}"])
    over = profiles[profile] or {}
    if not isinstance(over, dict):
        raise SpecError([f"{_where(source, lines.get(('profiles', profile)))}: profiles.{profile}: write a mapping of "
                         f"the fields this profile changes, not a {_kind(over)}"])
    base = {k: v for k, v in data.items() if k != "profiles"}
    merged = merge(base, over)
    merged["profile"] = profile
    return merged, yaml.safe_dump(merged, sort_keys=False), _profile_lines(base, over, profile, lines)


def _profile_lines(base: dict, over: dict, profile: str, lines: dict[tuple, int]) -> dict[tuple, int]:
    """The line index of the merged spec: the profile's lines where it sets a value, the base file's elsewhere
    (a value the profile replaces keeps none of the base's lines below it)."""
    replaced = list(_replaced(base, over, ()))
    own = {p: n for p, n in lines.items() if p[:1] != ("profiles",)
           and not any(p[:len(r)] == r for r in replaced)}
    prefix = ("profiles", profile)
    own |= {p[2:]: n for p, n in lines.items() if p[:2] == prefix and len(p) > 2}
    return own


def _replaced(base: Any, over: Any, path: tuple):
    if isinstance(base, dict) and isinstance(over, dict):
        for k, v in over.items():
            yield from _replaced(base.get(k), v, path + (k,))
    else:
        yield path


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
        allowed = ", ".join(_model_at(Experiment, tuple(err["loc"])[:-1]).model_fields)
        return f"unknown field; allowed here: {allowed}"
    if kind == "missing":
        return "required field is missing"
    return pydantic_message(err)


def _repetitions_message(err: dict, model: type[BaseModel]) -> str:
    where = ".".join(map(str, err["loc"]))
    msg = f"unknown field; allowed here: {', '.join(model.model_fields)}" \
        if err["type"] == "extra_forbidden" else _message(err)
    return f"{where}: {msg}" if where else msg


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The model a location falls in, e.g. ("underlay",) -> Underlay; the nearest one above when loc goes deeper."""
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        inner = field and next((a for a in (field.annotation, *get_args(field.annotation))
                                if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if inner is None:
            break
        model = inner
    return model


def schema() -> dict:
    return Experiment.model_json_schema()
