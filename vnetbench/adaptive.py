"""Adaptive repetitions: run a scenario until the 95 % CI of its main metric (one value per trial) is narrow enough.

`repetitions: {min: 3, max: 30, target: 0.05}` stops a scenario once, for every foreground workload, the Student-t
95 % CI of the mean of its per-trial values is within +-5 % of that mean (after at least `min` repetitions), or at
`max`. A trial's value is the median of its samples of the main metric (pairs, or echoes): one value per trial.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from . import catalog, stats
from .sample import Sample



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


def decide(sc, values: dict[int, list[float]], rule, rep: int) -> str | None:
    """Why the scenario stops after repetition `rep`, or None while it goes on."""
    if rep < rule.min:
        return None
    widths = {}
    for w, wl in enumerate(sc.workloads):
        if wl.background:
            continue
        got = values.get(w, [])
        if not got:
            return f"stopped after {rep} repetitions: no {wl.kind} trial finished ok"
        widths[f"{main_metric(wl, rule)} ({wl.kind})"] = (half_width(got), len(got))
    text = ", ".join(f"{name} +-{width:.1%} (n={n})" for name, (width, n) in widths.items())
    # At least `min` trial values each: a failed or invalid trial does not count towards the minimum.
    if all(width <= rule.target and n >= rule.min for width, n in widths.values()):
        return f"converged after {rep} repetitions: 95% CI of the mean within +-{rule.target:.0%}: {text}"
    if rep >= rule.max:
        return f"reached max {rule.max} repetitions before the 95% CI was within +-{rule.target:.0%}: {text}"
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
