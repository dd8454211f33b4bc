"""S2: VXLAN vs GRE with Linux bridge vs Open vSwitch — per-metric figures with 95% confidence intervals, the
table naming the best technology per metric for each placement and VM count (a tie where the best is not
significantly better than the runner-up), and tenant B alone vs under tenant A's flood."""
from __future__ import annotations

from collections import defaultdict
from statistics import mean

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from ..stats import best_of, compare, summarize  # noqa: E402
from ..store import Store  # noqa: E402
from ..units import human  # noqa: E402
from . import register  # noqa: E402
from .base import Analysis, AnalysisResult, FigureData, TableData  # noqa: E402
from .campaign_data import CampaignData, load  # noqa: E402

ENVIRONMENTS = {("ovs", "vxlan"): "OVS+VXLAN", ("ovs", "gre"): "OVS+GRE", ("linuxbridge", "vxlan"): "LB+VXLAN",
                ("linuxbridge", "gre"): "LB+GRE"}  # LB+GRE needs a gretap device: in a guest kernel (kernel: guest)
# (column, metric, protocol of the load, better, unit)
BEST = [("lowest latency", "rtt_loaded_s", "tcp", "lower", "s"),
        ("lowest jitter", "ping_jitter_s", "tcp", "lower", "s"),
        ("lowest loss", "ping_loss_ratio", "tcp", "lower", "ratio"),
        ("highest TCP throughput", "aggregate_throughput_bps", "tcp", "higher", "bit/s"),
        ("highest UDP throughput", "aggregate_throughput_bps", "udp", "higher", "bit/s")]
VICTIM = [("latency", "rtt_loaded_s", "s", "lower"), ("ping loss", "ping_loss_ratio", "ratio", "lower"),
          ("throughput", "throughput_bps", "bit/s", "higher"), ("TCP retransmits", "tcp_retransmits", "1", "lower")]


def trial_means(data: CampaignData, scenario: int, metric: str, pair: int | None = None) -> list[float]:
    """One value per trial (the mean of that trial's samples): trials, not echoes, are the replications."""
    per_trial: dict[int, list[float]] = defaultdict(list)
    for (sc, _, m, background), points in data.points.items():
        if sc == scenario and m == metric and not background:
            for p in points:
                if pair is None or p.meta.get("pair") == pair:
                    per_trial[p.trial].append(p.value)
    return [mean(v) for v in per_trial.values()]


def env(labels: dict) -> str | None:
    name = ENVIRONMENTS.get((labels["switch"], labels["overlay"]))
    # a technology measured in a guest's kernel says so: it is not the same machine as the others
    return f"{name} (guest kernel)" if name and labels.get("kernel") == "guest" else name


def _main_scenarios(data: CampaignData, protocol: str) -> dict[tuple[str, int], dict[str, int]]:
    """(placement, VMs) -> environment -> scenario, for one-way load of the given protocol. For UDP the
    highest controlled rate of the campaign is used, the study's most demanding level."""
    rows = [s for s in data.scenarios.values() if s["labels"].get("interference", "none") == "none"
            and s["labels"]["protocol"] == protocol and s["labels"]["direction"] == "uni" and env(s["labels"])]
    if protocol == "udp" and rows:
        top = max(int(s["levels"]["udp_rate"]) if str(s["levels"]["udp_rate"]).isdigit() else 0 for s in rows)
        rows = [s for s in rows if not str(s["levels"]["udp_rate"]).isdigit() or int(s["levels"]["udp_rate"]) == top]
    out: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)
    for s in rows:
        out[(s["labels"]["placement"], 2 * int(s["levels"]["pairs"]))][env(s["labels"])] = s["idx"]
    return out


def best_table(data: CampaignData) -> TableData:
    keys = sorted({k for proto in ("tcp", "udp") for k in _main_scenarios(data, proto)})
    rows = []
    for placement, vms in keys:
        row = [placement, str(vms)]
        for _, metric, proto, better, _ in BEST:
            groups = {e: v for e, sc in _main_scenarios(data, proto).get((placement, vms), {}).items()
                      if (v := trial_means(data, sc, metric))}
            row.append(_best_cell(groups, better))
        rows.append(row)
    return TableData("Best technology per metric, placement and VM count",
                     ["placement", "VMs", *[b[0] for b in BEST]], rows,
                     "Best = best mean over trials (one value per trial: the trial's mean). 'tie: A / B' where the best "
                     "is not significantly better than the runner-up: their 95% CIs of the mean overlap or a "
                     "Mann-Whitney test gives p >= 0.05 (stats.best_of). Latency, jitter and loss are from pings "
                     "sent during one-way TCP load; UDP throughput is counted at the receiver at the highest "
                     "controlled rate of the campaign. With fewer than 4 trials per technology no difference can reach "
                     "significance (Mann-Whitney's smallest p is then 0.1 or more), so every cell is a tie.")


def _best_cell(groups: dict[str, list[float]], better: str) -> str:
    if not groups:
        return "n/a"
    if len(groups) == 1:
        return f"{next(iter(groups))} (only one ran)"
    b = best_of(groups, better)
    return f"tie: {b.label} / {b.runner_up}" if b.tie else b.label


def metric_figures(data: CampaignData) -> list[FigureData]:
    figs = []
    for title, metric, proto, _, unit in BEST:
        table = _main_scenarios(data, proto)
        if not table:
            continue
        fig = Figure(figsize=(10, 4), layout="constrained")
        ax = fig.subplots()
        keys = sorted(table)
        envs = sorted({e for k in keys for e in table[k]}, key=lambda e: (list(ENVIRONMENTS.values()) + [e]).index(
            e.removesuffix(" (guest kernel)")))
        width = 0.8 / max(len(envs), 1)
        for j, e in enumerate(envs):
            xs, ys, errs = [], [], []
            for i, k in enumerate(keys):
                vals = trial_means(data, table[k][e], metric) if e in table[k] else []
                if vals:
                    s = summarize(vals)
                    half = 0.0 if s.n < 2 else (s.ci_mean[1] - s.ci_mean[0]) / 2
                    xs.append(i + (j - (len(envs) - 1) / 2) * width)
                    ys.append(s.mean)
                    errs.append(half)
            ax.bar(xs, ys, width, yerr=errs, capsize=3, label=e)
        ax.set_xticks(range(len(keys)), [f"{p}\n{v} VMs" for p, v in keys])
        ax.set_ylabel(f"{metric} ({unit})")
        ax.set_title(f"{title.split(' ', 1)[1]} ({proto.upper()} load): mean with 95% CI")
        ax.legend()
        figs.append(FigureData(f"s2-{metric}-{proto}", f"S2 {metric} under {proto.upper()} load", fig,
                               "Bars: mean over trials; whiskers: 95% confidence interval of the mean."))
    return figs


def interference_table(data: CampaignData) -> TableData | None:
    by_env: dict[str, dict[str, int]] = defaultdict(dict)
    for s in data.scenarios.values():
        level = s["labels"].get("interference", "none")
        if level != "none" and env(s["labels"]):
            by_env[env(s["labels"])][level] = s["idx"]
    if not by_env:
        return None
    rows = []
    for e, levels in sorted(by_env.items()):
        for name, metric, unit, better in VICTIM:
            alone = trial_means(data, levels["victim-alone"], metric, 2) if "victim-alone" in levels else []
            flooded = trial_means(data, levels["victim-flooded"], metric, 2) if "victim-flooded" in levels else []
            rows.append([e, name, _mean(alone, unit), _mean(flooded, unit), *_change(alone, flooded, better)])
    return TableData("Tenant interference: tenant B alone vs while tenant A floods",
                     ["environment", "tenant B metric", "B alone", "B under A's flood", "change", "significant"], rows,
                     "Tenant A (pair 1) sends bounded UDP through the same hosts while tenant B (pair 2, its own VNI) "
                     "is measured; 'significant': Mann-Whitney p < 0.05 and non-overlapping 95% CIs over trial means.")


def _mean(values: list[float], unit: str) -> str:
    return human(mean(values), unit) if values else "n/a"


def _change(alone: list[float], flooded: list[float], better: str) -> list[str]:
    if not alone or not flooded:
        return ["n/a", "n/a"]
    a, f = mean(alone), mean(flooded)
    change = "n/a" if a == 0 else f"{(f - a) / abs(a) * 100:+.0f} %"
    if len(alone) < 2 or len(flooded) < 2:
        return [change, "cannot tell (fewer than 2 trials)"]
    c = compare(alone, flooded)
    worse = (f > a) == (better == "lower")
    return [change, ("yes, worse" if worse else "yes, better") if c.significant else "no"]


@register
class S2(Analysis):
    name = "s2"
    title = "S2 — VXLAN vs GRE with Linux bridge vs Open vSwitch"

    def run(self, store: Store, campaign: int) -> AnalysisResult:
        data = load(store, campaign)
        tables = [best_table(data)]
        interference = interference_table(data)
        if interference:
            tables.append(interference)
        return AnalysisResult(tables, metric_figures(data), _findings(tables[0]))


def _findings(best: TableData) -> list[str]:
    """The study found OVS+VXLAN or LB+VXLAN best depending on the metric; say what this campaign found."""
    out = []
    for col, (title, *_rest) in enumerate(BEST, start=2):
        winners = [r[col] for r in best.rows if r[col] != "n/a"]
        if winners:
            clear = [w for w in winners if not w.startswith("tie")]
            out.append(f"{title}: {len(clear)} of {len(winners)} cells have a significant winner "
                       f"({', '.join(sorted(set(clear))) or 'none'}); the rest are ties.")
    return out
