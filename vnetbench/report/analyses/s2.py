"""S2: VXLAN vs GRE with Linux bridge vs Open vSwitch — per-metric figures with 95% confidence intervals, the
table naming the best technology per metric for each placement, VM count and direction (with every technology that
cannot be told from the best), throughput beside each host's CPU per Gbit/s with what bound each cell, and tenant B
alone vs under tenant A's flood ("could not be tested" when the flood fell short of its rate).

The best-technology table is the study's Table 3.1, cell for cell as the suite's scorecard reads it: the study's three
technologies (Linux bridge + GRE, which the study did not have, is left out of its cells), loss as the share of pings
lost during the UDP test (the study's measure), at the highest controlled rate each row ran.

The trial is the unit: every statistic is over one value per trial (a trial's median ping under load, its aggregate
throughput, its mean ping loss over pairs). The best per metric is stats.best_of: Welch's t-test on every pair of
technologies, Holm-corrected over all the pairs of the cell; those that cannot be told from the leader are listed
with it, "not told apart" (no tie is shown by that: the scorecard's "a tie" is an equivalence within its margin).
"""
from __future__ import annotations

from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from ...core.units import human, parse_rate  # noqa: E402
from ...results import guards, stats  # noqa: E402
from ...results.dataset import RATIO_OF_SUMS, Dataset, load  # noqa: E402
from ...results.stats import best_of, compare, holm, summarize, verdict  # noqa: E402
from ...results.store import Store  # noqa: E402
from .. import figures
from . import register  # noqa: E402
from ._cells import noted, saw  # noqa: E402
from .base import Analysis, AnalysisResult, FigureData, TableData  # noqa: E402

ENVIRONMENTS = {("ovs", "vxlan"): "OVS+VXLAN", ("ovs", "gre"): "OVS+GRE", ("linuxbridge", "vxlan"): "LB+VXLAN",
                ("linuxbridge", "gre"): "LB+GRE"}  # LB+GRE needs a gretap device: in a guest kernel (kernel: guest)
STUDY = ("OVS+VXLAN", "OVS+GRE", "LB+VXLAN")  # Table 3.1's technologies: Mitaka's Linux bridge had no GRE
NA_FIXED = "N.A. (fixed rate)"
# (column, metric, protocol of the test, better, unit, reduce: a trial's samples -> its value)
BEST = [("lowest latency", "rtt_loaded_s", "tcp", "lower", "s", "median"),
        ("lowest jitter", "ping_jitter_s", "tcp", "lower", "s", "mean"),
        ("lowest loss", "ping_loss_ratio", "udp", "lower", "ratio", "mean"),   # pings lost under the UDP load
        ("highest TCP throughput", "aggregate_throughput_bps", "tcp", "higher", "bit/s", "sum"),
        ("highest UDP throughput", "aggregate_throughput_bps", "udp", "higher", "bit/s", "sum")]
VICTIM = [("latency", "rtt_loaded_s", "s", "lower"), ("ping loss", "ping_loss_ratio", "ratio", "lower"),
          ("throughput", "throughput_bps", "bit/s", "higher"), ("TCP retransmits", "tcp_retransmits", "1", "lower")]


def trial_values(data: Dataset, scenario: int, metric: str, pair: int | str | None = None,
                 reduce: str | None = None) -> list[float]:
    """One value per trial of the scenario's foreground workload (a background flood is never mixed in)."""
    meta = {} if pair is None else {"pair": pair}
    return data.trial_values(metric, reduce, scenario=scenario, **meta).get(scenario, [])


def env(labels: dict) -> str | None:
    name = ENVIRONMENTS.get((labels["switch"], labels["overlay"]))
    # a technology measured in a guest's kernel says so: it is not the same machine as the others
    return f"{name} (guest kernel)" if name and labels.get("kernel") == "guest" else name


def _rate(s: dict) -> int:
    """The scenario's UDP rate in bit/s ('100M' -> 100000000); 0 when it has none."""
    try:
        return parse_rate(s["levels"].get("udp_rate"))
    except (TypeError, ValueError):
        return 0


def _key(s: dict) -> tuple[str, int, str]:
    return s["labels"]["placement"], 2 * int(s["levels"]["pairs"]), s["labels"].get("direction", "uni")


def in_study(e: str) -> bool:
    """One of the study's three technologies (the '(guest kernel)' mark aside)."""
    return e.removesuffix(" (guest kernel)") in STUDY


def _main_scenarios(data: Dataset, protocol: str) -> dict[tuple[str, int, str], dict[str, int]]:
    """(placement, VMs, direction) -> environment -> scenario, for the given protocol. For UDP the highest controlled
    rate that row ran is used, the study's most demanding level."""
    rows = [s for s in data.scenarios.values() if s["labels"].get("interference", "none") == "none"
            and s["labels"]["protocol"] == protocol and env(s["labels"])]
    top: dict[tuple[str, int, str], int] = defaultdict(int)
    for s in rows:
        top[_key(s)] = max(top[_key(s)], _rate(s) if protocol == "udp" else 0)
    out: dict[tuple[str, int, str], dict[str, int]] = defaultdict(dict)
    for s in rows:
        if protocol != "udp" or _rate(s) == top[_key(s)]:
            out[_key(s)][env(s["labels"])] = s["idx"]
    return out


def _udp_rates(data: Dataset) -> str:
    """The UDP rate each row's loss column is taken at, e.g. '200 Mbit/s (cross-host), 100 Mbit/s (same-host)'."""
    by: dict[int, set[str]] = defaultdict(set)
    for key, cell in _main_scenarios(data, "udp").items():
        for sc in cell.values():
            by[_rate(data.scenarios[sc])].add(key[0])
    return ", ".join(f"{r / 1e6:.0f} Mbit/s ({' and '.join(sorted(p))})" for r, p in sorted(by.items(), reverse=True))


def best_table(data: Dataset) -> TableData:
    keys = sorted({k for proto in ("tcp", "udp") for k in _main_scenarios(data, proto)},
                  key=lambda k: (k[0], k[1], k[2] != "uni", k[2]))
    rows = []
    for placement, vms, direction in keys:
        row = [placement, str(vms), direction]
        for title, metric, proto, better, _, how in BEST:
            cell = {e: sc for e, sc in _main_scenarios(data, proto).get((placement, vms, direction), {}).items()
                    if in_study(e)}   # the study's three, as the scorecard's Table 3.1 rows
            if title == "highest UDP throughput":
                row.append(NA_FIXED if cell else "n/a (no UDP test)")
                continue
            if not cell:
                row.append(f"n/a (no {proto.upper()} test{' in this direction' if direction != 'uni' else ''})")
                continue
            groups = {e: v for e, sc in cell.items() if (v := trial_values(data, sc, metric,
                      "all" if metric == "aggregate_throughput_bps" else None, how))}
            row.append(_best_cell(groups, better) + _short(data, cell))
        rows.append(row)
    rates = _udp_rates(data)
    others = sorted({e for proto in ("tcp", "udp") for cell in _main_scenarios(data, proto).values() for e in cell
                     if not in_study(e)})
    return TableData("Best technology per metric, placement, VM count and direction",
                     ["placement", "VMs", "direction", *[b[0] for b in BEST]], rows,
                     "Best = the best mean over trials (one value per trial). 'A / B (not told apart)' lists every "
                     "technology that cannot be told from the best (not shown equal: the scorecard's 'a tie' is an "
                     "equivalence within its margin): the permutation test of Welch's t (exact up to 8 trials a side) on the per-trial values of every pair of "
                     "technologies, Holm-corrected over all the pairs of the cell (alpha 0.05). Latency "
                     "(each trial's median ping) and jitter come from pings sent during the TCP test, as in the "
                     "study; loss, as the study measured it, is the share of pings lost during the UDP tests (each "
                     "trial's mean over connections; UDP datagram loss is in the cost table's 'bound by')"
                     + (f" at the highest controlled rate each row ran, per connection: {rates}" if rates else "")
                     + ". TCP throughput is the trial's aggregate goodput at the receivers (both directions summed in "
                     "bidirectional runs). UDP throughput is N.A., as in the study: the UDP tests send at a fixed, "
                     "controlled rate, so what they carry is set by the rate, not by the technology; the loss column "
                     "shows the pings each technology lost under it. UDP runs one way only. Each cell compares the "
                     "study's three technologies, as the scorecard's Table 3.1 rows do"
                     + (f"; {', '.join(others)}, which the study did not have, is left out of the cells (its values "
                        "are in the figures and the cost table)" if others else "") + ".")


def _short(data: Dataset, cell: dict[str, int]) -> str:
    """'; load not offered in 3 of 8 trials (LB+VXLAN)': a verdict built on trials whose sender (or flood) fell short
    of the rate asked for says so."""
    counts: dict[str, list[int]] = {}
    for t in data.trials.values():
        e = next((e for e, sc in cell.items() if sc == t["scenario"]), None)
        if e is not None and t["status"] == "ok":
            c = counts.setdefault(e, [0, 0])
            c[0] += guards.not_offered(t["metadata"])
            c[1] += 1
    short = {e: c for e, c in counts.items() if c[0]}
    if not short:
        return ""
    return (f"; load not offered in {sum(c[0] for c in short.values())} of {sum(c[1] for c in counts.values())} "
            f"trials ({', '.join(sorted(short))})")


def _best_cell(groups: dict[str, list[float]], better: str) -> str:
    if not groups:
        return "n/a"
    if len(groups) == 1:
        return f"{next(iter(groups))} (only one ran)"
    b = best_of(groups, better)
    return f"{' / '.join([b.label, *b.ties])} (not told apart)" if b.tie else b.label


def implementations(data: Dataset) -> dict[str, str]:
    """Environment -> the kernel and what carried its packets in this campaign, e.g. 'ovs-netdev + ovs-vxlan' on this
    machine's kernel, 'uml-6.1.176 + ovs-system + ovs-gre' in a guest's."""
    out: dict[str, set[str]] = defaultdict(set)
    for s in data.scenarios.values():
        if s["status"] == "done" and (e := env(s["labels"])):
            impl = s.get("implementation") or {}
            out[e].add(" + ".join(v for k, v in impl.items()
                                  if k in ("kernel", "switch", "overlay") and v and v != "none"))
    return {e: " / ".join(sorted(v)) for e, v in out.items()}


def implementation_note(data: Dataset) -> str:
    impl = implementations(data)
    if not impl:
        return ""
    text = "Implementations that ran: " + "; ".join(f"{e}: {v or 'not recorded'}" for e, v in sorted(impl.items()))
    ovs = " ".join(v for e, v in impl.items() if e.startswith("OVS"))
    if "netdev" in ovs or "userspace" in ovs:
        text += (". Open vSwitch ran here in userspace (datapath netdev): every packet goes up to ovs-vswitchd and "
                 "back, on the same 2 cores as the traffic, where the study's OpenStack OVS ran in the kernel. The "
                 "OVS vs Linux bridge verdicts here therefore compare userspace OVS with the kernel bridge; they do "
                 "not tell how kernel OVS would fare, and OVS+VXLAN vs OVS+GRE compares two userspace tunnels.")
    elif ovs:
        text += ". Open vSwitch ran in the kernel (datapath system), as in the study"
        guests = sorted({v.split(" + ")[0] for v in impl.values() if v.startswith("uml-")})
        text += (f", in a guest kernel ({', '.join(guests)}: User-Mode Linux, one CPU) like every environment "
                 "here: figures compare the technologies with each other, not with this machine's kernel."
                 if guests else ".")
    return text


# beside the table's metrics, the UDP tests' datagram loss at the receiver: finer than a few pings a second
FIGURES = BEST + [("lowest UDP datagram loss", "udp_loss_ratio", "udp", "lower", "ratio", "mean")]


def metric_figures(data: Dataset) -> list[FigureData]:
    figs = []
    for title, metric, proto, _, unit, how in FIGURES:
        table = {k: v for k, v in _main_scenarios(data, proto).items() if k[2] == "uni"}
        if not table:
            continue
        keys = sorted(table)
        envs = sorted({e for k in keys for e in table[k]}, key=lambda e: (list(ENVIRONMENTS.values()) + [e]).index(
            e.removesuffix(" (guest kernel)")))
        width = 0.8 / max(len(envs), 1)
        cells = {(k, e): summarize(v) for k in keys for e in envs
                 if e in table[k] and (v := trial_values(data, table[k][e], metric,
                                                         "all" if metric == "aggregate_throughput_bps" else None, how))}
        if not cells:   # no trial measured it (pings not sent under the load, a metric the tool did not give)
            continue
        fig = Figure(figsize=(10, 4), layout="constrained")
        ax = fig.subplots()
        mult, ulabel = figures.axis_unit(unit, [s.mean for s in cells.values()])
        lo_b, hi_b = figures.bounds(metric, unit)
        for j, e in enumerate(envs):
            got = [(i, cells[(k, e)]) for i, k in enumerate(keys) if (k, e) in cells]
            means = [s.mean * mult for _, s in got]
            err = figures.error_bars(means, [s.ci_mean[0] * mult for _, s in got],
                                     [s.ci_mean[1] * mult for _, s in got], lo_b * mult, hi_b * mult)
            ax.bar([i + (j - (len(envs) - 1) / 2) * width for i, _ in got], means, width, yerr=err, capsize=3, label=e)
        ax.set_xticks(range(len(keys)), [f"{p}\n{v} VMs" for p, v, _ in keys])
        ax.set_ylabel(f"{metric} ({ulabel})" if ulabel else metric)
        ax.set_title(f"{title.split(' ', 1)[1]} ({proto.upper()} test, one way): mean over trials with 95% CI")
        ax.legend()
        figs.append(FigureData(f"s2-{metric}-{proto}", f"S2 {metric} under {proto.upper()} load", fig,
                               "Bars: mean over trials (one value per trial); whiskers: 95% confidence interval of "
                               "the mean, clipped to the physically possible range."))
    return figs


CPU_BOUND = 0.9  # a host whose kernel was this busy over the window had no CPU to spare: its CPU bound the cell
LOSSY = 0.05     # a fixed-rate UDP cell losing this much of what was sent was bound by its receiving side


def _host_means(data: Dataset, sc: int, metric: str) -> dict[str, float]:
    """Host -> mean over trials of the host's own window total of `metric` (its /proc/stat: one guest per host, or
    the one guest / this machine as 'machine'). Each host is its own account: never added together."""
    host = lambda t, s: s["metadata"].get("host") or "machine"  # noqa: E731
    work = RATIO_OF_SUMS.get(metric)
    if work:  # CPU per unit of work over trials: all the CPU over all the work, not a mean of per-trial ratios
        parts: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for t, s in data.select(metric, scenario=sc, background=None, scope="machine"):
            if "cpu_s" in s["metadata"] and work in s["metadata"]:
                acc = parts[host(t, s)]
                acc[0], acc[1] = acc[0] + s["metadata"]["cpu_s"], acc[1] + s["metadata"][work]
        if parts:
            return {h.removeprefix("guest-"): c / w for h, (c, w) in sorted(parts.items()) if w > 0}
    got = data.trial_values(metric, "mean", key=host, scenario=sc, background=None, scope="machine")
    return {h.removeprefix("guest-"): summarize(v).mean for h, v in sorted(got.items()) if v}


def bound(data: Dataset, sc: int, offered: tuple[int, int], busy: dict[str, float], rate: int) -> str:
    """What bound the cell, where the data show it: the offered load (a sender short of its rate, or the rate itself
    when sent in full and received), the receiving side (a rate sent in full but lost), a host's CPU (its kernel >=
    90 % busy), the machine's CPU taken by other work (measured just before each trial: a guest's own /proc/stat
    cannot see the CPU it did not get); else what the data rule out. No S2 underlay has a link rate."""
    short, n = offered
    foreign = [f for t in data.trials.values() if t["scenario"] == sc and t["status"] == "ok"
               and isinstance(f := t["metadata"].get("foreign_busy_ratio"), (int, float))]
    machine = summarize(foreign).mean if foreign else 0.0
    context = f"; the machine {machine:.0%} busy with other work just before the trials" if machine >= 0.5 else ""
    hot = {h: b for h, b in busy.items() if b >= CPU_BOUND}
    cpu = "CPU of " + ", ".join(f"{h} ({b:.0%} busy)" for h, b in hot.items()) if hot else ""
    top = max(busy.values(), default=float("nan"))
    loss = trial_values(data, sc, "udp_loss_ratio", None, "mean") if rate else []
    lost = summarize(loss).mean if loss else 0.0
    if short:
        return f"offered load: the sender fell short of its rate in {short} of {n} trials" + \
            (f" ({cpu})" if cpu else "") + (f", and the receiving side lost {lost:.0%} of what was sent"
                                            if lost >= LOSSY else "") + context
    if cpu:
        return cpu + context
    if rate:
        if lost >= LOSSY:
            return (f"the receiving side: {lost:.0%} of the rate sent in full was lost (hosts at most {top:.0%} busy)"
                    f"{context}")
        return "offered load: the rate asked, sent in full and received"
    if context:
        return (f"the machine's CPU{context.split(';', 1)[1].removeprefix(' the machine')} (hosts' own kernels at "
                f"most {top:.0%} busy: a guest does not see the CPU it did not get)")
    return f"not shown by the data: no underlay rate set, hosts at most {top:.0%} busy" if busy else \
        "not shown by the data"


def _offered(data: Dataset, sc: int) -> tuple[int, int]:
    """(trials whose sender or background flood fell short of its rate, trials) of a scenario."""
    trials = [t for t in data.trials.values() if t["scenario"] == sc and t["status"] == "ok"]
    return sum(guards.not_offered(t["metadata"]) for t in trials), len(trials)


@noted
def cost_table(data: Dataset) -> TableData | None:
    """Throughput beside its CPU cost per host (s of CPU per Gbit/s delivered) and what bound each cell: on an
    emulator whose hosts are CPU-bound, the difference between technologies is their CPU cost."""
    rows = []
    for proto in ("tcp", "udp"):
        for (placement, vms, direction), cell in sorted(_main_scenarios(data, proto).items()):
            for e, sc in sorted(cell.items()):
                tput = trial_values(data, sc, "aggregate_throughput_bps", "all", "sum")
                if not tput:
                    continue
                s = summarize(tput)
                saw(s.n)
                cost = _host_means(data, sc, "cpu_s_per_gbit")
                busy = _host_means(data, sc, "cpu_busy_ratio")
                offered = _offered(data, sc)
                rate = _rate(data.scenarios[sc]) if proto == "udp" else 0
                sent = trial_values(data, sc, "sender_throughput_bps", None, "mean") if rate else []
                rows.append([placement, str(vms), direction, proto.upper(), e,
                             f"{human(s.mean, 'bit/s')} [{human(max(0.0, s.ci_mean[0]), 'bit/s')} .. "
                             f"{human(s.ci_mean[1], 'bit/s')}]",
                             (f"{human(summarize(sent).mean, 'bit/s')} of {human(rate, 'bit/s')}"
                              if sent else "n/a (TCP: as fast as it can)"),
                             ", ".join(f"{h} {v:.3g}" for h, v in cost.items()) or "not measured",
                             ", ".join(f"{h} {v:.0%}" for h, v in busy.items()) or "not measured",
                             bound(data, sc, offered, busy, rate)])
    if not rows:
        return None
    return TableData("Throughput, CPU per Gbit/s and what bound each cell",
                     ["placement", "VMs", "direction", "protocol", "environment", "throughput (95 % CI)",
                      "offered per connection", "CPU s per Gbit/s (per host)", "host CPU busy", "bound by"], rows,
                     "Throughput: the trial's aggregate goodput at the receivers, mean over trials with its 95 % CI. "
                     "Offered: each UDP sender's mean rate against the rate asked (a sender under 95 % of it flags the "
                     "trial). CPU per Gbit/s: each host's CPU seconds over the tool's window (its own kernel's "
                     "/proc/stat, busy share x CPUs) per Gbit delivered, all trials' CPU over all their Gbit (a ratio of "
                     "sums); each host is its own "
                     "account. Bound by: the offered load when a sender fell short, a host's CPU when its kernel was "
                     f"at least {CPU_BOUND:.0%} busy, else what the data rule out.")


def interference_table(data: Dataset) -> TableData | None:
    by_env: dict[str, dict[str, int]] = defaultdict(dict)
    for s in data.scenarios.values():
        level = s["labels"].get("interference", "none")
        if level != "none" and env(s["labels"]):
            by_env[env(s["labels"])][level] = s["idx"]
    if not by_env:
        return None
    rows, tests = [], []
    for e, levels in sorted(by_env.items()):
        for name, metric, unit, better in VICTIM:
            alone = trial_values(data, levels["victim-alone"], metric, 2) if "victim-alone" in levels else []
            flooded = trial_values(data, levels["victim-flooded"], metric, 2) if "victim-flooded" in levels else []
            rows.append([e, name, _mean(alone, unit), _mean(flooded, unit), _change(alone, flooded), "n/a"])
            short, n = _offered(data, levels["victim-flooded"]) if "victim-flooded" in levels else (0, 0)
            if short:   # a flood that did not flood: tenant B was not measured under the load the study asked
                rows[-1][-1] = f"could not be tested: tenant A's flood fell short of its rate in {short} of {n} trials"
                continue
            if not alone or not flooded:
                continue
            if len(alone) < 2 or len(flooded) < 2:
                rows[-1][-1] = "cannot tell (fewer than 2 trials)"
            else:
                tests.append((rows[-1], compare(alone, flooded, better=better)))
    level = 0.05 / max(1, sum(t.p == t.p for _, t in tests))  # Holm's first step: the tests that have a p
    for (row, c), p in zip(tests, holm([c.p for _, c in tests])):
        v = verdict(p < 0.05, c.diff, c.better)
        row[-1] = {"worse": "yes, worse", "better": "yes, better"}.get(v, c.why or "not significant") + (
            f" (p = {p:.2g}{_could(c, level) if v == stats.NOT_SIGNIFICANT else ''})" if p == p else "")
    return TableData("Tenant interference: tenant B alone vs while tenant A floods",
                     ["environment", "tenant B metric", "B alone", "B under A's flood", "change", "significant"], rows,
                     "Tenant A (pair 1) sends bounded UDP through the same hosts while tenant B (pair 2, its own VNI) "
                     "is measured. Means over trials, one value per trial (its median ping, its goodput ...); "
                     "'significant': the permutation test of Welch's t (exact up to 8 trials a side) on the per-trial values, p < 0.05 after Holm's correction over "
                     f"the {len(tests)} comparisons of this table (p shown is Holm-adjusted). 'could not be tested': "
                     "tenant A's flood fell short of its rate (a sender under 95 % of it) in some trial, so tenant B "
                     "was not measured under the flood asked for.")


def _mean(values: list[float], unit: str) -> str:
    return human(summarize(values).mean, unit) if values else "n/a"


def _change(alone: list[float], flooded: list[float]) -> str:
    if not alone or not flooded:
        return "n/a"
    a, f = summarize(alone).mean, summarize(flooded).mean
    return "n/a" if a == 0 else f"{(f - a) / abs(a) * 100:+.0f} %"


@register
class S2(Analysis):
    name = "s2"
    title = "S2 — VXLAN vs GRE with Linux bridge vs Open vSwitch"

    def run(self, store: Store, campaign: int) -> AnalysisResult:
        data = load(store, campaign)
        tables = [best_table(data)]
        note = implementation_note(data)
        if note:
            tables[0].note += " " + note
        if cost := cost_table(data):
            tables.append(cost)
        interference = interference_table(data)
        if interference:
            tables.append(interference)
        return AnalysisResult(tables, metric_figures(data), _findings(tables[0], note, interference))


def _interference_finding(table: TableData) -> str:
    """The study's multi-tenant finding (a UDP flood disturbed another tenant's network), as this campaign tested it."""
    untested = [r for r in table.rows if r[-1].startswith("could not be tested")]
    if untested:
        return (f"Tenant interference could not be tested: {untested[0][-1].split(': ', 1)[1]} ({untested[0][0]}); "
                f"tenant B was not measured under the flood asked for.")
    hit = [f"{r[0]} {r[1]} {r[4]}" for r in table.rows if r[-1].startswith("yes, worse")]
    return ("Tenant interference (the study: a UDP flood disturbed other tenants): "
            + (f"tenant B significantly worse under tenant A's flood: {'; '.join(hit)}" if hit else
               "no metric of tenant B significantly worse under tenant A's flood (Holm over the table)") + ".")


def _findings(best: TableData, implementation: str, interference: TableData | None = None) -> list[str]:
    """The study found OVS+VXLAN or LB+VXLAN best depending on the metric; say what this campaign found."""
    out = []
    for col, (title, *_rest) in enumerate(BEST, start=3):
        winners = [r[col].split(";")[0] for r in best.rows if not r[col].startswith(("n/a", "N.A."))]
        if winners:
            clear = [w for w in winners if not w.endswith("(not told apart)")]
            out.append(f"{title}: {len(clear)} of {len(winners)} cells have a significant winner "
                       f"({', '.join(sorted(set(clear))) or 'none'}); in the rest the best is not told apart from another (the permutation test of "
                       f"Welch's t on every pair, Holm within each cell: each cell is one family at 5 %, so among cells where nothing differs "
                       f"at most 1 in 20 shows a winner).")
    if interference:
        out.append(_interference_finding(interference))
    if implementation:
        out.append(implementation)
    return out


def _could(c: stats.Comparison, alpha: float) -> str:
    found = stats.could_find(c, alpha)
    return f"; could find ±{found} (80 % power)" if found else (
        f"; {stats.unreachable(c.a.n, c.b.n, alpha)}" if stats.unreachable(c.a.n, c.b.n, alpha) else "")
