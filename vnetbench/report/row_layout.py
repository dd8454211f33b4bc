"""A layout engine for a report figure's one row of axes: each axes' margins from the extents of its own texts (tick
labels, axis labels, title, legend) and the figure's suptitle, measured once.

Matplotlib's constrained layout measures every artist's tight box, in two passes, before the draw measures them
again: a sixth of a report's figure time. The texts measured here are the ones the draw lays out anyway, with the
same renderer, so the draw finds their sizes cached. Decorations that would crowd the plot out are left to
constrained layout's compromise. Matplotlib is imported when the first engine is made (figures.py imports this
module before any figure is made, and the document is built without matplotlib)."""
from __future__ import annotations

import functools
from typing import Any

PAD = 4 / 72     # inches: around the figure's edge and between one axes' decorations and the next one's
LEAST = 0.25     # the plots' least share of the figure's width and height


def _texts(texts, renderer) -> Any:
    from matplotlib.transforms import Bbox
    boxes = [t.get_window_extent(renderer) for t in texts if t is not None and t.get_visible() and t.get_text()]
    return Bbox.union(boxes) if boxes else None


def _reach(ax, renderer, dpi: float) -> list[float]:
    """[left, bottom, right, top] in pixels: how far the axes' texts reach beyond its box. Tick labels, title and
    legend are measured where they are; an axis label is placed at draw time, its labelpad beyond the tick labels."""
    box = ax.get_window_extent(renderer)
    ticks = [_beyond(box, _texts(_tick_labels(axis), renderer)) for axis in (ax.xaxis, ax.yaxis)]
    left, bottom, right, top = map(max, zip(*ticks))
    if _texts([ax.yaxis.label], renderer) is not None:
        left += ax.yaxis.labelpad * dpi / 72 + ax.yaxis.label.get_window_extent(renderer).width
    if _texts([ax.xaxis.label], renderer) is not None:
        bottom += ax.xaxis.labelpad * dpi / 72 + ax.xaxis.label.get_window_extent(renderer).height
    return list(map(max, zip([left, bottom, right, top], _beyond(box, _texts([ax.title], renderer)),
                             _beyond(box, _legend(ax, renderer)))))


def _tick_labels(axis) -> list:
    """The labels of the ticks the draw draws (those in view; an axis keeps others, unlabelled or not)."""
    drawn = axis._update_ticks()
    return [t.label1 for t in drawn] + [t.label2 for t in drawn]


def _beyond(box: Any, found: Any) -> tuple[float, float, float, float]:
    if found is None:
        return 0.0, 0.0, 0.0, 0.0
    return max(0.0, box.x0 - found.x0), max(0.0, box.y0 - found.y0), max(0.0, found.x1 - box.x1), \
        max(0.0, found.y1 - box.y1)


def _legend(ax, renderer) -> Any:
    legend = ax.get_legend()
    return legend.get_window_extent(renderer) if legend is not None and legend.get_visible() else None


def _ratios(axes: list) -> list[float]:
    """Each axes' share of the plots' width: its columns' width ratios."""
    grid = axes[0].get_subplotspec().get_gridspec()
    ratios = grid.get_width_ratios() or [1] * grid.ncols
    return [sum(ratios[c] for c in ax.get_subplotspec().colspan) for ax in axes]


def engine() -> Any:
    """A new RowLayout: axes in one row of one grid, each as wide as its width ratio of what their decorations
    leave."""
    return _engine_class()()


@functools.cache
def _engine_class() -> type:
    from matplotlib.layout_engine import ConstrainedLayoutEngine, LayoutEngine

    class RowLayout(LayoutEngine):
        _adjust_compatible = False
        _colorbar_gridspec = False

        def set(self, **kwargs) -> None:
            pass

        def execute(self, fig: Any) -> None:
            if not _lay_out(fig):
                ConstrainedLayoutEngine().execute(fig)
    return RowLayout


def _lay_out(fig: Any) -> bool:
    """Places the axes; False where their texts would leave the plots under LEAST of the figure."""
    axes = sorted((ax for ax in fig.axes if ax.get_visible()), key=lambda ax: ax.get_subplotspec().colspan.start)
    if not axes:
        return True
    for i, ax in enumerate(axes):  # where a usual layout would put them: the legend's offset follows the width
        ax.set_position([0.12 + 0.76 * i / len(axes), 0.15, 0.76 / len(axes) - 0.04, 0.7])
    renderer, pad = fig._get_renderer(), PAD * fig.dpi
    reach = [_reach(ax, renderer, fig.dpi) for ax in axes]
    width, height = fig.bbox.width, fig.bbox.height
    top = max(r[3] for r in reach) + pad + _suptitle(fig, renderer, pad)
    bottom = max(r[1] for r in reach) + pad
    free = width - sum(r[0] + r[2] for r in reach) - pad * (len(axes) + 1)
    if free < LEAST * width or height - top - bottom < LEAST * height:
        return False
    x, ratios = pad, _ratios(axes)
    for ax, (left, _, right, _), ratio in zip(axes, reach, ratios):
        w = free * ratio / sum(ratios)
        ax.set_position([(x + left) / width, bottom / height, w / width, (height - top - bottom) / height])
        x += left + w + right + pad
    return True


def _suptitle(fig: Any, renderer, pad: float) -> float:
    """The suptitle moved to the figure's top edge (less the pad); the height it takes there."""
    title = fig._suptitle
    if _texts([title], renderer) is None:
        return 0.0
    title.set_y(1 - pad / fig.bbox.height)
    title.set_verticalalignment("top")
    return title.get_window_extent(renderer).height + pad
