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
  best       a is the `better` (lower / higher) of a and every selector in `others` (a study's "best technology"
             cell): Welch's test of a against each, Holm over the card's direction and best comparisons together;
             a beats each significantly -> agrees; one beats a significantly -> differs; else cannot tell.
A row's `reduce` (median, mean, sum, ...) makes a trial's one value from its samples (default: the median of a
per-echo metric, else the sum over pairs); a mean over pairs for a ratio such as loss. A whole-machine probe's window
value stands in when the workload has no such sample (cpu_busy_ratio, interrupts_per_s); 'a/b' is the quotient of two
such values (`metric: context_switches_per_s/interrupts_per_s`).
Every cell needs `min_trials` trials (default 3), else cannot tell. A row with `uncheckable: why` is a claim the
suite's design cannot test (a load or direction it does not run): cannot tell, with that reason.
The ratio and value rows decide on intervals widened for the card's family (Bonferroni over those rows:
1 - 0.05 / m), the printed CI is the plain 95 % one."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from . import stats
from .dataset import DISTRIBUTIONS, Dataset, Trial, load, reduce_values
from .guards import not_offered, reader_flags
from .units import human, parse_rate

AGREES, DIFFERS, CANNOT = "agrees", "differs", "cannot tell"
KINDS = ("ratio", "direction", "value", "contrast", "best")
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


CPU_BOUND, LINE_BOUND = 0.9, 0.9  # a kernel this busy over the window had no CPU to spare; 90 % of the line rate
MACHINE_BUSY = 0.5


def _reason(cells: _Cells, line_rate: float | None = None) -> str:
    """The measured reasons a difference could have: a load the campaign asked and did not offer; a host whose own
    kernel was CPU-bound over the window (each host's own, else the machine's CPUs or a guest kernel's one); a cell at
    the line rate; the machine's CPU taken by other work just before the trials."""
    flagged = [f for ts in cells.trials for t in ts if not_offered(t.metadata) for f in reader_flags(t.metadata)
               if "offered" in f]
    out = [f"offered load not reached ({len(flagged)} flag(s), e.g. {flagged[0]})"] if flagged else []
    busy: dict[str, list[float]] = {}
    for t in (t for ts in cells.trials for t in ts):
        for s in t.samples:
            m = s["metadata"]
            if s["metric"] == "cpu_busy_ratio" and m.get("scope") == "machine" and m.get("host") \
                    and "cpu" not in m and not m.get("series"):
                busy.setdefault(str(m["host"]).removeprefix("guest-"), []).append(s["value"])
    hot = {h: math.fsum(v) / len(v) for h, v in sorted(busy.items()) if math.fsum(v) / len(v) >= CPU_BOUND}
    if hot:
        out.append("CPU-bound: " + ", ".join(f"{h} {b:.0%} busy" for h, b in hot.items()))
    for name, ts in zip("ab", cells.trials):
        whole = [b for t in ts if (b := t.machine("cpu_busy_ratio")) is not None]
        tput = [v for t in ts if (v := t.total("throughput_bps")) is not None]
        if not busy and whole and min(whole) >= CPU_BOUND:
            where = "its guest kernel's CPU" if any(t.labels.get("kernel") == "guest" for t in ts) else "the machine's CPUs"
            out.append(f"{name} CPU-bound ({where} {min(whole):.0%} .. {max(whole):.0%} busy)")
        elif line_rate and tput and min(tput) >= LINE_BOUND * line_rate:
            out.append(f"{name} at the line rate ({human(min(tput), 'bit/s')} of {human(line_rate, 'bit/s')})")
    foreign = [f for ts in cells.trials for t in ts
               if isinstance(f := t.metadata.get("foreign_busy_ratio"), (int, float))]
    if foreign and math.fsum(foreign) / len(foreign) >= MACHINE_BUSY:
        out.append(f"the machine {math.fsum(foreign) / len(foreign):.0%} busy with other work before the trials")
    return "; ".join(out)


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
    m_ci = max(1, sum(str(r.get("kind")) in ("ratio", "value", "contrast") and not r.get("uncheckable")
                      for r in entries))
    wide = 1 - ALPHA / m_ci
    rows, pend = [], []    # pend: (row index, Comparison, expect) of direction rows, Holm-ed together
    for r in entries:
        kind, metric, need = str(r.get("kind", "ratio")), str(r.get("metric", "throughput_bps")), int(r.get("min_trials", 3))
        if r.get("uncheckable"):   # a claim this design cannot test, and why (data in the suite file, not a gap)
            rows.append(Row(str(r.get("id", "")), str(r.get("claim", "")), str(r.get("study_text") or (
                _fmt(float(r["study"]), "x" if kind in ("ratio", "contrast") else str(r.get("unit", ""))) if "study" in r
                else r.get("name", r.get("expect", "")))), "—", CANNOT, f"not checkable here: {r['uncheckable']}"))
            continue
        sels, num, den = _contrast_cells(r, base) if kind == "contrast" else (_selectors(r, base), [], [])
        cells = _cells(data, sels, metric, r.get("reduce"))
        unit = "x" if kind in ("ratio", "contrast") else str(r.get("unit", ""))
        study = str(r.get("study_text") or (_fmt(float(r["study"]), unit) if kind not in ("direction", "best")
                                            else r.get("name", "") if kind == "best" else r.get("expect", "")))
        row = Row(str(r.get("id", "")), str(r.get("claim", "")), study, "—", CANNOT, n=tuple(len(v) for v in cells.values))
        rows.append(row)
        if any(not v for v in cells.values):
            row.why = "not measured" + (f" ({'; '.join(sorted(set(cells.skipped))[:2])})" if cells.skipped else
                                        " in this campaign (the profile leaves the cell out)")
            continue
        if kind == "best":
            row.ours = _best_text(r, cells, unit)
            if min(row.n) < need:
                row.why = f"too few trials (n={'/'.join(map(str, row.n))}, needs {need} a cell)"
                continue
            s = stats.summarize(cells.values[0])
            row.estimate, row.ci = s.mean, _physical(s.ci_mean, cells.values[0])
            better = str(r.get("better", "lower"))
            for other in cells.values[1:]:   # other against a: ratio = mean(a) / mean(other)
                pend.append((len(rows) - 1, stats.compare(other, cells.values[0]), better))
            continue
        if kind == "value":
            s = stats.summarize(cells.values[0])
            row.estimate, row.ci = s.mean, _physical(s.ci_mean, cells.values[0])
            row.ours = _ci_text(s.mean, row.ci, unit)
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
    tests: dict[int, list[tuple[stats.Comparison, str, float]]] = {}
    for (i, c, expect), p in zip(pend, adjusted):
        tests.setdefault(i, []).append((c, expect, p))
    for i, got in tests.items():
        rows[i].verdict, rows[i].why = _directions(got, entries[i])
        if rows[i].verdict == DIFFERS and (reason := _reason(_cells(data, _selectors(entries[i], base),
                                                                     str(entries[i].get("metric", "throughput_bps")),
                                                                     entries[i].get("reduce")), line)):
            rows[i].why += f"; {reason}"
    return rows


def _selectors(r: dict, base: dict) -> list[dict]:
    """The row's cells: a, then b (ratio, direction) or each of `others` (best); value rows have a only."""
    kind = str(r.get("kind", "ratio"))
    rest = [] if kind == "value" else list(r.get("others") or []) if kind == "best" else [r["b"]]
    return [{**base, **{k: v for k, v in sel.items() if k != "name"}} for sel in [r["a"], *rest]]


def _directions(got: list[tuple[stats.Comparison, str, float]], entry: dict) -> tuple[str, str]:
    """A direction row's (one test) or a best row's (one per other) verdict from Holm-adjusted p-values."""
    names = [str(o.get("name", "")) for o in entry.get("others") or []] or [""]
    held, opposite, open_ = [], [], []
    for (c, expect, p), name in zip(got, names):
        label = f"{name}: " if name else ""
        if not math.isfinite(p) or p >= ALPHA:
            open_.append(f"{label}not significant (Holm p = {p:.2g})" if math.isfinite(p) else
                         f"{label}{c.why or 'no test possible'}")
        elif (c.ratio > 1) == (expect == "higher"):
            held.append(f"{label}Holm p = {p:.2g}")
        else:
            opposite.append(f"{label}the opposite (Holm p = {p:.2g})")
    if opposite:
        return DIFFERS, "; ".join(opposite + open_)
    if open_:
        return CANNOT, "; ".join(open_ + held)
    return AGREES, "; ".join(held)


def _best_text(r: dict, cells: _Cells, unit: str) -> str:
    """The named technology's mean with its CI, and the best mean measured when another has it."""
    names = [str(r.get("name", "a"))] + [str(o.get("name", f"other {j}")) for j, o in enumerate(r["others"], 1)]
    means = {n: stats.summarize(v).mean for n, v in zip(names, cells.values)}
    s = stats.summarize(cells.values[0])
    text = _ci_text(s.mean, _physical(s.ci_mean, cells.values[0]), unit)
    pick = min if str(r.get("better", "lower")) == "lower" else max
    top = pick(means, key=means.get)
    return text if top == names[0] else f"{text}; best mean: {top} {_fmt(means[top], unit)}"


def _physical(ci: tuple[float, float], values: list[float]) -> tuple[float, float]:
    """A mean's t interval of values that cannot be negative (a time, a loss, a rate) starts at 0 at the lowest: a
    wide interval from few noisy trials is not allowed to print an impossible negative latency."""
    return (max(0.0, ci[0]), ci[1]) if values and min(values) >= 0 else ci


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
