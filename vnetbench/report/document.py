"""The campaign report as a document: sections of paragraphs, lists, tables and figures, independent of the
output format (render.py writes it as HTML or Markdown). Statistics come from report.rows, like `show`."""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Union

from ..catalog import METRICS
from ..core.units import human, human_interval
from ..results import dataset, scorecard, stats
from ..results.guards import reader_flags
from ..results.store import Campaign, Store
from . import analyses, answer, configuration, figures, mechanism_report, packet_rates
from . import tables as report
from .analyses.base import FigureData, TableData

NOISE_STEAL = 0.01          # steal share above which the machine was not ours alone
NOISE_CV = 0.10             # coefficient of variation above which a scenario's metric is called noisy
# Headline per-trial metrics whose spread between trials says how steady the machine was. Loss, jitter and
# retransmits are left out: rare events spread by nature, whatever the machine.
NOISE_METRICS = ("throughput_bps", "aggregate_throughput_bps", "sender_throughput_bps", "packet_rate_pps",
                 "transactions_per_s", "latency_mean_s", "latency_p50_s", "latency_p90_s", "latency_p99_s",
                 "cpu_busy_ratio", "rtt_s", "rtt_loaded_s", "latency_s")
CDF_METRICS = ("rtt_s", "rtt_loaded_s", "latency_s")
SERIES_METRIC = "throughput_interval_bps"
STAT_NOTE = (report.N_COUNTS + ". IQR = q3 - q1; CV = std / |mean|; 95 % CI of the mean by Student's t; of the median by "
             "the exact order-statistic method (* = too few samples for 95 %: the range min .. max is shown).")


@dataclass
class Para:
    text: str
    kind: str = ""               # "" | "warn" | "note"


@dataclass
class Bullets:
    items: list[str]
    kind: str = ""


@dataclass
class Fold:
    """Blocks shown collapsed in HTML (a <details> element), plainly in Markdown."""
    summary: str
    blocks: list["Block"]


Block = Union[Para, Bullets, TableData, FigureData, Fold]


@dataclass
class Section:
    id: str
    title: str
    blocks: list[Block] = field(default_factory=list)
    nav: str = ""                # a short name for the navigation bar ('' = the title)


@dataclass
class Document:
    title: str
    sections: list[Section]

    def figures(self) -> list[FigureData]:
        return [b for s in self.sections for b in _walk(s.blocks) if isinstance(b, FigureData)]


def _walk(blocks: list[Block]):
    for b in blocks:
        yield b
        if isinstance(b, Fold):
            yield from _walk(b.blocks)


@dataclass
class Data:
    """Everything the sections need, read from the store once."""
    camp: Campaign
    spec: dict
    scenarios: dict[int, dict]
    cols: list[str]
    groups: dict[dataset.Key, dict[int, float]]     # the results model (report.model): trial id -> value
    rows: list[report.Row]
    trials: list[dict]
    series: dict[tuple[int, str, str, str], dict[float, list[float]]]  # (scenario, workload, direction, role)
    event_metrics: set[str]
    data: dataset.Dataset | None = None
    exclude_noisy: bool = False
    overviews: dict[tuple, FigureData] = field(default_factory=dict)  # (metric, its rows) -> the figure drawn


def load(store: Store, cid: int, exclude_noisy: bool = False) -> Data:
    data = dataset.load(store, cid)
    camp, scenarios = data.campaign, data.scenarios
    groups = report.model(data, exclude_noisy)
    trials = list(data.trials.values())
    series: dict[tuple, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    events = set()
    for s in data.samples:
        meta = s["metadata"]
        if s["metric"] == SERIES_METRIC and s["t"] is not None:
            key = (s["scenario"], data.names.get((s["scenario"], s["workload_index"]), s["workload"]),
                   meta.get("direction", ""), "background" if meta.get("role") == "background" else "")
            series[key][round(figures.since_start(s), 1)].append(s["value"])
        elif s["t"] is not None and not meta.get("series") and "cpu" not in meta:
            events.add(s["metric"])  # one sample per echo or request, not one per trial
    run = [s for s in scenarios.values() if s["status"] != "skipped"]
    return Data(camp, camp.spec, scenarios, report.label_columns(run), groups,
                report.carried(report.rows(store, cid, None, groups, data)), trials, series, events, data,
                exclude_noisy)


def build(store: Store, cid: int, exclude_noisy: bool = False) -> Document:
    """The study's own section first (its tables, figures and findings); then what went wrong, the scenarios, and
    the generic statistics and figures, folded when a study leads; the machine's environment last."""
    with dataset.cached():  # the sections and the study's analysis share one read of the campaign
        d = load(store, cid, exclude_noisy)
        lead = bool(d.spec.get("analysis"))
        opening = [] if lead else [answer_section(d)]  # a study leads with its own tables and scorecard
        shown = lead or bool(opening[0].blocks)
        sections = [header(d), *opening, *([study(store, d)] if lead else []), folded(problems(d), shown),
                    folded(warnings(d), shown), latency_under_load(d), packet_rates_section(d), scenario_table(d),
                    statistics(d, fold=shown), where_cpu(store, d), figures_section(d, fold=lead), environment(d)]
    return Document(f"vnetbench report — campaign {d.camp.id} {d.camp.name}", [s for s in sections if s.blocks])


def answer_section(d: Data) -> Section:
    """The answer first: the main metric of each scenario against its baseline, as a figure and a table."""
    metric = answer.main_metric(d.rows, d.trials)
    if metric is None:
        return Section("answer", "Answer", [])
    rows = [r for r in _by_metric(d).get(metric, []) if not r.tag]
    return Section("answer", "Answer", [Para(answer.headline(d.rows, d.trials)), overview_figure(d, metric, rows),
                                        answer.table(d.rows, d.scenarios, d.cols, metric)])


def folded(section: Section, fold: bool) -> Section:
    """A section's blocks behind one line, when the answer comes first."""
    if not fold or not section.blocks:
        return section
    return dataclasses.replace(section, blocks=[Fold(f"{section.title}: show", section.blocks)])


def packet_rates_section(d: Data) -> Section:
    """NDR and PDR per frame size with bounds, in bit/s, the generator's ceiling, latency at shares of the PDR."""
    return Section("packet-rates", "Packet rates (NDR, PDR)", packet_rates.tables(d.data) if d.data is not None else [],
                   "Packet rates")


def where_cpu(store: Store, d: Data) -> Section:
    """Where the CPU went, per profiled scenario (mechanism_report.py); empty when no trial was profiled."""
    blocks: list = mechanism_report.section_blocks(store, d.camp.id, lambda idx: label(d, idx))
    if why := mechanism_report.skipped(store, d.camp.id):
        blocks.append(Para("Profiles asked for but not taken: " + "; ".join(why) + ".", "note"))
    return Section("cpu", "Where the CPU went", blocks, "CPU")


# ---- header and environment -------------------------------------------------------------------------------
def _when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if ts else "-"


def _kv(title: str, pairs: list[tuple[str, str]]) -> TableData:
    return TableData(title, ["", ""], [[k, str(v)] for k, v in pairs])


def tally(d: Data) -> tuple[dict[str, int], int, str, str, str]:
    """(scenario counts by status, ok trials, scenarios text, trials text, duration text)."""
    c = d.camp
    counts = {st: sum(s["status"] == st for s in d.scenarios.values()) for st in ("done", "skipped", "failed", "pending")}
    ok = sum(t["status"] == "ok" for t in d.trials)
    return (counts, ok, ", ".join(f"{n} {st}" for st, n in counts.items() if n) or "none",
            f"{ok} ok, {len(d.trials) - ok} failed", f"{c.finished - c.created:.0f} s" if c.finished else "-")


def header(d: Data) -> Section:
    """One paragraph: what ran, how it ended, where to look; then the configuration (RFC 8204 §3) folded behind one
    line saying what differs between the scenarios. The study's tables or the answer come right after it."""
    c = d.camp
    counts, ok, scen, trials, took = tally(d)
    profile = f", profile {d.spec['profile']}" if d.spec.get("profile") else ""
    line = (f"Campaign {c.id} ({c.name}{profile}) is {c.status}: scenarios {scen}; trials {trials}; started "
            f"{_when(c.created)}, took {took}.")
    if counts["skipped"] or counts["failed"] or len(d.trials) > ok:
        line += " Why scenarios or trials are missing: see 'Skipped and failed'."
    if warnings(d).blocks:
        line += " Read the 'Warnings' (noisy or shared machine) before comparing numbers."
    config = configuration.build(d.camp.environment, d.spec, d.scenarios, d.trials,
                                 {idx: label(d, idx) for idx in d.scenarios})
    return Section("campaign", "Campaign", [Para(line), Fold(config.summary, config.tables)])


def record(d: Data) -> Fold:
    c = d.camp
    _, _, scen, trials, took = tally(d)
    pairs = [("campaign", f"{c.id} — {c.name}"), ("status", c.status), ("description", d.spec.get("description") or "-"),
             ("spec source", c.source or "-"), ("spec sha256", c.spec_sha256), ("profile", d.spec.get("profile") or "-"),
             ("analysis", d.spec.get("analysis") or "-"), ("started", _when(c.created)), ("finished", _when(c.finished)),
             ("duration", took), ("repetitions", str(d.spec.get("repetitions", "-"))), ("scenarios", scen),
             ("trials", trials)]
    return Fold("Campaign record: spec, times, counts", [_kv("", pairs)])


def environment(d: Data) -> Section:
    """Where and from what the campaign ran: its record and the machine, both folded, at the end."""
    e = d.camp.environment
    title = "Campaign record and environment"
    if not e:
        return Section("environment", title, [record(d), Para("No environment was recorded.", "note")])
    mem = e.get("memory_bytes")
    pairs = [("host", e.get("hostname", "-")), ("kernel", e.get("kernel", "-")), ("machine", e.get("machine", "-")),
             ("CPU", e.get("cpu_model", "-")), ("cores", e.get("cpu_count", "-")),
             ("memory", f"{mem / 2**30:.1f} GiB" if mem else "-"),
             ("load average at start", " ".join(f"{v:.2f}" for v in e.get("load_average", []))),
             ("CPU steal at start", _pct(e.get("cpu_steal_ratio_at_start"))),
             ("python / vnetbench", f"{e.get('python', '-')} / {e.get('vnetbench', '-')}")]
    tools = TableData("Tool versions", ["tool", "version"], [[k, str(v)] for k, v in sorted(e.get("tools", {}).items())])
    feats = e.get("kernel_features", {})
    kern = _kv("Kernel features", [("available", ", ".join(k for k, v in sorted(feats.items()) if v) or "-"),
                                   ("missing", ", ".join(k for k, v in sorted(feats.items()) if not v) or "-")])
    table = sysctl_table(d)
    summary = (f"{e.get('hostname', '-')}: {e.get('kernel', '-')}, {e.get('cpu_count', '?')} cores "
               f"({e.get('cpu_model', '-')}), {pairs[5][1]}; machine, {'network sysctls, ' if table else ''}tool "
               f"versions and kernel features")
    blocks = [_kv("Machine", pairs), *([table] if table else []), tools, kern]
    return Section("environment", title, [record(d), Fold(summary, blocks)])


def sysctl_table(d: Data) -> TableData | None:
    """The sysctls that decide results: the machine's, and each value the run's own namespaces had (a new network
    namespace starts from defaults for many of them, so the two can differ)."""
    machine = d.camp.environment.get("sysctls") or {}
    inside: dict[str, set[str]] = defaultdict(set)
    for s in d.scenarios.values():
        for node in ((s.get("environment") or {}).get("sysctls") or {}).values():
            for name, value in node.items():
                inside[name].add(value)
    names = list(dict.fromkeys([*machine, *inside]))
    if not names:
        return None
    rows = [[n, machine.get(n, "-"), " | ".join(sorted(inside[n])) if inside.get(n) else "-"] for n in names]
    return TableData("Network sysctls", ["sysctl", "machine", "in the run's namespaces"], rows,
                     "Congestion control, socket buffers, backlogs, busy polling, GRO/TSO batching and forwarding, "
                     "as read when the campaign started (machine) and in every node of every scenario as built.")


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.2f} %"


# ---- scenarios, problems, warnings ------------------------------------------------------------------------
def label(d: Data, idx: int, sep: str = ", ") -> str:
    return sep.join(f"{k}={d.scenarios[idx]['labels'].get(k, '-')}" for k in d.cols)


def short(d: Data, idx: int) -> str:
    """Only the varying factors' values, for figure axes and legends (the factor names go in the axis title)."""
    return " · ".join(str(d.scenarios[idx]["labels"].get(k, "-")) for k in d.cols)


def scenario_table(d: Data) -> Section:
    sc = list(d.scenarios.values())
    if not sc:
        return Section("scenarios", "Scenarios", [Para("This campaign has no scenarios.", "note")])
    fixed = [k for k in sc[0]["labels"] if k not in d.cols]
    elements = list(dict.fromkeys(k for s in sc for k in (s["implementation"] or {})))
    table = TableData(f"{len(sc)} scenarios", ["#", *d.cols, "status", *(f"{e} impl." for e in elements), "notes"],
                      [[str(s["idx"]), *(str(s["labels"].get(k, "-")) for k in d.cols), s["status"],
                        *((s["implementation"] or {}).get(e) or "-" for e in elements),
                        "; ".join(s["notes"] or []) or (s["reason"] or "")] for s in sc],
                      "impl. = what really carried the packets for each datapath element.")
    common = Para("Fixed in every scenario: " + ", ".join(f"{k}={sc[0]['labels'][k]}" for k in fixed)) if fixed else None
    offloads = [Para(line) for line in report.offload_lines(d.data) + report.steering_lines(d.data)
                + report.pinning_lines(d.data)] \
        if d.data is not None else []
    return Section("scenarios", "Scenarios", [b for b in (common, table, *offloads) if b])


def problems(d: Data) -> Section:
    blocks: list[Block] = []
    bad = [s for s in d.scenarios.values() if s["status"] in ("skipped", "failed", "pending")]
    if bad:
        blocks.append(TableData("Scenarios not measured", ["#", "scenario", "status", "reason"],
                                [[str(s["idx"]), label(d, s["idx"]), s["status"], s["reason"] or "-"] for s in bad]))
    failed = [t for t in d.trials if t["status"] != "ok"]
    if failed:
        blocks.append(TableData("Failed and invalid trials", ["#", "scenario", "repetition", "workload", "status",
                                                              "error"],
                                [[str(t["scenario"]), label(d, t["scenario"]), str(t["repetition"]), _wname(d, t),
                                  t["status"], t["error"] or "-"] for t in failed]))
    return Section("problems", "Skipped and failed", blocks)


def _wname(d: Data, t: dict) -> str:
    return d.data.names.get((t["scenario"], t["workload"]), t["kind"]) if d.data else t["kind"]


def noisy_trials(d: Data) -> list[Block]:
    """The trials the run flagged noisy (steal, a busy machine, a load that did not cover the test), each with why:
    their numbers are in every table (the 'noisy' column counts them) unless the report was made with
    --exclude-noisy."""
    flagged = [t for t in d.trials if t["status"] == "ok" and (t["metadata"] or {}).get("noisy")]
    if not flagged:
        return []
    ok = sum(t["status"] == "ok" for t in d.trials)
    how = ("left out of every table and figure (--exclude-noisy)" if d.exclude_noisy else
           "counted in every table's 'noisy' column; `vnetbench report --exclude-noisy` leaves them out")
    return [Para(f"{len(flagged)} of {ok} trials were flagged noisy while they ran: {how}.", "warn"),
            Fold(f"The {len(flagged)} noisy trials and why",
                 [TableData("Noisy trials", ["#", "scenario", "repetition", "workload", "why"],
                            [[str(t["scenario"]), label(d, t["scenario"]), str(t["repetition"]), _wname(d, t),
                              "; ".join(map(str, t["metadata"]["noisy"]))] for t in flagged])])]


def flagged_trials(d: Data) -> list[Block]:
    """The trials whose load was asked but not offered (guards.check_offered), each with its flags: a number built
    on them measures less than the spec asked for."""
    flagged = [t for t in d.trials if t["status"] == "ok" and reader_flags(t["metadata"])]
    if not flagged:
        return []
    ok = sum(t["status"] == "ok" for t in d.trials)
    return [Para(f"{len(flagged)} of {ok} trials carry a flag (counted in every table's 'flagged' column): their "
                 "numbers measure less load than the spec asked for.", "warn"),
            Fold(f"The {len(flagged)} flagged trials and why",
                 [TableData("Flagged trials", ["#", "scenario", "repetition", "workload", "flags"],
                            [[str(t["scenario"]), label(d, t["scenario"]), str(t["repetition"]), _wname(d, t),
                              "; ".join(reader_flags(t["metadata"]))] for t in flagged])])]


def warnings(d: Data) -> Section:
    blocks: list[Block] = noisy_trials(d) + flagged_trials(d)
    if d.camp.status != "done":
        blocks.append(Para(f"The campaign is {d.camp.status}, not done: scenarios or trials are missing "
                           "(`vnetbench run --resume` continues it).", "warn"))
    steal0 = d.camp.environment.get("cpu_steal_ratio_at_start")
    if steal0 is not None and steal0 > NOISE_STEAL:
        blocks.append(Para(f"CPU steal was {_pct(steal0)} when the campaign started: another guest shared the "
                           "physical CPUs, so every number here is less repeatable.", "warn"))
    stolen = [r for r in d.rows if r.metric == "cpu_steal_ratio" and r.summary.max > NOISE_STEAL]
    if stolen:
        blocks.append(Para(f"CPU steal went above {_pct(NOISE_STEAL)} during the trials of these scenarios:", "warn"))
        blocks.append(Bullets([f"{r.label} ({r.workload}): up to {_pct(r.summary.max)}, mean {_pct(r.summary.mean)}"
                               for r in stolen], "warn"))
    noisy = sorted((r for r in d.rows if _cv_checked(d, r) and r.summary.cv > NOISE_CV),
                   key=lambda r: (NOISE_METRICS.index(r.metric), -r.summary.cv))
    # (trials disagreeing is spread; the trials flagged noisy while they ran are listed above)
    if noisy:
        blocks.append(Para(f"The trials of a scenario disagree by more than {NOISE_CV:.0%} (coefficient of variation) "
                           f"in the {len(noisy)} cases below: compare those numbers with care, or add repetitions.",
                           "warn"))
        blocks.append(TableData("Noisy metrics", ["metric", "scenario", "workload", "n", "noisy trials", "mean", "CV"],
                                [[r.metric, r.label, r.workload, str(r.summary.n), str(r.noisy),
                                  human(r.summary.mean, r.unit), f"{100 * r.summary.cv:.1f} %"] for r in noisy]))
    return Section("warnings", "Warnings", blocks)


def _cv_checked(d: Data, r: report.Row) -> bool:
    """Headline metrics with one value per trial; a CPU share under 5 % (an idle machine) is left out."""
    return (r.metric in NOISE_METRICS and r.metric not in d.event_metrics and _own(r) and r.summary.n > 1
            and math.isfinite(r.summary.cv) and not (r.unit == "ratio" and r.summary.mean < 0.05))


def _own(r: report.Row) -> bool:
    """A row of the workload's own traffic or of a whole machine, not a process, a VM, a background load or a
    tail statistic."""
    k = r.key
    return k is None or (not k.stat and not k.dims.role and k.dims.scope in ("traffic", "machine", "host"))


# ---- statistics and figures -------------------------------------------------------------------------------
def _by_metric(d: Data) -> dict[str, list[report.Row]]:
    """Rows per table: 'rtt_loaded_s', 'rtt_loaded_s p99' ... (a tail statistic is a table of its own)."""
    out: dict[str, list[report.Row]] = defaultdict(list)
    for r in d.rows:
        out[r.name].append(r)
    return out


def describe(metric: str, rows: list[report.Row], default: str = "") -> str:
    """The metric's description; where guests' own rows ([VM ...]) stand beside the machine's, a 'whole machine'
    metric says what their rows are: the guest kernel's own account (a one-CPU guest's 100 % is its one CPU)."""
    desc = METRICS[metric].description if metric in METRICS else default
    if "whole machine" in desc and any(r.key and r.key.dims.scope == "vm" for r in rows):
        desc += ("; rows [VM ...]: that guest's own kernel's account, not the machine's"
                 + (" (its own CPUs: for a one-CPU guest 100 % = its one CPU)" if rows[0].unit == "ratio" else ""))
    return desc


def metric_table(name: str, rows: list[report.Row]) -> TableData:
    several = report.several_workloads(rows)
    unit, metric = rows[0].unit, rows[0].metric
    desc = describe(metric, rows)
    stat = rows[0].key.stat if rows[0].key else ""
    sums = report.sums_note(rows, "the column 'ratio of sums'")
    notes = [sums, *report.carried_notes(rows)]
    return TableData(f"{name} ({unit}) — {desc}" + (f"; {report.trial_value(metric, stat)}" if stat else ""),
                     ["scenario", *(("workload",) if several else ()), "implementation",
                      *(c.replace("mean", "ratio of sums") if sums else c for c in report.STAT_COLUMNS),
                      "noisy trials"],
                     [[r.label, *((r.workload,) if several else ()), r.implementation,
                       *report.stat_cells(r.summary, unit), str(r.noisy)] for r in rows],
                     ". ".join(n for n in notes if n))


LOADED = "rtt_loaded_s"


def latency_under_load(d: Data) -> Section:
    """The loaded-ping tail: per trial its p50, p90, p99 and max (from that trial's echoes), summarised over the
    trials as median [95 % CI] — one row per scenario, workload and pair."""
    by: dict[tuple, dict[str, report.Row]] = defaultdict(dict)
    for r in d.rows:
        if r.metric == LOADED and not r.key.dims.role:
            by[(r.scenario, r.workload, r.tag)][r.key.stat or "p50"] = r
    if not by:
        return Section("latency", "Latency under load", [])
    stats = ("p50", *dataset.TAIL_STATS)
    several = len({w for _, w, _ in by}) > 1

    def cell(r: report.Row | None) -> str:
        if r is None:
            return "-"
        s = r.summary
        return human_interval(s.median, *s.ci_median, "s") + ("" if s.ci_median_exact else "*")
    rows = [[label(d, idx) + (f" [{tag}]" if tag else ""), *((w,) if several else ()), str(next(iter(rs.values())).summary.n),
             *(cell(rs.get(st)) for st in stats), str(max(r.noisy for r in rs.values()))]
            for (idx, w, tag), rs in sorted(by.items())]
    table = TableData(f"{LOADED}: ICMP round trip while the throughput test ran",
                      ["scenario", *(("workload",) if several else ()), "n", *(f"{st} [95% CI]" for st in stats),
                       "noisy trials"], rows,
                      "Each trial's p50, p90, p99 and max over its own echoes; each cell is the median of those per-trial "
                      "values over the n trials with its 95 % CI (* = too few trials for 95 %: min .. max)."
                      + "".join(f" {line}." for line in report.carried_notes([r for rs in by.values()
                                                                             for r in rs.values()])))
    return Section("latency", "Latency under load", [table])


def statistics(d: Data, fold: bool = False) -> Section:
    by = _by_metric(d)
    if not by:
        return Section("statistics", "Statistics per metric", [Para("No samples were stored.", "note")])
    # per-trial tails (p90, p99, max) fold with the other metrics: 'Latency under load' has the loaded one's
    main = [n for m in report.DEFAULT_METRICS for n in by if by[n][0].metric == m and not by[n][0].key.stat]
    rest = sorted(n for n in by if n not in main)
    least = min((r.summary.n for rs in by.values() for r in rs), default=0)
    blocks: list[Block] = [Para(" ".join(x for x in (STAT_NOTE, stats.t_note(least)) if x), "note")]
    for m in main:  # the figure for the picture, the table for the numbers (a tail statistic: the table only)
        if not by[m][0].key.stat:
            blocks.append(overview_figure(d, m, by[m]))
        blocks.append(metric_table(m, by[m]))
    if rest:
        blocks.append(Fold(f"Other metrics ({len(rest)})", [metric_table(m, by[m]) for m in rest]))
    if fold:
        blocks = [Fold(f"Every metric of every scenario: {len(main) + len(rest)} metrics, each with its n, median, "
                       "IQR, mean, CV and 95 % CIs", blocks)]
    return Section("statistics", "Statistics per metric", blocks)


def _row_label(d: Data, r: report.Row, several: bool) -> str:
    return short(d, r.scenario) + (f" ({r.workload})" if several else "") + (f" [{r.tag}]" if r.tag else "")


def overview_figure(d: Data, metric: str, rows: list[report.Row]) -> FigureData:
    """The figure of these rows, drawn once: the answer's and the main metric's table have the same one when the
    metric has no tagged rows."""
    key = (metric, tuple(map(id, rows)))
    if key not in d.overviews:
        d.overviews[key] = _overview(d, metric, rows)
    return d.overviews[key]


def _overview(d: Data, metric: str, rows: list[report.Row]) -> FigureData:
    several = report.several_workloads(rows)
    vals = [list(r.values.values()) for r in rows]
    desc = describe(metric, rows, metric)
    return figures.metric_overview(f"metric-{metric}", f"{metric} — {desc}", rows[0].unit,
                                   [_row_label(d, r, several) for r in rows], [r.summary for r in rows], vals,
                                   " · ".join(d.cols), "Mean per scenario with its 95 % confidence interval "
                                   "(left, clipped to the physically possible range) and the one value of each trial (right).",
                                   [r.workload for r in rows] if several else None, metric)


def figures_section(d: Data, fold: bool = False) -> Section:
    by = _by_metric(d)
    blocks: list[Block] = [f for f in (rtt_cdf(d, m) for m in CDF_METRICS) if f]
    blocks += [f for f in (series_figure(d), cpu_figure(d, by), streams_figure(d, by)) if f]
    if fold and blocks:
        blocks = [Fold(f"{len(blocks)} figures: latency distributions, throughput over time, CPU", blocks)]
    return Section("figures", "Distributions, time series and CPU", blocks)


def rtt_cdf(d: Data, metric: str) -> FigureData | None:
    """Every sample (each echo or round trip of every trial), one curve per scenario, workload and what the
    samples measure (pair, a background load's own pings): the distribution, not one median per trial."""
    found = d.data.pooled_by_key(metric, d.exclude_noisy) if d.data else {}
    if not found:
        return None
    several = len({k.workload for k in found}) > 1
    vary = report.varying_dims(found)
    curves = {}
    for k, vals in found.items():
        tag = k.dims.label(vary[k.name])
        curves[short(d, k.scenario) + (f" ({k.workload})" if several else "") + (f" [{tag}]" if tag else "")] = vals
    desc = METRICS[metric].description if metric in METRICS else metric
    trials = len({t.id for t in d.data.ok if any(s["metric"] == metric for s in t.samples)
                  and not (d.exclude_noisy and t.noisy)})
    return figures.cdf(f"cdf-{metric}", f"{metric} — {desc}", "s", curves, " · ".join(d.cols),
                       f"Empirical CDF of every {metric} sample: {sum(map(len, found.values()))} samples of "
                       f"{trials} trials, pooled per curve (one curve per scenario); the tables' statistics are over "
                       "one value per trial.")


def series_figure(d: Data) -> FigureData | None:
    """One line per scenario, workload entry (and protocol), direction and role: a line never averages a UDP test
    with a TCP one, or a background flood with the measured traffic."""
    if not d.series:
        return None
    varies = [len({k[i] for k in d.series}) > 1 for i in range(4)]
    lines = {}
    for (idx, workload, direction, role), pts in sorted(d.series.items()):
        extra = [x for x, v in zip((workload, direction, role), varies[1:]) if v and x]
        lines[short(d, idx) + (f" — {' '.join(extra)}" if extra else "")] = pts
    return figures.time_series("series-throughput", "Throughput over time (throughput_interval_bps)", "bit/s", lines,
                               " · ".join(d.cols), "Receiver throughput per reporting interval, time from the start "
                               "of the tool's measurement: the line is the mean over repetitions and pairs of one "
                               "workload (and direction), the band their min .. max.")


def cpu_figure(d: Data, by: dict[str, list[report.Row]]) -> FigureData | None:
    kinds = {r.workload for r in by.get("cpu_user_ratio", []) if r.key.dims.scope == "machine"}
    if not kinds:
        return None
    kind = min(kinds, key=lambda k: (not k.startswith("iperf3"), k))
    means = {(r.scenario, r.metric): r.summary.mean for m in figures.CPU_PARTS for r in by.get(m, [])
             if r.workload == kind and r.key.dims.scope == "machine" and not r.key.dims.role}
    idxs = sorted({i for i, _ in means})
    parts = {m: [means.get((i, m), 0.0) for i in idxs] for m in figures.CPU_PARTS if any((i, m) in means for i in idxs)}
    return figures.cpu_breakdown("cpu-breakdown", f"Where the CPU time went during {kind}", [short(d, i) for i in idxs],
                                 parts, " · ".join(d.cols), f"Mean share of the machine's CPU time per category "
                                 f"during the {kind} trials (100 % = all {d.camp.environment.get('cpu_count', '?')} "
                                 "cores busy).")


def streams_figure(d: Data, by: dict[str, list[report.Row]]) -> FigureData | None:
    if "streams" not in d.cols:
        return None
    others = [k for k in d.cols if k != "streams"]
    tput = "aggregate_throughput_bps" if "aggregate_throughput_bps" in by else "throughput_bps"
    kinds = {r.workload for r in by.get(tput, [])}
    panels = {}
    for metric, ylabel, unit in ((tput, "aggregate throughput", "bit/s"), ("cpu_busy_ratio", "CPU busy", "ratio")):
        groups: dict[str, dict[float, object]] = defaultdict(dict)
        for r in by.get(metric, []):
            if r.workload in kinds and _own(r) and r.key.dims.direction in ("", "forward") \
                    and r.key.dims.pair in ("", "1", "all"):
                labels = d.scenarios[r.scenario]["labels"]
                streams = _number(labels.get("streams"))
                if streams is not None:  # one line per workload entry too: never two workloads on one line
                    name = " · ".join(str(labels.get(k)) for k in others) or "all"
                    groups[name + (f" ({r.workload})" if len(kinds) > 1 else "")][streams] = r.summary
        if groups:
            panels[(ylabel, unit)] = dict(groups)
    if not panels:
        return None
    return figures.scaling("streams-scaling", "Scaling with parallel streams", panels, " · ".join(others) or "",
                           f"Mean with 95 % CI against the number of parallel streams ({tput}, cpu_busy_ratio).")


def _number(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


# ---- the study's own analysis -----------------------------------------------------------------------------
def study(store: Store, d: Data) -> Section:
    """The study's tables and figures as the study numbers them, what this run leaves out of it, then the study's
    findings checked on this campaign."""
    name = str(d.spec["analysis"])
    cls = analyses.load_all().get(name)
    scope = [b for b in (omitted(d),) if b]
    if cls is None:
        return Section("analysis", f"Analysis {name}",
                       [Para(f"The spec names analysis '{name}', which this vnetbench does not have.", "warn")])
    try:
        result = cls().run(store, d.camp.id)
    except Exception as exc:  # the generic report stays useful when a study's analysis breaks
        return Section("analysis", cls.title, [Para(f"Analysis '{name}' failed: {type(exc).__name__}: {exc}", "warn"),
                                               Para(traceback.format_exc(limit=3), "note"), *scope])
    blocks: list[Block] = [*card(d), *scope, *result.tables]
    blocks += [FigureData(re.sub(r"[^A-Za-z0-9_.-]+", "-", f"analysis-{name}-{f.name}"), f.title, f.figure, f.caption)
               for f in result.figures]
    if result.findings:
        blocks += [Para("The study's findings, checked on this campaign:"), Bullets(list(result.findings))]
    if not result.tables and not result.figures and not result.findings:
        blocks.append(Para("The analysis produced nothing for this campaign.", "note"))
    return Section("analysis", cls.title, blocks, cls.title.split(":")[0])


def card(d: Data) -> list[Block]:
    """The reproduction scorecard: the study's claims (data in the suite file) against this campaign."""
    rows = scorecard.evaluate(d.spec, d.data) if d.spec.get("scorecard") and d.data is not None else []
    return [TableData("Reproduction scorecard", scorecard.COLUMNS, scorecard.table_rows(rows),
                      scorecard.NOTE + scorecard.interval_note(rows))] \
        if rows else []


def omitted(d: Data) -> Para | None:
    """What this profile of the study leaves out (the spec's `omits`), so no table is read as the whole study."""
    omits = d.spec.get("omits")
    if not isinstance(omits, list) or not omits:
        return None
    profile = d.spec.get("profile")
    who = f"The '{profile}' profile" if profile else "This spec"
    return Para(f"{who} leaves out of the study: " + "; ".join(str(o) for o in omits) + ".", "scope")
