"""Adaptive repetitions: how many trials a scenario needs for the 95 % CI of its main metric to be narrow enough.

`repetitions: {min: 3, max: 30, target: 0.05}` is a two-stage rule (Stein 1945): a pilot of n0 = max(min, 8) trials
estimates the spread; the scenario then runs N = (t(n0 - 1) * s0 / (target * mean0))^2 trials in all, at least
2 * n0 and at most `max`, and stops there, whatever the later trials show. Stopping "as soon as the CI is narrow",
from n = 3, picked the runs whose spread happened to look small: the reported CI covered 91 % (normal data) and 67 %
(two-level data), and Welch's test between two such scenarios rejected 10-34 % of true nulls. The pilot of 8 and
the second stage of at least n0 more keep the reported CI's coverage >= 0.93 and Welch's false-positive rate
<= 0.06 (tests/test_verdicts.py simulates it). A trial's value is the median of its samples of the main metric
(pairs, or echoes): one value per trial.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable

from .. import catalog
from ..core.sample import Sample
from ..results import stats


def main_metric(wl, rule=None) -> str:
    """The spec's rule's metric, else the one the workload's class declares (catalog: from the registry)."""
    if rule is not None and rule.metric:
        return rule.metric
    return catalog.main_metric(wl.kind, wl.params)


def trial_value(samples: Iterable[Sample], wl, rule=None) -> float | None:
    """The trial's one value of its workload's main metric: the median over its pairs (or its echoes)."""
    metric = main_metric(wl, rule)
    values = [s.value for s in samples if s.metric == metric and s.metadata.get("role") != "background"
              and not s.metadata.get("series") and s.metadata.get("pair") != "all"]
    return stats.summarize(values).median if values else None


def half_width(values: list[float]) -> float:
    """Half-width of the 95 % CI of the mean relative to the mean (inf when it cannot be told yet)."""
    if len(values) < 2:
        return float("inf")
    s = stats.summarize(values)
    lo, hi = s.ci_mean
    if hi == lo:
        return 0.0
    return (hi - lo) / 2 / abs(s.mean) if s.mean else float("inf")


PILOT = 8           # the least pilot: below it s0 is too rough a guess (and the stop too selective)


def pilot(rule) -> int:
    return min(max(rule.min, PILOT), rule.max)


def needed(first: list[float], rule) -> float:
    """Stein's total sample size from the pilot's values: enough for a +-target 95 % CI at the pilot's spread."""
    s = stats.summarize(first)
    if s.mean == 0:
        return math.inf
    return (stats.t_quantile(0.95, len(first) - 1) * s.std / (rule.target * abs(s.mean))) ** 2


def planned(first: list[float], rule) -> int:
    """The trials to run in all: what the pilot needs, at least twice the pilot (so the pilot's own spread does not
    decide the final CI alone), at most `max`."""
    need = needed(first, rule)
    return int(min(rule.max, max(2 * len(first), math.ceil(need) if math.isfinite(need) else rule.max)))


def decide(sc, values: dict[int, list[float]], rule, rep: int) -> str | None:
    """Why the scenario stops after repetition `rep`, or None while it goes on. Each foreground workload needs its
    pilot of n0 ok trial values, then the N its pilot planned (failed or invalid trials do not count)."""
    n0 = pilot(rule)
    if rep < n0:
        return None
    plans = {}
    for w, wl in enumerate(sc.workloads):
        if wl.background:
            continue
        got = values.get(w, [])
        if not got:
            return f"stopped after {rep} repetitions: no {wl.kind} trial finished ok"
        plan = planned(got[:n0], rule) if len(got) >= n0 else None
        plans[f"{main_metric(wl, rule)} ({wl.kind})"] = (plan, got)
    text = ", ".join(f"{name} planned n={plan or '?'}, 95% CI +-{half_width(got):.1%} (n={len(got)})"
                     for name, (plan, got) in plans.items())
    capped = [name for name, (plan, got) in plans.items() if plan is not None and plan >= rule.max
              and needed(got[:n0], rule) > rule.max]
    if capped and rep >= rule.max:
        return f"reached max {rule.max} repetitions, fewer than the pilot asked for: {text}"
    if all(plan is not None and len(got) >= plan for plan, got in plans.values()):
        return (f"stopped after {rep} repetitions as planned from a pilot of {n0} (two-stage rule, target "
                f"+-{rule.target:.0%}): {text}")
    if rep >= rule.max:
        return f"reached max {rule.max} repetitions before every planned n was reached: {text}"
    return None


def stored_values(store, cid: int, scenarios, rule) -> dict[int, dict[int, list[tuple[int, float]]]]:
    """scenario index -> workload index -> (repetition, value) of its trials already stored ok (for a resume)."""
    if rule is None:
        return {}
    by_index = {sc.index: sc for sc in scenarios}
    ok = {t["id"]: t for t in store.trials(cid) if t["status"] == "ok" and t["scenario"] in by_index}
    samples: dict[int, list[Sample]] = defaultdict(list)
    for row in store.samples(cid):
        if row["trial"] in ok:
            samples[row["trial"]].append(Sample(row["metric"], row["value"], row["unit"], row["metadata"], row["t"]))
    out: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for tid, t in sorted(ok.items(), key=lambda kv: (kv[1]["repetition"], kv[0])):
        sc = by_index[t["scenario"]]
        if t["workload"] not in sc.workload_ids:
            continue
        w = sc.workload_ids.index(t["workload"])
        value = trial_value(samples[tid], sc.workloads[w], rule)
        if value is not None:
            out[sc.index][w].append((t["repetition"], value))
    return {k: dict(v) for k, v in out.items()}
