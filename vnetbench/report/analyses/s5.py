"""S5 — CPU context switches under a DDoS: the study's table (interrupts, context switches and their conversion rate,
without and with the attack) and what the attack did to the tenants (response times, CPU work), with figures.

What a round is: one ok trial of the foreground web workload (`http`); its scenario's `attack` level says control
(off) or attack (on). Per round the machine-wide SystemProbe gives interrupts/s and context switches/s over the
trial's window, exactly vmstat's `in` and `cs` (both read /proc/stat): the host's view, the study's own (vmstat in
Dom0, the hypervisor's control domain, not inside the VMs). Where VM1 and VM2 are guests with their own kernel
(`vm_kernel: guest`), each one's own /proc/stat over the same window too: the per-VM view, an addition of ours. The
victim is the pair the flood targets (`target_pair` of the spec's background workload; pair 1 if none), the neighbour
the other pair with a server-side workload (the web server's or the tenants' constant load: the study sends no
clients to VM2).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ...results import guards, stats
from ...results.dataset import load
from ...results.stats import Comparison, Summary, compare, holm, summarize, within
from ...results.store import Store
from .. import figures
from . import register
from ._cells import Family, noted, saw
from .base import Analysis, AnalysisResult, FigureData, TableData

GROUPS = ("control", "attack")
OFF_LEVELS = {"off", "false", "no", "0", "none"}
STUDY = {"control": 0.53, "attack": 0.68}  # the study's conversion rates (Xen host, vmstat)
MACHINE = ("interrupts_per_s", "context_switches_per_s", "net_rx_softirqs_per_s", "cpu_busy_ratio")
VM_METRICS = (("interrupts_per_s", "interrupts/s"), ("context_switches_per_s", "context switches/s"),
              ("conversion", "conversion rate (context switches / interrupts)"),
              ("net_rx_softirqs_per_s", "NET_RX softirqs/s"), ("if_rx_packets_per_s", "packets received by its NIC/s"),
              ("cpu_busy_ratio", "CPU busy (its own kernel's account)"))


@dataclass
class Round:
    trial: int
    group: str
    started: float = 0.0
    machine: dict[str, float] = field(default_factory=dict)        # metric -> window value (whole machine)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))  # metric -> (t, v)
    rt: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # pair -> response times (s)
    rps: dict[int, float] = field(default_factory=dict)               # pair -> http_requests_per_s
    errors: dict[int, float] = field(default_factory=dict)            # pair -> http_errors
    cpu_ops: dict[int, float] = field(default_factory=dict)           # pair -> cpuload_ops_per_s (server VM)
    nic_rx: float | None = None                                       # victim's host NIC, packets/s received
    vm: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))  # VM label -> metric -> value
    vm_role: dict[str, str] = field(default_factory=dict)             # "victim"/"neighbour" -> VM label
    flood_short: bool = False    # the flood offered less than its rate (guards.check_offered): not an attack round
    web_short: bool = False      # the web clients started fewer requests than asked

    @property
    def conversion(self) -> float | None:
        i, c = self.machine.get("interrupts_per_s"), self.machine.get("context_switches_per_s")
        return c / i if i and c is not None else None


def _order_note(by: dict[str, list[Round]]) -> str:
    """How control and attack rounds were ordered in time: a drift of the machine between two blocks of rounds
    would pass for an effect of the attack."""
    c, a = ([r.started for r in by[g]] for g in GROUPS)
    if not c or not a:
        return ""
    if max(c) < min(a) or max(a) < min(c):
        first = "control" if max(c) < min(a) else "attack"
        return (f"The {first} rounds all ran before the others, so a drift of the machine's background load between "
                "the two phases is not randomised away.")
    return "Control and attack rounds were interleaved in time, so a slow drift of the machine affects both alike."


def group_of(level) -> str:
    return "control" if str(level).strip().lower() in OFF_LEVELS else "attack"


def roles(spec: dict) -> tuple[int, int | None]:
    """(victim pair, neighbour pair) from the spec: the flood's target_pair, and the first other pair of the web
    workload or of the tenants' constant load (cpuload): the neighbour may have no web clients, as in the study."""
    wls = [w for w in spec.get("workloads", []) if isinstance(w, dict)]
    victim = next((w["target_pair"] for w in wls if isinstance(w.get("target_pair"), int)), 1)
    tenants = [p for kind in ("http", "cpuload") for w in wls if w.get("type") == kind
               and isinstance(w.get("pairs"), list) for p in w["pairs"]]
    neighbour = next((p for p in (tenants or [1, 2]) if p != victim), None)
    return victim, neighbour


def collect(store: Store, cid: int) -> tuple[list[Round], int, int | None, list[str]]:
    data = load(store, cid)
    camp = data.campaign
    victim, neighbour = roles(camp.spec if camp else {})
    scenarios = data.scenarios
    problems = []
    if scenarios and not any("attack" in s["labels"] for s in scenarios.values()):
        problems.append("this campaign has no `attack` factor: every round counts as control")
    trials = {t["id"]: t for t in data.trials.values() if t["status"] == "ok" and t["kind"] == "http"}
    rounds: dict[int, Round] = {}
    for t in trials.values():
        level = scenarios[t["scenario"]]["labels"].get("attack", "off")
        rounds[t["id"]] = Round(t["id"], group_of(level), t["started"] or 0.0, **_short(t["metadata"]))
        pairs = t["metadata"].get("pairs", [])
        for role, pair in (("victim", victim), ("neighbour", neighbour)):
            if pair is not None and 0 < pair <= len(pairs) and pairs[pair - 1].get("server"):
                rounds[t["id"]].vm_role[role] = pairs[pair - 1]["server"]
    nic = {tid: _nic_name(t["metadata"], victim) for tid, t in trials.items()}
    for s in data.samples:
        r = rounds.get(s["trial"])
        if r is None:
            continue
        meta, metric, value = s["metadata"], s["metric"], s["value"]
        background = meta.get("role") == "background"
        if meta.get("scope") == "vm":  # a guest VM's own kernel (vm_kernel: guest): window totals only
            if not meta.get("series") and "cpu" not in meta and meta.get("vm"):
                # a VM has one NIC in its namespace: if_rx_packets_per_s is that NIC's
                r.vm[meta["vm"]][metric] = value
        elif metric in MACHINE and meta.get("scope") == "machine" and "cpu" not in meta and not background:
            if meta.get("series"):
                r.series[metric].append((figures.since_start(s), value))
            else:
                r.machine[metric] = value
        elif metric == "http_response_time_s" and not background:
            r.rt[meta.get("pair")].append(value)
        elif metric == "http_requests_per_s" and not background:
            r.rps[meta.get("pair")] = value
        elif metric == "http_errors" and not background:
            r.errors[meta.get("pair")] = value
        elif metric == "cpuload_ops_per_s" and meta.get("side", "server") == "server":
            r.cpu_ops[meta.get("pair")] = value
        elif metric == "if_rx_packets_per_s" and (meta.get("node"), meta.get("interface")) == nic[s["trial"]]:
            r.nic_rx = value
    return sorted(rounds.values(), key=lambda r: r.trial), victim, neighbour, problems


def _short(meta: dict) -> dict[str, bool]:
    """Which load of the round offered less than its rate: the flood's flags are its own (the runner prefixes a
    background load's with "background ")."""
    flags = guards.reader_flags(meta)
    flood = [f for f in flags if f.startswith("background ")]
    return {"flood_short": guards.not_offered({"flags": flood}),
            "web_short": guards.not_offered({"flags": [f for f in flags if f not in flood]})}


def offered(rounds: list[Round]) -> tuple[dict[str, list[Round]], str]:
    """The groups, an attack round whose flood did not run at its rate left out, and what the reader is told."""
    attack = [r for r in rounds if r.group == "attack"]
    out = [r for r in attack if r.flood_short]
    by = {g: [r for r in rounds if r.group == g and not (g == "attack" and r.flood_short)] for g in GROUPS}
    rate = f"{100 * guards.OFFERED_SHORT:.0f} %"
    note = (f"{len(out)} of {len(attack)} attack rounds excluded: the flood offered less than {rate} of its rate. "
            if out else "")
    web = {g: sum(r.web_short for r in by[g]) for g in GROUPS}
    if any(web.values()):
        note += (f"The web clients started less than {rate} of the requests asked in {sum(web.values())} of "
                 f"{sum(len(v) for v in by.values())} rounds (control {web['control']}, attack {web['attack']}); "
                 f"kept: a client starts its next request only once the last one is answered, so a victim the "
                 f"attack slows is asked less. ")
    return by, note.strip()


def _nic_name(meta: dict, victim: int) -> tuple[str, str] | None:
    """(namespace, interface) of the underlay NIC of the victim's host, e.g. ('vb12ab-h2', 'vb12ab-u')."""
    prefix, pairs = meta.get("prefix"), meta.get("pairs", [])  # the trial's pairs, in order (runner)
    server = pairs[victim - 1].get("server") if 0 < victim <= len(pairs) else None
    if not prefix or not server or "v" not in server:
        return None
    return f"{prefix}-{server.split('v')[0]}", f"{prefix}-u"


# ---- formatting -------------------------------------------------------------------------------------------------
def rate_cell(s: Summary | None) -> str:
    if s is None:
        return "-"
    if s.n < 2 or not math.isfinite(s.ci_mean[0]):
        return f"{s.mean:.0f}"
    saw(s.n)
    s = within(s, 0.0)  # a rate is not negative: the t interval is cut at 0, and says so
    return f"{s.mean:.0f} ({s.ci_mean[0]:.0f}–{s.ci_mean[1]:.0f}{', clipped' if s.clipped else ''})"


def pct_cell(s: Summary | None) -> str:
    if s is None:
        return "-"
    if s.n < 2 or not math.isfinite(s.ci_mean[0]):
        return f"{100 * s.mean:.1f} %"
    saw(s.n)
    s = within(s, 0.0)  # a conversion rate is not negative (it may exceed 100 %)
    return f"{100 * s.mean:.1f} % ({100 * s.ci_mean[0]:.1f}–{100 * s.ci_mean[1]:.1f}{', clipped' if s.clipped else ''})"


def ms(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{1e3 * v:.2f} ms"


def _progression(ax, pts: list[tuple[float, float]], cis: list | None = None) -> None:
    """The paper's Fig. 3 on one axis: (interrupts, context switches) of control then attack, joined (observed), and
    the proportional growth from control (expected)."""
    (x0, y0), (x1, y1) = pts
    ax.plot([x0, x1], [y0, y1], color="C0", marker="o", label="observed (control -> attack)")
    ax.plot([x0, x1], [y0, y0 * x1 / x0] if x0 else [y0, y0], color="C3", ls="--",
            label="expected: in proportion to interrupts")
    for (x, y), ci in zip(pts, cis or [None, None]):
        if ci and all(math.isfinite(v) for v in (*ci[0], *ci[1])):
            ax.errorbar([x], [y], xerr=[[x - ci[0][0]], [ci[0][1] - x]], yerr=[[y - ci[1][0]], [ci[1][1] - y]],
                        color="C0", capsize=3, lw=0.8)
    for (x, y), g in zip(pts, GROUPS):
        ax.annotate(g, (x, y), xytext=(4, -10), textcoords="offset points", fontsize=8)
    ax.set_xlabel("interrupts per second (mean)")
    ax.set_ylabel("context switches per second (mean)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


def paper_growth(a: float | None, b: float | None) -> str:
    """Growth as the paper computes it, (attack − control) / attack: its 82.08 % = (141,157 − 25,295) / 141,157."""
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or b == 0:
        return "-"
    return f"{100 * (b - a) / b:+.1f} %"


def change(a: float | None, b: float | None) -> str:
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or a == 0:
        return "-"
    return f"{100 * (b - a) / a:+.0f} %"


MIN_ROUNDS = 4  # per group: fewer rounds a side are reported as too few (Welch at 3 + 3 finds only large changes)


def verdict(c: Comparison | None) -> str:
    if c is None:
        return "-"
    if min(c.a.n, c.b.n) < MIN_ROUNDS:
        return f"too few rounds ({c.a.n} + {c.b.n})"
    if c.why:
        return c.why
    if c.significant:
        return f"yes (p = {c.p:.2g})"
    fam = _FAMILY[0]
    m = fam.size if fam is not None and fam.adjusted is not None else 1
    found = stats.could_find(c, 0.05, m)
    could = f"; could find ±{found} (80 % power at alpha / {m})" if found else \
        f"; {stats.unreachable(c.a.n, c.b.n, 0.05, m)}" if stats.unreachable(c.a.n, c.b.n, 0.05, m) else ""
    return f"not significant (p = {c.p:.2g}{could})"


def _answer(c: Comparison, direction: str) -> str:
    """yes / no / not significant / too few rounds: is group b significantly `direction` (higher|lower) than a?"""
    if min(c.a.n, c.b.n) < MIN_ROUNDS:
        return f"cannot tell from {c.a.n} + {c.b.n} rounds"
    if c.why:
        return f"cannot tell: {c.why}"
    if not c.significant:
        return "not significant: cannot tell"
    return "yes" if (c.b.mean > c.a.mean) == (direction == "higher") else "no"


def _summary(values: list[float]) -> Summary | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return summarize(values) if values else None


_FAMILY: list[Family | None] = [None]  # the printed list being built: its tests are Holm-corrected together


def _compare(a: list[float], b: list[float]) -> Comparison | None:
    """Welch's test of a against b; inside family(), its p is the Holm-adjusted p of the list it is printed in."""
    a = [v for v in a if v is not None and math.isfinite(v)]
    b = [v for v in b if v is not None and math.isfinite(v)]
    c = compare(a, b) if a and b else None
    fam = _FAMILY[0]
    if c is None or fam is None:
        return c
    p = fam._p(c.p)
    return replace(c, p=p, significant=bool(p < fam.alpha))


def family(make):
    """make() as one Holm family: every _compare it makes is corrected over all of them (see _cells.Family)."""
    _FAMILY[0] = Family()
    try:
        return _FAMILY[0].build(make)
    finally:
        _FAMILY[0] = None


@register
class S5(Analysis):
    name = "s5"
    title = "S5 — CPU context switches under a DDoS in a Xen host"

    def run(self, store: Store, campaign: int) -> AnalysisResult:
        rounds, victim, neighbour, problems = collect(store, campaign)
        by, short = offered(rounds)
        result = AnalysisResult()
        if not rounds:
            result.findings.append("No round of the web workload finished: nothing to analyse.")
            return result
        result.tables.append(family(lambda: self._study_table(by)))  # the growth row: one family
        if any(r.vm for r in rounds):
            result.tables.append(self._vm_table(by, victim, neighbour))
        result.tables.append(family(lambda: self._tenant_table(by, victim, neighbour)))
        result.findings += family(lambda: self._findings(by, neighbour) + self._vm_findings(by)) + [
            "Findings: the permutation test of Welch's t (exact up to 8 trials a side) on per-round values, Holm-corrected over every test of this list (alpha 0.05); "
            "p shown is Holm-adjusted."] + ([short] if short else []) + problems
        for table in result.tables:
            table.note += f" {short}" if short else ""
        result.figures.append(self._fig3(by))
        result.figures.append(self._counts_figure(by))
        result.figures.append(self._series_figure(by))
        result.figures.append(self._rt_figure(by, victim, neighbour))
        return result

    # ---- the study's table --------------------------------------------------------------------------------------
    @noted
    def _study_table(self, by: dict[str, list[Round]]) -> TableData:
        rows = []
        for g in GROUPS:
            rs = by[g]
            intr = [r.machine.get("interrupts_per_s") for r in rs]
            ctx = [r.machine.get("context_switches_per_s") for r in rs]
            si, sc = _summary(intr), _summary(ctx)
            conv = _summary([r.conversion for r in rs if r.conversion is not None])
            ratio = f"{100 * sc.mean / si.mean:.1f} %" if si and sc and si.mean else "-"
            netrx = _summary([r.machine.get("net_rx_softirqs_per_s") for r in rs])
            nic = _summary([r.nic_rx for r in rs if r.nic_rx is not None])
            rows.append([g, str(len(rs)), rate_cell(si), rate_cell(sc), pct_cell(conv), ratio,
                         f"{100 * STUDY[g]:.0f} %", rate_cell(netrx), rate_cell(nic)])
        rows.append(self._growth_row(by))
        note = ("Per round (one trial of the web workload) the whole machine's interrupts/s and context switches/s over "
                "the trial, as vmstat's `in` and `cs` (both read /proc/stat); mean over rounds with its 95 % CI "
                "(Student t). Conversion rate = context switches / interrupts: computed per round, then averaged (the "
                "column with the CI, used for the findings); 'ratio of means' divides the two means instead. "
                "In this emulation packets between namespaces raise no hardware interrupt: their per-packet work is the "
                "NET_RX soft interrupt (shown), so the hardware interrupts are mostly timer and inter-processor ones "
                "and the conversion rate can exceed 100 %. Growth, two ways, each labelled: ours is the attack rounds' mean "
                "relative to the control rounds' ((attack − control) / control); the paper's is relative to the attack "
                "value ((attack − control) / attack: its 82.08 % = (141,157 − 25,295) / 141,157 and 85.84 % = "
                "(95,369 − 13,504) / 95,369), which cannot exceed 100 %. The conversion rate's growth is in percentage "
                "points (the paper's 'converts 14.23 % more' is 67.63 − 53.39 points). 'significant': stats.compare over "
                "per-round values. Every count is the whole machine's, the host's view as the study's vmstat in Dom0 "
                "(the hypervisor's control domain), including any other load on it. " + _order_note(by))
        return TableData("S5 — interrupts and context switches without and with the attack",
                         ["round type", "rounds", "interrupts/s (95 % CI)", "context switches/s (95 % CI)",
                          "conversion rate, mean of rounds (95 % CI)", "conversion rate, ratio of means",
                          "study's conversion rate", "NET_RX softirqs/s", "victim host NIC rx packets/s"], rows, note)

    def _growth_row(self, by: dict[str, list[Round]]) -> list[str]:
        """The study's growth percentages: attack vs control for each column, with whether the rounds show it."""
        def values(fn) -> dict[str, list[float]]:
            return {g: [v for r in by[g] if (v := fn(r)) is not None and math.isfinite(v)] for g in GROUPS}

        def cell(vals: dict[str, list[float]], points: bool = False) -> str:
            a, b = vals["control"], vals["attack"]
            if not a or not b:
                return "-"
            ma, mb = float(np.mean(a)), float(np.mean(b))
            text = f"{100 * (mb - ma):+.1f} points" if points else \
                f"ours {change(ma, mb)} of control; as the paper {paper_growth(ma, mb)} of attack"
            if min(len(a), len(b)) < MIN_ROUNDS:
                return f"{text}, not tested ({len(a)} + {len(b)} rounds)"
            return f"{text}, {'significant' if _compare(a, b).significant else 'not significant'}"

        conv = values(lambda r: r.conversion)
        ratio = ("the paper: interrupts 82.08 %, context switches 85.84 % of attack; conversion +14.23 points "
                 "(53.39 % -> 67.63 %)")
        return ["growth, attack vs control", "", cell(values(lambda r: r.machine.get("interrupts_per_s"))),
                cell(values(lambda r: r.machine.get("context_switches_per_s"))), cell(conv, points=True), "-", ratio,
                cell(values(lambda r: r.machine.get("net_rx_softirqs_per_s"))), cell(values(lambda r: r.nic_rx))]

    # ---- inside the VMs (our addition: the study measured in Dom0, the host) ----------------------------------------
    @staticmethod
    def _vm_value(r: Round, role: str, metric: str) -> float | None:
        got = r.vm.get(r.vm_role.get(role, ""), {})
        if metric == "conversion":
            i, c = got.get("interrupts_per_s"), got.get("context_switches_per_s")
            return c / i if i and c is not None else None
        return got.get(metric)

    def _vm_rows(self, by: dict[str, list[Round]], victim: int, neighbour: int | None):
        """(name, metric label, metric, comparison or None, control summary, attack summary) for each VM and the host."""
        out = []
        tenants = [("victim", f"VM1 (victim, pair {victim})")]
        if neighbour is not None:
            tenants.append(("neighbour", f"VM2 (neighbour, pair {neighbour})"))
        for role, name in tenants:
            for metric, label in VM_METRICS:
                vals = {g: [v for r in by[g] if (v := self._vm_value(r, role, metric)) is not None] for g in GROUPS}
                if vals["control"] or vals["attack"]:
                    out.append((name, label, metric, vals))
        for metric, label in VM_METRICS[:3]:
            fn = (lambda r: r.conversion) if metric == "conversion" else (lambda r, m=metric: r.machine.get(m))
            vals = {g: [v for r in by[g] if (v := fn(r)) is not None] for g in GROUPS}
            out.append(("host (whole machine)", label, metric, vals))
        return out

    @noted
    def _vm_table(self, by: dict[str, list[Round]], victim: int, neighbour: int | None) -> TableData:
        rows_in = self._vm_rows(by, victim, neighbour)
        comps = [_compare(v["control"], v["attack"]) if min(len(v["control"]), len(v["attack"])) >= 2 else None
                 for _, _, _, v in rows_in]
        adjusted = holm([c.p if c is not None else math.nan for c in comps])
        rows = []
        for (name, label, metric, vals), c, p_adj in zip(rows_in, comps, adjusted):
            cell = pct_cell if metric in ("conversion", "cpu_busy_ratio") else rate_cell
            diff = "-"
            if c is not None and math.isfinite(c.diff_ci[0]):
                scale, unit = (100, " points") if metric in ("conversion", "cpu_busy_ratio") else (1, "/s")
                diff = f"{scale * c.diff:+.{1 if scale == 100 else 0}f}{unit} ({scale * c.diff_ci[0]:+.{1 if scale == 100 else 0}f}" \
                       f" to {scale * c.diff_ci[1]:+.{1 if scale == 100 else 0}f})"
            if c is None:
                test = f"not tested ({len(vals['control'])} + {len(vals['attack'])} rounds)"
            elif min(c.a.n, c.b.n) < MIN_ROUNDS:
                test = f"too few rounds ({c.a.n} + {c.b.n}); p = {c.p:.2g}"
            else:
                test = f"{'yes' if p_adj < 0.05 else 'no'} (p = {c.p:.2g}, Holm {p_adj:.2g})"
            rows.append([name, label, cell(_summary(vals["control"])), cell(_summary(vals["attack"])), diff, test])
        note = ("Not the study's vantage point: it read vmstat in Dom0, the host (the 'host (whole machine)' rows, and "
                "the table above). Each VM's own kernel (a User-Mode Linux guest, `vm_kernel: guest`) counted over the same window as the "
                "host's probe: its /proc/stat (interrupts, context switches, CPU time, NET_RX softirqs) and its NIC's "
                "received packets. One value per round; mean with its 95 % CI (Student t); attack − control is the "
                "difference of the means with Welch's 95 % CI; significant = the permutation test of Welch's t (exact up to 8 trials a side), Holm-corrected over "
                "the rows of this table. A UML guest's interrupts are its timer and its NICs' signals, and its vector "
                "NIC takes received packets in batches, so a flood raises its packet count far more than its "
                "interrupts. A UML guest has no steal time: time the machine does not give it is counted as its idle, "
                "so its CPU busy share understates a starved VM (its stress-ng work done, in the next table, does not).")
        return TableData("S5 — inside the VMs (our addition; the study measured the host): each VM's own interrupts "
                         "and context switches, beside the host's",
                         ["VM", "measure", "control (95 % CI)", "attack (95 % CI)", "attack − control (95 % CI)",
                          "significant"], rows, note)

    def _vm_findings(self, by: dict[str, list[Round]]) -> list[str]:
        out = []
        for role, name in (("victim", "VM1"), ("neighbour", "VM2")):
            got = {g: {m: [v for r in by[g] if (v := self._vm_value(r, role, m)) is not None]
                       for m in ("interrupts_per_s", "context_switches_per_s")} for g in GROUPS}
            if not any(got[g]["interrupts_per_s"] for g in GROUPS):
                continue
            parts = []
            for m, what in (("interrupts_per_s", "interrupts"), ("context_switches_per_s", "context switches")):
                a, b = (float(np.mean(got[g][m])) if got[g][m] else None for g in GROUPS)
                parts.append(f"{what} {a:.0f}/s -> {b:.0f}/s" if a is not None and b is not None else f"{what}: -")
            conv = {g: [v for r in by[g] if (v := self._vm_value(r, role, "conversion")) is not None] for g in GROUPS}
            if (c := _compare(conv["control"], conv["attack"])) is not None:
                parts.append(f"conversion rate {100 * c.a.mean:.1f} % -> {100 * c.b.mean:.1f} %, higher under "
                             f"attack: {_answer(c, 'higher')} ("
                             + (f"Welch p = {c.p:.2g}; " if math.isfinite(c.p) else "")
                             + "the study, on its host: 53 % -> 68 %)")
            out.append(f"Inside {name} (its own kernel, our addition: the study measured the host; control -> "
                       f"attack, mean of rounds): " + "; ".join(parts) + ".")
        return out

    # ---- what the attack did to the tenants ---------------------------------------------------------------------
    def _tenant_table(self, by: dict[str, list[Round]], victim: int, neighbour: int | None) -> TableData:
        rows = []
        tenants = [(f"VM1 (victim, pair {victim})", victim)]
        if neighbour is not None:
            tenants.append((f"VM2 (neighbour, pair {neighbour})", neighbour))
        for name, pair in tenants:
            pooled = {g: [v for r in by[g] for v in r.rt.get(pair, [])] for g in GROUPS}
            per_round = {g: {q: [float(np.percentile(r.rt[pair], q)) for r in by[g] if r.rt.get(pair)] for q in (50, 95)}
                         for g in GROUPS}
            served = any(pooled.values())   # the study sends web clients to VM1 only: VM2 has no response times
            for q, label in ((50, "response time, median"), (95, "response time, p95")) if served else ():
                a, b = (float(np.percentile(pooled[g], q)) if pooled[g] else None for g in GROUPS)
                c = _compare(per_round["control"][q], per_round["attack"][q])
                rows.append([name, label, ms(a), ms(b), change(a, b), verdict(c)])
            for metric, label, fmt in (("rps", "web requests answered/s", "{:.1f}"), ("errors", "web errors per round", "{:.1f}"),
                                       ("cpu_ops", "CPU work done (stress-ng bogo ops/s)", "{:.0f}")):
                vals = {g: [getattr(r, metric)[pair] for r in by[g] if pair in getattr(r, metric)] for g in GROUPS}
                if metric != "cpu_ops" and not served:
                    continue
                a, b = (float(np.mean(vals[g])) if vals[g] else None for g in GROUPS)
                cells = [fmt.format(v) if v is not None else "-" for v in (a, b)]
                rows.append([name, label, *cells, change(a, b), verdict(_compare(vals["control"], vals["attack"]))])
        busy = {g: [r.machine.get("cpu_busy_ratio") for r in by[g] if r.machine.get("cpu_busy_ratio") is not None]
                for g in GROUPS}
        a, b = (float(np.mean(busy[g])) if busy[g] else None for g in GROUPS)
        rows.append(["host (whole machine)", "CPU busy", *[f"{100 * v:.1f} %" if v is not None else "-" for v in (a, b)],
                     change(a, b), verdict(_compare(busy["control"], busy["attack"]))])
        note = ("Response times: every request of every round pooled for the median and p95 shown; the significance "
                "test compares the per-round medians (or p95s) of the two groups, so that rounds, not requests, are the "
                "independent samples (Welch t-test, Holm-corrected over the tests of this table, adjusted p < 0.05). "
                "Change = attack vs control. CPU work is what the tenant's constant stress-ng load got done per second "
                "of wall time: it falls when the tenant gets less CPU.")
        return TableData("S5 — the tenants during the attack", ["tenant", "measure", "control", "attack", "change",
                                                                  "significant"], rows, note)

    def _findings(self, by: dict[str, list[Round]], neighbour: int | None) -> list[str]:
        """The study's findings, each answered yes / no only when the rounds can show it (stats.compare)."""
        out = []
        conv = {g: [r.conversion for r in by[g] if r.conversion is not None] for g in GROUPS}
        c = _compare(conv["control"], conv["attack"])
        if c is None:
            out.append("Conversion rate higher under attack: cannot tell (control or attack rounds missing).")
        else:
            out.append(f"Conversion rate (context switches / interrupts) on the host, the study's vantage point, higher "
                       f"under attack: {_answer(c, 'higher')} — "
                       f"{100 * c.a.mean:.1f} % without vs {100 * c.b.mean:.1f} % with the attack (mean of "
                       f"{c.a.n} and {c.b.n} rounds, Welch p = {c.p:.2g}); the study: 53 % vs 68 %.")
        for metric, what in (("context_switches_per_s", "Context switches"), ("interrupts_per_s", "Interrupts")):
            vals = {g: [r.machine[metric] for r in by[g] if metric in r.machine] for g in GROUPS}
            if (c := _compare(vals["control"], vals["attack"])) is not None:
                out.append(f"{what} per second on the host higher under attack: {_answer(c, 'higher')} "
                           f"({c.a.mean:.0f}/s without, {c.b.mean:.0f}/s with; grew {change(c.a.mean, c.b.mean)} of "
                           f"control, {paper_growth(c.a.mean, c.b.mean)} of attack as the paper computes it).")
        if neighbour is None:
            return out
        med = {g: [float(np.median(r.rt[neighbour])) for r in by[g] if r.rt.get(neighbour)] for g in GROUPS}
        cpu = {g: [r.cpu_ops[neighbour] for r in by[g] if neighbour in r.cpu_ops] for g in GROUPS}
        checks = [(c, what) for c, what in ((_compare(med["control"], med["attack"]), "higher"),
                                            (_compare(cpu["control"], cpu["attack"]), "lower")) if c is not None]
        answers = [_answer(c, what) for c, what in checks]
        overall = ("yes" if "yes" in answers else "no" if answers and all(a == "no" for a in answers)
                   else next((a for a in answers if a != "no"), "cannot tell (no data)"))
        parts = [f"median response time {ms(c.a.mean)} -> {ms(c.b.mean)}: slower {_answer(c, 'higher')}"
                 for c, what in checks if what == "higher"]
        parts += [f"CPU work {c.a.mean:.0f} -> {c.b.mean:.0f} ops/s: less {_answer(c, 'lower')}"
                  for c, what in checks if what == "lower"]
        out.append(f"Neighbour degraded (seen in the authors' earlier experiment, which the paper cites; its own table "
                   f"is the host's counters): {overall} — " + "; ".join(parts)
                   + " (means of per-round values, control -> attack).")
        return out

    # ---- figures ------------------------------------------------------------------------------------------------
    def _fig3(self, by: dict[str, list[Round]]) -> FigureData:
        """The study's Fig. 3: mean context switches as a function of mean interrupts, control to attack (the observed
        line), against the growth expected if context switches grew in proportion to interrupts (the control's
        conversion rate carried to the attack's interrupts); left this campaign, right the paper's Table 1."""
        fig = Figure(figsize=(11.0, 4.2), layout="constrained")
        ours, paper = fig.subplots(1, 2)
        sums = {(m, g): _summary([r.machine.get(m) for r in by[g]]) for m in ("interrupts_per_s",
                                                                              "context_switches_per_s") for g in GROUPS}
        pts = [(sums[("interrupts_per_s", g)], sums[("context_switches_per_s", g)]) for g in GROUPS]
        if all(x and y for x, y in pts):
            _progression(ours, [(x.mean, y.mean) for x, y in pts],
                         [(x.ci_mean, y.ci_mean) for x, y in pts])
        ours.set_title("this campaign: the host, mean of rounds (whiskers: 95 % CI)", fontsize=9)
        _progression(paper, [(25295, 13504), (141157, 95369)])
        paper.set_title("the paper's Table 1 (Dom0)", fontsize=9)
        title = "Fig. 3 — context switches as a function of interrupts, without and with the attack"
        fig.suptitle(title, fontsize=11)
        return FigureData("s5-fig3", title, fig, "As the paper's Fig. 3: the mean context switches/s against the mean "
                          "interrupts/s of the control and the attack rounds (blue, observed), and the growth expected "
                          "if context switches grew in proportion to interrupts (red dashed: the control's conversion "
                          "rate carried to the attack's interrupts). Blue above red: under attack more interrupts "
                          "became context switches. Whole machine, the host's view as the study's.")

    def _counts_figure(self, by: dict[str, list[Round]]) -> FigureData:
        """Mean interrupts and context switches per second without and with the attack, the growth of each written
        over its bars; beside it the conversion rate against the study's 53 % and 68 %."""
        fig = Figure(figsize=(11.0, 4.2), layout="constrained")
        counts, conv = fig.subplots(1, 2, width_ratios=[2, 1])
        metrics = (("interrupts_per_s", "interrupts"), ("context_switches_per_s", "context switches"))
        sums = {(m, g): _summary([r.machine.get(m) for r in by[g]]) for m, _ in metrics for g in GROUPS}
        mult, ulabel = figures.axis_unit("1/s", [x.mean for x in sums.values() if x])
        width = 0.38
        for j, g in enumerate(GROUPS):
            got = [(i, sums[(m, g)]) for i, (m, _) in enumerate(metrics) if sums[(m, g)]]
            means = [x.mean * mult for _, x in got]
            err = figures.error_bars(means, [x.ci_mean[0] * mult for _, x in got], [x.ci_mean[1] * mult for _, x in got])
            counts.bar([i + (j - 0.5) * width for i, _ in got], means, width, yerr=err, capsize=4, color=f"C{j}",
                       label=g)
        highest = 0.0
        for i, (m, _) in enumerate(metrics):
            a, b = sums[(m, "control")], sums[(m, "attack")]
            highest = max([highest] + [x.mean if not math.isfinite(x.ci_mean[1]) else max(x.mean, x.ci_mean[1])
                                       for x in (a, b) if x])
            if a and b:
                top = max(b.mean, b.ci_mean[1] if math.isfinite(b.ci_mean[1]) else b.mean) * mult
                counts.annotate(change(a.mean, b.mean), (i + 0.5 * width, top), ha="center", va="bottom",
                                xytext=(0, 3), textcoords="offset points", fontsize=9, fontweight="bold")
        counts.set_xticks(range(len(metrics)), [name for _, name in metrics])
        counts.set_ylabel(f"per second ({ulabel})" if ulabel not in ("", "/s") else "per second")
        counts.set_ylim(0, 1.15 * highest * mult or 1)
        counts.legend(fontsize=8)
        counts.set_title("whole machine, mean over rounds (whiskers: 95 % CI)", fontsize=9)
        rates = [_summary([r.conversion for r in by[g]]) for g in GROUPS]
        for j, (g, x) in enumerate(zip(GROUPS, rates)):
            if x:
                err = figures.error_bars([100 * x.mean], [100 * x.ci_mean[0]], [100 * x.ci_mean[1]])
                conv.bar(j, 100 * x.mean, 0.6, yerr=err, capsize=4, color=f"C{j}")
            conv.plot([j - 0.3, j + 0.3], [100 * STUDY[g]] * 2, color="black", ls="--", lw=1.2,
                      label="the study" if j == 0 else None)
        conv.set_xticks(range(len(GROUPS)), list(GROUPS))
        conv.set_ylabel("context switches / interrupts (%)")
        conv.set_ylim(bottom=0)
        conv.legend(fontsize=8)
        conv.set_title("conversion rate", fontsize=9)
        for ax in (counts, conv):
            ax.grid(True, axis="y", alpha=0.3)
            ax.set_axisbelow(True)
        title = "Interrupts and context switches without and with the attack, and the conversion rate"
        fig.suptitle(title, fontsize=11)
        return FigureData("s5-counts", title, fig, "The mean of the per-round rates of each group (the host's), with the "
                          "attack's growth over control written above (ours: relative to control); right: the "
                          "conversion rate per group (mean of rounds, 95 % CI) against the study's 53 % and 68 % "
                          "(dashed).")

    def _series_figure(self, by: dict[str, list[Round]]) -> FigureData:
        fig = Figure(figsize=(11.0, 4.2), layout="constrained")
        axes = fig.subplots(1, 2, squeeze=False)[0]
        for ax, metric, label in zip(axes, ("interrupts_per_s", "context_switches_per_s"),
                                     ("interrupts/s", "context switches/s")):
            for i, g in enumerate(GROUPS):
                bins: dict[int, list[float]] = defaultdict(list)
                for r in by[g]:
                    for t, v in r.series.get(metric, []):
                        bins[int(round(t))].append(v)
                if not bins:
                    continue
                ts = sorted(bins)
                ax.plot(ts, [float(np.mean(bins[t])) for t in ts], marker=".", color=f"C{i}", label=f"{g} (mean)")
                ax.fill_between(ts, [float(np.percentile(bins[t], 25)) for t in ts],
                                [float(np.percentile(bins[t], 75)) for t in ts], color=f"C{i}", alpha=0.15, lw=0,
                                label=f"{g} (IQR over rounds)")
            ax.set_xlabel("time since the start of the round (s)")
            ax.set_ylabel(label)
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            if ax.has_data():
                ax.legend(fontsize=7)
        fig.suptitle("Interrupts and context switches per second, control vs attack", fontsize=11)
        return FigureData("s5-series", "Interrupts and context switches per second during the rounds", fig,
                          "Whole machine, 1-s points of the system probe; line = mean over the rounds of a group at each "
                          "second, band = their inter-quartile range.")

    def _rt_figure(self, by: dict[str, list[Round]], victim: int, neighbour: int | None) -> FigureData:
        tenants = [(f"VM1 (victim, pair {victim})", victim)] + (
            [(f"VM2 (neighbour, pair {neighbour})", neighbour)] if neighbour is not None else [])
        # a VM without web clients (the study's VM2) has no response times: no panel
        tenants = [(n, p) for n, p in tenants if any(r.rt.get(p) for r in by["control"] + by["attack"])] or tenants[:1]
        fig = Figure(figsize=(11.0, 4.2), layout="constrained")
        axes = fig.subplots(1, len(tenants), squeeze=False, sharex=True)[0]
        for ax, (name, pair) in zip(axes, tenants):
            for i, g in enumerate(GROUPS):
                xs = sorted(1e3 * v for r in by[g] for v in r.rt.get(pair, []))
                if xs:
                    ax.step(xs, [(k + 1) / len(xs) for k in range(len(xs))], where="post", color=f"C{i}",
                            label=f"{g} ({len(xs)} requests)")
            if ax.has_data():
                ax.set_xscale("log")
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.legend(fontsize=7, loc="lower right")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("response time (ms, log scale)")
            ax.set_ylabel("fraction of requests ≤ x")
            ax.set_ylim(0, 1.02)
            ax.grid(True, alpha=0.3)
        fig.suptitle("Web response times, control vs attack", fontsize=11)
        return FigureData("s5-response-times", "Distribution of the web response times", fig,
                          "Empirical CDF of every request's response time (new TCP connection, GET, whole page), all "
                          "rounds of a group pooled.")
