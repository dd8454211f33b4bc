"""Packet rates the field's way: per frame size, the highest offered load whose loss ratio meets each goal (NDR: no
loss, PDR: 0.5 %), searched by MLRsearch (RFC 9971, FD.io CSIT's library), latency at shares of the PDR found, and
the generator's own ceiling over a bare veth pair measured in the same trial.

One trial is one search per frame size, over the first selected pair. Loads are frames per second offered by the
client's one interface (unidirectional); frames are IPv4/UDP, the client's to the server's address. See
docs/packet-rates.md for what a report states and how the search deviates from RFC 2544's trial phases.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

from pydantic import Field, field_validator, model_validator

from ..core.sample import Metric, Sample
from ..core.strict import Strict
from . import pktgen, register
from .base import OFFERED_SHORT, Command, Pair, Params, Tool, Workload, WorkloadError
from .iperf3 import Iperf3
from .ping import PING_TOOLS, collect_ping, parse_rtts, ping_argv

# MLRsearch is imported where it is used: importing it inspects the call stack (0.15 s of CPU in every `vnetbench`
# process, which loads every workload, whether it runs a search or not).
if TYPE_CHECKING:
    from MLRsearch import GoalResult, SearchGoal

log = logging.getLogger(__name__)

GOALS = ("ndr", "pdr")
GENERATOR_BOUND = 0.9   # a rate within 10 % of the generator's ceiling may be the generator's, not the path's
CEILING_S = 1.0         # seconds the flat-out rate is counted over
CEILING_WIDTH = 0.02    # the ceiling's own search: 2 % apart is close enough to judge a path by
CEILING_SEARCH_S = 25.0
CEILING_MARGIN = 1.05   # Max Load: the ceiling and a little more (a search never asks beyond it)
NO_CEILING_MAX = 2e6    # Max Load when no ceiling was measured and none is given
PER_FRAME_S = 40.0      # a frame size's ceiling, search and latency streams, for the progress estimate
PROFILE_S = 3.0         # the trial at NDR the profiler's window covers (profile: true): 3000 samples of 2 CPUs
PROFILED = "ndr_profile_loss_ratio"


class Goal(Strict):
    """One RFC 9971 Search Goal; defaults are FD.io CSIT's but for the duration sum (CSIT: 21 s; a 60-s budget)."""
    loss_ratio: float = Field(0.0, ge=0, lt=1, description="Goal Loss Ratio: the highest trial loss ratio that meets it")
    exceed_ratio: float = Field(0.5, ge=0, lt=1, description="Goal Exceed Ratio: share of trial seconds above the "
                                                             "loss ratio a lower bound tolerates")
    width: float = Field(0.005, gt=0, lt=1, description="Goal Width, relative: the search stops once the relevant "
                                                        "bounds are this close (upper - lower <= width x upper)")
    initial_trial_duration: float = Field(1.0, gt=0, le=60, description="Goal Initial Trial Duration, s")
    final_trial_duration: float = Field(1.0, gt=0, le=60, description="Goal Final Trial Duration, s")
    duration_sum: float = Field(1.0, gt=0, le=600, description="Goal Duration Sum, s: trial seconds that classify a load")

    @model_validator(mode="after")
    def _ordered(self) -> "Goal":
        if self.final_trial_duration < self.initial_trial_duration:
            raise ValueError("final_trial_duration must be at least initial_trial_duration")
        if self.duration_sum < self.final_trial_duration:
            raise ValueError("duration_sum must be at least final_trial_duration")
        return self

    def search_goal(self) -> SearchGoal:
        from MLRsearch import SearchGoal
        return SearchGoal(loss_ratio=self.loss_ratio, exceed_ratio=self.exceed_ratio, relative_width=self.width,
                          initial_trial_duration=self.initial_trial_duration,
                          final_trial_duration=self.final_trial_duration, duration_sum=self.duration_sum,
                          fail_fast=False)


class Goals(Strict):
    # factories, not instances: an instance here builds the models' validators at import (15 ms of every command)
    ndr: Goal = Field(default_factory=lambda: Goal(loss_ratio=0.0))
    pdr: Goal = Field(default_factory=lambda: Goal(loss_ratio=0.005))

    @field_validator("pdr", mode="before")
    @classmethod
    def _pdr_defaults(cls, v: Any) -> Any:
        return {"loss_ratio": 0.005} | v if isinstance(v, dict) else v


class NdrpdrParams(Params):
    type: Literal["ndrpdr"] = "ndrpdr"
    frame_sizes: list[int | Literal["imix"]] = Field(
        [64, 1518], min_length=1, description="Ethernet frame sizes with FCS (64 .. 9018), or imix (64/570/1518 7:4:1)")
    goals: Goals = Field(default_factory=Goals, description="the NDR and PDR search goals, attributes as RFC 9971 names them")
    generator: Literal["trafgen", "pktgen", "iperf3"] = Field(
        "trafgen", description="trafgen, the kernel's pktgen (where the sender's kernel has it), or iperf3 UDP (a "
                               "fallback)")
    min_rate: float = Field(1000, gt=0, description="Min Load, frames/s")
    max_rate: float | None = Field(None, gt=0, description="Max Load, frames/s (default: the generator's ceiling +5 %)")
    search_time: float = Field(60, ge=5, le=3600, description="seconds the search of one frame size may take")
    ceiling: bool = Field(True, description="measure the generator's ceiling over a bare veth pair per frame size")
    latency: list[float] = Field([0.1, 0.5, 0.9], description="shares of the PDR found to measure latency at")
    latency_duration: float = Field(3.0, ge=1, le=60, description="seconds of load per latency measurement")
    latency_rate: int = Field(500, ge=1, le=1000, description="latency echoes per second beside the load")
    port: int = Field(9, ge=1, le=65535, description="UDP destination port of the generated frames")

    @field_validator("frame_sizes")
    @classmethod
    def _sizes(cls, v: list) -> list:
        for size in v:
            if size != "imix" and not 64 <= size <= 9018:
                raise ValueError(f"frame size {size}: use 64 .. 9018 bytes, or imix")
        if len(set(map(str, v))) != len(v):
            raise ValueError("a frame size is listed twice")
        return v

    @field_validator("latency")
    @classmethod
    def _shares(cls, v: list[float]) -> list[float]:
        if any(not 0 < f <= 1 for f in v):
            raise ValueError("latency shares of the PDR are between 0 (excluded) and 1")
        return v


def _goal_metrics(goal: str) -> tuple[Metric, ...]:
    g = goal.upper()
    return (
        Metric(f"{goal}_pps", "1/s", "higher", f"{g} per frame size: RFC 9971 conditional throughput, frames/s "
                                               "offered by one interface (one direction)"),
        Metric(f"{goal}_lower_pps", "1/s", "higher", f"{g}'s relevant lower bound, frames/s"),
        Metric(f"{goal}_upper_pps", "1/s", "higher", f"{g}'s relevant upper bound, frames/s"),
        Metric(f"{goal}_l1_bps", "bit/s", "higher", f"{g} in bit/s on a wire: frames with preamble, start delimiter "
                                                    "and inter-frame gap (20 B each)"),
        Metric(f"{goal}_l2_bps", "bit/s", "higher", f"{g} in bit/s of whole frames, header to FCS"),
        Metric(f"{goal}_trial_s", "s", "none", f"seconds the generator sent for, mean of the trials at {g}'s "
                                               "relevant lower bound"),
        Metric(f"{goal}_cpu_s_per_mpacket", "s/Mpacket", "lower", f"busy CPU time of the machine (every CPU, other "
               f"work included) per million frames received in the trials at {g}'s relevant lower bound (µs a frame)"),
    )


@register
class Ndrpdr(Workload):
    kind = "ndrpdr"
    Params = NdrpdrParams
    tool = "trafgen"
    tools = {"trafgen": Tool("netsniff-ng", ["trafgen", "--version"], r"trafgen (\S+)"),
             "iperf3": Iperf3.tools["iperf3"], **PING_TOOLS}
    main_metric = "ndr_pps"
    catalogue = (
        *_goal_metrics("ndr"), *_goal_metrics("pdr"),
        Metric("generator_ceiling_pps", "1/s", "higher", "frames/s the generator gets to a receiver over a bare veth "
                                                         "pair, per frame size, measured in the same trial"),
        Metric("ndrpdr_search_s", "s", "lower", "seconds the search of one frame size took"),
        Metric("ndrpdr_trials", "1", "none", "trials the search of one frame size made"),
        Metric("ndrpdr_trial_loss_ratio", "ratio", "none", "each search trial's loss ratio counted at the receiver "
                                                           "(a series: one per trial, its load in its metadata)"),
        Metric("ndrpdr_rtt_s", "s", "lower", "round trip of an echo sent beside the generator's load at a share of "
                                             "the PDR found, one per echo", per_event=True),
        Metric(PROFILED, "ratio", "none", f"loss ratio of the {PROFILE_S:g}-s trial at NDR's relevant lower bound "
                                          "that the profiler's window covers (profile: true), counted at the receiver"),
    )
    metrics = frozenset({m.name for m in catalogue} - {"ndrpdr_trial_loss_ratio", "ndrpdr_rtt_s", PROFILED})

    @classmethod
    def describe(cls, p: dict) -> str:
        sizes = ",".join(str(s) for s in p.get("frame_sizes") or [64, 1518])
        return f"ndrpdr {sizes}" + (f" {p['generator']}" if p.get("generator", "trafgen") != "trafgen" else "")

    def refuse(self, labels: dict[str, str]) -> str | None:
        if self.params.generator != "iperf3" and labels.get("encryption", "none") != "none":
            return (f"{self.params.generator} writes whole frames below IP, which IPsec or WireGuard would never "
                    f"encrypt (its frames would cross in clear): `generator: iperf3` sends through the IP stack")
        return None

    def kernel_features(self) -> tuple[str, ...]:
        return ("pktgen",) if self.params.generator == "pktgen" else ()

    def expected_duration(self) -> float:
        return (PER_FRAME_S + PROFILE_S * self.params.profile) * len(self.params.frame_sizes)

    def profile_parts(self, samples: Sequence[Sample]) -> list[tuple[dict, tuple[float, float]]]:
        """The profiler's windows: the trial at each frame size's NDR, with what it offered and received."""
        keep = ("pair", "frame", "frame_size", "generator", "load_pps")
        return [({k: s.metadata[k] for k in keep} | {"at": "ndr", "mpackets": s.metadata["received"] / 1e6},
                 tuple(s.metadata["profile_window"])) for s in samples if s.metric == PROFILED]

    def commands(self, pairs: Sequence[Pair]) -> list[Command]:
        """What each trial of a search runs on pair 1's client: its interface (DEV) is found at run time, and the
        rates (in the shaper, in --num) are chosen by the search."""
        where, server = pairs[0].client.node.name, pairs[0].server.addr
        gen = {"iperf3": ["iperf3", "-u", "-c", server, "-l", "PAYLOAD", "-b", "RATE", "-t", "DURATION"],
               "pktgen": ["sh", "-c", "echo 'count RATE*DURATION' > /proc/net/pktgen/DEV && echo 'ratep RATE' > "
                                      "/proc/net/pktgen/DEV && echo start > /proc/net/pktgen/pgctrl"],
               "trafgen": ["trafgen", "--dev", "DEV", "--no-sock-mem", "--notouch-irq", "--qdisc-path", "--gap", "0",
                           "--num", "RATE*DURATION",
                           f"{{ eth(...), ipv4(da={server}), udp(dp={self.params.port}), fill(...) }}"]}[
            self.params.generator]
        shaper = [] if self.params.generator != "trafgen" else \
            [Command(where, ["tc", "class", "change", "dev", "DEV", "parent", "1:", "classid", "1:2", "htb", "rate",
                             "RATE", "ceil", "RATE", "burst", "BURST"])]
        return [*shaper, Command(where, gen)]

    def run(self, pairs: Sequence[Pair]) -> list[Sample]:
        pair = pairs[0]
        if ":" in pair.server.addr:
            raise WorkloadError("ndrpdr sends IPv4 frames: run it with ip_version 4")
        path = pktgen.discover(pair.client.node, pair.client.addr, pair.server.node, pair.server.addr, self.params.port)
        if self.spotlight:  # the profiler waits for the trials at NDR (profile_parts): quiet through the search
            self.spotlight(False)
        out = []
        for size in self.params.frame_sizes:
            out += FrameSearch(self.params, pair, path, pktgen.Frames.of(size), self.spotlight).run()
        return out


def __getattr__(name: str):
    if name == "Measurer":
        return _measurer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _measurer() -> type:
    """The Measurer class, made on first use (MLRsearch's AbstractMeasurer is its base)."""
    from MLRsearch import AbstractMeasurer, MeasurementResult

    class Measurer(AbstractMeasurer):
        """MLRsearch's measurer: one generator trial per call. A generator that fell short of the load asked by more
        than OFFERED_SHORT has its unsent frames counted against the load in the search (RFC 9971: a severe
        deviation of the offered load becomes a higher trial loss ratio); the stored loss ratio stays the receiver's."""

        def __init__(self, gen: pktgen.Generator):
            self.gen = gen
            self.trials: list[pktgen.Counts] = []

        def measure(self, intended_duration: float, intended_load: float) -> MeasurementResult:
            c = self.gen.trial(intended_load, intended_duration)
            self.trials.append(c)
            short = c.offered_pps < OFFERED_SHORT * c.load
            offered = c.intended - c.shortfall if short else c.sent
            return MeasurementResult(intended_duration=intended_duration, intended_load=intended_load,
                                     offered_count=offered, loss_count=round(c.loss_ratio * offered),
                                     offered_duration=c.seconds, intended_count=c.intended if short else offered)

    return Measurer


class FrameSearch:
    """One frame size: the ceiling, the search, the latency streams; its samples."""

    def __init__(self, params: NdrpdrParams, pair: Pair, path: pktgen.Path, frames: pktgen.Frames,
                 spotlight: Callable[[bool], bool] | None = None):
        self.p, self.pair, self.path, self.frames, self.spotlight = params, pair, path, frames, spotlight
        self.meta: dict[str, Any] = {"pair": pair.index, "frame": frames.label, "frame_size": frames.name,
                                     "generator": params.generator}

    def run(self) -> list[Sample]:
        if why := pktgen.frames_fit(self.frames, [self.path.sender, self.path.receiver]):
            raise WorkloadError(why)
        began = time.time()
        ceiling, out = self._ceiling()
        gen = pktgen.GENERATORS[self.p.generator](self.path, self.frames)
        gen.setup()
        try:
            found, trials, searched, note = self._search(gen, ceiling)
            out += self._results(found, trials, searched, note, ceiling)
            if self.p.profile and found["ndr"][1]:
                out += self._profiled(gen, found["ndr"][1])
            if found["pdr"][0] is not None:
                out += [s for share in self.p.latency for s in self._latency(gen, share, found["pdr"][0])]
        finally:
            gen.teardown()
        window = [began, time.time()]
        return [Sample(s.metric, s.value, s.unit, s.metadata | {"window": window}, s.t) for s in out]

    def _ceiling(self) -> tuple[float | None, list[Sample]]:
        """The generator's ceiling over a bare veth pair: as fast as it sends at all (flat out), then the highest
        rate it offers as a trial does (paced) with at most the PDR's loss, searched as the path is (RFC 9971:
        benchmark the tester first and use that rate as Max Load)."""
        node = self.pair.client.node
        if not self.p.ceiling:
            return None, []
        prefix = node.ledger.prefix if node.ledger is not None else getattr(node, "prefix", node.name.split("-")[0])
        with pktgen.BareVeth(prefix, node.ledger, node) as bare:
            gen = pktgen.GENERATORS[self.p.generator](bare, self.frames)
            gen.setup()
            try:
                flat = gen.flat_out(CEILING_S)
                paced = self._paced(gen, flat.received_pps)
            finally:
                gen.teardown()
        return paced, [Sample.of("generator_ceiling_pps", paced, flat_out_pps=round(flat.received_pps),
                                 flat_out_sent_pps=round(flat.sent_pps), **self.meta)]

    def _paced(self, gen: pktgen.Generator, flat: float) -> float:
        from MLRsearch import SearchGoal
        goal = SearchGoal(loss_ratio=self.p.goals.pdr.loss_ratio, relative_width=CEILING_WIDTH, duration_sum=1.0,
                          fail_fast=False)
        results, _, _ = search([goal], gen, self.p.min_rate, max(flat * CEILING_MARGIN, 2 * self.p.min_rate),
                               CEILING_SEARCH_S)
        ct, lower, _ = results[0]
        return ct or lower or self.p.min_rate

    def _search(self, gen: pktgen.Generator, ceiling: float | None):
        max_load = self.p.max_rate or (ceiling * CEILING_MARGIN if ceiling else NO_CEILING_MAX)
        began = time.monotonic()
        results, trials, note = search([getattr(self.p.goals, g).search_goal() for g in GOALS], gen, self.p.min_rate,
                                       max_load, self.p.search_time)
        self.meta |= {"min_load_pps": min(self.p.min_rate, max_load / 2), "max_load_pps": round(max_load)}
        return dict(zip(GOALS, results)), trials, time.monotonic() - began, note

    def _results(self, found: dict, trials: list[pktgen.Counts], searched: float, note: str,
                 ceiling: float | None) -> list[Sample]:
        out = [Sample.of("ndrpdr_search_s", searched, **self.meta), Sample.of("ndrpdr_trials", len(trials), **self.meta)]
        out += [Sample.of("ndrpdr_trial_loss_ratio", c.loss_ratio, series=True, load_pps=round(c.load), sent=c.sent,
                          received=c.received, intended=c.intended, seconds=round(c.seconds, 4), **self.meta)
                for c in trials]
        for name in GOALS:
            ct, lower, upper = found[name]
            goal = getattr(self.p.goals, name)
            regular = None not in (lower, upper) and upper - lower <= goal.width * upper * (1 + 1e-9) and not note
            meta = self.meta | {"goal": goal.model_dump(), "regular": regular,
                                "generator_bound": _bound(ct, lower, upper, ceiling)} | ({"note": note} if note else {})
            if ct is not None:
                at = [c for c in trials if lower is not None and abs(c.load - lower) <= 1e-6 * lower]
                out += [Sample.of(f"{name}_pps", ct, **meta), Sample.of(f"{name}_l1_bps", self.frames.l1_bps(ct), **meta),
                        Sample.of(f"{name}_l2_bps", self.frames.l2_bps(ct), **meta)]
                out += [Sample.of(f"{name}_trial_s", sum(c.seconds for c in at) / len(at), **meta)] if at else []
                out += _cost(name, at, meta)
            out += [Sample.of(f"{name}_lower_pps", lower, **meta)] if lower is not None else []
            out += [Sample.of(f"{name}_upper_pps", upper, **meta)] if upper is not None else []
        return out

    def _profiled(self, gen: pktgen.Generator, load: float) -> list[Sample]:
        """One more trial, at NDR's relevant lower bound, for the profiler (RFC 9971 leaves the search's own trials
        as they are: a profile beside them would be a search of a slower system)."""
        lit = self.spotlight(True) if self.spotlight else True
        try:
            c = gen.trial(load, PROFILE_S)
        finally:
            if self.spotlight:
                self.spotlight(False)
        if not lit:  # perf did not say it samples again: its window would be short (the profiler then says so)
            log.warning("ndrpdr: the profiler did not acknowledge its switch before the trial at NDR")
        return [Sample.of(PROFILED, c.loss_ratio, load_pps=round(c.load), sent=c.sent, received=c.received,
                          seconds=round(c.seconds, 4), profile_window=list(c.window), **self.meta)]

    def _latency(self, gen: pktgen.Generator, share: float, pdr: float) -> list[Sample]:
        """Echoes at latency_rate from the client to the server while the generator offers `share` of the PDR:
        they start once the generator runs and end before it stops, each the frame size (IMIX: the smallest)."""
        p, load, got = self.p, share * pdr, {}
        count = max(1, int(p.latency_rate * (p.latency_duration - 2 * pktgen.START_S)))
        argv = ping_argv(self.pair.server.addr, count, 1 / p.latency_rate, max(16, min(self.frames.sizes) - 46),
                         int(p.latency_duration) + 3)

        def offer() -> None:
            try:
                got["counts"] = gen.trial(load, p.latency_duration)
            except Exception as exc:  # raised below, in the workload's thread
                got["error"] = exc
        loader = threading.Thread(target=offer, daemon=True)
        loader.start()
        time.sleep(pktgen.START_S)
        proc = self.pair.client.node.spawn(argv, label=f"latency echoes at {share:.0%} of PDR")
        text = collect_ping(proc, p.latency_duration + 10, "latency echoes")
        loader.join(p.latency_duration + 15)
        if "error" in got or "counts" not in got:
            raise WorkloadError(f"generator beside the latency echoes: {got.get('error', 'did not finish')}")
        c = got["counts"]
        meta = self.meta | {"at_pdr": share, "load_pps": round(load), "sent": c.sent, "received": c.received}
        return parse_rtts(text, "ndrpdr_rtt_s", **meta)


def search(goals: list[SearchGoal], gen: pktgen.Generator, min_load: float, max_load: float,
           seconds: float) -> tuple[list[tuple], list[pktgen.Counts], str]:
    """MLRsearch over `gen`: per goal (conditional throughput, relevant lower bound, relevant upper bound), every
    trial, and why the search stopped early ('' when it reached every goal). Out of time, the bounds found so far
    are kept."""
    from MLRsearch import Config, GoalResult, MultipleLossRatioSearch
    config = Config()
    config.goals = goals
    # the lower first: each setter checks it against the other, and a generator whose ceiling is below the default
    # Min Load (a slow one in a guest kernel: iperf3 at a few thousand frames/s) would be refused
    config.min_load = min(min_load, max_load / 2)
    config.max_load = max_load
    config.search_duration_max = seconds
    config.warmup_duration = None
    measurer, mlr, note = _measurer()(gen), MultipleLossRatioSearch(config), ""
    try:
        result = mlr.search(measurer)
    except RuntimeError as exc:
        note = f"search stopped: {exc}"
        result = {g: GoalResult.from_bounds(mlr.database.get_relevant_bounds(mlr.scaling.goal_to_final_target[g]))
                  for g in config.goals}
    return [_goal_result(result[g]) for g in goals], measurer.trials, note


def _cost(goal: str, trials: list[pktgen.Counts], meta: dict) -> list[Sample]:
    """CPU per frame in the trials at a goal's lower bound, with its parts (a summary over searches is a ratio of
    sums, as for cpu_s_per_mpacket)."""
    cpu, frames = [c.cpu_s for c in trials if c.cpu_s is not None], sum(c.received for c in trials)
    if not cpu or len(cpu) < len(trials) or frames <= 0:
        return []
    return [Sample.of(f"{goal}_cpu_s_per_mpacket", sum(cpu) / (frames / 1e6), cpu_s=sum(cpu), mpackets=frames / 1e6,
                      **meta)]


def _goal_result(r: GoalResult) -> tuple[float | None, float | None, float | None]:
    """(conditional throughput, relevant lower bound, relevant upper bound), frames/s; None where there is none."""
    ct = r.conditional_throughput
    return (float(ct) if ct is not None else None,
            float(r.relevant_lower_bound) if r.relevant_lower_bound is not None else None,
            float(r.relevant_upper_bound) if r.relevant_upper_bound is not None else None)


def _bound(ct: float | None, lower: float | None, upper: float | None, ceiling: float | None) -> bool:
    """Whether the rate found may be the generator's: within 10 % of its ceiling, or no load it could offer was
    too much for the path (no upper bound)."""
    if ct is None:
        return False
    return upper is None or (ceiling is not None and ct >= GENERATOR_BOUND * ceiling)
