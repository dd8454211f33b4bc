"""`vnetbench compare A B`: is B better, worse or the same as A, per scenario and metric, and by how much?

A and B are two campaigns, or two scenario selections (`--a-where overlay=vxlan --b-where overlay=none`) of one or
two campaigns. Scenarios are matched by their factor levels, leaving out the factors a selection names. Per matched
scenario, workload and metric: the mean of each side's trial values, the ratio of the means B/A with Fieller's 95 %
CI, Welch's p on the same means, Holm-corrected over the whole table, and a verdict (better / worse / not
significant, by the metric's direction in sample.METRICS; "too few trials" or "cannot tell (no spread)" when the
test cannot judge). CPU is compared per unit of work: where the workload measured throughput, a CPU metric's row is
CPU per Gbit/s of that trial (a faster datapath that uses more CPU for more traffic is not a regression). With a
regression threshold, a gated metric (--gate, default: every metric) that is significantly worse (after Holm) by
more than the threshold is a regression, and the command exits 1: a CI gate, the way pyperf's `compare_to` is used.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..catalog import METRICS
from ..core.scenario import NOT_APPLICABLE
from ..core.units import human
from ..results import dataset, guards, stats
from ..results.store import Campaign, Store
from . import tables as report


class CompareError(Exception):
    """Bad input: one line, exit 2."""


@dataclass
class Side:
    store: Store
    campaign: Campaign
    where: dict[str, str] = field(default_factory=dict)

    def describe(self, file: bool = False) -> str:
        """What this side is; `file`: with its results file (when A and B come from two: campaign 1 of each read
        'A: campaign 1 (first)', 'B: campaign 1 (first)')."""
        sel = f" where {', '.join(f'{k}={v}' for k, v in self.where.items())}" if self.where else ""
        return f"campaign {self.campaign.id} ({self.campaign.name}){' in ' + str(self.store.path) if file else ''}{sel}"


@dataclass
class Row:
    scenario: dict[str, str]           # the matched levels
    workload: str
    who: str                           # a process or background workload, '' for the workload itself
    metric: str
    unit: str
    better: str
    a: stats.Summary
    b: stats.Summary
    comparison: stats.Comparison
    p_holm: float = math.nan
    verdict: str = stats.NOT_SIGNIFICANT
    regression: bool = False
    gated: bool = True                 # this row's metric may fail the gate
    not_offered: str = ""              # "A 2/4, B 0/4": trials whose rate-bounded sender fell short of its rate

    @property
    def change(self) -> float:
        """Relative change of the mean, B against A (ratio - 1)."""
        return self.comparison.ratio - 1


def parse_where(items: list[str], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for part in filter(None, (p.strip() for p in item.split(","))):
            key, eq, value = part.partition("=")
            if not eq or not key.strip():
                raise CompareError(f"{option} {part!r}: write FACTOR=LEVEL, e.g. {option} overlay=vxlan")
            out[key.strip()] = value.strip()
    return out


def parse_threshold(text: str) -> float:
    """'5%', '5 %', '0.05' -> 0.05."""
    t = text.strip()
    try:
        value = float(t.rstrip("%").strip()) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise CompareError(f"--fail-on-regression {text!r}: write a percentage like 5% (or a fraction like 0.05)")
    if not 0 <= value < 10:
        raise CompareError(f"--fail-on-regression {text!r}: the threshold must be between 0% and 1000%")
    return value


def _selected(side: Side, option: str) -> dict[tuple, dict]:
    """Match key -> scenario row of the scenarios that satisfy the selection, whatever their status (one that
    failed to build must not vanish: it is missing from the comparison); a done one wins a key."""
    scenarios = side.store.scenarios(side.campaign.id)
    factors = {k for s in scenarios for k in s["labels"]}
    for k in side.where:
        if k not in factors:
            raise CompareError(f"{option} {k}=...: campaign {side.campaign.id} has no factor {k!r}; its factors: "
                               f"{', '.join(sorted(factors)) or 'none'}")
    return {tuple(sorted(s["labels"].items())): s for s in sorted(scenarios, key=lambda s: s["status"] == "done")
            if all(str(s["labels"].get(k)) == v for k, v in side.where.items())}


def _trial_counts(side: Side) -> dict[int, tuple[int, int, str | None]]:
    """Scenario -> (ok trials, trials, the first failed trial's error)."""
    out: dict[int, tuple[int, int, str | None]] = {}
    for t in side.store.trials(side.campaign.id):
        ok, n, error = out.get(t["scenario"], (0, 0, None))
        out[t["scenario"]] = (ok + (t["status"] == "ok"), n + 1, error or (t["error"] if t["status"] != "ok" else None))
    return out


def _ran(s: dict) -> bool:
    """Whether a scenario has results to compare: built (done) is not enough, a datapath that builds and then passes
    no traffic has every trial failed, and its rows would vanish from the table and the gate without a word."""
    return s["status"] == "done" and s["ok"] > 0


def _keyed(a: Side, b: Side) -> list[dict[tuple, dict]]:
    """Per side: the levels left after leaving out the factors a selection names -> that side's scenario row, with
    its trial counts (ok, trials, error)."""
    drop = set(a.where) | set(b.where)
    keyed = []
    for side, option in ((a, "--a-where"), (b, "--b-where")):
        sel = _selected(side, option)
        counts = _trial_counts(side)
        for s in sel.values():
            s["ok"], s["trials"], s["error"] = counts.get(s["idx"], (0, 0, None))
        if not any(s["status"] == "done" for s in sel.values()):
            raise CompareError(f"{option}: no scenario of {side.describe()} ran with those levels" if side.where else
                               f"no scenario of {side.describe()} ran (`vnetbench show` says why)")
        out: dict[tuple, dict] = {}
        for labels, s in sel.items():
            key = tuple((k, v) for k, v in labels if k not in drop)
            if key in out and "done" == s["status"] == out[key]["status"]:
                raise CompareError(f"{option}: several scenarios of {side.describe()} have the levels "
                                   f"{dict(key) or '(none)'}; name more factors so each side has one per match")
            if key not in out or s["status"] == "done":
                out[key] = s
        keyed.append(out)
    return keyed


def _compatible(ka: tuple, kb: tuple) -> bool:
    """Two scenarios' levels agree where both have the factor, a level that does not apply (n/a: no encryption's
    scope, a direct NIC's switch) agreeing with any."""
    da, db = dict(ka), dict(kb)
    return all(da[f] == db[f] or NOT_APPLICABLE in (da[f], db[f]) for f in da.keys() & db.keys())


def _pairs(a: Side, b: Side, keyed: list[dict[tuple, dict]]) -> list[tuple[tuple, tuple]]:
    """A's scenarios paired with B's: the same levels first, then levels that agree but where one side's factor is
    n/a ("no encryption" against WireGuard, whose scope is vm-to-vm); several such on B for one of A is a question
    to narrow, said with the factors that tell them apart."""
    A, B = keyed
    pairs = [(k, k) for k in A if k in B]
    taken = {kb for _, kb in pairs}
    for ka in (k for k in A if k not in B):
        cands = [kb for kb in B if kb not in taken and _compatible(ka, kb)]
        if len(cands) > 1:
            apart = distinguishing([dict(kb) for kb in cands])
            raise CompareError(f"{len(cands)} scenarios of {b.describe()} match {dict(ka)} of {a.describe()}, "
                               f"telling apart by {', '.join(apart)}: add it to --b-where (e.g. --b-where "
                               f"{apart[0]}={dict(cands[0])[apart[0]]})")
        if cands:
            pairs.append((ka, cands[0]))
            taken.add(cands[0])
    return pairs


def _merged(ka: tuple, kb: tuple) -> dict[str, str]:
    """A row's levels: A's, with B's level where A's does not apply."""
    db = dict(kb)
    return {f: db.get(f, v) if v == NOT_APPLICABLE else v for f, v in ka}


def _match(a: Side, b: Side) -> list[tuple[dict[str, str], int, int]]:
    """The scenarios that ran on both sides. Levels that match only where one side passed no trial are not an
    error: missing() lists them, and the gate fails on them."""
    keyed = _keyed(a, b)
    pairs = _pairs(a, b, keyed)
    both = [(ka, kb) for ka, kb in pairs if keyed[0][ka]["status"] == keyed[1][kb]["status"] == "done"]
    if not both:
        two = str(a.store.path) != str(b.store.path)
        raise CompareError(f"no scenario of {a.describe(two)} has the same levels as one of {b.describe(two)}"
                           + _apart(keyed))
    return [(_merged(ka, kb), keyed[0][ka]["idx"], keyed[1][kb]["idx"]) for ka, kb in both
            if _ran(keyed[0][ka]) and _ran(keyed[1][kb])]


def _apart(keyed: list[dict[tuple, dict]]) -> str:
    """': they differ in F, G' for the two scenarios (one a side) that differ in the fewest factors."""
    best = min(((sorted(f for f, v in ka if dict(kb).get(f) not in (v, NOT_APPLICABLE) and v != NOT_APPLICABLE), ka)
                for ka in keyed[0] for kb in keyed[1]), key=lambda d: len(d[0]), default=([], None))[0]
    return f": they differ in {', '.join(best)} (name it in --a-where/--b-where to compare across it)" if best else ""


def missing(a: Side, b: Side) -> list[dict[str, Any]]:
    """The scenarios that ran on one side only: {scenario, missing_in: "A" | "B", why}. Ran: built, with at least one
    ok trial. A CI gate fails on them (a datapath that failed to build in B, or built and then passed no traffic,
    is not "no regression") unless told otherwise."""
    keyed = _keyed(a, b)
    pairs = _pairs(a, b, keyed)
    paired = [(keyed[0][ka], keyed[1][kb], _merged(ka, kb)) for ka, kb in pairs]
    paired += [(keyed[0][ka], None, dict(ka)) for ka in keyed[0] if ka not in {p for p, _ in pairs}]
    paired += [(None, keyed[1][kb], dict(kb)) for kb in keyed[1] if kb not in {q for _, q in pairs}]
    out = []
    for ra, rb, levels in paired:
        ran = [r is not None and _ran(r) for r in (ra, rb)]
        if ran[0] == ran[1]:
            continue
        side, other = ("B", rb) if ran[0] else ("A", ra)
        out.append({"scenario": levels, "missing_in": side, "why": _why(other, (b if ran[0] else a).campaign.id)})
    return out


def _why(row: dict | None, camp: int) -> str:
    """Why a side has no results for a scenario: absent, not built, or no ok trial."""
    if row is None:
        return f"not in campaign {camp}"
    if row["status"] == "done":
        what, reason = f"{row['ok']} of {row['trials']} trials ok", row["error"]
    else:
        what, reason = row["status"], row.get("reason")
    return f"{what} in campaign {camp}" + (f": {reason}" if reason else "")


def trial_values(sides: list[Side], exclude_noisy: bool = False) -> list[dict[tuple[int, str, str, str], list[float]]]:
    """Per side: (scenario, metric, workload, what the row measures) -> one value per trial, from the results model
    (report.model): a VM's CPU is never pooled with the host's, nor one direction with the other."""
    datas = [dataset.load(s.store, s.campaign.id) for s in sides]
    models = [report.model(d, exclude_noisy) for d in datas]
    vary = report.varying_dims([k for m in models for k in m])
    gone = [d.uncarried(m) for d, m in zip(datas, models)]  # a p99 of 30 round trips: not compared (uncarried())
    return [{(k.scenario, k.metric, k.workload, k.dims.label(vary[k.name])): list(v.values())
             for k, v in m.items() if not k.stat and k not in g} for m, g in zip(models, gone)]


def uncarried(sides: list[Side], metrics: list[str] | None = None) -> list[str]:
    """Why a workload's own percentile is not compared: 'latency_p99_s not compared: p99 needs >= 100 round trips
    (had 30) in A' (its trials' round trips cannot carry it; trial_values leaves it out)."""
    wanted = set(metrics or report.COMPARE_METRICS)
    lines: dict[str, None] = {}
    for name, side in zip("AB", sides):
        data = dataset.load(side.store, side.campaign.id)
        for k, (why, _) in sorted(data.uncarried(report.model(data)).items()):
            if k.metric in wanted:
                lines[f"{k.metric} not compared: {why} in {name}"] = None
    return list(lines)


def ratio_parts(sides: list[Side], exclude_noisy: bool = False) -> list[dict[tuple, list[tuple[float, float]]]]:
    """Per side, keyed as trial_values: each trial's (CPU seconds, work) of a metric whose estimate over trials is
    a ratio of sums (dataset.RATIO_OF_SUMS)."""
    got = [dataset.load(s.store, s.campaign.id).ratio_parts(exclude_noisy) for s in sides]
    vary = report.varying_dims([k for g in got for k in g])
    return [{(k.scenario, k.metric, k.workload, k.dims.label(vary[k.name])): list(v.values()) for k, v in g.items()}
            for g in got]


def of_sums(c: stats.Comparison, pa: list[tuple[float, float]], pb: list[tuple[float, float]]) -> stats.Comparison:
    """c with each side's mean the ratio of sums over its trials, and B/A, B - A and their intervals of those: a
    trial that delivered almost nothing weighs what it delivered. The test stays on the per-trial values."""
    sa, sb = dataset.ratio_of_sums(c.a, pa), dataset.ratio_of_sums(c.b, pb)
    return replace(c, a=sa, b=sb, ratio=sb.mean / sa.mean if sa.mean else math.nan, ratio_ci=stats.ratio_ci(sa, sb),
                   diff=sb.mean - sa.mean, diff_ci=stats.diff_ci(sa, sb))


def _not_offered(data) -> dict[tuple[int, str], tuple[int, int]]:
    """(scenario, workload name) -> (ok trials whose sender did not offer its rate, ok trials): guards flag them."""
    out: dict[tuple[int, str], list[int]] = {}
    for t in data.trials.values():
        if t["status"] != "ok":
            continue
        got = out.setdefault((t["scenario"], data.names.get((t["scenario"], t["workload"]), t["kind"])), [0, 0])
        got[0] += guards.not_offered(t["metadata"])
        got[1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def compare(a: Side, b: Side, metrics: list[str] | None = None, alpha: float = 0.05,
            threshold: float | None = None, gate: list[str] | None = None,
            exclude_noisy: bool = False) -> list[Row]:
    """One row per matched scenario, workload, metric and what it measures; Holm over the whole table. CPU is judged
    by its efficiency (cpu_s_per_gbit, a metric of its own): raw CPU has no better direction, so a faster datapath
    that uses more CPU is not a regression."""
    matched = _match(a, b)
    with dataset.cached():  # one read of each campaign for its values, their parts and its flags
        groups = trial_values([a, b], exclude_noisy)
        parts = ratio_parts([a, b], exclude_noisy)
        short = [_not_offered(dataset.load(s.store, s.campaign.id)) for s in (a, b)]
    wanted = set(metrics or report.COMPARE_METRICS)
    unknown = (wanted | set(gate or ())) - set(METRICS)
    if unknown:
        raise CompareError(f"--metric/--gate {sorted(unknown)[0]!r} is not a metric; `vnetbench metrics` lists them")
    rows: list[Row] = []
    for levels, ia, ib in matched:
        for (sc, metric, workload, who), va in sorted(groups[0].items()):
            m = METRICS.get(metric)
            if sc != ia or metric not in wanted or m is None or m.better not in ("higher", "lower"):
                continue
            vb = groups[1].get((ib, metric, workload, who))
            if not vb:
                continue
            c = stats.compare(va, vb, alpha, m.better)
            pa, pb = parts[0].get((sc, metric, workload, who)), parts[1].get((ib, metric, workload, who))
            if pa and pb and len(pa) == len(va) and len(pb) == len(vb):
                c = of_sums(c, pa, pb)
            flags = [short[0].get((ia, workload), (0, 0)), short[1].get((ib, workload), (0, 0))]
            rows.append(Row(levels, workload, who, metric, m.unit, m.better, c.a, c.b, c,
                            gated=gate is None or metric in gate,
                            not_offered=f"A {flags[0][0]}/{flags[0][1]}, B {flags[1][0]}/{flags[1][1]}"
                            if flags[0][0] or flags[1][0] else ""))
    for row, (p, verdict) in zip(rows, stats.holm_verdicts([r.comparison for r in rows], alpha)):
        row.p_holm, row.verdict = p, verdict
        row.regression = bool(threshold is not None and row.gated and verdict == "worse"
                              and abs(row.change) > threshold)
    return rows


# ---- output ------------------------------------------------------------------------------------------------------
def distinguishing(scenarios: list[dict[str, str]]) -> list[str]:
    """The factors whose level is not the same in all these scenarios, in first-seen order."""
    keys = list(dict.fromkeys(k for sc in scenarios for k in sc))
    return [k for k in keys if len({sc.get(k) for sc in scenarios}) > 1]


def _varying(rows: list[Row]) -> list[str]:
    return distinguishing([r.scenario for r in rows])


def _ratio(r: Row) -> str:
    c = r.comparison
    if math.isnan(c.ratio):
        return "-"
    ci = "" if math.isnan(c.ratio_ci[0]) else f" [{c.ratio_ci[0]:.3f}, {c.ratio_ci[1]:.3f}]"
    return f"{c.ratio:.3f}{ci}"


def _p(p: float) -> str:
    return "-" if math.isnan(p) else (f"{p:.2g}" if p >= 0.001 else "<0.001")


def header(a: Side, b: Side, rows: list[Row], alpha: float, threshold: float | None) -> list[str]:
    two = str(a.store.path) != str(b.store.path)
    lines = [f"A: {a.describe(two)}", f"B: {b.describe(two)}",
             f"n = trials per side (one value per trial). Means of the trial values; B/A = ratio of the means with "
             f"Fieller's 95 % CI; p = {stats.TEST} on the same means, " + _family_text(rows, alpha)
             + f"'{stats.NO_TEST}': the exact test cannot reach p < {alpha:g} at that n. Raw CPU has no better "
             f"direction: cpu_s_per_gbit judges it."]
    if sums := sorted({r.metric for r in rows if r.metric in dataset.RATIO_OF_SUMS}):
        lines.append(f"{', '.join(sums)}: each side's mean is its trials' CPU seconds summed / their work summed "
                     f"(delta-method spread); the test is on the per-trial values.")
    least = min((min(r.a.n, r.b.n) for r in rows), default=0)
    if stats.t_note(least):
        lines.append(stats.t_note(least))
    if threshold is not None:
        bad = sum(r.regression for r in rows)
        gated = sorted({r.metric for r in rows if r.gated})
        lines.append(f"{bad} regression{'s' if bad != 1 else ''} (significantly worse by more than {threshold:.0%}; "
                     f"gated metrics: {', '.join(gated) or 'none'}).")
    return lines


def _family_text(rows: list[Row], alpha: float) -> str:
    """Holm's family as the header says it: the rows with a test (none at 3 + 3 trials: no correction to name)."""
    m = family_size(rows)
    if not m:
        return "no row has trials enough for a test; "
    return (f"Holm-corrected over the {m} tested comparison{'s' * (m != 1)} of this table; verdict at alpha = "
            f"{alpha:g}. 'not significant' is not 'the same': (±x %) is the smallest change its test finds 80 % of "
            f"the time at alpha / {m} (Holm's first step); ")


def family_size(rows: list[Row]) -> int:
    """How many tests Holm corrected over: the rows with a p (a row too few for a test is not in the family)."""
    return sum(math.isfinite(r.comparison.p) for r in rows)


def _detectable(r: Row, rows: list[Row], alpha: float) -> str:
    """' (±x %)': the change a 'not significant' row could have found at its family's first Holm step
    (alpha / m, not alpha: at 3 + 3 trials in 13 rows ±17 % would be quoted where 42 % is needed)."""
    if r.verdict != stats.NOT_SIGNIFICANT:
        return ""
    m = family_size(rows)
    found = stats.could_find(r.comparison, alpha, m)
    return f" (±{found})" if found else " (no change detectable)"


def _widths(rows: list[Row], width: int) -> list[int]:
    """Each column's width, fixed here: rich's own shrinking made the table wider than the console and cropped it
    (it shrinks the widest column, then a minimum widens it back). A metric's name, each mean and the verdict's
    first word stay whole when they fit ('not significant' is 15); else names, means and ratios share the rest."""
    name = min(24, max((len(r.metric) for r in rows), default=6))
    means = max([6] + [len(human(s.mean, r.unit)) for r in rows for s in (r.a, r.b)])
    fixed = [name, 5, means, means, 14, 8]
    room = width - 6 - sum(fixed)  # 6 one-space column gaps
    if room >= 16:
        return fixed + [room]
    share = max(6, (width - 6 - 5 - 8 - 16) // 4)
    return [share, 5, share, share, share, 8, 16]


def table(a: Side, b: Side, rows: list[Row], alpha: float, threshold: float | None, width: int = 100):
    """The comparison as a rich table that fits `width` columns. Wider, rich crops it: the verdict lost its last
    letters and the header whole words (its column collapse shrinks the widest column, a min_width widens it back)."""
    from rich.table import Table  # lazily: start-up speed of commands that print no comparison
    cols = _varying(rows)
    several = len({(r.workload, r.who) for r in rows}) > 1
    from rich import box
    from rich.markup import escape
    t = Table(title="\n".join(header(a, b, rows, alpha, threshold)), title_justify="left", header_style="bold",
              box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=0)  # the box's space parts columns
    # The scenario heads its group of rows (a column of its own left the metrics and verdicts a few letters wide
    # at 100 columns).
    for col, w in zip(("metric", "n A/B", "A mean", "B mean", "B/A [95% CI]", "p (Holm)", "verdict"),
                      _widths(rows, width)):
        t.add_column(col, justify="left" if col in ("metric", "verdict") else "right", overflow="fold", width=w)
    heading = None
    for r in rows:
        scen = ", ".join(f"{k}={r.scenario[k]}" for k in cols)
        if cols and scen != heading:
            heading = scen
            t.add_row(f"[bold]{escape(scen)}[/]", end_section=False)
        what = r.metric \
            + (f" ({r.workload}{' ' + r.who if r.who else ''})" if several or r.who else "")
        style = {"worse": "red", "better": "green"}.get(r.verdict, "")
        verdict = r.verdict + (" REGRESSION" if r.regression else "") + _detectable(r, rows, alpha) \
            + (f"; load not offered in {r.not_offered} trials" if r.not_offered else "")
        unit = r.unit
        t.add_row(escape(what), f"{r.a.n}/{r.b.n}", human(r.a.mean, unit),
                  human(r.b.mean, unit), _ratio(r), _p(r.p_holm), f"[{style}]{verdict}[/]" if style else verdict)
    return t


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def as_json(a: Side, b: Side, rows: list[Row], alpha: float, threshold: float | None,
            gone: list[dict] | None = None) -> str:
    def side(s: Side) -> dict[str, Any]:
        return {"campaign": s.campaign.id, "name": s.campaign.name, "db": str(s.store.path), "where": s.where}

    def summ(s: stats.Summary) -> dict[str, Any]:
        return {k: _num(v) for k, v in asdict(s).items() if k in ("n", "median", "mean", "std", "min", "max")}

    out = {"a": side(a), "b": side(b), "test": stats.TEST, "correction": stats.CORRECTION, "alpha": alpha,
           "threshold": threshold, "n_counts": "trials", "regressions": sum(r.regression for r in rows),
           "rows": [{"scenario": r.scenario, "workload": r.workload, "process": r.who or None, "metric": r.metric,
                     "unit": r.unit, "better": r.better, "a": summ(r.a), "b": summ(r.b),
                     "ratio": _num(r.comparison.ratio), "ratio_ci": [_num(v) for v in r.comparison.ratio_ci],
                     "diff": _num(r.comparison.diff), "diff_ci": [_num(v) for v in r.comparison.diff_ci],
                     "p": _num(r.comparison.p), "p_holm": _num(r.p_holm), "verdict": r.verdict,
                     "regression": r.regression, "gated": r.gated,
                     "load_not_offered": r.not_offered or None} for r in rows],
           "missing": gone or []}
    return json.dumps(out, indent=2)
