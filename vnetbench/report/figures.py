"""Figure builders for the report: plain data in (values per scenario label), a FigureData out.

Matplotlib's object API with the Agg canvas only: no display, no pyplot state. Axes are labelled in the unit a
person reads (Gbit/s, µs, %), chosen from the data by `axis_unit`. Matplotlib is imported when the first figure is
made or encoded (library()): a report's second process imports it while this one builds the document.
"""
from __future__ import annotations

import functools
import inspect
import io
import math
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..core.sample import elapsed
from ..results.stats import Summary
from . import row_layout
from .analyses.base import FigureData, LaterFigure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WIDTH = 11.0          # inches; 110 dpi PNG = 1210 px, readable in a 1400 px page
DPI = 110
CPU_PARTS = ("cpu_user_ratio", "cpu_system_ratio", "cpu_irq_ratio", "cpu_softirq_ratio", "cpu_steal_ratio")
_PREFIXES = {"bit/s": ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s"), (1, "bit/s")),
             "s": ((1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")),
             "1/s": ((1e6, "M/s"), (1e3, "k/s"), (1, "/s"))}


@functools.cache
def library() -> Any:
    """matplotlib with the modules the builders use, its Agg canvas chosen."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.backends.backend_agg
    import matplotlib.cbook
    import matplotlib.collections
    import matplotlib.figure
    import matplotlib.layout_engine
    import matplotlib.ticker
    return matplotlib  # (each submodule imported is an attribute of the package)


def axis_unit(unit: str, values: Sequence[float]) -> tuple[float, str]:
    """(multiplier, label): the largest prefix under which the biggest value is still >= 1."""
    if unit == "ratio":
        return 100.0, "%"
    if unit not in _PREFIXES:
        return 1.0, "" if unit == "1" else unit
    top = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    for scale, name in _PREFIXES[unit]:
        if top >= scale:
            return 1 / scale, name
    scale, name = _PREFIXES[unit][-1]
    return 1 / scale, name


def since_start(sample: dict) -> float:
    """A series point's time on the figure's axis: seconds from the start of its tool's measurement window (the
    sample's `window` metadata), else from the trial's start; sample.elapsed is the one rule."""
    got = elapsed(sample["t"], sample["metadata"], sample.get("started"))
    return sample["t"] if got is None else got


def bounds(metric: str, unit: str) -> tuple[float, float]:
    """The physical range of a metric in its SI unit: every metric vnetbench writes is >= 0; a loss or a whole
    machine's CPU share is at most 1."""
    whole = metric.endswith("loss_ratio") or (metric.startswith("cpu_") and metric.endswith("_ratio"))
    return 0.0, 1.0 if unit == "ratio" and whole else math.inf


def error_bars(centres: Sequence[float], lows: Sequence[float], highs: Sequence[float],
               lo_bound: float = 0.0, hi_bound: float = math.inf) -> list[list[float]]:
    """matplotlib's [below, above] error lengths for intervals lows..highs around centres, clipped to the physical
    range (a 95 % CI of a latency near zero must not reach below zero); an unknown end draws no whisker."""
    below, above = [], []
    for c, lo, hi in zip(centres, lows, highs):
        below.append(max(0.0, c - max(lo, lo_bound)) if math.isfinite(lo) else 0.0)
        above.append(max(0.0, min(hi, hi_bound) - c) if math.isfinite(hi) else 0.0)
    return [below, above]


def plain_axes(fig: Figure) -> None:
    """No axis of a report figure reads '1e10' or '+3e4': linear number axes print plain numbers (each builder
    scales values into a readable unit first; this is the safety net)."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            fmt = axis.get_major_formatter()
            if isinstance(fmt, library().ticker.ScalarFormatter):
                fmt.set_scientific(False)
                fmt.set_useOffset(False)


def encode(fig: Figure, fmt: str) -> bytes:
    plain_axes(fig)
    buf = io.BytesIO()
    # unhinted glyphs: a seventh of a report figure's drawing, and at 110 dpi as legible
    with library().rc_context({"text.hinting": "none"}), _laid_out(fig) if fmt == "png" else nullcontext():
        fig.savefig(buf, format=fmt, dpi=DPI, metadata=_metadata(fmt), **_compression(fmt))
    return buf.getvalue()


@contextmanager
def _laid_out(fig: Figure):
    """The figure's constrained layout made at the PNG's dpi, and the engine off while savefig draws: savefig would
    make it in a whole draw without output before the draw that renders (every figure drawn twice, most of a
    report's time). The same layout, the same bytes; the engine is back after (an SVG of it is laid out again)."""
    engine = fig.get_layout_engine()
    if engine is None or isinstance(engine, library().layout_engine.PlaceHolderLayoutEngine):
        yield
        return
    if not hasattr(fig.canvas, "print_png"):
        # the layout and the draw share its renderer, and the text sizes it keeps
        library().backends.backend_agg.FigureCanvasAgg(fig)
    dpi = fig.dpi
    fig.dpi = DPI
    try:
        engine.execute(fig)
    except ValueError:  # as Figure.draw does
        pass
    finally:
        fig.dpi = dpi
    _no_engine(fig)
    try:
        yield
    finally:
        fig.set_layout_engine(engine)


def _no_engine(fig: Figure) -> None:
    """No layout engine at all: with 'none' (a placeholder engine) savefig still makes a whole draw without output
    first, a sixth of each figure's encoding. (None follows the rc defaults, which must not bring an engine back.)"""
    with library().rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
        fig.set_layout_engine(None)


def _compression(fmt: str) -> dict:
    """zlib's fastest level for a PNG: a quarter of the encoding's time, 4 % more bytes (the demo's 14 figures)."""
    return {"pil_kwargs": {"compress_level": 1}} if fmt == "png" else {}


def _metadata(fmt: str) -> dict:
    # No generator or date stamps: the same campaign gives byte-identical PNGs, and SVGs carry no URLs.
    return {"Software": None} if fmt == "png" else {"Creator": None, "Date": None, "Format": None, "Type": None}


_BUILDERS: dict[str, Callable[..., FigureData]] = {}


def _later(build: Callable[..., FigureData]) -> Callable[..., FigureData]:
    """The builder's FigureData at once, its figure made when first read: render.py makes and encodes the figures in
    two processes (making them was two thirds of building the document), and hands them to the second one pickled
    (a builder is named, with its arguments: plain data)."""
    signature = inspect.signature(build)
    _BUILDERS[build.__name__] = build

    @functools.wraps(build)
    def later(*args, **kwargs) -> FigureData:
        given = signature.bind(*args, **kwargs).arguments
        return LaterFigure(given["name"], given["title"], functools.partial(_made, build.__name__, args, kwargs),
                           given["caption"])
    return later


def _made(builder: str, args: tuple, kwargs: dict) -> Figure:
    return _BUILDERS[builder](*args, **kwargs).figure


def _figure(height: float, ncols: int = 1) -> tuple[Figure, list]:
    fig = library().figure.Figure(figsize=(WIDTH, max(2.6, height)), layout=row_layout.engine())
    axes = fig.subplots(1, ncols, sharey=ncols > 1, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, axis="both", alpha=0.3)
        ax.set_axisbelow(True)
    return fig, list(axes)


def _wide_range(values: Sequence[float]) -> bool:
    pos = [v for v in values if v > 0 and math.isfinite(v)]
    return bool(pos) and max(pos) / min(pos) > 20


def _log(ax, which: str) -> None:
    """Log scale with plain numbers (0.5, 10, 200) instead of powers of ten."""
    getattr(ax, f"set_{which}scale")("log")
    getattr(ax, f"{which}axis").set_major_formatter(library().ticker.FuncFormatter(lambda v, _: plain(v)))


def plain(v: float) -> str:
    """A tick label without an exponent: 0.00001, 200, 1500000 (never 1e-05 or 2e+02)."""
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    digits = max(0, 3 - math.floor(math.log10(abs(v))) - 1)
    text = f"{v:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _legend(ax, n: int, title: str) -> None:
    if n:
        ax.legend(title=title, fontsize=7, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  ncol=1 if n <= 24 else 2, frameon=False)


DASHES = ("-", "--", ":", "-.")


def _style(i: int) -> dict:
    """Colour and dash per curve: 10 colours x 4 dashes stay distinguishable."""
    return {"color": f"C{i % 10}", "linestyle": DASHES[(i // 10) % 4]}


@_later
def metric_overview(name: str, title: str, unit: str, labels: list[str], summaries: list[Summary],
                    values: list[list[float]], axis_title: str, caption: str, groups: list[str] | None = None,
                    metric: str = "") -> FigureData:
    """Left: mean with its 95 % CI per scenario. Right: the distribution of the trial values (box = IQR, whiskers
    1.5 IQR, a dot per trial). `groups` (e.g. the workload of each row) colours the bars."""
    scale, ulabel = axis_unit(unit, [v for vs in values for v in vs])
    fig, (bars, boxes) = _figure(0.32 * len(labels) + 1.2, ncols=2)
    ys = list(range(len(labels)))
    lo_b, hi_b = bounds(metric, unit)
    means = [s.mean * scale for s in summaries]
    xerr = error_bars(means, [s.ci_mean[0] * scale for s in summaries], [s.ci_mean[1] * scale for s in summaries],
                      lo_b * scale, hi_b * scale)
    kinds = list(dict.fromkeys(groups or [""]))
    colors = [f"C{kinds.index(g)}" for g in groups] if groups else "C0"
    bars.barh(ys, means, xerr=xerr, color=colors, alpha=0.75, error_kw={"capsize": 3, "elinewidth": 1})
    bars.set_xlabel(f"mean ({ulabel}), whiskers = 95 % CI" if ulabel else "mean, whiskers = 95 % CI")
    few = max((len(v) for v in values), default=0) <= 200
    _boxes(boxes, ys, [[v * scale for v in vs] for vs in values], fliers=not few)
    if few:  # one scatter for all rows: a collection per row cost a report ~0.2 s per figure
        xs = [v * scale for vs in values for v in vs]
        jitter = [y + 0.25 * (((i * 0.618) % 1) - 0.5) for y, vs in zip(ys, values) for i in range(len(vs))]
        if xs:
            boxes.scatter(xs, jitter, s=6, color="C0", alpha=0.6, zorder=3)
    boxes.set_xlabel(f"distribution ({ulabel})" if ulabel else "distribution")
    bars.set_yticks(ys, labels, fontsize=8)
    bars.set_ylabel(axis_title, fontsize=8)
    bars.invert_yaxis()
    fig.suptitle(title, fontsize=11)
    return FigureData(name, title, fig, caption)


def _boxes(ax, ys: list[int], values: list[list[float]], fliers: bool) -> None:
    """Horizontal box plots as matplotlib's boxplot draws them (box = IQR, whiskers to the last value within 1.5 IQR,
    the median in red), in four artists instead of six lines a row: a sixth of an overview figure's time."""
    stats = [(y, s) for y, vs in zip(ys, values) if vs for s in library().cbook.boxplot_stats(vs, whis=1.5)]
    box = [[(s["q1"], y - 0.3), (s["q3"], y - 0.3), (s["q3"], y + 0.3), (s["q1"], y + 0.3), (s["q1"], y - 0.3)]
           for y, s in stats]
    whiskers = [seg for y, s in stats for seg in ([(s["q1"], y), (s["whislo"], y)], [(s["q3"], y), (s["whishi"], y)],
                                                  [(s["whislo"], y - 0.15), (s["whislo"], y + 0.15)],
                                                  [(s["whishi"], y - 0.15), (s["whishi"], y + 0.15)])]
    medians = [[(s["med"], y - 0.3), (s["med"], y + 0.3)] for y, s in stats]
    lines = library().collections.LineCollection
    for segs, color in ((box + whiskers, "black"), (medians, "C3")):
        ax.add_collection(lines(segs, colors=color, linewidths=1.0, zorder=2), autolim=True)
    out = [(x, y) for y, s in stats for x in s["fliers"]] if fliers else []
    if out:
        ax.plot(*zip(*out), linestyle="none", marker="o", markerfacecolor="none", markeredgecolor="black")
    ax.autoscale_view()


@_later
def cdf(name: str, title: str, unit: str, curves: Mapping[str, Sequence[float]], legend_title: str,
        caption: str) -> FigureData:
    """Empirical CDF, one step curve per scenario; log x when the values span more than 20x."""
    return _cdf(name, title, unit, curves, [_style(i) for i in range(len(curves))], legend_title, caption)


def _cdf(name: str, title: str, unit: str, curves: Mapping[str, Sequence[float]], styles: list[dict],
         legend_title: str, caption: str) -> FigureData:
    """Step curves of the curves' empirical CDFs on one axes, curve i drawn with styles[i]."""
    allv = [v for vs in curves.values() for v in vs]
    scale, ulabel = axis_unit(unit, allv)
    fig, (ax,) = _figure(4.2)
    for (label, vs), style in zip(curves.items(), styles):
        xs = sorted(v * scale for v in vs)
        ax.step(xs, [(k + 1) / len(xs) for k in range(len(xs))], where="post", label=label, lw=1.2, **style)
    if _wide_range(allv):
        _log(ax, "x")
    ax.set_xlabel(f"{title.split(' — ')[0]} ({ulabel})")
    ax.set_ylabel("fraction of samples ≤ x")
    ax.set_ylim(0, 1.02)
    ax.set_title(title, fontsize=11)
    _legend(ax, len(curves), legend_title)
    return FigureData(name, title, fig, caption)


@_later
def time_series(name: str, title: str, unit: str, lines: Mapping[str, Mapping[float, Sequence[float]]],
                legend_title: str, caption: str) -> FigureData:
    """One line per scenario: the mean at each time, with a min..max band over repetitions and pairs."""
    allv = [v for pts in lines.values() for vs in pts.values() for v in vs]
    scale, ulabel = axis_unit(unit, allv)
    fig, (ax,) = _figure(4.2)
    for i, (label, pts) in enumerate(lines.items()):
        ts = sorted(pts)
        style = _style(i)
        ax.plot(ts, [scale * sum(pts[t]) / len(pts[t]) for t in ts], marker=".", label=label, lw=1.2, **style)
        ax.fill_between(ts, [scale * min(pts[t]) for t in ts], [scale * max(pts[t]) for t in ts],
                        color=style["color"], alpha=0.12, lw=0)
    if _wide_range(allv):
        _log(ax, "y")
    ax.set_xlabel("time since the start of the trial (s)")
    ax.set_ylabel(f"throughput ({ulabel})")
    ax.set_title(title, fontsize=11)
    _legend(ax, len(lines), legend_title)
    return FigureData(name, title, fig, caption)


@_later
def cpu_breakdown(name: str, title: str, labels: list[str], parts: Mapping[str, list[float]], axis_title: str,
                  caption: str) -> FigureData:
    """Stacked horizontal bars: mean share of each CPU time category per scenario, in % of all CPUs."""
    fig, (ax,) = _figure(0.32 * len(labels) + 1.4)
    ys = list(range(len(labels)))
    left = [0.0] * len(labels)
    for i, (metric, shares) in enumerate(parts.items()):
        pct = [100 * v for v in shares]
        ax.barh(ys, pct, left=left, color=f"C{i}", label=metric.removeprefix("cpu_").removesuffix("_ratio"))
        left = [a + b for a, b in zip(left, pct)]
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_ylabel(axis_title, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of all CPUs' time (%)")
    ax.set_title(title, fontsize=11)
    _legend(ax, len(parts), "CPU time")
    return FigureData(name, title, fig, caption)


@_later
def scaling(name: str, title: str, panels: Mapping[tuple[str, str], Mapping[str, Mapping[float, Summary]]],
            legend_title: str, caption: str) -> FigureData:
    """One panel per (metric label, unit): mean with 95 % CI against the number of streams, a line per group."""
    fig = library().figure.Figure(figsize=(WIDTH, 4.0), layout=row_layout.engine())
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, ((ylabel, unit), groups) in zip(axes, panels.items()):
        scale, ulabel = axis_unit(unit, [s.mean for pts in groups.values() for s in pts.values()])
        for i, (label, pts) in enumerate(groups.items()):
            xs = sorted(pts)
            means = [pts[x].mean * scale for x in xs]
            err = error_bars(means, [pts[x].ci_mean[0] * scale for x in xs], [pts[x].ci_mean[1] * scale for x in xs],
                             0.0, 100.0 if unit == "ratio" else math.inf)
            ax.errorbar(xs, means, yerr=err, marker="o", capsize=3, label=label, **_style(i))
        levels = sorted({x for pts in groups.values() for x in pts})
        if levels and levels[0] > 0 and levels[-1] / levels[0] >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [f"{x:g}" for x in levels])
        ax.minorticks_off()
        ax.set_xlabel("parallel streams")
        ax.set_ylabel(f"{ylabel} ({ulabel})")
        ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=11)
    if len(next(iter(panels.values()), {})) > 1:
        _legend(axes[-1], 1, legend_title)
    return FigureData(name, title, fig, caption)


@_later
def overlay_means(name: str, title: str, unit: str, labels: list[str], campaigns: list[str],
                  summaries: list[list[Summary | None]], values: list[list[list[float]]], axis_title: str,
                  caption: str, metric: str = "") -> FigureData:
    """Several campaigns side by side: per scenario (a row) one bar per campaign (a colour), its mean with the 95 %
    CI, a dot per trial. summaries[i][j] / values[i][j]: row i, campaign j (None / []: the campaign lacks it)."""
    scale, ulabel = axis_unit(unit, [v for row in values for vs in row for v in vs]
                              + [s.mean for row in summaries for s in row if s is not None])
    k = len(campaigns)
    fig, (ax,) = _figure((0.22 * k + 0.1) * len(labels) + 1.4)
    lo_b, hi_b = bounds(metric, unit)
    step = 0.8 / k
    for j, camp in enumerate(campaigns):  # one bar series per campaign: the legend names the campaigns
        got = [(i, row[j]) for i, row in enumerate(summaries) if row[j] is not None]
        ys = [i - 0.4 + step * (j + 0.5) for i, _ in got]
        means = [s.mean * scale for _, s in got]
        err = error_bars(means, [s.ci_mean[0] * scale for _, s in got], [s.ci_mean[1] * scale for _, s in got],
                         lo_b * scale, hi_b * scale)
        ax.barh(ys, means, height=step * 0.9, xerr=err, color=f"C{j % 10}", alpha=0.75, label=camp,
                error_kw={"capsize": 2, "elinewidth": 1})
        dots = [(v * scale, i - 0.4 + step * (j + 0.5)) for i, row in enumerate(values) for v in row[j]]
        if dots:
            ax.scatter(*zip(*dots), s=5, color="black", alpha=0.5, zorder=3)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_ylabel(axis_title, fontsize=8)
    ax.set_xlabel(f"mean ({ulabel}), whiskers = 95 % CI, dots = trials" if ulabel else
                  "mean, whiskers = 95 % CI, dots = trials")
    ax.set_title(title, fontsize=11)
    _legend(ax, k, "campaign")
    return FigureData(name, title, fig, caption)


@_later
def overlay_cdf(name: str, title: str, unit: str, curves: Mapping[str, Sequence[float]],
                styles: list[tuple[int, int]], legend_title: str, caption: str) -> FigureData:
    """Empirical CDFs of several campaigns on one axes: styles[i] = (campaign, scenario) of curve i, the colour
    the campaign's (as in overlay_means), the dash the scenario's."""
    return _cdf(name, title, unit, curves, [{"color": f"C{camp % 10}", "linestyle": DASHES[line % 4]}
                                            for camp, line in styles], legend_title, caption)
