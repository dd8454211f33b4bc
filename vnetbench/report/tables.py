"""Per-metric statistics tables for `show` and the end of `run`, from the results model (dataset.Dataset.reduced):
by default one line per scenario, workload and what the row measures (the machine, a VM, a process, a direction, a
pair, a background load) with its median, 95% CI, n and how many of its trials were flagged noisy, fitting the
terminal (at most 100 columns); `wide` gives every statistic, split into tables that fit."""
from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..catalog import METRICS, WORKLOADS
from ..core import offloads, pinning
from ..core.scenario import NOT_APPLICABLE
from ..core.units import human, human_interval
from ..results import dataset, export, stats
from ..results.guards import NO_CEILING
from ..results.stats import Summary, summarize
from ..results.store import Store

COMPACT_WIDTH = 100

HEADLINE_METRICS = ("throughput_bps", "aggregate_throughput_bps", "tcp_retransmits", "udp_loss_ratio", "jitter_s",
                    "rtt_s", "rtt_loaded_s", "latency_p50_s", "latency_p99_s", "cpu_busy_ratio", "interrupts_per_s",
                    "context_switches_per_s", "cpu_s_per_gbit", "process_cpu_ratio",
                    "hypervisor_cpu_ratio")
# ... and every workload's main metric, so that a new workload's numbers are shown without naming them here
DEFAULT_METRICS = HEADLINE_METRICS + tuple(m for m in dict.fromkeys(cls.main_metric for cls in WORKLOADS.values())
                                           if m not in HEADLINE_METRICS)
# compare's default family: the headline metrics (retransmits, rare events, are compared when asked for with -m)
COMPARE_METRICS = tuple(m for m in HEADLINE_METRICS if m != "tcp_retransmits") + ("ndr_pps", "pdr_pps")
# The tail `show` gives beside a per-echo metric's median unless asked for more (--all, -m): latency under load.
SHORT_TAILS: dict[str, tuple[str, ...]] | None = {"rtt_loaded_s": ("p99",)}
ALL_TAILS = None  # every tail statistic of every per-echo metric
# each daemon, each part of a VM's emulator: --wide, --all, -m
SHORT_METRICS = tuple(m for m in DEFAULT_METRICS if m not in ("process_cpu_ratio", "hypervisor_cpu_ratio"))


@dataclass
class Row:
    scenario: int
    workload: str
    label: str
    implementation: str
    metric: str
    unit: str
    summary: Summary
    tag: str = ""                  # what the row is about beyond the scenario and workload (Dims.label): a VM, the
                                   # machine, a process, a direction, a pair, a background load; '' for the workload
    impl_parts: dict | None = None  # the scenario's implementation, element -> what ran
    key: dataset.Key | None = None
    values: dict[int, float] = field(default_factory=dict)   # trial id -> its value, in run order
    noisy: int = 0                 # how many of those trials the run flagged noisy
    flagged: int = 0               # how many carry a flag for the reader (a load asked but not offered)
    of_sums: bool = False          # the summary's mean is sum(cpu_s) / sum(work) over the trials (RATIO_OF_SUMS)
    uncarried: str = ""            # why the trials' samples cannot carry this percentile ('' when they can)
    instead_of: dict[str, str] = field(default_factory=dict)  # percentile this row stands in for -> why

    @property
    def name(self) -> str:
        return self.key.name if self.key else self.metric


def varying(scenarios: list[dict]) -> list[str]:
    """Factors whose level differs between scenarios: the only ones worth a column (a level that does not apply,
    n/a, is no difference: host-to-host rows beside switch rows do not make `switch` a column)."""
    keys = list(scenarios[0]["labels"]) if scenarios else []
    return [k for k in keys if len({s["labels"][k] for s in scenarios} - {NOT_APPLICABLE}) > 1]


def label_columns(scenarios: list[dict]) -> list[str]:
    """The columns that tell rows apart; with one scenario (or none differing), the switch, or the attachment
    when there is no switch (a host-to-host campaign is not labelled `switch linuxbridge`)."""
    if cols := varying(scenarios):
        return cols
    first = scenarios[0]["labels"] if scenarios else {}
    return ["attach"] if first.get("switch") == NOT_APPLICABLE and "attach" in first else ["switch"]


N_COUNTS = ("n counts trials: every statistic is over one value per trial (a trial's median for per-echo and "
            "per-request metrics such as rtt_s, or its p90/p99/max where the row says so), never over the echoes "
            "inside a trial; a host, each VM, each direction and each pair are rows of their own")


def trial_value(metric: str, stat: str = "") -> str:
    """What one trial contributes to `metric`'s statistics, said in words (for a table title or caption)."""
    if stat:
        return f"one value per trial: the {stat} of its samples"
    if dataset.default_reduce(metric) == "median":
        return "one value per trial: the median of its samples"
    return "one value per trial"


def model(data: dataset.Dataset, exclude_noisy: bool = False) -> dict[dataset.Key, dict[int, float]]:
    """The results model of a campaign (dataset.Dataset.reduced): 1-s series are left to the figures."""
    metrics = {s["metric"] for t in data.ok for s in t.samples} - {"throughput_interval_bps"}
    return data.reduced(metrics, exclude_noisy)


def rows(store: Store, cid: int, metrics: tuple[str, ...] | None = None,
         groups: dict[dataset.Key, dict[int, float]] | None = None, data: dataset.Dataset | None = None,
         exclude_noisy: bool = False) -> list[Row]:
    data = data or dataset.load(store, cid)
    groups = model(data, exclude_noisy) if groups is None else groups
    scenarios = data.scenarios
    cols = label_columns([s for s in scenarios.values() if s["status"] != "skipped"])
    asked = _with_stand_ins(metrics)
    shown = dict(sorted(((k, v) for k, v in groups.items() if not asked or k.metric in asked),
                        key=lambda kv: (kv[0].scenario, kv[0].workload, kv[0].metric, kv[0].dims.order(), kv[0].stat)))
    vary = varying_dims(shown)
    noisy = {t.id for t in data.ok if t.noisy}
    flagged = {t.id for t in data.ok if t.flags}
    parts = data.ratio_parts(exclude_noisy) if any(k.metric in dataset.RATIO_OF_SUMS for k in shown) else {}
    out = []
    for key, values in shown.items():
        sc = scenarios[key.scenario]
        tag = key.dims.label(vary[key.name])
        label = ", ".join(f"{k}={sc['labels'][k]}" for k in cols) + (f" [{tag}]" if tag else "")
        unit = METRICS[key.metric].unit if key.metric in METRICS else ""
        # intervals never leave the physical range (a loss CI of -50.8 % .. 137 %): cut there, marked 'clipped'
        summary = stats.within(summarize(list(values.values())), *stats.physical_range(key.metric, unit))
        of_sums = key in parts and set(parts[key]) == set(values)
        if of_sums:
            summary = dataset.ratio_of_sums(summary, parts[key].values())
        out.append(Row(key.scenario, key.workload, label, implementation(sc["implementation"]), key.metric, unit,
                       summary, tag, sc["implementation"] or {}, key, values, len(noisy & set(values)),
                       len(flagged & set(values)), of_sums))
    return [r for r in mark_carried(out, data) if not metrics or r.metric in metrics or r.instead_of]


def _with_stand_ins(metrics: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The metrics asked for and the workload's own percentiles that may stand in for one of them (latency_p90_s for
    a latency_p99_s its round trips cannot carry)."""
    if not metrics:
        return metrics
    families = {_family(m) for m in metrics if dataset.own_percentile(m)}
    return tuple(metrics) + tuple(m for m in METRICS if m not in metrics and dataset.own_percentile(m)
                                  and _family(m) in families)


def _family(metric: str) -> str:
    return metric.replace(f"_{dataset.own_percentile(metric)}_", "_pNN_")


def mark_carried(rows_: list[Row], data: dataset.Dataset) -> list[Row]:
    """Marks a per-trial percentile (p99) whose trials had too few samples for it (uncarried), and the row of the
    highest percentile they do carry (p90, else the median) as standing in for it (instead_of)."""
    by_key = {r.key: r for r in rows_}
    counts = {m: data.sample_counts(m) for m in {r.metric for r in rows_ if dataset.quantile(r.key.stat) is not None}}
    for r in rows_:
        r.uncarried, n = _uncarried(r, counts.get(r.metric, {}))
        if not r.uncarried:
            continue
        instead = dataset.highest_supported(n)
        if (stand_in := by_key.get(dataclasses.replace(r.key, stat="" if instead == "p50" else instead))) is not None:
            stand_in.instead_of[r.key.stat] = r.uncarried
    _mark_own(rows_, data, by_key)
    return rows_


def _mark_own(rows_: list[Row], data: dataset.Dataset, by_key: dict[dataset.Key, Row]) -> None:
    """Marks a workload's own percentile (latency_p99_s) its trials' round trips cannot carry, and the row of the
    highest own percentile they do carry (latency_p90_s) as standing in for it."""
    for key, (why, n) in data.uncarried(by_key).items():
        by_key[key].uncarried = why
        siblings = {dataset.own_percentile(k.metric): k for k in by_key  # the same row's other own percentiles
                    if dataclasses.replace(k, metric=key.metric) == key and _family(k.metric) == _family(key.metric)}
        instead = siblings.get(dataset.highest_supported(n, siblings))
        if instead is not None and instead != key:
            by_key[instead].instead_of[key.metric] = why


def carried(rows_: list[Row]) -> list[Row]:
    """The rows whose numbers the samples carry: what tables and `show --json` present."""
    return [r for r in rows_ if not r.uncarried]


def _uncarried(r: Row, counts: dict[dataset.Key, dict[int, int]]) -> tuple[str, int]:
    """Why a percentile row's trials cannot carry it ('' if they can), and the fewest samples a trial of it had."""
    per = counts.get(dataclasses.replace(r.key, stat=""))
    if dataset.quantile(r.key.stat) is None or not per:
        return "", 0
    n = min(per.get(t, 0) for t in r.values)
    noun = "echoes" if "echo" in getattr(METRICS.get(r.metric), "description", "") else "samples"
    return dataset.unsupported(r.key.stat, n, noun), n


def carried_notes(rows_: list[Row], tails: dict[str, tuple[str, ...]] | None = ALL_TAILS) -> list[str]:
    """A line per percentile asked for (`tails`) that a table's rows stand in for: 'rtt_loaded_s p99 not shown: p99
    needs >= 100 echoes (had 10); p90 shown instead', naming the rows when not all of the table's do."""
    notes: dict[str, list[Row]] = defaultdict(list)
    for r in rows_:
        for stat, why in r.instead_of.items():
            if dataset.own_percentile(stat):  # a workload's own percentile: a metric of its own, always asked
                notes[f"{stat} not shown: {why}; {r.metric} shown instead"].append(r)
            elif tails is None or stat in tails.get(r.metric, ()):
                notes[f"{r.metric} {stat} not shown: {why}; {r.key.stat or 'the median'} shown instead"].append(r)
    return [text + ("" if len(rs) == len(rows_) else f" ({'; '.join(r.label for r in rs)})")
            for text, rs in notes.items()]


def several_workloads(rows_: list[Row]) -> bool:
    """A workload column is worth its width when one scenario has rows of two workloads (the workload's name
    otherwise repeats what the scenario's levels say)."""
    seen: dict[tuple, set[str]] = defaultdict(set)
    for r in rows_:
        seen[(r.scenario, r.tag)].add(r.workload)
    return any(len(w) > 1 for w in seen.values())


def varying_dims(groups) -> dict[str, set[str]]:
    """Per metric (and stat): the Dims fields worth saying in a row's label: the scope (machine, VM, process...)
    when rows of that metric differ in it, the direction and the pair likewise."""
    seen: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for k in groups:
        seen[k.name]["scope"].add((k.dims.scope, k.dims.which))
        seen[k.name]["direction"].add(k.dims.direction)
        seen[k.name]["pair"].add(k.dims.pair)
    return defaultdict(set, {m: {f for f, vs in fs.items() if len(vs) > 1} for m, fs in seen.items()})


def implementation(impl: dict | None) -> str:
    """What really carried the packets, e.g. 'linux-bridge + kernel-vxlan + veth'."""
    return " + ".join(v for v in (impl or {}).values() if v and v != "none")


def campaign_line(camp, scenarios: list[dict]) -> str:
    """The first line of `show` and of `run`'s summary: the campaign, how it ended, its scenarios by status."""
    return (f"[bold]Campaign {camp.id}[/] {escape(camp.name)} ({camp.status}); "
            f"{sum(s['status'] == 'done' for s in scenarios)} scenarios run, "
            f"{sum(s['status'] == 'skipped' for s in scenarios)} skipped, "
            f"{sum(s['status'] == 'failed' for s in scenarios)} failed")


def show(store: Store, cid: int, console: Console, metrics: tuple[str, ...] | None = DEFAULT_METRICS,
         wide: bool = False, exclude_noisy: bool = False, tails: dict[str, tuple[str, ...]] | None = SHORT_TAILS) -> None:
    """The campaign's summary: one table per metric (and per-trial tail statistic in `tails`), one line per
    scenario, workload and what the row measures (a VM, a direction, a pair...)."""
    camp = store.campaign(cid)
    data = dataset.load(store, cid)
    scenarios = list(data.scenarios.values())
    console.print(campaign_line(camp, scenarios))
    by_metric = _by_name(carried(rows(store, cid, metrics, data=data, exclude_noisy=exclude_noisy)), metrics, tails)
    noisy = [t for t in data.ok if t.noisy]
    if noisy:
        console.print(f"{len(noisy)} of {len(data.ok)} trials were flagged noisy ({noisy_why(data)}) and are "
                      + ("left out (--exclude-noisy)" if exclude_noisy else
                         "counted in the 'noisy' column; --exclude-noisy leaves them out"), style="yellow")
    for line in flag_lines(data):
        console.print(escape(line), style="yellow", soft_wrap=False)
    if wide:
        console.print(N_COUNTS + ".", style="dim")
        least = min((r.summary.n for rs in by_metric.values() for r in rs), default=0)
        if stats.t_note(least):  # the mean's t interval, not the exact median interval, is what it is about
            console.print("95% CI mean: " + stats.t_note(least), style="dim")
        for name, rs in by_metric.items():
            for table in _wide_tables(name, rs, console.width):
                console.print(table)
            _print_notes(console, rs, tails)
    else:
        shown = [s for s in scenarios if s["status"] != "skipped"]
        common, differs = split_implementation([s["implementation"] for s in shown])
        if common:
            console.print(escape(f"implementation{' of every scenario' if len(shown) > 1 else ''}: {common}"))
        if shown:  # the legend of tables there are none of when nothing ran
            console.print("median [95% CI] over one value per trial; n = trials; every metric: --all; every "
                          "statistic: --wide", style="dim")
        cols = label_columns(shown)
        labels = {sc["idx"]: sc["labels"] for sc in scenarios}
        for name, rs in by_metric.items():
            console.print(_compact_table(name, rs, differs, cols, labels, console.width))
            _print_notes(console, rs, tails)
        if any(not r.summary.ci_median_exact and not r.of_sums for rs in by_metric.values() for r in rs):
            console.print("* n too small for a 95% interval of the median: the interval shown is min .. max",
                          style="dim")
    for line in offload_lines(data) + steering_lines(data) + pinning_lines(data):
        console.print(escape(line), highlight=False)
    for line in not_run_lines(scenarios):
        console.print(line)
    failed = [t for t in data.trials.values() if t["status"] != "ok"]
    for t in failed[:10]:
        console.print(f"[red]{t['status']} trial[/] scenario {t['scenario']} rep {t['repetition']} "
                      f"{escape(data.names.get((t['scenario'], t['workload']), t['kind']))}: {escape(str(t['error']))}")
    if line := tool_time(list(data.trials.values())):
        console.print(line, style="dim")  # wrapped to the terminal




SUMMARY_LINES = 40  # what `run` ends with fits one screen


def summary(store: Store, cid: int, console: Console, db: str, budget: int = SUMMARY_LINES - 3) -> None:
    """The end of `run`, one screen: each scenario's main metric (its workloads' own, as adaptive repetitions judge
    them) with its interval, what was flagged, what did not run, and the commands that show the rest. Rows past
    the budget are counted, not shown (`show` has them all)."""
    camp = store.campaign(cid)
    data = dataset.load(store, cid)
    scenarios = list(data.scenarios.values())
    more = f"vnetbench show {cid} --db {db}"
    head = [campaign_line(camp, scenarios)]
    noisy = [t for t in data.ok if t.noisy]
    tail = [f"[yellow]{len(noisy)} of {len(data.ok)} trials flagged noisy ({escape(noisy_why(data))})[/]"] \
        if noisy else []
    tail += [f"[yellow]{escape(line)}[/]" for line in flag_lines(data)[:2]]
    not_run = not_run_lines(scenarios)
    tail += not_run if len(not_run) <= 2 else [f"[yellow]{len(not_run)} groups of scenarios skipped or failed[/] "
                                               f"(why: {escape(more)})"]
    failed = [t for t in data.trials.values() if t["status"] != "ok"]
    tail += [f"[red]{len(failed)} trials failed or invalid[/], first: scenario {failed[0]['scenario']} rep "
             f"{failed[0]['repetition']}: {escape(str(failed[0]['error']))[:200]}"] if failed else []
    commands = [f"every metric and statistic: {escape(more)} --all --wide",
                f"the report: vnetbench report {cid} --db {escape(db)} -o report.html"]
    main = tuple(dict.fromkeys(WORKLOADS[t.kind].main_metric for t in data.ok if t.kind in WORKLOADS))
    by_metric = _by_name(carried(rows(store, cid, main, data=data)), main, SHORT_TAILS)
    shown = [s for s in scenarios if s["status"] != "skipped"]
    common, differs = split_implementation([s["implementation"] for s in shown])
    cols, labels = label_columns(shown), {sc["idx"]: sc["labels"] for sc in scenarios}
    if common:
        head.append(escape(f"implementation{' of every scenario' if len(shown) > 1 else ''}: {common}"))
    if by_metric:
        head.append("[dim]median [95% CI] over one value per trial; n = trials; *: too few trials, min .. max shown[/]")
    wrapped = sum(len(console.render_lines(Text.from_markup(c), console.options.update(overflow="fold")))
                  for c in commands)
    left = budget - len(head) - len(tail) - wrapped - 2 * len(by_metric)
    for name, rs in by_metric.items():
        keep = rs[:max(left // max(len(by_metric), 1), 1)]
        head.append(_compact_table(name, keep, differs, cols, labels, console.width))
        if len(keep) < len(rs):
            head.append(f"[dim]... {len(rs) - len(keep)} more rows: {escape(more)}[/]")
    for part in head + tail:
        console.print(part, highlight=False, soft_wrap=False, overflow="ellipsis", no_wrap=isinstance(part, str))
    for line in commands:  # never cut: they are what to type next (a long path folds onto the next line)
        console.print(line, highlight=False, overflow="fold")


def _print_notes(console: Console, rows_: list[Row], tails: dict[str, tuple[str, ...]] | None) -> None:
    """Under a table: the percentiles asked for that its rows stand in for, and what a ratio of sums is."""
    for line in carried_notes(rows_, tails):
        console.print(escape(line), style="yellow", soft_wrap=False)
    if line := sums_note(rows_):
        console.print(line, style="dim")


def sums_note(rows_: list[Row], mean: str = "--wide: mean") -> str:
    """What a table's ratio of sums is, when its rows are one ('' otherwise)."""
    if not rows_ or not all(r.of_sums for r in rows_):
        return ""
    return (f"ratio of sums ({mean}) = the trials' CPU seconds / their {rows_[0].unit.split('/')[-1]}, each summed; "
            "CI: delta method")


def offload_lines(data: dataset.Dataset) -> list[str]:
    """'offloads in force, scenario 2 (offloads=tso/gso/gro off): tso off, gso off, gro off on 10 interfaces' for
    each scenario whose trials read them back (build/offloads.py), said once when its trials agree; the features
    shown are those any level of the campaign sets."""
    records: dict[int, list[dict]] = defaultdict(list)
    for t in data.trials.values():
        if rec := t["metadata"].get("offloads"):
            records[t["scenario"]].append(rec)
    asked = list(dict.fromkeys(k for recs in records.values() for r in recs if isinstance(r.get("asked"), dict)
                               for k in r["asked"]))
    lines = []
    for idx, recs in sorted(records.items()):
        said: dict[str, int] = defaultdict(int)
        for r in recs:
            said[offloads.summary(r, asked)] += 1
        text = next(iter(said)) if len(said) == 1 else \
            " | ".join(f"in {n} of {len(recs)} trials: {s}" for s, n in said.items())
        level = data.scenarios[idx]["labels"].get("offloads", "on") if idx in data.scenarios else "?"
        lines.append(f"offloads in force, scenario {idx} (offloads={level}): {text}")
    return lines


def _in_force_lines(data: dataset.Dataset, key: str, default: str, what: str,
                    summary: Callable[[dict], str]) -> list[str]:
    """'{what} in force, scenario 2 ({key}=level): ...' for each scenario whose trials read `key` back before they
    measured, said once when its trials agree."""
    records: dict[int, list[dict]] = defaultdict(list)
    for t in data.trials.values():
        if rec := t["metadata"].get(key):
            records[t["scenario"]].append(rec)
    lines = []
    for idx, recs in sorted(records.items()):
        said: dict[str, int] = defaultdict(int)
        for r in recs:
            said[summary(r)] += 1
        text = next(iter(said)) if len(said) == 1 else \
            " | ".join(f"in {n} of {len(recs)} trials: {s}" for s, n in said.items())
        level = data.scenarios[idx]["labels"].get(key, default) if idx in data.scenarios else "?"
        lines.append(f"{what} in force, scenario {idx} ({key}={level}): {text}")
    return lines


def _steering_summary(r: dict) -> str:
    counts: dict[str, int] = defaultdict(int)
    for g in r.get("groups", []):
        counts[", ".join(f"{k} {v}" for k, v in g["steering"].items())] += len(g["devices"])
    return "; ".join(f"{s} on {n} interface{'s' * (n != 1)}" for s, n in counts.items()) or \
        f"not read: {r.get('error')}"


def steering_lines(data: dataset.Dataset) -> list[str]:
    """'steering in force, scenario 2 (steering=rps 0-1): rps 0-1, xps n/a on 8 interfaces' for each scenario whose
    trials read the masks back (build/steering.py)."""
    return _in_force_lines(data, "steering", "default", "steering", _steering_summary)


def pinning_lines(data: dataset.Dataset) -> list[str]:
    """'cpu pinning in force, scenario 2 (cpu_pinning=pin(h1=0,h2=1)): h2 on 1 (1 process), h1 on 0 (1 process)' for
    each scenario whose trials read their processes' CPUs (build/pinning.py)."""
    return _in_force_lines(data, "cpu_pinning", "none", "cpu pinning", pinning.summary)


def not_run_lines(scenarios: list[dict]) -> list[str]:
    """A line per failed scenario; skipped ones grouped by reason, named by the levels they share (the demo's ten
    combinations that do not exist, a line of three each, ended its summary with thirty lines)."""
    cols = varying(scenarios)
    groups: dict[str, list[dict]] = defaultdict(list)
    lines = []
    for s in scenarios:
        if s["status"] == "skipped":
            groups[str(s["reason"])].append(s)
        elif s["status"] == "failed":
            groups[f"failed {s['idx']}"].append(s)
    for group in groups.values():
        s = group[0]
        if len(group) == 1:
            short = ", ".join(f"{k}={s['labels'][k]}" for k in cols)  # none when no factor varies: no "()"
            lines.append(f"[yellow]{s['status']}[/] scenario {s['idx']}" + (f" ({escape(short)})" if short else "")
                         + f": {escape(str(s['reason']))}")
            continue
        shared = ", ".join(f"{k}={s['labels'][k]}" for k in cols if len({g['labels'][k] for g in group}) == 1)
        ids = ", ".join(str(g["idx"]) for g in group)
        lines.append(f"[yellow]skipped[/] scenarios {ids}" + (f" ({escape(shared)})" if shared else "")
                     + f": {escape(str(s['reason']))}")
    return lines


def _by_name(rows_: list[Row], metrics: tuple[str, ...] | None,
             tails: dict[str, tuple[str, ...]] | None) -> dict[str, list[Row]]:
    """Rows per table ('rtt_loaded_s', 'rtt_loaded_s p99'), in the order of `metrics`, then by name."""
    out: dict[str, list[Row]] = defaultdict(list)
    order = {m: i for i, m in enumerate(metrics or ())}
    for r in sorted(rows_, key=lambda r: (min(order.get(m, len(order)) for m in (r.metric, *r.instead_of)), r.metric,
                                          dataset.TAIL_STATS.index(r.key.stat) + 1 if r.key.stat else 0)):
        wanted = set(tails.get(r.metric, ())) if tails is not None else set()
        if not r.key.stat or tails is None or r.key.stat in wanted or wanted & set(r.instead_of):
            out[r.name].append(r)
    return out


def as_json(store: Store, cid: int, metrics: tuple[str, ...] | None = None, exclude_noisy: bool = False) -> dict:
    """`show --json`: every row of the results model with its summary and per-trial values, and what did not run."""
    data = dataset.load(store, cid)
    camp = data.campaign

    def num(x):
        return x if isinstance(x, (int, float)) and math.isfinite(x) else None

    levels = dict(zip(data.scenarios, export.typed_levels([s["labels"] for s in data.scenarios.values()])))
    out_rows = []
    for r in carried(rows(store, cid, metrics, data=data, exclude_noisy=exclude_noisy)):
        s = r.summary
        out_rows.append({"scenario": r.scenario, "levels": levels[r.scenario],
                         "workload": r.workload, "metric": r.metric, "stat": r.key.stat or None, "unit": r.unit,
                         **r.key.dims.as_dict(), "n": s.n, "noisy": r.noisy, "flagged": r.flagged,
                         "median": num(s.median), "ci_median": [num(v) for v in s.ci_median],
                         "ci_median_exact": s.ci_median_exact, "mean": num(s.mean),
                         "ci_mean": [num(v) for v in s.ci_mean], "std": num(s.std), "min": num(s.min),
                         "max": num(s.max), "trials": [{"trial": t, "value": v} for t, v in r.values.items()],
                         "mean_is": "ratio of sums" if r.of_sums else "mean",
                         "instead_of": r.instead_of or None})
    return {"campaign": camp.id, "name": camp.name, "status": camp.status, "n_counts": "trials",
            "exclude_noisy": exclude_noisy,
            "scenarios": [{"idx": s["idx"], "levels": levels[i], "status": s["status"], "reason": s["reason"],
                           "implementation": s["implementation"]} for i, s in data.scenarios.items()],
            "trials_noisy": sum(bool(t.noisy) for t in data.ok),
            "trials_not_ok": [{"trial": t["id"], "scenario": t["scenario"], "repetition": t["repetition"],
                               "status": t["status"], "error": t["error"]}
                              for t in data.trials.values() if t["status"] != "ok"],
            "rows": out_rows}


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


OFFERED = "\0offered\0"  # where the offered amount goes in a folded flag


def noisy_why(data: dataset.Dataset) -> str:
    """Why trials were flagged noisy, each kind counted: CPU steal, other load, intervals above the ceiling, a
    background load that ended early (a ceiling flag is not load, and was counted as such)."""
    kinds: dict[str, int] = defaultdict(int)
    for t in data.ok:
        mine = set()
        for why in t.noisy or []:
            text = str(why)
            mine.add("CPU steal" if text.startswith("CPU steal") else "other load" if text.startswith("other work")
                     else "intervals above the ceiling" if "above the payload ceiling" in text
                     else "a background load ended early" if text.startswith("background") else text.split(":")[0])
        for kind in mine:
            kinds[kind] += 1
    return ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))


def flag_lines(data: dataset.Dataset) -> list[str]:
    """What the run flagged, once per campaign: each reason (pairs folded) with how many trials carry it, and
    whether any throughput ceiling went unchecked."""
    reasons: dict[str, int] = defaultdict(int)
    offered: dict[str, list[float]] = defaultdict(list)
    for t in data.ok:
        mine = set()
        for f in t.flags:
            why = re.sub(r" \(pair [^)]*\)", "", f.split(":")[0])  # pairs and directions folded
            # each trial's own shortfall folded too (it made a line per trial, and with the first three shown,
            # "1 of 63 trials flagged" three times for five flagged trials): the range is said instead
            if m := re.match(r"((?:background )?offered )([\d.]+)( of .*)$", why):
                why = m[1] + OFFERED + m[3]
                offered[why].append(float(m[2]))
            mine.add(why)
        for why in mine:
            reasons[why] += 1

    def said(why: str) -> str:
        lo, hi = min(offered[why], default=0), max(offered[why], default=0)
        return why.replace(OFFERED, f"{lo:g}" if lo == hi else f"{lo:g} to {hi:g}")
    lines = [f"{n} of {len(data.ok)} trials flagged: {said(why)} (the 'flagged' column counts them)"
             for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:3]]
    unchecked = sum(NO_CEILING in (t.metadata.get("flags") or []) for t in data.ok)
    return lines + ([f"{unchecked} of {len(data.ok)} trials: {NO_CEILING}"] if unchecked else [])


def _compact_table(name: str, rows_: list[Row], differs: list[str], cols: list[str],
                   labels: dict[int, dict], width: int = COMPACT_WIDTH) -> Table:
    """One line per scenario and what the row measures: its levels of the factors that vary (named once, in the
    header), median [95% CI], n, the trials flagged noisy (when any) and the part of the implementation that
    differs between scenarios."""
    unit = rows_[0].unit
    parts = [[str(labels[r.scenario][k]) for k in cols] for r in rows_]
    several_scenarios = len({r.scenario for r in rows_}) > 1  # one scenario's rows keep its levels as they were
    same = [i for i in range(len(cols)) if several_scenarios and len({p[i] for p in parts}) == 1]
    title = f"{escape(name)} ({unit})" + (f" — {escape(', '.join(f'{cols[i]} {parts[0][i]}' for i in same))}"
                                          if same else "")
    cols_shown = [c for i, c in enumerate(cols) if i not in same]  # a level every row shares goes to the title
    parts = [[x for i, x in enumerate(p) if i not in same] for p in parts]
    table = Table(title=title, title_justify="left", title_style="bold", box=None,
                  header_style="dim", pad_edge=False, padding=(0, 2, 0, 0))
    several = several_workloads(rows_)
    noisy = any(r.noisy for r in rows_)
    flagged = any(r.flagged for r in rows_)
    sums = all(r.of_sums for r in rows_)
    estimate = "ratio of sums [95% CI]" if sums else "median [95% CI]"
    lines = []
    for r, part in zip(rows_, parts):
        s = r.summary
        label = "/".join(part) + (f" [{r.tag}]" if r.tag else "")
        lines.append([label, *((r.workload,) if several else ()),
                      human_interval(s.mean, *s.ci_mean, unit) if sums else
                      human_interval(s.median, *s.ci_median, unit) + ("" if s.ci_median_exact else "*"), str(s.n),
                      *((str(r.noisy),) if noisy else ()), *((str(r.flagged),) if flagged else ()),
                      *((implementation({k: v for k, v in r.impl_parts.items() if k in differs}),) if differs else ())])
    # The numbers are never cut; the scenario and the implementation share what is left of the line.
    names = ["/".join(cols_shown), *(("workload",) if several else ()), estimate, "n",
             *(("noisy",) if noisy else ()), *(("flagged",) if flagged else ()),
             *(("implementation",) if differs else ())]
    widths = [max(len(n), *(len(line[i]) for line in lines)) for i, n in enumerate(names)]
    fixed = widths[1:-1] if differs else widths[1:]
    rest = min(width, COMPACT_WIDTH) - 1 - sum(fixed) - 2 * (len(widths) - 1)
    impl_need = widths[-1] if differs else 0
    widths[0] = max(min(widths[0], rest - impl_need), min(widths[0], rest * 3 // 5), 12)
    if differs:
        widths[-1] = max(rest - widths[0], 8)
    w = widths[0]
    if len({ln[0] if len(ln[0]) <= w else ln[0][:w - 1] for ln in lines}) < len({ln[0] for ln in lines}):
        # cutting the labels' ends would make rows alike: cut each level in its middle instead
        short = _abbreviated(parts, widths[0], [len(r.tag) + 3 if r.tag else 0 for r in rows_])
        for line, r, part in zip(lines, rows_, short):
            line[0] = "/".join(part) + (f" [{r.tag}]" if r.tag else "")
    for n, w in zip(names, widths):
        table.add_column(n, no_wrap=True, overflow="ellipsis", width=w,
                         justify="right" if n in (estimate, "n", "noisy", "flagged") else "left")
    for line in lines:
        table.add_row(*map(escape, line))
    return table


def _abbreviated(parts: list[list[str]], width: int, tags: list[int] | None = None) -> list[list[str]]:
    """Each row's levels, cut in their middle (`tcp…m-4`) to the fewest characters that still tell a level's distinct
    values apart, until every label (with its row's tag, `tags` characters) fits `width`. The level cut first is the
    longest in a row that does not fit, and a cut that shortens no such row is not made: a row that fits keeps its
    levels whole."""
    parts = [list(p) for p in parts]
    tags = tags or [0] * len(parts)
    todo = set(range(len(parts[0]))) if parts else set()

    def length(k: int) -> int:
        return len("/".join(parts[k])) + tags[k]
    while todo and (over := [k for k in range(len(parts)) if length(k) > width]):
        i = max(todo, key=lambda c: max(len(parts[k][c]) for k in over))
        todo.discard(i)
        values = sorted({p[i] for p in parts})
        need = max(length(k) for k in over) - width  # cut no more than the labels need
        longest = max(len(parts[k][i]) for k in over)
        for keep in range(max(3, longest - need - 1), longest):
            short = {v: _middle(v, keep) for v in values}
            if len(set(short.values())) == len(values):
                if any(len(short[parts[k][i]]) < len(parts[k][i]) for k in over):
                    for p in parts:
                        p[i] = short[p[i]]
                break
    return parts


def _middle(text: str, keep: int) -> str:
    """text with its middle cut to `keep` characters around an ellipsis (unchanged when that is no shorter)."""
    if len(text) <= keep + 1:
        return text
    head = (keep + 1) // 2
    return text[:head] + "…" + text[len(text) - (keep - head):]


def _wide_tables(name: str, rows_: list[Row], width: int) -> list[Table]:
    """Every statistic of a metric: one table when it fits the console, else as few as fit, each led by the scenario
    column and holding the next statistics that fit (the implementation last), so no number is cut or folded."""
    extra = (*(("noisy",) if any(r.noisy for r in rows_) else ()),
             *(("flagged",) if any(r.flagged for r in rows_) else ()), "implementation")
    columns, tables, chunk = [*STAT_COLUMNS, *extra], [], []
    wide = Console(width=10_000)
    for col in columns:
        if chunk and wide.measure(_table(name, rows_, (*chunk, col), bool(tables))).maximum > width:
            tables.append(_table(name, rows_, tuple(chunk), bool(tables)))
            chunk = []
        chunk.append(col)
    tables.append(_table(name, rows_, tuple(chunk), bool(tables)))
    return tables


def _table(name: str, rows_: list[Row], columns: tuple[str, ...], cont: bool = False) -> Table:
    unit, metric, stat = rows_[0].unit, rows_[0].metric, rows_[0].key.stat if rows_[0].key else ""
    desc = METRICS[metric].description if metric in METRICS else ""
    title = f"{escape(name)} ({unit}), continued" if cont else \
        f"{escape(name)} ({unit}) — {desc}; n = trials, {trial_value(metric, stat)}"
    table = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    several = several_workloads(rows_)
    for col in ("scenario", *(("workload",) if several else ()), *columns):
        table.add_column(col, justify="left" if col in ("scenario", "workload", "implementation") else "right",
                         overflow="fold")
    for r in rows_:
        cells = dict(zip(STAT_COLUMNS, stat_cells(r.summary, unit))) | {"noisy": str(r.noisy),
                                                                        "flagged": str(r.flagged),
                                                                        "implementation": r.implementation}
        table.add_row(escape(r.label), *((escape(r.workload),) if several else ()),
                      *(escape(cells[c]) for c in columns))
    return table


STAT_COLUMNS = ("n", "median", "IQR", "mean", "std", "CV", "min", "max", "95% CI mean", "95% CI median")


def stat_cells(s: Summary, unit: str) -> list[str]:
    """The STAT_COLUMNS of one summary in human units; '*' marks a median interval that is only min..max."""
    h = lambda v: human(v, unit)  # noqa: E731
    return [str(s.n), h(s.median), h(s.iqr), h(s.mean), h(s.std), human(s.cv, "ratio"), h(s.min), h(s.max),
            f"{h(s.ci_mean[0])} .. {h(s.ci_mean[1])}" + (" (clipped)" if s.clipped else ""),
            f"{h(s.ci_median[0])} .. {h(s.ci_median[1])}" + ("" if s.ci_median_exact else "*")]
