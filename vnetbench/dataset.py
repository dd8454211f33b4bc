"""The one data loader: a campaign's scenarios, trials and samples, read once, and the values analyses use.

The trial is the unit of replication. `trial_values` gives ONE VALUE PER TRIAL per group (by default per scenario):
the trial's goodput, its median RTT, its p99 ... — what every CI, test and verdict is computed on. `pooled` gives
every sample of every trial (all echoes of all repetitions): for CDFs and percentile figures only, labelled
"pooled samples" wherever shown.

Only trials that finished ok count. Samples of background workloads (role=background: a flood, a CPU load) are kept
apart from the foreground ones, and 1-second series and per-CPU samples apart from the window totals.
"""
from __future__ import annotations

import math
from collections import defaultdict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator

from . import stats
from .store import Campaign, Store

# Metrics a trial holds many samples of (one per echo, round trip or request): a trial's value is their median.
# Every other metric has one sample per pair (or one per trial): a trial's value is their mean (the per-pair value).
DISTRIBUTIONS = {"rtt_s", "rtt_loaded_s", "latency_s", "http_response_time_s"}
POOLED = "pooled samples"


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

    def values(self, metric: str, **meta: Any) -> list[float]:
        """The workload's own samples of `metric` (not the probes', not a background load's), matching meta."""
        return [s["value"] for s in self.samples if s["metric"] == metric and _own(s["metadata"])
                and all(s["metadata"].get(k) == v for k, v in meta.items())]

    def total(self, metric: str, **meta: Any) -> float | None:
        """Sum over the pairs of a trial (None when the trial has no such sample)."""
        vs = self.values(metric, **meta)
        return sum(vs) if vs else None

    def mean(self, metric: str, **meta: Any) -> float | None:
        vs = self.values(metric, **meta)
        return sum(vs) / len(vs) if vs else None

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
        how = reduce or default_reduce(metric)
        per: dict[Hashable, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for t, s in self.select(metric, **filters):
            per[t.scenario if key is None else key(t, s)][t.id].append(s["value"])
        return {g: [reduce_values(v, how) for v in trials.values()] for g, trials in per.items()}

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
    ok: dict[int, Trial] = {}
    for t in rows.values():
        if t["status"] == "ok" and t["scenario"] in scenarios:
            sc = scenarios[t["scenario"]]
            ok[t["id"]] = Trial(t["id"], t["scenario"], t["repetition"], t["kind"], t["params"], sc["labels"],
                                sc["levels"], t["metadata"], t["workload"])
    samples = []
    for s in store.samples(cid):
        if (t := ok.get(s["trial"])) is not None:
            t.samples.append(s)
            samples.append(s)
    return Dataset(store.campaign(cid), scenarios, rows, list(ok.values()), samples)
