"""S5 — CPU context switches under a DDoS: the study's table (interrupts, context switches and their conversion rate,
without and with the attack) and what the attack did to the tenants (response times, CPU work), with figures.

What a round is: one ok trial of the foreground web workload (`http`); its scenario's `attack` level says control
(off) or attack (on). Per round the machine-wide SystemProbe gives interrupts/s and context switches/s over the
trial's window, exactly vmstat's `in` and `cs` (both read /proc/stat). The victim is the pair the flood targets
(`target_pair` of the spec's background workload; pair 1 if none), the neighbour the other pair of the web workload.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import yaml
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ..sample import elapsed
from ..stats import Comparison, Summary, compare, summarize
from ..store import Store
from . import register
from .base import Analysis, AnalysisResult, FigureData, TableData

GROUPS = ("control", "attack")
OFF_LEVELS = {"off", "false", "no", "0", "none"}
STUDY = {"control": 0.53, "attack": 0.68}  # the study's conversion rates (Xen host, vmstat)
MACHINE = ("interrupts_per_s", "context_switches_per_s", "net_rx_softirqs_per_s", "cpu_busy_ratio")


@dataclass
class Round:
    trial: int
    group: str
    machine: dict[str, float] = field(default_factory=dict)        # metric -> window value (whole machine)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))  # metric -> (t, v)
    rt: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # pair -> response times (s)
    rps: dict[int, float] = field(default_factory=dict)               # pair -> http_requests_per_s
    errors: dict[int, float] = field(default_factory=dict)            # pair -> http_errors
    cpu_ops: dict[int, float] = field(default_factory=dict)           # pair -> cpuload_ops_per_s (server VM)
    nic_rx: float | None = None                                       # victim's host NIC, packets/s received

    @property
    def conversion(self) -> float | None:
        i, c = self.machine.get("interrupts_per_s"), self.machine.get("context_switches_per_s")
        return c / i if i and c is not None else None


def group_of(level) -> str:
    return "control" if str(level).strip().lower() in OFF_LEVELS else "attack"


def roles(spec_text: str) -> tuple[int, int | None]:
    """(victim pair, neighbour pair) from the spec: the flood's target_pair, the web workload's other pair."""
    try:
        spec = yaml.safe_load(spec_text) or {}
    except yaml.YAMLError:
        spec = {}
    wls = [w for w in spec.get("workloads", []) if isinstance(w, dict)]
    victim = next((w["target_pair"] for w in wls if isinstance(w.get("target_pair"), int)), 1)
    web = next((w.get("pairs") for w in wls if w.get("type") == "http" and isinstance(w.get("pairs"), list)), None)
    neighbour = next((p for p in (web or [1, 2]) if p != victim), None)
    return victim, neighbour


def collect(store: Store, cid: int) -> tuple[list[Round], int, int | None, list[str]]:
    camp = store.campaign(cid)
    victim, neighbour = roles(camp.spec_text if camp else "")
    scenarios = {s["idx"]: s for s in store.scenarios(cid)}
    problems = []
    if scenarios and not any("attack" in s["labels"] for s in scenarios.values()):
        problems.append("this campaign has no `attack` factor: every round counts as control")
    trials = {t["id"]: t for t in store.trials(cid) if t["status"] == "ok" and t["kind"] == "http"}
    rounds: dict[int, Round] = {}
    for t in trials.values():
        level = scenarios[t["scenario"]]["labels"].get("attack", "off")
        rounds[t["id"]] = Round(t["id"], group_of(level))
    nic = {tid: _nic_name(t["metadata"], victim) for tid, t in trials.items()}
    for s in store.samples(cid):
        r = rounds.get(s["trial"])
        if r is None:
            continue
        meta, metric, value = s["metadata"], s["metric"], s["value"]
        background = meta.get("role") == "background"
        if metric in MACHINE and meta.get("scope") == "machine" and "cpu" not in meta and not background:
            if meta.get("series"):
                r.series[metric].append((elapsed(s["t"], meta, s.get("started")), value))
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
    return f"{s.mean:.0f} ({s.ci_mean[0]:.0f}–{s.ci_mean[1]:.0f})"


def pct_cell(s: Summary | None) -> str:
    if s is None:
        return "-"
    if s.n < 2 or not math.isfinite(s.ci_mean[0]):
        return f"{100 * s.mean:.1f} %"
    return f"{100 * s.mean:.1f} % ({100 * s.ci_mean[0]:.1f}–{100 * s.ci_mean[1]:.1f})"


def ms(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{1e3 * v:.2f} ms"


def change(a: float | None, b: float | None) -> str:
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or a == 0:
        return "-"
    return f"{100 * (b - a) / a:+.0f} %"


MIN_ROUNDS = 4  # per group: with 3 + 3 rounds Mann-Whitney cannot go below p = 0.1


def verdict(c: Comparison | None) -> str:
    if c is None:
        return "-"
    if min(c.a.n, c.b.n) < MIN_ROUNDS:
        return f"too few rounds ({c.a.n} + {c.b.n})"
    return f"{'yes' if c.significant else 'no'} (p = {c.mannwhitney_p:.2g})"


def _answer(c: Comparison, direction: str) -> str:
    """yes / no / within noise / too few rounds: is group b significantly `direction` (higher|lower) than a?"""
    if min(c.a.n, c.b.n) < MIN_ROUNDS:
        return f"cannot tell from {c.a.n} + {c.b.n} rounds"
    if not c.significant:
        return "not shown (within noise)"
    return "yes" if (c.b.mean > c.a.mean) == (direction == "higher") else "no"


def _summary(values: list[float]) -> Summary | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return summarize(values) if values else None


def _compare(a: list[float], b: list[float]) -> Comparison | None:
    a = [v for v in a if v is not None and math.isfinite(v)]
    b = [v for v in b if v is not None and math.isfinite(v)]
    return compare(a, b) if a and b else None


@register
class S5(Analysis):
    name = "s5"
    title = "S5 — CPU context switches under a DDoS in a Xen host"

    def run(self, store: Store, campaign: int) -> AnalysisResult:
        rounds, victim, neighbour, problems = collect(store, campaign)
        by = {g: [r for r in rounds if r.group == g] for g in GROUPS}
        result = AnalysisResult()
        if not rounds:
            result.findings.append("No round of the web workload finished: nothing to analyse.")
            return result
        result.tables.append(self._study_table(by))
        result.tables.append(self._tenant_table(by, victim, neighbour))
        result.findings += self._findings(by, neighbour) + problems
        result.figures.append(self._series_figure(by))
        result.figures.append(self._rt_figure(by, victim, neighbour))
        return result

    # ---- the study's table --------------------------------------------------------------------------------------
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
        note = ("Per round (one trial of the web workload) the whole machine's interrupts/s and context switches/s over "
                "the trial, as vmstat's `in` and `cs` (both read /proc/stat); mean over rounds with its 95 % CI "
                "(Student t). Conversion rate = context switches / interrupts: computed per round, then averaged (the "
                "column with the CI, used for the findings); 'ratio of means' divides the two means instead. "
                "In this emulation packets between namespaces raise no hardware interrupt: their per-packet work is the "
                "NET_RX soft interrupt (shown), so the hardware interrupts are mostly timer and inter-processor ones "
                "and the conversion rate can exceed 100 %. Every count is the whole machine's, including any other "
                "load on it. Control rounds all run before the attack rounds (one scenario each), so a drift of the "
                "machine's background load between the two phases is not randomised away.")
        return TableData("S5 — interrupts and context switches without and with the attack",
                         ["round type", "rounds", "interrupts/s (95 % CI)", "context switches/s (95 % CI)",
                          "conversion rate, mean of rounds (95 % CI)", "conversion rate, ratio of means",
                          "study's conversion rate", "NET_RX softirqs/s", "victim host NIC rx packets/s"], rows, note)

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
            for q, label in ((50, "response time, median"), (95, "response time, p95")):
                a, b = (float(np.percentile(pooled[g], q)) if pooled[g] else None for g in GROUPS)
                c = _compare(per_round["control"][q], per_round["attack"][q])
                rows.append([name, label, ms(a), ms(b), change(a, b), verdict(c)])
            for metric, label, fmt in (("rps", "web requests answered/s", "{:.1f}"), ("errors", "web errors per round", "{:.1f}"),
                                       ("cpu_ops", "CPU work done (stress-ng bogo ops/s)", "{:.0f}")):
                vals = {g: [getattr(r, metric)[pair] for r in by[g] if pair in getattr(r, metric)] for g in GROUPS}
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
                "independent samples (Mann-Whitney p < 0.05 and disjoint 95 % CIs of the mean, stats.compare). "
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
            out.append(f"Conversion rate (context switches / interrupts) higher under attack: {_answer(c, 'higher')} — "
                       f"{100 * c.a.mean:.1f} % without vs {100 * c.b.mean:.1f} % with the attack (mean of "
                       f"{c.a.n} and {c.b.n} rounds, Mann-Whitney p = {c.mannwhitney_p:.2g}); the study: 53 % vs 68 %.")
        for metric, what in (("context_switches_per_s", "Context switches"), ("interrupts_per_s", "Interrupts")):
            vals = {g: [r.machine[metric] for r in by[g] if metric in r.machine] for g in GROUPS}
            if (c := _compare(vals["control"], vals["attack"])) is not None:
                out.append(f"{what} per second higher under attack: {_answer(c, 'higher')} "
                           f"({c.a.mean:.0f}/s without, {c.b.mean:.0f}/s with).")
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
        out.append(f"Neighbour degraded: {overall} — " + "; ".join(parts)
                   + " (means of per-round values, control -> attack).")
        return out

    # ---- figures ------------------------------------------------------------------------------------------------
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
