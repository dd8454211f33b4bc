"""The report figures' own layout: every text inside the figure, no axes' text over another axes, the plots as large
as what their texts leave, and constrained layout's compromise where texts would crowd the plot out."""
import itertools

import pytest

from vnetbench.report import figures
from vnetbench.results.stats import summarize

LONG = "vxlan · ovs · cross-host · tcp (iperf3 tcp 10 streams, 256 KB window)"


def _overview(labels):
    values = [[1e9 * (i + 1), 1.1e9 * (i + 1), 0.9e9 * (i + 1)] for i in range(len(labels))]
    return figures.metric_overview("m", "throughput_bps — goodput at the receiver", "bit/s", labels,
                                   [summarize(v) for v in values], values, "scenario", "").figure


def _cdf(names):
    curves = {n: [1e-5 * (1 + k / 10) * (i + 1) for k in range(20)] for i, n in enumerate(names)}
    return figures.cdf("c", "rtt_s — ICMP echo round-trip time", "s", curves, "scenario", "").figure


def _scaling():
    panels = {(label, unit): {g: {s: summarize([s * 1e8, s * 1.1e8]) for s in (1, 8, 64)} for g in ("native", LONG)}
              for label, unit in (("throughput", "bit/s"), ("CPU busy", "ratio"), ("retransmits", "1"))}
    return figures.scaling("s", "streams", panels, "scenario", "").figure


def _laid_out(fig):
    figures.encode(fig, "png")  # lays it out at the PNG's dpi, as the report does
    fig.dpi = figures.DPI
    return fig, fig._get_renderer()


def _boxes(ax, renderer):
    """Each axis' drawn tick labels and label (matplotlib's own tight box), the title and the legend."""
    boxes = [(f"{axis.axis_name} axis", axis.get_tightbbox(renderer)) for axis in (ax.xaxis, ax.yaxis)]
    boxes += [("title", ax.title.get_window_extent(renderer))] if ax.title.get_text() else []
    boxes += [("legend", ax.get_legend().get_window_extent(renderer))] if ax.get_legend() else []
    return [(name, b) for name, b in boxes if b is not None and b.width > 0]


def _problems(fig):
    fig, renderer = _laid_out(fig)
    width, height = fig.bbox.width, fig.bbox.height
    bad = []
    for i, ax in enumerate(fig.axes):
        for name, b in _boxes(ax, renderer):
            if b.x0 < -1 or b.y0 < -1 or b.x1 > width + 1 or b.y1 > height + 1:
                bad.append(f"axes {i}: {name!r} outside the figure ({b.x0:.0f}..{b.x1:.0f} of {width:.0f})")
            for j, other in enumerate(fig.axes):
                if j != i and b.overlaps(other.get_window_extent(renderer)):
                    bad.append(f"axes {i}: {name!r} over axes {j}")
    if fig._suptitle is not None:
        top = fig._suptitle.get_window_extent(renderer)
        bad += [f"suptitle over axes {i}" for i, ax in enumerate(fig.axes)
                if top.overlaps(ax.get_window_extent(renderer))]
    return bad


@pytest.mark.parametrize("make", [
    lambda: _overview(["none · tcp", "vxlan · udp"]),
    lambda: _overview([f"{LONG} #{i}" for i in range(12)]),
    lambda: _cdf(["none", "vxlan"]),
    lambda: _cdf([f"{LONG} #{i}" for i in range(8)]),
    _scaling,
], ids=["overview", "overview-long-labels", "cdf", "cdf-long-legend", "scaling-three-panels"])
def test_every_text_in_the_figure_and_off_the_other_axes(make):
    fig = make()
    assert type(fig.get_layout_engine()).__name__ == "RowLayout"
    assert not _problems(fig)


def test_the_plots_fill_what_the_texts_leave():
    """Two short-labelled panels: together at least 80 % of the figure's width, side by side, not overlapping."""
    fig, renderer = _laid_out(_overview(["a", "b"]))
    boxes = sorted((ax.get_window_extent(renderer) for ax in fig.axes), key=lambda b: b.x0)
    assert sum(b.width for b in boxes) > 0.8 * fig.bbox.width
    assert all(a.x1 < b.x0 for a, b in itertools.pairwise(boxes))
    assert boxes[0].height > 0.5 * fig.bbox.height


def test_texts_that_crowd_the_plot_out_get_constrained_layouts_compromise(monkeypatch):
    """Labels that would leave the plots under a quarter of the width: matplotlib's constrained layout lays it out."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine
    ran = []
    monkeypatch.setattr(ConstrainedLayoutEngine, "execute", lambda self, fig: ran.append(fig))
    fig = _overview([LONG * 3, "b"])
    _laid_out(fig)
    assert ran == [fig]
