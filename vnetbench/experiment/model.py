"""The experiment model: what an experiment file may say, as pydantic models (the spec module loads a file into
it; the checks against the registries and the matrix read it)."""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from ..catalog import METRICS
from ..core import pinning
from ..core.scenario import offloads_level
from ..core.tuning import irq_affinity_level, steering_level
from ..core.strict import Strict, one_line, pydantic_message
from ..core.units import parse_duration, parse_percent, parse_rate, parse_span

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
REDUCE_RE = re.compile(r"median|mean|sum|min|max|p\d+(\.\d+)?")  # dataset.reduce_values


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
    """Adaptive repetitions, a two-stage rule (vnetbench.run.adaptive): a pilot of max(min, 8) trials plans how many
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
    """A scorecard's rounds (vnetbench.run.rounds): every cell runs to the first count, then only the cells of claims
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
                            "machine's idle policy alone (vnetbench/system/wakeup.py)")
    warmup: int = Field(0, ge=0, le=5, description="trials of each workload run after each build and discarded "
                                                   "(a cell's first trial after a build was its lowest or highest "
                                                   "twice as often as chance: bench/card_noise.py)")
    analysis: str | None = Field(None, description="study analysis the report adds (s1..s5), see `vnetbench suites`")
    omits: list[str] = Field(default_factory=list, description="what this spec (or profile) leaves out of the study it "
                                                               "reproduces; the report shows it in the study's section")
    scorecard: list[dict[str, Any]] = Field(default_factory=list, description="the study's checkable claims as data: "
                                            "the report's reproduction scorecard (vnetbench/results/scorecard.py)")
    scorecard_where: dict[str, Any] = Field(default_factory=dict, description="selector merged into every scorecard cell")
    scorecard_uncheckable: dict[str, str] = Field(
        default_factory=dict, description="claims (by id) this spec or profile cannot check, each with what the "
                                          "machine lacks to run the study's condition (a profile's scaled-down load)")
    scorecard_reduce: dict[str, str] = Field(
        default_factory=dict, description="claims (by id) this spec or profile decides on another reduction of each "
                                          "trial's samples than the row's (min, pNN, ...), saying so by the claim")
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

    @model_validator(mode="after")
    def _reduce_named_rows(self) -> "Experiment":
        ids = {str(r.get("id")) for r in self.scorecard if isinstance(r, dict) and "id" in r}
        for cid, how in self.scorecard_reduce.items():
            if cid not in ids:
                raise ValueError(f"scorecard_reduce: no scorecard row has id {one_line(repr(cid))}; name one of the "
                                 f"rows under scorecard")
            if not REDUCE_RE.fullmatch(str(how)):
                raise ValueError(f"scorecard_reduce: {one_line(repr(how))} for {cid} is no reduction; write median, "
                                 f"mean, sum, min, max or pNN (e.g. p10)")
        return self

    @model_validator(mode="after")
    def _offloads_in_one_spelling(self) -> "Experiment":
        """`offloads` levels as the matrix compares them, in the factors and in every rule: YAML reads an unquoted
        on/off as true/false, so `{tso: off}` and `{tso: 'off'}` are one level, and `on` and `'on'` another."""
        for where in (self.factors, *self.exclude, *self.include, *(w.get("when") for w in self.workloads)):
            if isinstance(where, dict) and "offloads" in where:
                v = where["offloads"]
                where["offloads"] = [offloads_level(x) for x in v] if isinstance(v, list) else offloads_level(v)
            for factor, one in (("steering", steering_level), ("irq_affinity", irq_affinity_level),
                                ("cpu_pinning", pinning.level)):
                if isinstance(where, dict) and factor in where:  # one spelling: 1 and "1" ({h1: 0}, {h1: '0'}) agree
                    v = where[factor]
                    where[factor] = [one(x) for x in v] if isinstance(v, list) else one(v)
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError("use 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit")
        return v


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
