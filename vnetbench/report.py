"""Per-metric statistics tables for `show` and the end of `run`: by default one line per scenario and metric
(median, its 95% CI, n, what ran) that fits a 100-column terminal; `wide` gives every statistic."""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import dataset
from .sample import METRICS
from .stats import Summary, summarize
from .store import Store
from .units import human, human_interval

COMPACT_WIDTH = 100

DEFAULT_METRICS = ("throughput_bps", "aggregate_throughput_bps", "udp_loss_ratio", "jitter_s", "rtt_s",
                   "rtt_loaded_s", "latency_p50_s", "latency_p99_s", "cpu_busy_ratio", "interrupts_per_s",
                   "context_switches_per_s", "process_cpu_ratio")
SHORT_METRICS = tuple(m for m in DEFAULT_METRICS if m != "process_cpu_ratio")  # each daemon: --wide, --all, -m


@dataclass
class Row:
    scenario: int
    workload: str
    label: str
    implementation: str
    metric: str
    unit: str
    summary: Summary
    tag: str = ""                  # the process or background workload the row is about, '' for the workload itself
    impl_parts: dict | None = None  # the scenario's implementation, element -> what ran


def varying(scenarios: list[dict]) -> list[str]:
    """Factors whose level differs between scenarios: the only ones worth a column."""
    keys = list(scenarios[0]["labels"]) if scenarios else []
    return [k for k in keys if len({s["labels"][k] for s in scenarios}) > 1]


N_COUNTS = ("n counts trials: every statistic is over one value per trial (a trial's median for per-echo and "
            "per-request metrics such as rtt_s, its mean over pairs for the others), never over the echoes inside a trial")


def trial_value(metric: str) -> str:
    """What one trial contributes to `metric`'s statistics, said in words (for a table title or caption)."""
    if dataset.default_reduce(metric) == "median":
        return "one value per trial: the median of its samples"
    return "one value per trial" + ("" if metric.startswith(("cpu_", "interrupts", "context", "net_")) else
                                    " (the mean over pairs when there are several)")


def group_values(store: Store, cid: int, data: dataset.Dataset | None = None
                 ) -> dict[tuple[int, str, str, str], list[float]]:
    """(scenario, metric, workload, process-or-'') -> ONE VALUE PER TRIAL (dataset.trial_values). Machine-wide probes
    are kept apart per workload (CPU during iperf3 is not CPU during ping); series and per-CPU samples are left to the
    figures."""
    data = data or dataset.load(store, cid)
    label = workload_labels(store, cid, data)
    groups: dict[tuple[int, str, str, str], list[float]] = {}
    for metric in sorted({s["metric"] for s in data.samples} - {"throughput_interval_bps"}):
        groups.update(data.trial_values(metric, background=None, key=lambda t, s, m=metric: (
            t.scenario, m, label[t.workload], _who(s["metadata"]))))
    return groups


def _who(meta: dict) -> str:
    return meta.get("process") or (f"background {meta['background_workload']}" if meta.get("role") == "background"
                                   else "")


def workload_labels(store: Store, cid: int, data: dataset.Dataset | None = None) -> dict[int, str]:
    """Spec position -> name shown: the tool, numbered by its place in the spec when a tool is listed twice
    (S1's 64-byte and 65515-byte pings are two workloads and must not be pooled)."""
    kinds = {t["workload"]: t["kind"] for t in (data.trials.values() if data else store.trials(cid))}
    repeated = {k for k in kinds.values() if list(kinds.values()).count(k) > 1}
    return {i: f"{k} #{i + 1}" if k in repeated else k for i, k in kinds.items()}


def rows(store: Store, cid: int, metrics: tuple[str, ...] | None = None,
         groups: dict[tuple[int, str, str, str], list[float]] | None = None) -> list[Row]:
    scenarios = {s["idx"]: s for s in store.scenarios(cid)}
    cols = varying([s for s in scenarios.values() if s["status"] != "skipped"]) or ["switch"]
    out = []
    for (idx, metric, workload, proc), values in sorted((group_values(store, cid) if groups is None else groups).items()):
        if metrics and metric not in metrics:
            continue
        sc = scenarios[idx]
        label = ", ".join(f"{k}={sc['labels'][k]}" for k in cols) + (f" [{proc}]" if proc else "")
        out.append(Row(idx, workload, label, implementation(sc["implementation"]), metric,
                       METRICS[metric].unit if metric in METRICS else "", summarize(values), proc,
                       sc["implementation"] or {}))
    return out


def implementation(impl: dict | None) -> str:
    """What really carried the packets, e.g. 'linux-bridge + kernel-vxlan + veth'."""
    return " + ".join(v for v in (impl or {}).values() if v and v != "none")


def show(store: Store, cid: int, console: Console, metrics: tuple[str, ...] | None = DEFAULT_METRICS,
         wide: bool = False) -> None:
    camp = store.campaign(cid)
    scenarios = store.scenarios(cid)
    console.print(f"[bold]Campaign {camp.id}[/] {camp.name} ({camp.status}); "
                  f"{sum(s['status'] == 'done' for s in scenarios)} scenarios run, "
                  f"{sum(s['status'] == 'skipped' for s in scenarios)} skipped, "
                  f"{sum(s['status'] == 'failed' for s in scenarios)} failed", soft_wrap=True)
    by_metric: dict[str, list[Row]] = defaultdict(list)
    for r in rows(store, cid, metrics):
        by_metric[r.metric].append(r)
    order = [m for m in (metrics or ()) if m in by_metric] + sorted(m for m in by_metric if m not in (metrics or ()))
    if wide:
        console.print(N_COUNTS + ".", style="dim", soft_wrap=True)
        for metric in order:
            console.print(_table(metric, by_metric[metric]))
    else:
        shown = [s for s in scenarios if s["status"] != "skipped"]
        common, differs = split_implementation([s["implementation"] for s in shown])
        if common:
            console.print(f"implementation{' of every scenario' if len(shown) > 1 else ''}: {common}", soft_wrap=True)
        console.print("median [95% CI] over one value per trial; n = trials; every metric: --all; every statistic: --wide",
                      style="dim", soft_wrap=True)
        cols = varying(shown) or ["switch"]
        labels = {sc["idx"]: sc["labels"] for sc in scenarios}
        if all(sc["levels"].get("pairs", 1) == 1 for sc in shown):
            order = [m for m in order if m != "aggregate_throughput_bps"]  # the same numbers as throughput_bps
        for metric in order:
            console.print(_compact_table(metric, by_metric[metric], differs, cols, labels))
        if any(not r.summary.ci_median_exact for rs in by_metric.values() for r in rs):
            console.print("* n too small for a 95% interval of the median: the interval shown is min .. max",
                          style="dim", soft_wrap=True)
    cols = varying(scenarios)
    for s in scenarios:
        if s["status"] in ("skipped", "failed"):
            short = ", ".join(f"{k}={s['labels'][k]}" for k in cols)
            console.print(f"[yellow]{s['status']}[/] scenario {s['idx']} ({short}): {s['reason']}", soft_wrap=True)
    trials = store.trials(cid)
    failed = [t for t in trials if t["status"] == "failed"]
    for t in failed[:10]:
        console.print(f"[red]failed trial[/] scenario {t['scenario']} rep {t['repetition']} {t['kind']}: {t['error']}",
                      soft_wrap=True)
    if line := tool_time(trials):
        console.print(line, style="dim")  # wrapped to the terminal


def tool_time(trials: list[dict]) -> str:
    """Where the tool's own time went: the topology builds (metadata.build) and the median of each phase of a
    trial (metadata.phases, which add up to the trial's time); '' for trials stored without them."""
    builds = {(t["metadata"].get("prefix"), b["n"]): b["s"] for t in trials if (b := t["metadata"].get("build"))}
    phases = [t["metadata"]["phases"] for t in trials if t["metadata"].get("phases")]
    if not phases:
        return ""
    keys = list(dict.fromkeys(k for p in phases for k in p))
    each = " ".join(f"{k} {statistics.median(p.get(k, 0.0) for p in phases):.2f}" for k in keys)
    built = f"{len(builds)} build{'s' * (len(builds) != 1)} {sum(builds.values()):.1f} s; " if builds else ""
    return f"tool time: {built}trial phases (median s of {len(phases)}): {each}"


def split_implementation(impls: list[dict | None]) -> tuple[str, list[str]]:
    """What ran in every scenario (said once), and the parts that differ between scenarios (a column)."""
    keys = list(dict.fromkeys(k for i in impls for k in (i or {})))
    differs = [k for k in keys if len({(i or {}).get(k) for i in impls}) > 1]
    first = impls[0] if impls else {}
    return implementation({k: v for k, v in (first or {}).items() if k not in differs}), differs


def _compact_table(metric: str, rows_: list[Row], differs: list[str], cols: list[str],
                   labels: dict[int, dict]) -> Table:
    """One line per scenario: its levels of the factors that vary (named once, in the header), median [95% CI],
    n and the part of the implementation that differs between scenarios."""
    unit = rows_[0].unit
    table = Table(title=f"{metric} ({unit})", title_justify="left", title_style="bold", box=None,
                  header_style="dim", pad_edge=False, padding=(0, 2, 0, 0))
    several = len({r.workload for r in rows_}) > 1
    lines = []
    for r in rows_:
        s = r.summary
        label = "/".join(str(labels[r.scenario][k]) for k in cols) + (f" [{r.tag}]" if r.tag else "")
        lines.append([escape(label), *((r.workload,) if several else ()),
                      human_interval(s.median, *s.ci_median, unit) + ("" if s.ci_median_exact else "*"), str(s.n),
                      *((implementation({k: v for k, v in r.impl_parts.items() if k in differs}),) if differs else ())])
    # The numbers are never cut; the scenario and the implementation share what is left of the line.
    names = ["/".join(cols), *(("workload",) if several else ()), "median [95% CI]", "n",
             *(("implementation",) if differs else ())]
    widths = [max(len(name), *(len(line[i]) for line in lines)) for i, name in enumerate(names)]
    fixed = widths[1:-1] if differs else widths[1:]
    rest = COMPACT_WIDTH - 1 - sum(fixed) - 2 * (len(widths) - 1)
    impl_need = widths[-1] if differs else 0
    widths[0] = max(min(widths[0], rest - impl_need), min(widths[0], rest * 3 // 5), 12)
    if differs:
        widths[-1] = max(rest - widths[0], 8)
    for name, width in zip(names, widths):
        table.add_column(name, no_wrap=True, overflow="ellipsis", width=width,
                         justify="right" if name in ("median [95% CI]", "n") else "left")
    for line in lines:
        table.add_row(*line)
    return table


def _table(metric: str, rows_: list[Row]) -> Table:
    unit = rows_[0].unit
    desc = METRICS[metric].description if metric in METRICS else ""
    table = Table(title=f"{metric} ({unit}) — {desc}; n = trials, {trial_value(metric)}", title_justify="left",
                  header_style="bold")
    several = len({r.workload for r in rows_}) > 1
    for col in ("scenario", *(("workload",) if several else ()), "implementation", *STAT_COLUMNS):
        table.add_column(col, justify="left" if col in ("scenario", "workload", "implementation") else "right")
    for r in rows_:
        table.add_row(escape(r.label), *((r.workload,) if several else ()), r.implementation,
                      *stat_cells(r.summary, unit))
    return table


STAT_COLUMNS = ("n", "median", "IQR", "mean", "std", "CV", "min", "max", "95% CI mean", "95% CI median")


def stat_cells(s: Summary, unit: str) -> list[str]:
    """The STAT_COLUMNS of one summary in human units; '*' marks a median interval that is only min..max."""
    h = lambda v: human(v, unit)  # noqa: E731
    return [str(s.n), h(s.median), h(s.iqr), h(s.mean), h(s.std), human(s.cv, "ratio"), h(s.min), h(s.max),
            f"{h(s.ci_mean[0])} .. {h(s.ci_mean[1])}",
            f"{h(s.ci_median[0])} .. {h(s.ci_median[1])}" + ("" if s.ci_median_exact else "*")]
