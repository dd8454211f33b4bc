"""The reproduction scorecard: each checkable claim of a study (its `scorecard:` list in the suite file, data not
prose) computed from a campaign — the study's value | ours with a 95 % CI | the interval the verdict was decided on |
agrees / differs / cannot tell, with the measured reason of a difference (a load asked but not offered, a CPU-bound
cell, a skipped scenario's reason), what would decide an undecided claim, and whether what ran is the study's
implementation or a stand-in for it.

A row names two cells (`a`, `b`) or one (`a`) by selectors: every key must match the trial's scenario labels, its
scenario's levels (a dict level matches when it holds every given key: `encryption: {protocol: esp, cipher:
3des-cbc}`), or its workload's parameters (`test: TCP_STREAM`). The file's `scorecard_where` is merged into every
selector, so no cell pools scenarios the study kept apart (IP versions, routers, loads). Values are one per trial.

An entry `{define: [...]}` is no claim: it holds YAML anchors (selectors) the rows below merge. An entry
`{paper: {...}}` alone is no claim either: what the study ran, for every row (a row's own `paper` adds to it).

Kinds:
  ratio      mean(a) / mean(b), Fieller's CI (stats.ratio_ci), printed; decided on median(a) / median(b) within
             each cell's exact order-statistic interval at the square root of the level (distribution-free: a quiet
             cell beside a busy one's bimodal trials made Fieller's interval give 27-33 % wrong verdicts at a band's
             edge at 4 trials a cell, 6-7 % still at 24; seeded, tests/test_card_verdicts.py). The study's value v
             with `tolerance` t: the band is [v / (1 + t), v * (1 + t)]. An equivalence test: the deciding interval
             wholly inside the band -> agrees; wholly outside -> differs; else cannot tell. At a band's edge either
             verdict is wrong at most as often as the interval misses on one side or the other: alpha / m, over m
             interval rows alpha.
  direction  a `higher` / `lower` than b: the pre-declared test (stats.compare), Holm over the card's direction and
             best comparisons; the direction holds significantly -> agrees; the opposite -> differs; else cannot tell
             (3 + 3 trials: "too few trials for a test", left out of the Holm family).
  value      the median of a's trials with its exact order-statistic interval against the study's value, the same
             band rule as ratio (distribution-free: on a busy machine's bimodal trials the t interval of a mean missed
             12 % at a nominal 99.7 % and 5 trials; the median's holds at any n, and needs 10 trials at 99.7 %).
  contrast   (mean(a) - mean(b)) / (mean(c) - mean(d)), Fieller's CI (stats.contrast_ratio), the band rule.
  best       a is the `better` (lower / higher) of a and every selector in `others` (a study's "best technology"
             cell): the test of a against each, Holm as for direction; a beats each significantly -> agrees; one
             beats a significantly -> differs; else cannot tell. With a tie margin t (the card's `- {tie: t}`
             entry, or the row's `tie`), two one-sided tests (stats.tie_p) against each other show a tie, their
             geometric means within a factor 1 + t, in the same Holm family: a technology that ties with another and
             does not beat it is no best -> differs ("a tie"). Without a margin a tie is undecidable: the test would
             need ever more trials to tell two equal technologies apart.
The ratio, value and contrast rows decide on intervals widened for the card's family: Bonferroni over the m such rows
the campaign measured (1 - 0.05 / m), and over the k looks of a card run in rounds (1 - 0.05 / (m k); its tests at
0.05 / k: vnetbench.run.rounds), printed beside the plain 95 % CI with its level. Such an interval needs
INTERVAL_MIN_N trials a cell (stats.CONTRAST_MIN_N for a contrast): at 3 a busy machine's bimodal trials make a widened
Fieller interval miss far more often than its level says (11 % family-wise over 8 rows at 3 + 3, seeded); a ratio or
value row needs the trials its medians' exact interval takes at that level (a ratio at 95 %: 7 a cell).
A row's `reduce` (median, mean, sum, ...) makes a trial's one value from its samples (default: the median of a
per-echo metric, else the sum over pairs); a mean over pairs for a ratio such as loss. A whole-machine probe's window
value stands in when the workload has no such sample (cpu_busy_ratio, interrupts_per_s); 'a/b' is the quotient of two
such values (`metric: context_switches_per_s/interrupts_per_s`).
Every cell needs `min_trials` trials (default 3), else cannot tell. A row with `uncheckable: why` is a claim the
suite's design cannot test (a load or direction it does not run): cannot tell, and "this machine cannot: why"; a
spec's (or profile's) `scorecard_uncheckable: {id: why}` marks rows so where that profile cannot run the study's
condition (a load scaled down to what a one-CPU guest sends).
An undecided row says what would decide it: about how many trials a cell at the cells' measured CV (for a ratio
or value row, where the medians' exact interval's order statistics are expected to lie among that many normal
trials; else a normal approximation of the interval's or the test's width), more than the trials it has, with the
minutes they take at the campaign's mean trial duration.
Like for like: what ran in a cell (the scenario's recorded implementation) is checked against what the study ran (the
card's and the row's `paper`, else what the row's selectors imply: kernel WireGuard, kernel IPsec, OVS's kernel
datapath, an SR-IOV virtual function); a stand-in (STAND_INS: wireguard-go, strongSwan's userspace ESP, OVS's netdev
datapath, a macvlan; namespace or UML guest VMs where the paper names its VMs; a qemu guest under TCG, an emulated
CPU, wherever it ran: EMULATED) is named in the verdict.
Trials whose sender did not offer the load asked (guards.not_offered) stay in their cells, and every verdict on them
says so with their count. A trial whose background load (S5's flood) did not run at its rate is no trial of its
cell's condition: it is left out of the cell, as S5's own tables leave out such an attack round, and the row says how
many. So is a trial whose samples cannot carry the row's percentile (`reduce: p99` over fewer than 100 samples, a
workload's own latency_p99_s over fewer than 100 round trips: dataset.unsupported)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..core.scenario import DEFAULT_LEVELS
from ..core.units import human, parse_rate
from . import stats
from .dataset import DISTRIBUTIONS, Dataset, Trial, load, quantile, reduce_values, unsupported
from .guards import OFFERED_SHORT, not_offered, reader_flags

AGREES, DIFFERS, CANNOT = "agrees", "differs", "cannot tell"
KINDS = ("ratio", "direction", "value", "contrast", "best")
INTERVALS = ("ratio", "value", "contrast")
EXACT = ("ratio", "value")   # decided on medians' exact order-statistic intervals, whatever the trials' shape
TESTS = ("direction", "best")
ALPHA = 0.05
POWER = 0.8          # what an undecided direction row's trial count is planned for
INTERVAL_MIN_N = 4   # trials a cell before an interval decides (at 3 the exact test cannot reach alpha either)
MAX_TRIALS = 1000    # past this many trials a cell, "what would decide it" says no practical number does
FUTILE = 2           # a card's rounds stop drawing trials for a row that needs over this many times their last count

# (the study's element, what the study ran) -> (where the implementation is recorded, a mark in what ran here that
# only stands in for it, the stand-in's name, the study's)
STAND_INS: dict[tuple[str, str], tuple[str, str, str, str]] = {
    ("wireguard", "kernel"): ("encryption", "wireguard-go", "wireguard-go", "kernel WireGuard"),
    ("ipsec", "kernel"): ("encryption", "libipsec", "strongSwan's userspace ESP (kernel-libipsec)",
                          "the kernel's IPsec"),
    ("ovs_datapath", "kernel"): ("switch", "ovs-netdev", "OVS's userspace datapath (netdev)",
                                 "OVS's kernel datapath"),
    ("nic", "sr-iov"): ("attach", "macvlan", "a macvlan of the host NIC", "an SR-IOV virtual function"),
}
# a mark in any element of what ran (a qemu host guest's `kernel`, a qemu VM's `vm_kernel`, an encryption in its
# kernel) -> what it stands in for: every study ran on its machines' own CPUs, so a TCG row is a stand-in whatever
# its `paper` says (a qemu-kvm row is not)
EMULATED: tuple[str, str] = ("qemu-tcg", "qemu-tcg, an emulated CPU (the study: hardware CPUs)")


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
    decided: str = ""          # what the verdict was decided on: the widened interval, labelled, or the Holm family
    decided_ci: tuple[float, float] = (math.nan, math.nan)
    decided_level: float = math.nan
    stand_in: str = ""         # what ran in place of the study's implementation, and what the study ran
    to_decide: str = ""        # an undecided claim: the trials that would decide it, or what this machine lacks
    trials_to_decide: float = math.nan  # that number of trials a cell (inf: past MAX_TRIALS; nan: not computed)
    cv: tuple[float, ...] = () # each cell's coefficient of variation over its trials

    @property
    def checkable(self) -> bool:
        """A claim this machine can decide: not one the suite marks uncheckable or whose scenario it must skip."""
        return not self.to_decide.startswith("this machine cannot")

    @property
    def reads(self) -> str:
        """The verdict as the card prints it: one decided on a stand-in never reads as a plain agrees / differs."""
        return f"{self.verdict} — stand-in: {self.stand_in}" if self.stand_in else self.verdict

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "claim": self.claim, "study": self.study, "ours": self.ours, "verdict": self.verdict,
                "reads": self.reads, "why": self.why, "n": list(self.n), "estimate": _num(self.estimate),
                "ci": [_num(x) for x in self.ci], "decided": self.decided,
                "decided_level": _num(self.decided_level), "decided_ci": [_num(x) for x in self.decided_ci],
                "stand_in": self.stand_in, "to_decide": self.to_decide, "cv": [_num(x) for x in self.cv]}


@dataclass
class _Cells:
    values: list[list[float]] = field(default_factory=list)
    trials: list[list[Trial]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)   # why trials of the cells were left out, counted


@dataclass
class _Claim:
    """One scorecard entry on its way to a Row: its cells, the coefficients of its estimate and its tests."""
    entry: dict
    row: Row
    kind: str
    unit: str
    cells: _Cells | None = None
    selectors: list[dict] = field(default_factory=list)
    num: list[float] = field(default_factory=list)   # the estimate is sum(num * mean) / sum(den * mean)
    den: list[float] = field(default_factory=list)
    sums: list[stats.Summary] = field(default_factory=list)   # each cell's summary
    ready: bool = False                               # measured with enough trials: gets a verdict
    tests: list[tuple[stats.Comparison, str]] = field(default_factory=list)   # (comparison, expected direction)
    adjusted: list[float] = field(default_factory=list)                         # their Holm-adjusted p
    ties: list[float] = field(default_factory=list)          # a best row's tie test against each other (tie_p)
    ties_adjusted: list[float] = field(default_factory=list)  # their Holm-adjusted p, in the tests' family


def _num(x: float) -> float | None:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def matches(where: dict, labels: dict, levels: dict, params: dict | None) -> bool:
    """Every key of `where` matches a label, a level, or (for trials) a workload parameter. params=None: a scenario
    without trials, whose workload keys cannot be checked and are ignored."""
    for key, want in where.items():
        if isinstance(want, dict):
            level = levels.get(key)
            if not isinstance(level, dict) or any(str(level.get(k)) not in _spellings(v) for k, v in want.items()):
                return False
            continue
        wants = set().union(*map(_spellings, want if isinstance(want, list) else [want]))
        if key not in labels and key not in levels and str(DEFAULT_LEVELS.get(key)) in wants:
            continue  # a campaign from before the factor existed ran at its default level
        have = [labels.get(key), levels.get(key) if not isinstance(levels.get(key), dict) else None]
        if params is not None:
            have.append(params.get(key))
        elif key not in labels and key not in levels:
            continue
        if not any(h is not None and str(h) in wants for h in have):
            return False
    return True


def _spellings(value: Any) -> set[str]:
    """How a selector's value may read in a label or level: YAML reads on/off as true/false (`offloads: {tso: off}`
    selects the level the spec wrote the same way, which the run keeps as 'off')."""
    return {str(value), "on" if value else "off"} if isinstance(value, bool) else {str(value)}


def _cells(data: Dataset, sels: list[dict], metric: str, how: str | None = None) -> _Cells:
    out = _Cells()
    dropped: dict[str, list[str]] = {}   # what left trials out -> an example of each
    for sel in sels:
        got = [t for t in data.ok if matches(sel, t.labels, t.levels, t.params)]
        vals, used = [], []
        for t in got:
            if why := _left_out(t, metric, how):
                dropped.setdefault(why[0], []).append(why[1])
                continue
            v = _value(t, metric, how)
            if v is not None and math.isfinite(v):
                vals.append(v)
                used.append(t)
        out.values.append(vals)
        out.trials.append(used)
        out.skipped += [f"{s['status']}: {s['reason'] or 'no reason recorded'}" for s in data.scenario_list
                        if s["status"] in ("skipped", "failed") and matches(sel, s["labels"], s["levels"], None)]
    total = sum(map(len, out.values)) + sum(map(len, dropped.values()))
    out.left_out = [f"{len(ex)} of {total} trials left out: {what}" + (f" ({ex[0]})" if ex[0] else "")
                    for what, ex in dropped.items()]
    return out


def _left_out(t: Trial, metric: str, how: str | None) -> tuple[str, str] | None:
    """Why a trial is no trial of its cell (what, an example), or None: its background load did not run at its rate
    (S5's flood), or its samples cannot carry the row's percentile."""
    if any(str(f).startswith("background offered ") for f in t.metadata.get("flags") or ()):
        return f"their background load offered less than {100 * OFFERED_SHORT:.0f} % of its rate", ""
    for m in (x.strip() for x in metric.split("/")):
        if how and quantile(how) is not None and (why := unsupported(how, len(t.values(m)))):
            return f"too few samples for their {how}", why
        if why := t.uncarried(m):
            return f"too few round trips for their {m}", why
    return None


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


def _offered(cells: _Cells) -> str:
    """The trials whose sender (or background flood) did not offer the load asked, counted: said on every verdict
    that uses them, so a sender at 1 % of its rate never reads as a plain agreement."""
    short = [t for ts in cells.trials for t in ts if not_offered(t.metadata)]
    if not short:
        return ""
    flags = [f for f in reader_flags(short[0].metadata) if "offered" in f]
    total = sum(len(ts) for ts in cells.trials)
    return f"offered load not reached in {len(short)} of {total} trials" + (f" (e.g. {flags[0]})" if flags else "")


def _reason(cells: _Cells, line_rate: float | None = None) -> str:
    """The measured reasons a difference could have (besides a load not offered, which _offered says on every
    verdict): a host whose own kernel was CPU-bound over the window (each host's own, else the machine's CPUs or a
    guest kernel's one); a cell at the line rate; the machine's CPU taken by other work just before the trials."""
    out: list[str] = []
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


def _by_interval(row: dict, ci: tuple[float, float], unit: str) -> tuple[str, str]:
    """Equivalence: the deciding interval wholly inside the study's band agrees, wholly outside differs; an interval
    that merely touches the band decides nothing (it read 'agrees' 82-99 % of the time on null data)."""
    lo, hi = _band(row)
    if not all(math.isfinite(x) for x in ci):
        return CANNOT, "no finite interval (the denominator cannot be told from 0)"
    if ci[1] < lo or ci[0] > hi:
        return DIFFERS, ""
    if lo <= ci[0] and ci[1] <= hi:
        return AGREES, ""
    band = f"the study's band {_fmt(lo, unit)} .. {_fmt(hi, unit)}"
    if ci[1] - ci[0] > hi - lo:
        return CANNOT, f"interval wider than {band}"
    return CANNOT, f"interval across an edge of {band}"


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
    """The scorecard of a campaign: one Row per claim of the spec's `scorecard` list."""
    return [c.row for c in _evaluate(spec, data)]


def looks(spec: dict) -> int:
    """How many times the card may be decided in the campaign: once, or at each of its rounds (vnetbench.run.rounds)."""
    return len(_counts(spec)) or 1


def open_cells(spec: dict, data: Dataset) -> list[list[dict]]:
    """The cell selectors of every claim still undecided that more trials could decide: measured (no cell skipped
    or empty), checkable, and at its measured CV not beyond FUTILE times the trials a cell the card's last round
    gives (a row that needs ten times more would only take the time of those that can be decided)."""
    reach = FUTILE * max(_counts(spec) or [MAX_TRIALS])
    out = []
    for c in _evaluate(spec, data):
        if c.row.verdict == CANNOT and c.cells is not None and all(c.cells.values) \
                and not c.row.to_decide.startswith("this machine cannot") and not c.row.trials_to_decide > reach:
            out.append(c.selectors)
    return out


def _counts(spec: dict) -> list[int]:
    reps = spec.get("repetitions")
    return list(reps.get("rounds") or ()) if isinstance(reps, dict) else []


@dataclass
class Coverage:
    """What a profile's scenarios measure of its card, before it runs (`plan`, and a card profile's test)."""
    claims: int = 0                                         # checkable claims
    unmeasured: list[str] = field(default_factory=list)     # a claim's cell no runnable scenario measures (and why)
    unneeded: list[str] = field(default_factory=list)       # a runnable scenario's workload no claim's cell names


def coverage(spec: dict, scenarios: list) -> Coverage:
    """Each checkable claim's cells against the expanded scenarios (matrix.Scenario) and their workloads."""
    base = dict(spec.get("scorecard_where") or {})
    listed = [r for r in _listed(spec) if not _setting(r) and not r.get("uncheckable")]
    out, used = Coverage(len(listed)), set()
    for r in listed:
        kind = str(r.get("kind", "ratio"))
        sels = (_contrast_cells(r, base) if kind == "contrast" else _plain_cells(r, base, kind))[0]
        for sel in sels:
            hits = [(sc.index, w) for sc in scenarios for w in range(len(sc.workload_params)) if measures(sel, sc, w)]
            used |= {h for h in hits if not next(sc for sc in scenarios if sc.index == h[0]).skip}
            if not any(not next(sc for sc in scenarios if sc.index == i).skip for i, _ in hits):
                why = next((sc.skip for sc in scenarios for i, _ in hits if sc.index == i and sc.skip), "")
                out.unmeasured.append(f"{r.get('id', '?')}: no scenario measures {sel}" + (f" ({why})" if why else ""))
    out.unneeded = [f"scenario {sc.index} ({sc.key}) workload {w + 1} ({params.get('type')})"
                    for sc in scenarios if not sc.skip for w, params in enumerate(sc.workload_params)
                    if (sc.index, w) not in used and not params.get("background")]
    return out


def measures(sel: dict, sc: Any, w: int) -> bool:
    """Whether workload w of scenario sc (matrix.Scenario) is in the cell `sel` names."""
    params = sc.workload_params[w]
    return matches(sel, sc.shown_labels, sc.levels, {**params, **(params.get("parameters") or {})})


def _listed(spec: dict) -> list[dict]:
    """The card's entries, each claim the spec's `scorecard_uncheckable` names marked uncheckable with its reason,
    and each its `scorecard_reduce` names decided on that reduction of a trial's samples, saying so in its claim."""
    marked, reduced = spec.get("scorecard_uncheckable") or {}, spec.get("scorecard_reduce") or {}
    out = []
    for r in spec.get("scorecard") or []:
        if not isinstance(r, dict) or "define" in r:
            continue
        if r.get("id") in marked:
            r = {**r, "uncheckable": marked[r["id"]]}
        if (how := reduced.get(r.get("id"))) is not None:
            was = r.get("reduce") or ("median" if r.get("metric") in DISTRIBUTIONS else "total")  # _value's
            r = {**r, "reduce": how, "claim": f"{r.get('claim', '')} [here each trial's {how} of its samples, not its "
                                              f"{was}]"}
        out.append(r)
    return out


def _evaluate(spec: dict, data: Dataset) -> list[_Claim]:
    listed = _listed(spec)
    paper = {k: v for r in listed if _setting(r) for k, v in (r.get("paper") or {}).items()}
    tie = next((r["tie"] for r in listed if _setting(r) and "tie" in r), None)
    base = dict(spec.get("scorecard_where") or {})
    claims = [_claim({"tie": tie, **r} if tie and r.get("kind") == "best" else r, base, data)
              for r in listed if not _setting(r)]
    k = looks(spec)
    planned_rows = sum(bool(c.sums) for c in claims if c.kind in INTERVALS)
    for c in claims:
        if c.ready and c.kind in EXACT:
            _exact_enough(c, 1 - ALPHA / (planned_rows * k))
    family = [c for c in claims if c.ready and c.kind in INTERVALS]   # measured: their number is no outcome
    for c in family:
        _decide_interval(c, len(family), k)
    _decide_tests([c for c in claims if c.ready and c.kind in TESTS], k)
    # the families once every measured row has trials enough: what an undecided row's trials are planned for
    planned = (planned_rows * k,
               sum(len(c.tests) for c in claims if c.kind in TESTS), k)
    line = _line_rate(spec)
    for c in claims:
        _finish(c, data, paper, line, planned)
    return claims


def _setting(r: dict) -> bool:
    """A card-wide entry, no claim: what the study ran (`paper`), the margin within which a best row's technologies
    tie (`tie`)."""
    return bool(r) and set(r) <= {"paper", "tie"}


def _claim(r: dict, base: dict, data: Dataset) -> _Claim:
    """A claim's row with our estimate, or why it cannot be decided (not checkable, not measured, too few trials)."""
    kind = str(r.get("kind", "ratio"))
    unit = "x" if kind in ("ratio", "contrast") else str(r.get("unit", ""))
    c = _Claim(r, Row(str(r.get("id", "")), str(r.get("claim", "")), _study_text(r, kind, unit), "—", CANNOT), kind,
               unit)
    if r.get("uncheckable"):   # a claim this design cannot test, and why (data in the suite file, not a gap)
        c.row.why, c.row.to_decide = "not checkable here", f"this machine cannot: {r['uncheckable']}"
        return c
    sels, c.num, c.den = _contrast_cells(r, base) if kind == "contrast" else _plain_cells(r, base, kind)
    c.selectors = sels
    c.cells = _cells(data, sels, str(r.get("metric", "throughput_bps")), r.get("reduce"))
    c.row.n = tuple(len(v) for v in c.cells.values)
    if any(not v for v in c.cells.values):
        c.row.why, c.row.to_decide = _unmeasured(c.cells)
        return c
    _estimate(c)
    need, n = _need(c), "/".join(map(str, c.row.n))
    if min(c.row.n) < int(r.get("min_trials", 3)):
        c.row.why = f"too few trials (n={n}, needs {int(r.get('min_trials', 3))} a cell)"
    elif min(c.row.n) < need:
        c.row.why = f"{stats.NO_TEST} (n={n}; an interval verdict needs {need} a cell)"
    else:
        c.ready = True
    return c


def _study_text(r: dict, kind: str, unit: str) -> str:
    if r.get("study_text"):
        return str(r["study_text"])
    if kind in INTERVALS and "study" in r:
        return _fmt(float(r["study"]), unit)
    return str(r.get("name", "") if kind == "best" else r.get("expect", r.get("name", "")))


def _plain_cells(r: dict, base: dict, kind: str) -> tuple[list[dict], list[float], list[float]]:
    """The cells of a row that is no contrast, with the coefficients of its estimate: a / b, or a alone."""
    coefs = ([1.0], [0.0]) if kind == "value" else ([1.0, 0.0], [0.0, 1.0]) if kind in ("ratio", "direction") \
        else ([], [])
    return _selectors(r, base), *coefs


def _need(c: _Claim) -> int:
    """Trials a cell before the row gets a verdict: an interval's minimum (a contrast's stats.CONTRAST_MIN_N), the
    row's `min_trials`; a test row's test says itself when its trials are too few for it."""
    floor = stats.CONTRAST_MIN_N if c.kind == "contrast" else INTERVAL_MIN_N if c.kind in INTERVALS else 2
    return max(floor, int(c.entry.get("min_trials", 3)))


def _unmeasured(cells: _Cells) -> tuple[str, str]:
    """Why a cell has no trials, and what would measure it."""
    if cells.left_out:
        return f"not measured ({'; '.join(cells.left_out)})", "trials its cells need not leave out"
    skipped = sorted({s.removeprefix("skipped: ") for s in cells.skipped if s.startswith("skipped: ")})
    if skipped:
        return "not measured (its scenario was skipped)", "this machine cannot: " + "; ".join(skipped[:2])
    if cells.skipped:
        return f"not measured ({'; '.join(sorted(set(cells.skipped))[:2])})", "trials that complete in its cells"
    return "not measured in this campaign (the profile leaves the cell out)", "a profile that runs its cells"


def _estimate(c: _Claim) -> None:
    """Our estimate with its plain 95 % CI, and a test row's comparisons."""
    vals, row = c.cells.values, c.row
    c.sums = [stats.summarize(v) for v in vals]
    row.cv = tuple(s.cv for s in c.sums)
    if c.kind == "value":   # the median: its order-statistic interval holds whatever the trials' distribution
        s = c.sums[0]
        row.estimate, row.ci = s.median, s.ci_median
        row.ours = _ci_text(s.median, row.ci, c.unit)
    elif c.kind == "best":
        s = c.sums[0]
        row.estimate, row.ci = s.mean, _physical(s.ci_mean, vals[0])
        row.ours = _best_text(c.entry, c.cells, c.unit)
        better = str(c.entry.get("better", "lower"))
        c.tests = [(stats.compare(other, vals[0]), better) for other in vals[1:]]
        if c.entry.get("tie"):
            c.ties = [stats.tie_p(vals[0], other, float(c.entry["tie"]), ALPHA) for other in vals[1:]]
    elif c.kind == "contrast":
        row.estimate, row.ci = stats.contrast_ratio(c.sums, c.num, c.den)
        row.ours = _ci_text(row.estimate, row.ci, "x")
    else:   # a against b: mean(a) / mean(b)
        a, b = c.sums
        row.estimate = a.mean / b.mean if b.mean else math.nan
        row.ci = stats.ratio_ci(b, a)
        row.ours = _ci_text(row.estimate, row.ci, "x")
        c.tests = [(stats.compare(vals[1], vals[0]), str(c.entry.get("expect", "higher")))] \
            if c.kind == "direction" else []


def _exact_enough(c: _Claim, level: float) -> None:
    """A value (ratio) row decides on the median's exact interval (each cell's, at the square root of the level)
    at the card's level: below the trials that reach it, no verdict (a value row at 99.7 %, 10 a cell)."""
    n, need = min(map(len, c.cells.values)), _median_need(_cell_level(c.kind, level))
    if n < need:
        c.ready = False
        what = "median's exact" if c.kind == "value" else "medians' exact"
        c.row.why = f"too few trials for the {what} {_pct(level)} interval (n={n}, needs {need} a cell)"


def _cell_level(kind: str, level: float) -> float:
    """Each cell's median interval level: a ratio's two cells cover together at least `level` (independent)."""
    return level if kind == "value" else math.sqrt(level)


def _median_ratio_ci(vals: list[list[float]], level: float) -> tuple[float, float]:
    """median(a) / median(b) bounded by each cell's exact order-statistic interval at sqrt(level): distribution-free
    (a quiet cell beside a busy one's bimodal trials made Fieller's interval of the means' ratio miss 27-33 % at
    4 trials a cell at a band's edge, 6-7 % still at 24)."""
    (alo, ahi), (blo, bhi) = (stats.summarize(v, confidence=math.sqrt(level)).ci_median for v in vals)
    return (alo / bhi, ahi / blo) if blo > 0 and alo >= 0 else (math.nan, math.nan)


def _median_need(level: float) -> int:
    """The fewest trials whose median has an exact order-statistic interval at `level`: 1 - 2^(1-n) >= level."""
    return max(2, math.ceil(1 - math.log2(1 - level)))


def _decide_interval(c: _Claim, m: int, k: int = 1) -> None:
    """The verdict on the interval widened for the card's m interval rows at each of its k looks (Bonferroni),
    labelled on the row."""
    level, vals, row = 1 - ALPHA / (m * k), c.cells.values, c.row
    if c.kind == "value":
        ci = stats.summarize(vals[0], confidence=level).ci_median
    elif c.kind == "contrast":
        ci = stats.contrast_ratio(c.sums, c.num, c.den, level)[1]
    else:
        ci = _median_ratio_ci(vals, level)
    row.decided_ci, row.decided_level = ci, level
    shown = f"{_fmt(ci[0], c.unit)} .. {_fmt(ci[1], c.unit)}" if all(map(math.isfinite, ci)) else "unbounded"
    over = [f"{m} rows"] * (m > 1) + [f"{k} looks"] * (k > 1)
    of = " of the medians' ratio (exact)" if c.kind == "ratio" else ""
    row.decided = f"{_pct(level)} CI{of} {shown}" + (f" (Bonferroni over {' x '.join(over)})" if over else "")
    row.verdict, row.why = _by_interval(c.entry, ci, c.unit)


def _pct(level: float) -> str:
    return f"{100 * level:.1f}".removesuffix(".0") + " %"


def _decide_tests(claims: list[_Claim], k: int = 1) -> None:
    """Direction and best rows: Holm over all their comparisons together (one with too few trials for a test is
    left out of the family), each p times the card's k looks (Bonferroni over its rounds)."""
    pend = [(c, comp.p) for c in claims for comp, _ in c.tests] + [(c, p) for c in claims for p in c.ties]
    adjusted = stats.holm([min(1.0, p * k) if math.isfinite(p) else p for _, p in pend])
    n = sum(math.isfinite(p) for p in adjusted)
    for c in claims:
        mine = [p for (owner, _), p in zip(pend, adjusted) if owner is c]
        c.adjusted, c.ties_adjusted = mine[:len(c.tests)], mine[len(c.tests):]
        got = [(comp, e, p) for (comp, e), p in zip(c.tests, c.adjusted)]
        c.row.verdict, c.row.why = _directions(got, c.entry, c.ties_adjusted)
        tested = any(math.isfinite(p) for p in mine)
        looked = f" x {k} looks" if k > 1 else ""
        c.row.decided = f"the test, Holm over {n} test{'s' * (n != 1)}{looked}" if tested else ""


def _finish(c: _Claim, data: Dataset, paper: dict, line: float | None, family: tuple[int, int, int]) -> None:
    """What a measured row carries whatever its verdict: a stand-in, a load not offered; a difference's measured
    reason; for an undecided row, what would decide it."""
    row = c.row
    if c.cells is None or any(not v for v in c.cells.values):
        return
    row.stand_in = _stand_in({**_implied(c.entry), **paper, **(c.entry.get("paper") or {})}, c.cells, data)
    offered = _offered(c.cells)
    notes = [x for x in (row.why, *c.cells.left_out, offered) if x]
    if row.verdict == DIFFERS:
        notes.append(_reason(c.cells, line) or ("" if offered else "no measured cause in the campaign"))
    row.why = "; ".join(x for x in notes if x)
    if row.verdict == CANNOT:
        row.to_decide = _what_decides(c, data, family)


def _what_decides(c: _Claim, data: Dataset, family: tuple[int, int, int]) -> str:
    """About how many trials a cell would decide the row at its cells' measured CV, and the minutes they take, in
    the card's families once all its measured rows have trials enough (family: interval rows x looks, tests,
    looks)."""
    vals = c.cells.values
    if min(map(len, vals)) < 2:
        return f"at least {max(2, _need(c))} trials a cell (one trial shows no CV)"
    sums = c.sums
    if c.kind in INTERVALS:
        n = _interval_trials(c, sums, family[0])
        edge = "the estimate sits on an edge of the study's band"
    else:
        n = _test_trials(c, family[1] * family[2])
        edge = "the means are too close to tell apart"
    if n is None:
        return ""
    c.row.trials_to_decide = n
    cv = " / ".join(f"{100 * s.cv:.1f} %" for s in sums if math.isfinite(s.cv))
    if math.isinf(n):
        return f"more than {MAX_TRIALS} trials a cell at this CV ({cv}): {edge}"
    seconds = _seconds(data, c.cells)
    minutes = max(1, round(n * len(vals) * seconds / 60)) if seconds else 0
    took = f", ≈ {minutes} minute{'s' * (minutes != 1)}" if minutes else ""
    return f"about {n} trials a cell at this CV ({cv}{took})"


def _interval_trials(c: _Claim, sums: list[stats.Summary], m: int) -> float | None:
    """Trials a cell that narrow the deciding interval (1 - alpha / m) to fit between the estimate and the band's
    nearer edge: inside the band to agree, outside to differ (a normal approximation)."""
    from scipy.special import ndtri
    if c.kind in EXACT:
        return _exact_trials(c, m)
    lo, hi = _band(c.entry)
    est = c.row.estimate
    gap = min(abs(est - lo), abs(est - hi))
    floor = max(_need(c), _median_need(_cell_level(c.kind, 1 - ALPHA / m)) if c.kind in EXACT else 0)
    return _trials_for(gap, _spread(sums, c.num, c.den, est), float(ndtri(1 - ALPHA / (2 * m))), floor)


def _exact_trials(c: _Claim, m: int) -> float | None:
    """Trials a cell at which the medians' exact interval (order statistics k + 1 and n - k at the cell's level) is
    expected to fit between the estimate and the band's nearer edge: each end's expected place among n normal
    trials (Blom's) times the cell's spread, a ratio's two cells added on a log scale (its ends are one cell's end
    over the other's). More than the trials a cell has: at those the interval was measured, and did not fit."""
    from scipy.special import ndtri
    level, (lo, hi) = _cell_level(c.kind, 1 - ALPHA / m), _band(c.entry)
    if c.kind == "value":
        est, spread = c.sums[0].median, c.sums[0].std
        gap = min(abs(est - lo), abs(est - hi))
    else:
        a, b = (s.median for s in c.sums)
        if min(a, b, lo) <= 0:
            return None
        est, spread = a / b, math.fsum(s.cv for s in c.sums)
        gap = min(abs(math.log(est / lo)), abs(math.log(est / hi)))
    if not (math.isfinite(gap) and math.isfinite(spread)):
        return None

    def fits(n: int) -> bool:
        k = stats.median_ci_rank(n, level)[0]
        return k >= 0 and float(ndtri((n - k - 0.375) / (n + 0.25))) * spread <= gap

    low, high = max(_need(c), min(map(len, c.cells.values)) + 1), MAX_TRIALS
    if not fits(high):
        return math.inf
    while low < high:   # the interval narrows as n grows (in steps): the fewest n that fits
        mid = (low + high) // 2
        low, high = (low, mid) if fits(mid) else (mid + 1, high)
    return low


def _test_trials(c: _Claim, k: int) -> float | None:
    """Trials a cell at which the test finds each undecided comparison's measured ratio 80 % of the time at the
    first step of a Holm family of k (a normal approximation; no fewer than the exact test needs to reach it). A best
    row with a tie margin is decided as soon as one comparison ties (or goes the other way): the fewest trials of
    those routes, where finding every comparison in the claimed direction would take more."""
    from scipy.special import ndtri
    level = ALPHA / max(1, k)
    z = float(ndtri(1 - level / 2) + ndtri(POWER))
    floor = next(n for n in range(2, 20) if stats.smallest_p(n, n) < level)
    held, other = [], []
    ties = c.ties_adjusted or [math.nan] * len(c.tests)
    for (comp, expect), p, tp in zip(c.tests, c.adjusted or [math.nan] * len(c.tests), ties):
        if p < ALPHA or tp < ALPHA:
            continue
        gap = abs(math.log(comp.ratio)) if comp.ratio > 0 else math.nan
        spread = math.hypot(comp.a.cv, comp.b.cv)
        n = _trials_for(gap, spread, z, floor)
        n = math.nan if n is None else n
        if (comp.ratio > 1) == (expect == "higher"):
            held.append(n)
        else:
            other.append(n)
        if c.entry.get("tie") and math.isfinite(gap):
            margin = math.log1p(float(c.entry["tie"]))
            tie_z = float(ndtri(1 - level) + ndtri(POWER))
            tie_floor = next(n for n in range(2, 40) if stats.smallest_one_sided_p(n, n) < level)
            tie = _trials_for(margin - gap, spread, tie_z, tie_floor) if gap < margin else math.inf
            other.append(math.nan if tie is None else tie)
    if c.entry.get("tie") and other and not any(math.isnan(n) for n in other):
        return min(min(other), max(held) if held and not any(math.isnan(n) for n in held) else math.inf)
    need = held + other
    return None if not need or any(math.isnan(n) for n in need) else max(need)


def _trials_for(gap: float, spread: float, z: float, floor: int) -> float | None:
    """The n at which z * spread / sqrt(n) falls below gap: None when not computable, inf past MAX_TRIALS."""
    if not (math.isfinite(gap) and math.isfinite(spread)):
        return None
    if spread == 0:
        return floor
    n = max(floor, math.ceil((z * spread / gap) ** 2)) if gap > 0 else math.inf
    return n if n <= MAX_TRIALS else math.inf


def _spread(sums: list[stats.Summary], num: list[float], den: list[float], est: float) -> float:
    """The estimate's standard error times sqrt(n) at n trials a cell (delta method): |est| sqrt(cv_a^2 + cv_b^2)
    for a ratio, the standard deviation for a value."""
    d = math.fsum(w * s.mean for w, s in zip(den, sums)) or 1.0
    return math.sqrt(math.fsum((a - est * b) ** 2 * s.std ** 2 for a, b, s in zip(num, den, sums))) / abs(d)


def _seconds(data: Dataset, cells: _Cells) -> float | None:
    """The cells' mean trial duration, from the stored trials' start and end."""
    spans = [r["finished"] - r["started"] for ts in cells.trials for t in ts
             if (r := data.trials.get(t.id)) and r.get("started") is not None and r.get("finished") is not None]
    return math.fsum(spans) / len(spans) if spans else None


def _implied(entry: dict) -> dict[str, str]:
    """What the study ran, as the row's selectors imply it: the studies' WireGuard, IPsec and OVS datapath were the
    kernel's, and a direct attachment is S1's SR-IOV virtual function."""
    out: dict[str, str] = {}
    for sel in [entry.get(k) for k in "abcd"] + list(entry.get("others") or []):
        enc = sel.get("encryption") if isinstance(sel, dict) else None
        if enc == "wireguard":
            out["wireguard"] = "kernel"
        elif isinstance(enc, dict) or str(enc).startswith("ipsec"):
            out["ipsec"] = "kernel"
        if isinstance(sel, dict) and sel.get("switch") == "ovs":
            out["ovs_datapath"] = "kernel"
        if isinstance(sel, dict) and sel.get("attach") == "direct":
            out["nic"] = "sr-iov"
    return out


def _stand_in(paper: dict, cells: _Cells, data: Dataset) -> str:
    """What ran in the row's cells in place of what the study ran (STAND_INS; VMs where the paper names its VMs; an
    emulated CPU, EMULATED), e.g. 'wireguard-go (the study: kernel WireGuard)'; '' when like for like."""
    want = {str(k): str(v).lower() for k, v in paper.items()}
    found: list[str] = []
    for sc in sorted({t.scenario for ts in cells.trials for t in ts}):
        impl = (data.scenarios.get(sc) or {}).get("implementation") or {}
        found += [f"{name} (the study: {theirs})" for (el, ran), (key, mark, name, theirs) in STAND_INS.items()
                  if want.get(el) == ran and mark in str(impl.get(key, ""))]
        if "vm" in want and (vm := _vm(impl)):
            found.append(f"{vm} (the study: {paper['vm']})")
        if any(EMULATED[0] in str(v) for v in impl.values()):
            found.append(EMULATED[1])
    return "; ".join(dict.fromkeys(found))


def _vm(impl: dict) -> str:
    """What a VM was here ('' without VMs: host to host): a User-Mode Linux or qemu guest, or a namespace."""
    if str(impl.get("attach", "host")) in ("host", "none"):
        return ""
    if str(impl.get("vm_kernel", "")).startswith("uml"):
        return "UML guest VMs"
    if str(impl.get("vm_kernel", "")).startswith("qemu-"):  # qemu-tcg-<kernel> + virtio-net (...) (VMs)
        return f"qemu guest VMs ({impl['vm_kernel'].rsplit(' (', 1)[0]})"
    return "namespace VMs" + (" in a UML guest" if str(impl.get("kernel", "")).startswith("uml") else "")


def _selectors(r: dict, base: dict) -> list[dict]:
    """The row's cells: a, then b (ratio, direction) or each of `others` (best); value rows have a only."""
    kind = str(r.get("kind", "ratio"))
    rest = [] if kind == "value" else list(r.get("others") or []) if kind == "best" else [r["b"]]
    return [{**base, **{k: v for k, v in sel.items() if k != "name"}} for sel in [r["a"], *rest]]


def _directions(got: list[tuple[stats.Comparison, str, float]], entry: dict,
                ties: list[float] = ()) -> tuple[str, str]:
    """A direction row's (one test) or a best row's (one per other) verdict from Holm-adjusted p-values. With a tie
    margin, a best row's technology that ties with another (their tie test significant, and neither better) is
    not the best: differs."""
    names = [str(o.get("name", "")) for o in entry.get("others") or []] or [""]
    held, opposite, open_ = [], [], []
    ties = list(ties) or [math.nan] * len(got)
    for (c, expect, p), name, tp in zip(got, names, ties):
        label = f"{name}: " if name else ""
        if not p < ALPHA and tp < ALPHA:
            opposite.append(f"{label}a tie (within {_pct(float(entry['tie']))}, Holm p = {tp:.2g})")
        elif not math.isfinite(p) or p >= ALPHA:
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


COLUMNS = ["claim", "study", "ours (95 % CI)", "decided on", "verdict", "n", "why"]


def table_rows(rows: list[Row]) -> list[list[str]]:
    return [[f"{r.id}: {r.claim}", r.study, r.ours, r.decided, r.reads, "/".join(map(str, r.n)), _why_text(r)]
            for r in rows]


def _why_text(r: Row) -> str:
    if not r.to_decide:
        return r.why
    lead = "" if r.to_decide.startswith("this machine cannot") else "would decide it: "
    return "; ".join(x for x in (r.why, lead + r.to_decide) if x)


NOTE = ("Each row is a claim of the study, data in the suite file's `scorecard`; ours is computed from this campaign, "
        "one value per trial. Interval rows decide on the interval in 'decided on', widened for the card (Bonferroni "
        "over its measured interval rows): agrees when it lies wholly inside the study's band, differs when wholly "
        "outside, else cannot tell. Direction and best rows: the test, Holm over the card's tests. A stand-in (what "
        "ran in place of the study's implementation, or on an emulated CPU: qemu-tcg) is named in the verdict; an "
        "undecided row says what would decide it.")


def for_campaign(store, cid: int) -> list[Row]:
    """The scorecard of a stored campaign ([] when its spec has none)."""
    data = load(store, cid)
    if "scorecard" not in (data.campaign.spec_text or ""):  # no card: the spec need not be parsed (`show`)
        return []
    spec = data.campaign.spec or {}
    return evaluate(spec, data) if spec.get("scorecard") else []


def tally(rows: list[Row]) -> dict[str, float]:
    """A card in three numbers: its checkable claims, how many were decided, the median CV of their cells."""
    checkable = [r for r in rows if r.checkable]
    cvs = sorted(x for r in checkable for x in r.cv if math.isfinite(x))
    median = (cvs[(len(cvs) - 1) // 2] + cvs[len(cvs) // 2]) / 2 if cvs else math.nan
    return {"claims": len(rows), "checkable": len(checkable),
            "decided": sum(r.verdict != CANNOT for r in checkable), "median_cv": median}


def tally_line(rows: list[Row]) -> str:
    t = tally(rows)
    cv = f"; median cell CV {100 * t['median_cv']:.1f} %" if math.isfinite(t["median_cv"]) else ""
    return (f"{t['decided']} of {t['checkable']} checkable claims decided ({t['claims'] - t['checkable']} this "
            f"machine cannot check){cv}")


def interval_note(rows: list[Row]) -> str:
    """' ' + what the card's 95 % intervals cover on a busy machine's trials at its smallest cell, or ''."""
    least = min((k for r in rows for k in r.n if k >= 2), default=0)
    text = stats.t_note(least)
    return f" {text}" if text else ""


def print_card(rows: list[Row], console) -> None:
    """`show`'s scorecard before the metrics: a short block per claim (a seven-column table folded every cell
    letter by letter at 80 columns)."""
    from rich.markup import escape
    console.print("[bold]Reproduction scorecard[/] (the study's claims against this campaign): " + escape(tally_line(rows)))
    for r in rows:
        console.print(escape(f"{r.id}: {r.claim}"), style="bold")
        cv = "/".join(f"{100 * x:.1f}" for x in r.cv if math.isfinite(x))
        facts = [f"study {r.study}", f"ours {r.ours}", r.reads, f"n {'/'.join(map(str, r.n))}" if r.n else "",
                 f"CV {cv} %" if cv else ""]
        console.print(escape("  " + " | ".join(x for x in facts if x)))
        for line in (f"decided on {r.decided}" if r.decided else "", _why_text(r)):
            if line:
                console.print(escape(f"  {line}"), style="dim")
    if interval_note(rows):
        console.print(interval_note(rows).strip(), style="dim")