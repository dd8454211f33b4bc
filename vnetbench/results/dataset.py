"""The one data loader: a campaign's scenarios, trials and samples, read once, and the values analyses use.

The trial is the unit of replication. `trial_values` gives ONE VALUE PER TRIAL per group (by default per scenario):
the trial's goodput, its median RTT, its p99 ... — what every CI, test and verdict is computed on. `pooled` gives
every sample of every trial (all echoes of all repetitions): for CDFs and percentile figures only, labelled
"pooled samples" wherever shown.

Only trials that finished ok count. Samples of background workloads (role=background: a flood, a CPU load) are kept
apart from the foreground ones, and 1-second series and per-CPU samples apart from the window totals.

The results model: `Dataset.reduced()` keys one value per trial by (scenario, workload, metric, Dims, stat) — Dims
(sample.dimensions) say what a sample measures (machine, host, VM or process; direction; pair; role), so no summary
pools a host's CPU with a VM's or one direction with the other; an additive metric of a two-way test gets the sum of
its directions beside them. `show`, `compare`, the report's tables and figures and `export` read through it, and
every per-trial value here comes from `per_trial`, the one reduction.
"""
from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Iterable, Iterator

from ..catalog import METRICS, WORKLOADS, distributions
from ..core.sample import Dims, dimensions
from . import stats
from .guards import reader_flags
from .store import Campaign, Store

# Metrics a trial holds many samples of (one per echo, round trip or request): a trial's value is their median.
# Every other metric has one sample per pair (or one per trial): a trial's value is their mean (the per-pair value).
DISTRIBUTIONS = distributions()  # declared by each workload (Metric.per_event)
POOLED = "pooled samples"
# Per-trial statistics of a per-echo metric beside its median: the tail a reader needs (latency under load's p99).
TAIL_STATS = ("p90", "p99", "max")
# Metrics of CPU per unit of work -> the work their samples carry beside the CPU seconds (metadata, efficiency.py).
# Over trials the estimate is sum(cpu_s) / sum(work): a mean of the ratios lets a trial that delivered almost nothing
# (1000 s of CPU per Gbit) outweigh every other.
RATIO_OF_SUMS = {"cpu_s_per_gbit": "gbit", "cpu_s_per_mpacket": "mpackets"}
# A workload's own percentile (sockperf's, netperf's latency_p99_s) is over the round trips its tool counted: their
# number is stored on the sample (metadata OBSERVATIONS); older samples are counted by the trial's per-event ones.
OBSERVATIONS = "observations"
OWN_EVENTS = "latency_s"  # the per-round-trip metric a workload stores beside its own percentiles


def quantile(stat: str) -> float | None:
    """The q of a percentile statistic ('p99' -> 0.99, 'p99.9' -> 0.999, 'p50' -> 0.5); None for max, mean ..."""
    if stat.startswith("p") and stat[1:].replace(".", "", 1).isdigit():
        return float(stat[1:]) / 100
    return None


def needed(q: float) -> int:
    """Samples a trial needs before its q-th quantile is more than its largest sample: n >= 1 / (1 - q) (p0 and p100,
    the minimum and maximum, describe any sample)."""
    return 1 if q <= 0 or q >= 1 else math.ceil(1 / (1 - q) - 1e-9)


def supported(q: float, n: int) -> bool:
    return n >= needed(q)


def highest_supported(n: int, among: Iterable[str] = ("p50", *TAIL_STATS)) -> str:
    """The highest percentile `among` these that n samples support ('p50' when none above it does)."""
    ok = [s for s in among if (q := quantile(s)) is not None and supported(q, n)]
    return max(ok, key=lambda s: quantile(s), default="p50")


def own_percentile(metric: str) -> str | None:
    """The percentile a workload's own summary metric is ('latency_p99_s' -> 'p99'); None for any other metric."""
    m = re.search(r"_(p\d+(?:\.\d+)?)_", metric)
    return m[1] if m and quantile(m[1]) is not None else None


def unsupported(stat: str, n: int, noun: str = "samples") -> str:
    """Why a trial of n samples cannot carry `stat` ('p99 needs >= 100 echoes (had 10)'); '' when it can."""
    q = quantile(stat)
    return "" if q is None or supported(q, n) else f"{stat} needs >= {needed(q)} {noun} (had {n})"


@dataclass(frozen=True, order=True)
class Key:
    """What one row of the results model is about."""
    scenario: int
    workload: str        # the workload's name (Dataset.names)
    metric: str
    dims: Dims
    stat: str = ""       # '' = the metric's per-trial value (a trial's median for per-echo metrics); else p90, p99, max

    @property
    def name(self) -> str:
        """The metric as tables title it: 'rtt_loaded_s', 'rtt_loaded_s p99'."""
        return f"{self.metric} {self.stat}" if self.stat else self.metric


def per_trial(selected: Iterable[tuple["Trial", dict]], how: str,
              key: Callable[["Trial", dict], Hashable]) -> dict[Hashable, dict[int, float]]:
    """THE reduction: {group: {trial id: one value}} — each trial's samples of a group reduced with `how` (median,
    mean, sum, min, max, pNN). Every per-trial value of every table, figure, test and export comes from here."""
    return reduce_groups(grouped(selected, key), how)


def grouped(selected: Iterable[tuple["Trial", dict]],
            key: Callable[["Trial", dict], Hashable]) -> dict[Hashable, dict[int, list[float]]]:
    """per_trial before its reduction: {group: {trial id: the values of its samples}}."""
    per: dict[Hashable, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for t, s in selected:
        per[key(t, s)][t.id].append(s["value"])
    return per


def reduce_groups(per: dict[Hashable, dict[int, list[float]]], how: str) -> dict[Hashable, dict[int, float]]:
    return {g: {tid: reduce_values(v, how) for tid, v in trials.items()} for g, trials in per.items()}


def default_reduce(metric: str) -> str:
    return "median" if metric in DISTRIBUTIONS else "mean"


def reduce_values(values: list[float], how: str) -> float:
    """One trial's samples -> its value: median, mean, sum, min, max or pNN (a percentile, e.g. p99)."""
    if how == "median":
        return stats.median(values)
    if how == "mean":
        return math.fsum(values) / len(values)
    if how == "sum":
        return math.fsum(values)
    if how in ("min", "max"):
        return min(values) if how == "min" else max(values)
    if how.startswith("p") and how[1:].replace(".", "", 1).isdigit():
        return stats.percentile(values, float(how[1:]))
    raise ValueError(f"unknown reduction {how!r}; use median, mean, sum, min, max or pNN (e.g. p99)")


def ratio_of_sums(summary: stats.Summary, parts: Iterable[tuple[float, float]]) -> stats.Summary:
    """`summary` of per-trial ratios (cpu / work) with its mean made sum(cpu) / sum(work) over the trials, and its
    std (so CV and the mean's interval) the spread of each trial's linearised share of that ratio (delta method);
    median, quartiles and extremes still describe the per-trial values."""
    parts = list(parts)
    n, total = len(parts), math.fsum(w for _, w in parts)
    if total <= 0:
        return summary
    r = math.fsum(c for c, _ in parts) / total
    shares = [r + (c - r * w) * n / total for c, w in parts]  # their mean is r
    sd = statistics.stdev(shares) if n > 1 else math.nan
    return replace(summary, mean=r, std=sd, cv=sd / abs(r) if r else math.nan)


@dataclass
class Trial:
    """One successful trial: its scenario's labels and levels, the workload's parameters, and its samples."""
    id: int
    scenario: int
    repetition: int
    kind: str
    params: dict
    labels: dict
    levels: dict
    metadata: dict
    workload: int = 0                # the workload's position in the spec
    samples: list[dict] = field(default_factory=list)
    name: str = ""                   # the workload's name in tables (Dataset.names)

    @property
    def flags(self) -> list[str]:
        """What the run flagged on the trial for the reader (guards.reader_flags): a load asked but not offered."""
        return reader_flags(self.metadata)

    @property
    def noisy(self) -> list[str]:
        """Why the run flagged the trial noisy (steal, a busy machine, a load that did not cover it); [] if not."""
        return list(self.metadata.get("noisy") or [])

    def values(self, metric: str, **meta: Any) -> list[float]:
        """The workload's own samples of `metric` (not the probes', not a background load's), matching meta."""
        return [s["value"] for s in self.samples if s["metric"] == metric and _own(s["metadata"])
                and all(s["metadata"].get(k) == v for k, v in meta.items())]

    def total(self, metric: str, **meta: Any) -> float | None:
        """Sum over the pairs of a trial (None when the trial has no such sample)."""
        return self._reduce(metric, "sum", meta)

    def mean(self, metric: str, **meta: Any) -> float | None:
        return self._reduce(metric, "mean", meta)

    def _reduce(self, metric: str, how: str, meta: dict) -> float | None:
        """The trial's own samples of `metric` (matching meta) reduced through per_trial, the one reduction."""
        own = [(self, s) for s in self.samples if s["metric"] == metric and _own(s["metadata"])
               and all(s["metadata"].get(k) == v for k, v in meta.items())]
        return per_trial(own, how, lambda t, s: 0).get(0, {}).get(self.id)

    def uncarried(self, metric: str) -> str:
        """Why the trial's own percentile `metric` (latency_p99_s) is over too few round trips to carry it: 'p99 needs
        >= 100 round trips (had 30)'; '' when it carries it, or is no such metric, or its count was not stored."""
        counts = [n for s in self.samples if s["metric"] == metric and _own(s["metadata"])
                  and isinstance(n := s["metadata"].get(OBSERVATIONS), int)]
        stat = own_percentile(metric)
        return unsupported(stat, min(counts), "round trips") if stat and counts else ""

    def machine(self, metric: str) -> float | None:
        """A whole-machine probe's value over the trial (the window total, not the series or a single CPU)."""
        vs = [s["value"] for s in self.samples if s["metric"] == metric and s["metadata"].get("scope") == "machine"
              and not s["metadata"].get("series") and "cpu" not in s["metadata"]]
        return vs[0] if vs else None

    def processes(self) -> dict[str, float]:
        """process_cpu_ratio per datapath process (ovs-vswitchd, wireguard-go, charon ...)."""
        return {s["metadata"]["process"]: s["value"] for s in self.samples
                if s["metric"] == "process_cpu_ratio" and "process" in s["metadata"]}


def _own(meta: dict) -> bool:
    return meta.get("role") != "background" and meta.get("scope") not in ("machine", "vm") and "process" not in meta


def _part(sample: dict, field: str) -> dict:
    """One part (`field`: cpu_s or the work) of a ratio-of-sums sample, keyed as the sample."""
    return {"value": sample["metadata"][field], "dims": _dims(sample)}


def is_window(meta: dict) -> bool:
    """A window total (not a 1-second series point, not a single CPU's share)."""
    return not meta.get("series") and "cpu" not in meta


@dataclass
class Dataset:
    campaign: Campaign | None
    scenarios: dict[int, dict]                 # idx -> scenario row (labels, levels, status, reason, implementation)
    trials: dict[int, dict]                    # trial id -> trial row, every status
    ok: list[Trial]                            # trials that finished ok, with their samples, in run order
    samples: list[dict]                        # every sample of the ok trials, joined with trial and scenario
    names: dict[tuple[int, int], str] = field(default_factory=dict)  # (scenario, spec position) -> workload name
    _by_metric: dict[str, list[tuple[Trial, dict]]] | None = field(default=None, repr=False)

    @property
    def scenario_list(self) -> list[dict]:
        return list(self.scenarios.values())

    # ---- selection ---------------------------------------------------------------------------------------
    def select(self, metric: str, *, scenario: int | None = None, workload: int | None = None,
               kind: str | None = None, background: bool | None = False, window: bool = True,
               where: Callable[[dict], bool] | None = None, **meta: Any) -> Iterator[tuple[Trial, dict]]:
        """(trial, sample) of `metric`: foreground samples only by default (background=True: only a background
        load's; None: both), window totals only (window=False: series and per-CPU too), matching meta and where."""
        if self._by_metric is None:
            self._by_metric = defaultdict(list)
            for t in self.ok:
                for s in t.samples:
                    self._by_metric[s["metric"]].append((t, s))
        for t, s in self._by_metric.get(metric, ()):
            if (scenario is not None and t.scenario != scenario) or (workload is not None and t.workload != workload) \
                    or (kind is not None and t.kind != kind):
                continue
            m = s["metadata"]
            if window and not is_window(m):
                continue
            if background is not None and (m.get("role") == "background") != background:
                continue
            if all(m.get(k) == v for k, v in meta.items()) and (where is None or where(m)):
                yield t, s

    def trial_values(self, metric: str, reduce: str | None = None,
                     key: Callable[[Trial, dict], Hashable] | None = None, **filters: Any) -> dict[Hashable, list[float]]:
        """{group: [one value per trial]}; group = the scenario's idx unless `key(trial, sample)` says otherwise.
        A trial's samples are reduced with `reduce` (default: median for per-echo metrics, else mean). Filters as
        in select(): scenario, workload, kind, background, where, metadata=value."""
        got = per_trial(self.select(metric, **filters), reduce or default_reduce(metric),
                        (lambda t, s: t.scenario) if key is None else key)
        return {g: list(trials.values()) for g, trials in got.items()}

    def reduced(self, metrics: Iterable[str] | None = None, exclude_noisy: bool = False) -> dict[Key, dict[int, float]]:
        """The results model: {Key: {trial id: value}} for every metric (or `metrics`), in run order. Window totals
        only (1-s series and single CPUs are the figures'); background loads are rows of their own (Dims.role).
        Per-echo metrics get their tail (TAIL_STATS) beside the median; an additive metric measured in both
        directions of one trial gets their sum (direction 'both'). exclude_noisy leaves out trials flagged noisy."""
        wanted = set(metrics) if metrics is not None else {s["metric"] for t in self.ok for s in t.samples}
        keep = (lambda t: not t.noisy) if exclude_noisy else (lambda t: True)
        out: dict[Key, dict[int, float]] = {}
        for metric in sorted(wanted):
            chosen = [(t, s) for t, s in self.select(metric, background=None) if keep(t)]
            # grouped once for the median and every tail, and a Key made per group, not per sample
            groups = grouped(chosen, lambda t, s: (t.scenario, t.name, _dims(s)))
            for stat in ("", *(TAIL_STATS if metric in DISTRIBUTIONS else ())):
                got = {Key(sc, name, metric, dims, stat): trials for (sc, name, dims), trials
                       in reduce_groups(groups, stat or default_reduce(metric)).items()}
                out.update(got)
                if METRICS.get(metric) and METRICS[metric].additive:
                    out.update(both_directions(got))
        drop = one_pair_aggregates(out)  # (once: per key, it made the results model quadratic in its keys)
        return dict(sorted((k, v) for k, v in out.items() if k not in drop))

    def pooled_by_key(self, metric: str, exclude_noisy: bool = False) -> dict[Key, list[float]]:
        """{Key: every sample of every trial} of a per-echo metric, split as reduced() splits it: for CDFs."""
        out: dict[Key, list[float]] = defaultdict(list)
        for t, s in self.select(metric, background=None):
            if not (exclude_noisy and t.noisy):
                out[Key(t.scenario, t.name, metric, _dims(s))].append(s["value"])
        return dict(sorted(out.items()))

    def sample_counts(self, metric: str) -> dict[Key, dict[int, int]]:
        """How many samples stand behind each trial's value of `metric`, keyed as reduced() keys its values."""
        out: dict[Key, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for t, s in self.select(metric, background=None):
            out[Key(t.scenario, t.name, metric, _dims(s))][t.id] += 1
        return out

    def observation_counts(self, metric: str) -> dict[Key, dict[int, int]]:
        """How many round trips stand behind each trial's own percentile `metric` (latency_p99_s), keyed as reduced()
        keys it: the count stored on the sample, else the trial's per-round-trip samples of the same Dims (times
        their thinning); a trial with neither has no count (and its percentile is not checked)."""
        events: dict[tuple[int, Dims], int] = defaultdict(int)
        for t, s in self.select(OWN_EVENTS, background=None):
            events[(t.id, _dims(s))] += int(s["metadata"].get("thinned_every") or 1)
        out: dict[Key, dict[int, int]] = defaultdict(dict)
        for t, s in self.select(metric, background=None):
            key, n = Key(t.scenario, t.name, metric, _dims(s)), s["metadata"].get(OBSERVATIONS)
            n = n if isinstance(n, int) and not isinstance(n, bool) else events.get((t.id, key.dims))
            if n is not None:
                out[key][t.id] = min(n, out[key].get(t.id, n))
        return out

    def uncarried(self, keys: Iterable[Key]) -> dict[Key, tuple[str, int]]:
        """Keys of a workload's own percentile whose trials had too few round trips for it -> (why: 'p99 needs >= 100
        round trips (had 30)', the fewest a trial had)."""
        own = [k for k in keys if not k.stat and own_percentile(k.metric)]
        counts = {m: self.observation_counts(m) for m in {k.metric for k in own}}
        out: dict[Key, tuple[str, int]] = {}
        for k in own:
            per = counts[k.metric].get(k)
            if per and (why := unsupported(own_percentile(k.metric), n := min(per.values()), "round trips")):
                out[k] = (why, n)
        return out

    def ratio_parts(self, exclude_noisy: bool = False) -> dict[Key, dict[int, tuple[float, float]]]:
        """Per key of a RATIO_OF_SUMS metric: each trial's (CPU seconds, work) behind its value, keyed and chosen as
        reduced() does; samples stored without them (older campaigns) have none."""
        out: dict[Key, dict[int, tuple[float, float]]] = {}
        for metric, work in RATIO_OF_SUMS.items():
            chosen = [(t, s) for t, s in self.select(metric, background=None) if not (exclude_noisy and t.noisy)
                      and "cpu_s" in s["metadata"] and work in s["metadata"]]
            key = lambda t, s, metric=metric: Key(t.scenario, t.name, metric, _dims(s))  # noqa: E731
            cpu = per_trial([(t, _part(s, "cpu_s")) for t, s in chosen], "mean", key)
            den = per_trial([(t, _part(s, work)) for t, s in chosen], "mean", key)
            out.update({k: {tid: (c, den[k][tid]) for tid, c in trials.items()} for k, trials in cpu.items()})
        return out

    def pooled(self, metric: str, key: Callable[[Trial, dict], Hashable] | None = None,
               **filters: Any) -> dict[Hashable, list[float]]:
        """{group: every sample of every trial} — pooled samples, for CDFs and percentile figures only."""
        out: dict[Hashable, list[float]] = defaultdict(list)
        for t, s in self.select(metric, **filters):
            out[t.scenario if key is None else key(t, s)].append(s["value"])
        return dict(out)

    def values(self, scenario: int, workload: int, metric: str, reduce: str | None = None,
               background: bool = False, **meta: Any) -> list[float]:
        """One value per trial of one scenario and workload entry."""
        return self.trial_values(metric, reduce, scenario=scenario, workload=workload, background=background,
                                 **meta).get(scenario, [])

    # ---- what ran ----------------------------------------------------------------------------------------
    def entries(self, kind: str | None = None) -> dict[int, dict]:
        """Workload entry (position in the spec) -> its parameters (+ '_kind'), as run in the first scenario that
        ran it."""
        out: dict[int, dict] = {}
        for t in sorted(self.trials.values(), key=lambda t: (t["scenario"], t["workload"])):
            if kind is None or t["kind"] == kind:
                out.setdefault(t["workload"], t["params"] | {"_kind": t["kind"]})
        return dict(sorted(out.items()))

    def repetitions(self, scenario: int) -> int:
        return len({t.repetition for t in self.ok if t.scenario == scenario})

    def failed_trials(self, scenario: int, workload: int | None = None) -> list[dict]:
        return [t for t in self.trials.values() if t["scenario"] == scenario and t["status"] != "ok"
                and (workload is None or t["workload"] == workload)]

    def missing_text(self, scenario: dict | None, workload: int | None = None) -> str:
        """Why a scenario has no numbers, for a table cell: "n/a (skipped: reason)" and the like."""
        if scenario is None:
            return "n/a (not in this campaign)"
        status, reason = scenario["status"], scenario.get("reason") or ""
        if status == "skipped":
            return f"n/a (skipped: {reason})"
        if status == "failed":
            return f"n/a (failed: {reason})"
        if status in ("pending", "running"):
            return "n/a (not run: the campaign was interrupted)"
        if workload is not None:  # a workload the matrix left out of this scenario says why in its notes
            left = [n for n in scenario.get("notes") or [] if n.startswith(f"workload {workload + 1} (")
                    and " left out: " in n]
            if left:
                return f"n/a (left out: {left[0].split(' left out: ', 1)[1]})"
        failed = self.failed_trials(scenario["idx"], workload)
        if failed:
            return f"n/a (trials failed: {failed[0].get('error') or 'no error recorded'})"
        return "n/a (no samples)"


def _dims(sample: dict) -> Dims:
    """The sample's Dims, worked out once per sample (a campaign holds hundreds of thousands of echoes)."""
    if (d := sample.get("dims")) is None:
        d = sample["dims"] = dimensions(sample["metadata"])
    return d


def both_directions(got: dict[Key, dict[int, float]]) -> dict[Key, dict[int, float]]:
    """For a metric whose directions add up: per trial, forward + reverse, keyed with direction 'both' (only trials
    that measured both directions)."""
    halves: dict[Key, dict[str, dict[int, float]]] = defaultdict(dict)
    for k, trials in got.items():
        if k.dims.direction in ("forward", "reverse"):
            halves[replace(k, dims=replace(k.dims, direction="both"))][k.dims.direction] = trials
    return {k: {tid: v + h["reverse"][tid] for tid, v in h["forward"].items() if tid in h["reverse"]}
            for k, h in halves.items() if len(h) == 2 and set(h["forward"]) & set(h["reverse"])}


def one_pair_aggregates(got: dict[Key, dict[int, float]]) -> set[Key]:
    """aggregate_throughput_bps keys whose workload ran on one pair: the same numbers as its throughput_bps."""
    pairs: dict[tuple, set[str]] = defaultdict(set)
    for k in got:
        if k.metric == "throughput_bps":
            pairs[(k.scenario, k.workload, k.dims.direction, k.dims.role, k.stat)].add(k.dims.pair)
    return {k for k in got if k.metric == "aggregate_throughput_bps"
            and len(pairs.get((k.scenario, k.workload, k.dims.direction, k.dims.role, k.stat), ())) == 1}


def workload_names(trials: Iterable[dict]) -> dict[tuple[int, int], str]:
    """(scenario, spec position) -> the workload's name: the spec's `name:`, else what its parameters say it is
    ('iperf3 tcp x10'); two entries of one scenario with one name get their place in the spec ('ping #1')."""
    reg = WORKLOADS
    named: dict[tuple[int, int], str] = {}
    for t in trials:
        cls = reg.get(t["kind"])
        named.setdefault((t["scenario"], t["workload"]), (t.get("metadata") or {}).get("workload_name")
                         or (cls.describe(t.get("params") or {}) if cls else t["kind"]))
    clash = defaultdict(set)
    for (sc, w), name in named.items():
        clash[(sc, name)].add(w)
    return {(sc, w): name + (f" #{w + 1}" if len(clash[(sc, name)]) > 1 else "") for (sc, w), name in named.items()}


_CACHE: ContextVar[dict | None] = ContextVar("dataset_cache", default=None)


@contextmanager
def cached():
    """Within this block each campaign is read from its results file once, whoever asks (the report's sections and
    a study's analysis each called load: the store was read 8 times per report). Only for readers: a run's
    results change under it."""
    token = _CACHE.set({})
    try:
        yield
    finally:
        _CACHE.reset(token)


def load(store: Store, cid: int) -> Dataset:
    """Every scenario, trial and sample of a campaign, read once (once per `cached()` block, too)."""
    cache = _CACHE.get()
    if cache is None:
        return _load(store, cid)
    key = (str(store.path), cid)
    if key not in cache:
        cache[key] = _load(store, cid)
    return cache[key]


def _load(store: Store, cid: int) -> Dataset:
    scenarios = {s["idx"]: s for s in store.scenarios(cid)}
    rows = {t["id"]: t for t in store.trials(cid)}
    names = workload_names(rows.values())
    ok: dict[int, Trial] = {}
    for t in rows.values():
        if t["status"] == "ok" and t["scenario"] in scenarios:
            sc = scenarios[t["scenario"]]
            ok[t["id"]] = Trial(t["id"], t["scenario"], t["repetition"], t["kind"], t["params"], sc["labels"],
                                sc["levels"], t["metadata"], t["workload"], name=names[(t["scenario"], t["workload"])])
    samples = []
    for s in store.samples(cid):
        if (t := ok.get(s["trial"])) is not None:
            t.samples.append(s)
            samples.append(s)
    return Dataset(store.campaign(cid), scenarios, rows, list(ok.values()), samples, names)
