"""The reproduction scorecard: each checkable claim of a study (its `scorecard:` list in the suite file, data not
prose) computed from a campaign — the study's value | ours with a 95 % CI | agrees / differs / cannot tell, and for a
difference the measured reason the campaign holds (a load asked but not offered, a skipped scenario's reason).

A row names two cells (`a`, `b`) or one (`a`) by selectors: every key must match the trial's scenario labels, its
scenario's levels (a dict level matches when it holds every given key: `encryption: {protocol: esp, cipher:
3des-cbc}`), or its workload's parameters (`test: TCP_STREAM`). The file's `scorecard_where` is merged into every
selector, so no cell pools scenarios the study kept apart (IP versions, routers, loads). Values are one per trial.

An entry `{define: [...]}` is no claim: it holds YAML anchors (selectors) the rows below merge.

Kinds:
  ratio      mean(a) / mean(b), Fieller's CI (stats.ratio_ci). The study's value v with `tolerance` t: the band is
             [v / (1 + t), v * (1 + t)]. CI outside the band -> differs; CI inside [v / w, v * w] (w = `within`, default
             2: the CI can tell v from half or twice it) and touching the band -> agrees; else cannot tell (too wide).
  direction  a `higher` / `lower` than b: Welch's test (stats.compare), Holm over the card's direction rows; the
             direction holds significantly -> agrees; the opposite significantly -> differs; else cannot tell.
  value      mean(a) with its t CI against the study's value, the same band rule as ratio.
  contrast   (mean(a) - mean(b)) / (mean(c) - mean(d)), Fieller's CI for two contrasts (stats.contrast_ratio; a cell
             named twice is one sample): S1's ratios of processing rates, TP = 1 / t with t = diff / 2. Band rule as ratio.
A cell's value per trial: `metric` summed over the trial's pairs (a row's `reduce: mean` etc. reduces its samples
instead, for a per-pair quantity such as a latency percentile), a whole-machine probe's window value when the workload
has no such sample (cpu_busy_ratio, interrupts_per_s), or the quotient of two such values
(`metric: context_switches_per_s/interrupts_per_s`).
Every cell needs `min_trials` trials (default 3), else cannot tell. The ratio and value rows decide on intervals
widened for the card's family (Bonferroni over those rows: 1 - 0.05 / m), the printed CI is the plain 95 % one."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from . import stats
from .dataset import DISTRIBUTIONS, Dataset, Trial, load, reduce_values
from .guards import not_offered, reader_flags
from .units import human, parse_rate

AGREES, DIFFERS, CANNOT = "agrees", "differs", "cannot tell"
KINDS = ("ratio", "direction", "value", "contrast")
ALPHA = 0.05


@dataclass
class Row:
    id: str
    claim: str
    study: str                 # the study's value as the card prints it
    ours: str                  # our estimate with its 95 % CI
    verdict: str               # agrees | differs | cannot tell
    why: str = ""              # the measured reason of a difference, or why it cannot tell
    n: tuple[int, ...] = ()    # trials per cell
    estimate: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "claim": self.claim, "study": self.study, "ours": self.ours, "verdict": self.verdict,
                "why": self.why, "n": list(self.n), "estimate": _num(self.estimate), "ci": [_num(x) for x in self.ci]}


@dataclass
class _Cells:
    values: list[list[float]] = field(default_factory=list)
    trials: list[list[Trial]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _num(x: float) -> float | None:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def matches(where: dict, labels: dict, levels: dict, params: dict | None) -> bool:
    """Every key of `where` matches a label, a level, or (for trials) a workload parameter. params=None: a scenario
    without trials, whose workload keys cannot be checked and are ignored."""
    for key, want in where.items():
        if isinstance(want, dict):
            level = levels.get(key)
            if not isinstance(level, dict) or any(str(level.get(k)) != str(v) for k, v in want.items()):
                return False
            continue
        wants = {str(w) for w in want} if isinstance(want, list) else {str(want)}
        have = [labels.get(key), levels.get(key) if not isinstance(levels.get(key), dict) else None]
        if params is not None:
            have.append(params.get(key))
        elif key not in labels and key not in levels:
            continue
        if not any(h is not None and str(h) in wants for h in have):
            return False
    return True


def _cells(data: Dataset, sels: list[dict], metric: str, how: str | None = None) -> _Cells:
    out = _Cells()
    for sel in sels:
        got = [t for t in data.ok if matches(sel, t.labels, t.levels, t.params)]
        vals, used = [], []
        for t in got:
            v = _value(t, metric, how)
            if v is not None and math.isfinite(v):
                vals.append(v)
                used.append(t)
        out.values.append(vals)
        out.trials.append(used)
        out.skipped += [f"{s['status']}: {s['reason'] or 'no reason recorded'}" for s in data.scenario_list
                        if s["status"] in ("skipped", "failed") and matches(sel, s["labels"], s["levels"], None)]
    return out


def _value(t: Trial, metric: str, how: str | None = None) -> float | None:
    """A trial's one value: `how` over its samples, else the median of its echoes for a per-echo metric (rtt_s), else
    the sum over its pairs; else the whole machine's window value (a probe's); 'a/b' is the quotient of two such
    values (a conversion rate, CPU per bit)."""
    if "/" in metric:
        num, den = (_value(t, m.strip(), how) for m in metric.split("/", 1))
        return num / den if num is not None and den else None
    if how or metric in DISTRIBUTIONS:
        vals = t.values(metric)
        own = reduce_values(vals, how or "median") if vals else None
    else:
        own = t.total(metric)
    return own if own is not None else t.machine(metric)


CPU_BOUND, LINE_BOUND = 0.9, 0.9  # a cell is CPU-bound / line-rate-bound at 90 % of the CPUs / of the line rate


def _reason(cells: _Cells, line_rate: float | None = None) -> str:
    """The measured reason a difference could have: a load the campaign asked and did not offer, a cell whose
    trials kept the CPUs (all of the machine's, or a guest kernel's one) busy, a cell at the line rate."""
    flagged = [f for ts in cells.trials for t in ts if not_offered(t.metadata) for f in reader_flags(t.metadata)
               if "offered" in f]
    if flagged:
        return f"offered load not reached ({len(flagged)} flag(s), e.g. {flagged[0]})"
    bounds = []
    for name, ts in zip("ab", cells.trials):
        busy = [b for t in ts if (b := t.machine("cpu_busy_ratio")) is not None]
        tput = [v for t in ts if (v := t.total("throughput_bps")) is not None]
        if busy and min(busy) >= CPU_BOUND:
            where = "its guest kernel's CPU" if any(t.labels.get("kernel") == "guest" for t in ts) else "the machine's CPUs"
            bounds.append(f"{name} CPU-bound ({where} {min(busy):.0%} .. {max(busy):.0%} busy)")
        elif line_rate and tput and min(tput) >= LINE_BOUND * line_rate:
            bounds.append(f"{name} at the line rate ({human(min(tput), 'bit/s')} of {human(line_rate, 'bit/s')})")
    return "; ".join(bounds)


def _line_rate(spec: dict) -> float | None:
    try:
        rate = (spec.get("underlay") or {}).get("rate")
        return float(parse_rate(rate)) if rate is not None else None
    except (ValueError, AttributeError, TypeError):
        return None


def _band(row: dict) -> tuple[float, float]:
    v, tol = float(row["study"]), float(row.get("tolerance", 0.25))
    return (v / (1 + tol), v * (1 + tol)) if v > 0 else (v - tol, v + tol)


def _by_interval(row: dict, ci: tuple[float, float]) -> tuple[str, str]:
    lo, hi = _band(row)
    v, w = float(row["study"]), float(row.get("within", 2.0))
    if not all(math.isfinite(x) for x in ci):
        return CANNOT, "no finite interval (the denominator cannot be told from 0, or too few trials)"
    if ci[1] < lo or ci[0] > hi:
        return DIFFERS, ""
    if v > 0 and (ci[0] < v / w or ci[1] > v * w):
        return CANNOT, f"interval too wide to tell {human(v, '')} from half or twice it"
    return AGREES, ""


def _fmt(x: float, unit: str) -> str:
    return f"{x:.2f}x" if unit == "x" else human(x, unit)


def _contrast_cells(r: dict, base: dict) -> tuple[list[dict], list[float], list[float]]:
    """A contrast row's distinct cells, each with its coefficient in (a - b) / (c - d): a cell named twice (S1's
    Reference in (Reference - CS) / (IPsec - Reference)) is one sample with both coefficients."""
    sels: list[dict] = []
    num: list[float] = []
    den: list[float] = []
    for key, coef, into in (("a", 1, num), ("b", -1, num), ("c", 1, den), ("d", -1, den)):
        sel = {**base, **r[key]}
        if sel not in sels:
            sels.append(sel)
            num.append(0.0)
            den.append(0.0)
        into[sels.index(sel)] += coef
    return sels, num, den


def evaluate(spec: dict, data: Dataset) -> list[Row]:
    """The scorecard of a campaign: one Row per entry of the spec's `scorecard` list."""
    entries = [r for r in (spec.get("scorecard") or []) if isinstance(r, dict) and "define" not in r]
    base = dict(spec.get("scorecard_where") or {})
    line = _line_rate(spec)
    m_ci = max(1, sum(str(r.get("kind")) in ("ratio", "value", "contrast") for r in entries))
    wide = 1 - ALPHA / m_ci
    rows, pend = [], []    # pend: (row index, Comparison, expect) of direction rows, Holm-ed together
    for r in entries:
        kind, metric, need = str(r.get("kind", "ratio")), str(r.get("metric", "throughput_bps")), int(r.get("min_trials", 3))
        sels, num, den = _contrast_cells(r, base) if kind == "contrast" else \
            ([{**base, **r["a"]}] + ([{**base, **r["b"]}] if kind != "value" else []), [], [])
        cells = _cells(data, sels, metric, r.get("reduce"))
        unit = "x" if kind in ("ratio", "contrast") else str(r.get("unit", ""))
        study = str(r.get("study_text") or (_fmt(float(r["study"]), unit) if kind != "direction" else r.get("expect", "")))
        row = Row(str(r.get("id", "")), str(r.get("claim", "")), study, "—", CANNOT, n=tuple(len(v) for v in cells.values))
        rows.append(row)
        if any(not v for v in cells.values):
            row.why = "not measured" + (f" ({'; '.join(sorted(set(cells.skipped))[:2])})" if cells.skipped else
                                        " in this campaign (the profile leaves the cell out)")
            continue
        if kind == "value":
            s = stats.summarize(cells.values[0])
            row.estimate, row.ci = s.mean, s.ci_mean
            row.ours = _ci_text(s.mean, s.ci_mean, unit)
            if s.n < need:
                row.why = f"too few trials (n={s.n}, needs {need})"
                continue
            sw = stats.summarize(cells.values[0], confidence=wide)
            row.verdict, row.why = _by_interval(r, sw.ci_mean)
        elif kind == "contrast":
            sums = [stats.summarize(v) for v in cells.values]
            row.estimate, row.ci = stats.contrast_ratio(sums, num, den)
            row.ours = _ci_text(row.estimate, row.ci, "x")
            if min(row.n) < need:
                row.why = f"too few trials (n={'/'.join(map(str, row.n))}, needs {need} a cell)"
                continue
            row.verdict, row.why = _by_interval(r, stats.contrast_ratio(sums, num, den, wide)[1])
        else:
            c = stats.compare(cells.values[1], cells.values[0])   # a against b: ratio = mean(a) / mean(b)
            row.estimate, row.ci = c.ratio, c.ratio_ci
            row.ours = _ci_text(c.ratio, c.ratio_ci, "x")
            if min(row.n) < need:
                row.why = f"too few trials (n={'/'.join(map(str, row.n))}, needs {need} a cell)"
                continue
            if kind == "ratio":
                row.verdict, row.why = _by_interval(r, stats.ratio_ci(c.a, c.b, wide))
            else:
                pend.append((len(rows) - 1, c, str(r.get("expect", "higher"))))
        if row.verdict == DIFFERS:
            row.why = _reason(cells, line) or "no measured cause in the campaign"
    adjusted = stats.holm([c.p for _, c, _ in pend])
    for (i, c, expect), p in zip(pend, adjusted):
        row = rows[i]
        if not math.isfinite(p) or p >= ALPHA:
            row.verdict, row.why = CANNOT, f"not significant (Holm p = {p:.2g})" if math.isfinite(p) else \
                (c.why or "no test possible")
            continue
        holds = (c.ratio > 1) == (expect == "higher")
        row.verdict = AGREES if holds else DIFFERS
        row.why = f"Holm p = {p:.2g}" if holds else f"the opposite (Holm p = {p:.2g})"
    for i, c, _ in pend:
        if rows[i].verdict == DIFFERS:
            cells = _cells(data, [{**base, **entries[i]["a"]}, {**base, **entries[i]["b"]}],
                           str(entries[i].get("metric", "throughput_bps")), entries[i].get("reduce"))
            if reason := _reason(cells, line):
                rows[i].why += f"; {reason}"
    return rows


def _ci_text(est: float, ci: tuple[float, float], unit: str) -> str:
    if not math.isfinite(est):
        return "—"
    if not all(math.isfinite(x) for x in ci):
        return f"{_fmt(est, unit)} (no CI)"
    return f"{_fmt(est, unit)} ({_fmt(ci[0], unit)} .. {_fmt(ci[1], unit)})"


COLUMNS = ["claim", "study", "ours (95 % CI)", "verdict", "n", "why"]


def table_rows(rows: list[Row]) -> list[list[str]]:
    return [[f"{r.id}: {r.claim}", r.study, r.ours, r.verdict, "/".join(map(str, r.n)), r.why] for r in rows]


NOTE = ("Each row is a claim of the study, data in the suite file's `scorecard`; ours is computed from this campaign, "
        "one value per trial. agrees: the CI lies in the study's band (or the direction holds, Holm over the card's "
        "direction rows); differs: the CI excludes it (or the opposite direction holds); cannot tell: too few trials, "
        "or an interval too wide. Interval rows decide on intervals widened for the card (Bonferroni over them).")


def for_campaign(store, cid: int) -> list[Row]:
    """The scorecard of a stored campaign ([] when its spec has none)."""
    data = load(store, cid)
    spec = data.campaign.spec or {}
    return evaluate(spec, data) if spec.get("scorecard") else []


def print_card(rows: list[Row], console) -> None:
    """`show`'s short table before the metrics: one line per claim."""
    from rich.table import Table
    t = Table(title="Reproduction scorecard (the study's claims against this campaign)", title_justify="left")
    for c in COLUMNS:
        t.add_column(c, overflow="fold")
    for r in table_rows(rows):
        t.add_row(*r)
    console.print(t)
