"""`vnetbench report A B [C ...]`: campaigns of the same experiment side by side, as Flent's `-p` plots runs over each
other: the same spec run again after a kernel, an OVS version or an offload changed.

Each campaign is read as its own report reads it (document.load: the same rows, the same summaries, so a number
here is the number its own report prints); scenarios match across campaigns by their levels, as `trend` matches
them (trend.match_key), and what changed beside a scenario (its implementation, the kernel, tool versions) is told
as `trend` tells it. A scenario that ran in only some campaigns is listed, never dropped. `compare A B` tests the
differences; this report shows them.
"""
from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field

from ..catalog import METRICS
from ..core.sample import Dims
from ..results import dataset
from ..results.store import Store
from . import answer, document, figures, trend
from . import tables as report
from .analyses.base import FigureData, TableData
from .compare import distinguishing
from .document import Block, Bullets, Document, Fold, Para, Section

CHANGED = "†"  # marks a scenario whose implementation changed between the campaigns, in figures and tables


class OverlayError(Exception):
    """Bad input: one line, exit 2."""


@dataclass
class Line:
    """One row of an overlay: a scenario, workload and what it measures, with each campaign's row (None: absent)."""
    scenario: tuple                      # trend.match_key of its levels
    workload: str
    dims: Dims
    rows: list[report.Row | None]

    def first(self) -> report.Row:
        return next(r for r in self.rows if r is not None)


@dataclass
class Overlay:
    runs: list[document.Data]
    levels: dict[tuple, dict]                    # match key -> the scenario's levels
    present: dict[tuple, list[int | None]]       # match key -> each campaign's scenario idx that ran (None: did not)
    cols: list[str]                              # the factors that tell the matched scenarios apart
    changes: dict[tuple, list[str]]              # match key -> what changed beside it (its implementation)
    campaign_changes: list[str]                  # what changed for every scenario: kernel, tool versions
    figs: dict[tuple, FigureData] = field(default_factory=dict)  # the figures drawn: the answer's is drawn once
    rows: dict[str, dict[tuple, list]] = field(default_factory=dict)  # table name -> line key -> each campaign's row

    def name(self, j: int) -> str:
        return f"campaign {self.runs[j].camp.id}"

    @property
    def names(self) -> list[str]:
        return [self.name(j) for j in range(len(self.runs))]

    def matched(self) -> list[tuple]:
        """Scenarios that ran in two campaigns or more, in the first campaign's order."""
        return [k for k, idx in self.present.items() if sum(i is not None for i in idx) >= 2]

    def short(self, key: tuple) -> str:
        lv = self.levels[key]
        text = " · ".join(str(lv.get(k, "-")) for k in self.cols) or "the one scenario"
        return text + (f" {CHANGED}" if self.changes.get(key) else "")


def _ran(d: document.Data) -> dict[int, bool]:
    """Scenario idx -> whether it has results: built, and at least one ok trial (compare's rule)."""
    ok = {t["scenario"] for t in d.trials if t["status"] == "ok"}
    return {i: s["status"] == "done" and i in ok for i, s in d.scenarios.items()}


def match(runs: list[document.Data]) -> Overlay:
    present: dict[tuple, list[int | None]] = {}
    levels: dict[tuple, dict] = {}
    for j, d in enumerate(runs):
        for idx, ran in _ran(d).items():
            if not ran:
                continue
            key = trend.match_key(d.scenarios[idx]["labels"])
            levels.setdefault(key, trend.levels(d.scenarios[idx]["labels"]))
            present.setdefault(key, [None] * len(runs))[j] = idx
    if not any(sum(i is not None for i in idx) >= 2 for idx in present.values()):
        raise OverlayError(f"campaigns {', '.join(str(d.camp.id) for d in runs)} have no scenario in common (none "
                           "ran with the same levels in two of them): an overlay needs runs of the same experiment")
    matched = [k for k, idx in present.items() if sum(i is not None for i in idx) >= 2]
    cols = distinguishing([levels[k] for k in matched])
    wide = _campaign_changes(runs)
    changes = {k: _scenario_changes(runs, present[k], {c for _, c in wide}) for k in matched}
    return Overlay(runs, levels, present, cols, {k: v for k, v in changes.items() if v},
                   [f"campaign {cid}: {c}" for cid, c in wide])


def _campaign_changes(runs: list[document.Data]) -> list[tuple[int, str]]:
    """(campaign id, change) of the kernel and tool versions, each campaign against the one before it."""
    out = []
    for before, after in zip(runs, runs[1:]):
        out += [(after.camp.id, c) for c in trend.changed(trend.facts(before.camp, {}), trend.facts(after.camp, {}))]
    return out


def _scenario_changes(runs: list[document.Data], idx: list[int | None], wide: set[str]) -> list[str]:
    """What changed for this scenario only (its implementation), each campaign against the previous one that ran it,
    trend's words; the campaign-wide changes are said once, in the header."""
    out, prev = [], None
    for d, i in zip(runs, idx):
        if i is None:
            continue
        now = trend.facts(d.camp, d.scenarios[i]["implementation"] or {})
        if prev is not None:
            out += [f"campaign {d.camp.id}: {c}" for c in trend.changed(prev, now) if c not in wide]
        prev = now
    return out


def lines(o: Overlay, name: str) -> list[Line]:
    """The rows of table `name` (a metric, or 'metric p99') matched across campaigns, scenarios in the matched
    order; a line any campaign lacks keeps its place with None."""
    if not o.rows:  # every row of every campaign keyed once: a campaign has thousands, a report asks per metric
        keys = set(o.matched())
        for j, d in enumerate(o.runs):
            for r in d.rows:
                key = trend.match_key(d.scenarios[r.scenario]["labels"])
                if key in keys:
                    o.rows.setdefault(r.name, {}).setdefault((key, r.workload, r.key.dims), [None] * len(o.runs))[j] = r
    order = {k: i for i, k in enumerate(o.matched())}
    found = o.rows.get(name, {})
    return [Line(k, w, dims, rs) for (k, w, dims), rs in sorted(found.items(), key=lambda kv: (
        order[kv[0][0]], kv[0][1], kv[0][2].order())) if sum(r is not None for r in rs) >= 2]


def _label(o: Overlay, line: Line, several: bool) -> str:
    r = line.first()
    return o.short(line.scenario) + (f" ({line.workload})" if several else "") + (f" [{r.tag}]" if r.tag else "")


def build(store: Store, cids: list[int], exclude_noisy: bool = False) -> Document:
    """The answer first (the main metric, every campaign side by side), the scenarios not in every campaign, every
    metric overlaid, the distributions overlaid, then what each campaign ran on."""
    with dataset.cached():
        runs = [document.load(store, cid, exclude_noisy) for cid in cids]
    o = match(runs)
    sections = [header(o), answer_section(o), only_some(o), statistics(o), distributions(o), environment(o)]
    return Document(f"vnetbench report — campaigns {', '.join(str(c) for c in cids)} side by side",
                    [s for s in sections if s.blocks])


def header(o: Overlay) -> Section:
    rows = []
    for j, d in enumerate(o.runs):
        _, _, scen, trials, _ = document.tally(d)
        rows.append([o.name(j), d.camp.name, d.camp.status, _when(d.camp.created), scen, trials,
                     str((d.camp.environment or {}).get("kernel", "-"))])
    blocks: list[Block] = [
        Para(f"{len(o.runs)} campaigns side by side, in the order given: {len(o.matched())} scenarios ran in two or "
             "more of them. Each number is the one the campaign's own report prints (one value per trial)."),
        TableData("Campaigns", ["campaign", "name", "status", "started", "scenarios", "trials", "kernel"], rows)]
    if o.campaign_changes:
        blocks.append(Para("Changed between the campaigns, for every scenario: " + "; ".join(o.campaign_changes)
                           + ".", "warn"))
    if o.changes:
        blocks.append(Para(f"{CHANGED} marks a scenario whose implementation changed between the campaigns; the "
                           "tables say how.", "note"))
    return Section("campaigns", "Campaigns", blocks)


def _when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if ts else "-"


def main_metric(o: Overlay) -> str | None:
    """The main metric of the first campaign that has one (the same spec: the same workloads)."""
    return next((m for d in o.runs if (m := answer.main_metric(d.rows, d.trials))), None)


def answer_section(o: Overlay) -> Section:
    metric = main_metric(o)
    if metric is None:
        return Section("answer", "Answer", [])
    got = [ln for ln in lines(o, metric) if not ln.first().tag]
    if not got:
        return Section("answer", "Answer", [])
    better = METRICS[metric].better if metric in METRICS else ""
    head = Para(f"The main metric is {metric} ({METRICS[metric].description if metric in METRICS else metric})"
                + (f": {better} is better" if better in ("higher", "lower") else "") + ". Each campaign's mean with "
                "its 95 % interval, per scenario; `vnetbench compare A B` tests each difference.")
    return Section("answer", "Answer", [head, overlay_figure(o, metric, got), overlay_table(o, metric, got)])


def overlay_figure(o: Overlay, name: str, got: list[Line]) -> FigureData:
    """The figure of these lines, drawn once (the answer's and its metric's under 'Every metric' are one)."""
    key = (name, tuple((ln.scenario, ln.workload, ln.dims) for ln in got))
    if key not in o.figs:
        o.figs[key] = _overlay_figure(o, name, got)
    return o.figs[key]


def _overlay_figure(o: Overlay, name: str, got: list[Line]) -> FigureData:
    several = len({ln.workload for ln in got}) > 1
    r = got[0].first()
    desc = document.describe(r.metric, [ln.first() for ln in got], r.metric)
    return figures.overlay_means(
        f"overlay-{name.replace(' ', '-')}", f"{name} — {desc}", r.unit, [_label(o, ln, several) for ln in got],
        o.names, [[x.summary if x else None for x in ln.rows] for ln in got],
        [[list(x.values.values()) if x else [] for x in ln.rows] for ln in got], " · ".join(o.cols),
        "Mean per scenario and campaign with its 95 % confidence interval (clipped to the physically possible "
        "range), a dot per trial; a campaign without a bar did not run that scenario."
        + (f" {CHANGED}: the implementation changed between the campaigns." if o.changes else ""), r.metric)


def overlay_table(o: Overlay, name: str, got: list[Line]) -> TableData:
    """Per line, each campaign's n, mean and 95 % CI of the mean, the cells of its own report's table."""
    several = len({ln.workload for ln in got}) > 1
    unit = got[0].first().unit
    rows = []
    for ln in got:
        cells = [_label(o, ln, several)]
        for r in ln.rows:
            c = report.stat_cells(r.summary, unit) if r else None
            cells += [c[0], c[3], c[8]] if c else ["-", "not run", "-"]
        rows.append(cells + ["; ".join(o.changes.get(ln.scenario, [])) or "-"])
    desc = document.describe(got[0].first().metric, [ln.first() for ln in got])
    notes = [report.sums_note([r for ln in got for r in ln.rows if r], "the column 'mean'"),
             *report.carried_notes([r for ln in got for r in ln.rows if r])]
    return TableData(f"{name} ({unit}) — {desc}",
                     [" · ".join(o.cols) or "scenario", *(f"{n} {c}" for n in o.names for c in ("n", "mean",
                                                                                             "95% CI mean")),
                      "changed beside it"], rows,
                     ". ".join(x for x in [report.N_COUNTS, *notes] if x))


def only_some(o: Overlay) -> Section:
    """Every scenario that did not run in every campaign, with where it ran and why not elsewhere."""
    items = []
    every = list(o.levels)
    cols = distinguishing([o.levels[k] for k in every]) or o.cols
    for key, idx in o.present.items():
        if all(i is not None for i in idx):
            continue
        ran = [o.name(j) for j, i in enumerate(idx) if i is not None]
        lacking = [_why_not(d, key) for d, i in zip(o.runs, idx) if i is None]
        lv = o.levels[key]
        what = ", ".join(f"{k}={lv.get(k, '-')}" for k in cols) or "the one scenario"
        items.append(f"{what}: ran in {', '.join(ran)} only" + ("" if len(ran) > 1 else " (not overlaid)")
                     + f"; {'; '.join(lacking)}")
    return Section("only-some", "Scenarios not in every campaign", [Bullets(items, "warn")] if items else [],
                   "Not in every campaign")


def _why_not(d: document.Data, key: tuple) -> str:
    for s in d.scenarios.values():
        if trend.match_key(s["labels"]) == key:
            why = s["reason"] or ("no trial ok" if s["status"] == "done" else "")
            return f"campaign {d.camp.id}: {s['status']}" + (f" ({why})" if why else "")
    return f"campaign {d.camp.id}: not in it"


def statistics(o: Overlay) -> Section:
    """Every metric overlaid but the answer's: the headline metrics each with its figure and table, the rest as
    tables, folded."""
    names = list(dict.fromkeys(r.name for d in o.runs for r in d.rows if r.name != main_metric(o)))
    by = {n: got for n in names if (got := lines(o, n))}
    main = [n for m in report.DEFAULT_METRICS for n in by if n == m]
    blocks: list[Block] = []
    for n in main:
        own = [ln for ln in by[n] if not ln.first().tag] or by[n]
        blocks += [overlay_figure(o, n, own), overlay_table(o, n, by[n])]
    rest = [n for n in sorted(by) if n not in main]
    if rest:
        blocks.append(Fold(f"Other metrics ({len(rest)})", [overlay_table(o, n, by[n]) for n in rest]))
    return Section("statistics", "Every metric, campaign by campaign", blocks, "Statistics")


def distributions(o: Overlay) -> Section:
    return Section("figures", "Distributions overlaid",
                   [f for f in (cdf_figure(o, m) for m in document.CDF_METRICS) if f], "Distributions")


def cdf_figure(o: Overlay, metric: str) -> FigureData | None:
    """Every sample of each campaign's matched scenarios: one curve per campaign and scenario (per campaign when
    one scenario is matched), a campaign's colour as in the means' figure."""
    keys = o.matched()
    pooled: dict[tuple, dict[int, list[float]]] = defaultdict(dict)
    for j, d in enumerate(o.runs):
        found = d.data.pooled_by_key(metric, d.exclude_noisy) if d.data else {}
        for k, vals in found.items():
            key = trend.match_key(d.scenarios[k.scenario]["labels"])
            if key in keys:
                pooled[(key, k.workload, k.dims)][j] = vals
    shown = sorted(((k, v) for k, v in pooled.items() if len(v) >= 2),
                   key=lambda kv: (keys.index(kv[0][0]), kv[0][1], kv[0][2].order()))
    if not shown:
        return None
    several = len({w for (_, w, _), _ in shown}) > 1
    vary = report.varying_dims([dataset.Key(0, w, metric, dims) for (_, w, dims), _ in shown])
    curves, styles = {}, []
    for i, ((key, workload, dims), per) in enumerate(shown):
        tag = dims.label(vary.get(metric, set()))
        what = o.short(key) + (f" ({workload})" if several else "") + (f" [{tag}]" if tag else "")
        for j, vals in sorted(per.items()):
            curves[o.name(j) + ("" if len(shown) == 1 else f" · {what}")] = vals
            styles.append((j, i))
    desc = METRICS[metric].description if metric in METRICS else metric
    return figures.overlay_cdf(f"overlay-cdf-{metric}", f"{metric} — {desc}", "s", curves, styles,
                               "campaign" + (f" · {' · '.join(o.cols)}" if len(shown) > 1 and o.cols else ""),
                               f"Empirical CDF of every {metric} sample, pooled per campaign and scenario: colour = "
                               "campaign (as in the means' figures), dash = scenario.")


def environment(o: Overlay) -> Section:
    """Each campaign's own record and machine, folded: what its report ends with."""
    return Section("environment", "Campaign records and environments",
                   [Fold(f"{o.name(j)}: {d.camp.name}", document.environment(d).blocks) for j, d in enumerate(o.runs)],
                   "Environment")
