"""The packet-rate section of `show`: per scenario and frame size, NDR and PDR (RFC 9971 conditional throughput) with
their relevant bounds, in frames/s and bit/s (L1 and L2), the generator's ceiling and whether a rate may be the
generator's; then latency at shares of the PDR. Each cell is the median over trials of one value per trial (one
search each), with the spread over trials when there are several."""
from __future__ import annotations

import math
import statistics
from collections import defaultdict

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..core.units import human
from ..results import dataset, stats
from ..results.store import Store
from .analyses.base import TableData
from .tables import label_columns

LATENCY_STATS = ("p50", "p90", "p99", "p99.9", "max")
NOTE = ("each cell the median over searches (cv: their spread); generator-bound: within 10 % of the ceiling, or no "
        "load the generator offered was too much; irregular: no upper bound, or out of time before the goal width")


def _frame_order(frame: str) -> tuple:
    head = frame.split()[0]
    return (0, int(head)) if head.isdigit() else (1, head)


def groups(data: dataset.Dataset) -> dict[tuple[int, str], dict[str, dict[int, float]]]:
    """(scenario, frame) -> metric -> {trial: value} of the ndrpdr workload's per-trial metrics."""
    out: dict[tuple[int, str], dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for t in data.ok:
        if t.kind != "ndrpdr":
            continue
        for s in t.samples:
            m = s["metadata"]
            if m.get("frame") and not m.get("series") and m.get("at_pdr") is None:
                out[(t.scenario, m["frame"])][s["metric"]][t.id] = s["value"]
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], _frame_order(kv[0][1]))))


def _flags(data: dataset.Dataset, scenario: int, frame: str) -> tuple[bool, bool]:
    """(generator-bound in any trial, irregular in any trial) for the NDR/PDR of one scenario and frame size."""
    bound = irregular = False
    for t in data.ok:
        for s in t.samples:
            m = s["metadata"]
            if t.scenario == scenario and m.get("frame") == frame and s["metric"] in ("ndr_pps", "pdr_pps"):
                bound |= bool(m.get("generator_bound"))
                irregular |= m.get("regular") is False
    return bound, irregular


def _cell(values: dict[int, float], unit: str, spread: bool = True) -> str:
    if not values:
        return "-"
    v = list(values.values())
    text = human(statistics.median(v), unit)
    if spread and len(v) > 1:
        s = stats.summarize(v)
        text += f" cv {s.std / s.mean:.0%}" if s.mean else ""
    return text


def _bounds(g: dict[str, dict[int, float]], goal: str) -> str:
    lo, hi = (_cell(g.get(f"{goal}_{b}_pps", {}), "1/s", False).removesuffix("/s") for b in ("lower", "upper"))
    return f"{lo} .. {hi}"


def _generators(data: dataset.Dataset) -> list[str]:
    """Which generator ran (iperf3 is the fallback, labelled as such)."""
    names = {s["metadata"].get("generator") for t in data.ok if t.kind == "ndrpdr" for s in t.samples}
    return [f"{n} (UDP, the fallback)" if n == "iperf3" else n for n in sorted(n for n in names if n)]


def _per_frame(data: dataset.Dataset, scenario: int, frame: str, goal: str = "ndr") -> str:
    """s/Mpacket as µs a frame, over the trials the ratio of sums: their CPU seconds / their Mpackets, each summed
    (dataset.RATIO_OF_SUMS; a trial that received almost nothing weighs what it received)."""
    parts = [(m["cpu_s"], m["mpackets"]) for t, s in data.select(f"{goal}_cpu_s_per_mpacket", scenario=scenario)
             if (m := s["metadata"]).get("frame") == frame and "cpu_s" in m and m.get("mpackets")]
    total = math.fsum(w for _, w in parts)
    return f"{math.fsum(c for c, _ in parts) / total:.3g} µs" if total > 0 else "-"


def rates_tables(data: dataset.Dataset) -> list[TableData]:
    """Frames/s with bounds and the ceiling; then the same rates in bit/s and the trial duration achieved."""
    got = groups(data)
    if not got:
        return []
    cols = label_columns([data.scenarios[sc] for sc, _ in got])
    rates = TableData("packet rates per frame size: RFC 9971 conditional throughput offered by one interface, "
                      "[relevant lower .. upper bound]; the generator's ceiling over a bare veth pair",
                      [*cols, "frame", "NDR", "NDR bounds", "PDR", "PDR bounds", "ceiling", "", "n"], [],
                      NOTE + f"; generator: {', '.join(_generators(data))}")
    bits = TableData("the same in bit/s: L1 counts 20 B of preamble and gap a frame, L2 the frame; the seconds the "
                     "generator sent for at the lower bound, and the machine's busy CPU per frame received there",
                     [*cols, "frame", "NDR L1", "NDR L2", "PDR L1", "PDR L2", "NDR trial", "PDR trial", "NDR CPU"], [])
    for (sc, frame), g in got.items():
        labels = [str(data.scenarios[sc]["labels"].get(c, "")) for c in cols]
        bound, irregular = _flags(data, sc, frame)
        note = ", ".join(w for w, on in (("generator-bound", bound), ("irregular", irregular)) if on)
        n = max((len(v) for v in g.values()), default=0)
        rates.rows.append([*labels, frame, *(x for goal in ("ndr", "pdr")
                                             for x in (_cell(g.get(f"{goal}_pps", {}), "1/s"), _bounds(g, goal))),
                           _cell(g.get("generator_ceiling_pps", {}), "1/s", False), note, str(n)])
        bits.rows.append([*labels, frame, *(_cell(g.get(f"{goal}_{layer}_bps", {}), "bit/s", False)
                                            for goal in ("ndr", "pdr") for layer in ("l1", "l2")),
                          *(_cell(g.get(f"{goal}_trial_s", {}), "s", False) for goal in ("ndr", "pdr")),
                          _per_frame(data, sc, frame)])
    return [rates, bits]


def latency(data: dataset.Dataset) -> dict[tuple[int, str, float], dict[str, dict[int, float]]]:
    """(scenario, frame, share of PDR) -> statistic -> {trial: value}; a percentile only from a trial with enough
    echoes for it (p99 needs >= 100, p99.9 >= 1000)."""
    per: dict[tuple[int, str, float], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for t, s in data.select("ndrpdr_rtt_s"):
        m = s["metadata"]
        per[(t.scenario, m.get("frame", ""), m.get("at_pdr"))][t.id].append(s["value"])
    out: dict = {}
    for key, trials in sorted(per.items(), key=lambda kv: (kv[0][0], _frame_order(kv[0][1]), kv[0][2])):
        out[key] = {stat: {tid: dataset.reduce_values(v, stat) for tid, v in trials.items()
                           if stat == "max" or dataset.supported(dataset.quantile(stat), len(v))}
                    for stat in LATENCY_STATS}
        out[key]["n"] = {tid: len(v) for tid, v in trials.items()}
    return out


def latency_table(data: dataset.Dataset) -> TableData | None:
    got = latency(data)
    if not got:
        return None
    cols = label_columns([data.scenarios[sc] for sc, _, _ in got])
    table = TableData("round trip beside the load at shares of the PDR found (median over trials; - : too few echoes "
                      "in a trial for that percentile)", [*cols, "frame", "load", *LATENCY_STATS, "echoes"], [])
    for (sc, frame, share), g in got.items():
        n = g.pop("n")
        table.rows.append([*(str(data.scenarios[sc]["labels"].get(c, "")) for c in cols), frame, f"{share:.0%} PDR",
                           *(_cell(g[s], "s", False) for s in LATENCY_STATS), str(int(statistics.median(n.values())))])
    return table


def tables(data: dataset.Dataset) -> list[TableData]:
    """The section's tables (none when the campaign ran no ndrpdr)."""
    return [t for t in (*rates_tables(data), latency_table(data)) if t is not None]


def _rich(t: TableData, width: int) -> Table:
    table = Table(title=escape(t.title), box=box.SIMPLE, title_justify="left", width=min(width, 160))
    for name in t.columns:
        table.add_column(escape(name))
    for row in t.rows:
        table.add_row(*(escape(c) for c in row))
    return table


def show(store: Store, cid: int, console: Console) -> None:
    """The section, when the campaign ran ndrpdr."""
    for t in tables(dataset.load(store, cid)):
        console.print(_rich(t, console.width))
        if t.note:
            console.print(escape(t.note), style="dim")
