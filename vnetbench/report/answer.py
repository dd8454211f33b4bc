"""The report's opening: the answer to the spec's question. Each scenario's main metric (its workload's own, as
adaptive repetitions judge it) with its 95 % interval, against the baseline: the scenario with the same levels but
the first level of the first factor that varies. One family of tests per table, corrected together (Holm), and the
interval beside each verdict is the one printed."""
from __future__ import annotations

import math

from ..catalog import METRICS, WORKLOADS
from ..core.units import human_interval
from ..results import stats
from . import tables
from .analyses.base import TableData

NOTE = ("median [95 % CI] over one value per trial; 'vs baseline' is the ratio of the means with its 95 % interval "
        "(Fieller), judged by the pre-declared test with Holm's correction over the table's comparisons; a test "
        "that did not reject says nothing about equality.")


def main_metric(rows: list[tables.Row], trials: list[dict]) -> str | None:
    """The main metric of the campaign's first foreground workload that has rows."""
    have = {r.metric for r in rows if not r.tag}
    kinds = [t["kind"] for t in sorted(trials, key=lambda t: (t["scenario"], t["workload"])) if t["status"] == "ok"]
    return next((m for k in dict.fromkeys(kinds) if k in WORKLOADS and (m := WORKLOADS[k].main_metric) in have), None)


def baseline_of(idx: int, scenarios: dict[int, dict], factor: str, base: str) -> int | None:
    """The scenario with the same levels as `idx` but `factor` at `base` (None: there is none, or it is itself)."""
    want = {k: v for k, v in scenarios[idx]["labels"].items() if k != factor}
    for j, sc in scenarios.items():
        if j != idx and sc["status"] == "done" and str(sc["labels"].get(factor)) == base and \
                {k: v for k, v in sc["labels"].items() if k != factor} == want:
            return j
    return None


def table(rows: list[tables.Row], scenarios: dict[int, dict], cols: list[str], metric: str) -> TableData:
    """One line per scenario: its level of each varying factor, median [CI], n, and against its baseline."""
    mine = [r for r in rows if r.metric == metric and not r.tag and not r.key.stat]
    first = cols[0] if cols else None
    base = str(scenarios[min(r.scenario for r in mine)]["labels"].get(first)) if first and mine else None
    by_scenario = {(r.scenario, r.workload): r for r in mine}
    better = METRICS[metric].better if metric in METRICS else None
    pairs = []
    for r in mine:
        j = baseline_of(r.scenario, scenarios, first, base) if first else None
        b = by_scenario.get((j, r.workload)) if j is not None else None
        pairs.append((r, b, stats.compare(list(b.values.values()), list(r.values.values()), better=better)
                      if b is not None else None))
    judged = stats.holm_verdicts([c for _, _, c in pairs if c is not None])
    verdicts = iter(judged)
    out = []
    for r, b, c in pairs:
        s = r.summary
        cells = [*(str(scenarios[r.scenario]["labels"].get(k)) for k in cols), r.workload,
                 human_interval(s.median, *s.ci_median, r.unit), str(s.n)]
        if c is None:
            cells += ["baseline" if str(scenarios[r.scenario]["labels"].get(first)) == base else "-", ""]
        else:
            p, words = next(verdicts)
            lo, hi = c.ratio_ci
            ratio = f"{c.ratio:.2f}x [{lo:.2f} .. {hi:.2f}]" if math.isfinite(lo) and math.isfinite(hi) \
                else f"{c.ratio:.2f}x"
            cells += [ratio, words + (f" (p {p:.2g})" if math.isfinite(p) else "")]
        out.append(cells)
    return TableData(f"{metric} — each scenario against {first} {base}" if first else metric,
                     [*cols, "workload", f"median [95 % CI] ({METRICS[metric].unit if metric in METRICS else ''})",
                      "n", f"vs {first} {base}" if first else "vs baseline", "verdict"], out, NOTE)


def headline(rows: list[tables.Row], trials: list[dict]) -> str:
    """One sentence: what the table answers, in words a reader can act on."""
    metric = main_metric(rows, trials)
    return "" if metric is None else (f"The main metric is {metric} ({METRICS[metric].description}): "
                                      f"{'higher' if METRICS[metric].better == 'higher' else 'lower'} is better.")

