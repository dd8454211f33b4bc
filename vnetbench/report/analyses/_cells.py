"""Helpers the S3 and S4 analyses share: table cells, and matplotlib figures built with the object API (no pyplot
state, Agg only). Data comes from vnetbench.results.dataset (the one loader), statistics from vnetbench.results.stats."""
from __future__ import annotations

import functools
import math
from typing import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from ...core.units import human  # noqa: E402
from ...results import stats  # noqa: E402
from ...results.stats import Summary, summarize  # noqa: E402

DASH = "—"


def summary(values: Sequence[float]) -> Summary | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return summarize(vals) if vals else None


_LEAST_N: list[int | None] = [None]  # the fewest trials behind a t interval printed since interval_note() last ran


def saw(n: int) -> None:
    """A Student-t interval of n trials was printed: the table's note will say what such an interval covers."""
    if n >= 2:
        _LEAST_N[0] = n if _LEAST_N[0] is None else min(_LEAST_N[0], n)


def interval_note() -> str:
    """' ' + what the t intervals printed since the last call cover on a busy machine's trials (at their smallest n),
    or ''; starts the count anew. Call it once before a table's rows are built and once for its note."""
    n, _LEAST_N[0] = _LEAST_N[0], None
    text = stats.t_note(n) if n else ""
    return f" {text}" if text else ""


def noted(make):
    """A method that builds a table: its note says what the table's t intervals cover on a busy machine."""
    @functools.wraps(make)
    def build(*args, **kwargs):
        interval_note()
        table = make(*args, **kwargs)
        if table is not None:
            table.note += interval_note()
        return table
    return build


def mean_ci(values: Sequence[float], unit: str) -> str:
    """'9.41 Gbit/s ± 0.12 Gbit/s' (95 % CI half-width of the mean); n=1 has no interval. An interval that would
    reach below 0 is cut there and shown as its ends: '550 Mbit/s (0 .. 1.19 Gbit/s, clipped)'."""
    s = summary(values)
    if s is None:
        return DASH
    if s.n < 2 or not math.isfinite(s.ci_mean[0]):
        return f"{human(s.mean, unit)} (n=1)"
    saw(s.n)
    cut = stats.within(s, 0.0)
    if cut.clipped:
        return f"{human(s.mean, unit)} ({human(cut.ci_mean[0], unit)} .. {human(cut.ci_mean[1], unit)}, clipped)"
    return f"{human(s.mean, unit)} ± {human(s.ci_mean[1] - s.mean, unit)}"


def mean_cell(values: Sequence[float], unit: str) -> str:
    s = summary(values)
    return DASH if s is None else human(s.mean, unit)


def relative(a: float | None, b: float | None) -> float | None:
    """a relative to b: a / b - 1 (None when either is missing or b is 0)."""
    if a is None or b is None or not b:
        return None
    return a / b - 1


def pct(r: float | None) -> str:
    return DASH if r is None else f"{r * 100:+.0f} %"


def spread(changes: Sequence[float]) -> str:
    """The median relative change over matched cells, with their range: '-3 % (-8 .. +2 %, 12 cells)'."""
    xs = sorted(c for c in changes if c is not None)
    if not xs:
        return DASH
    med = stats.median(xs)
    if len(xs) == 1:
        return f"{med * 100:+.0f} % (1 cell)"
    return f"{med * 100:+.0f} % ({xs[0] * 100:+.0f} .. {xs[-1] * 100:+.0f} %, {len(xs)} cells)"


def median(xs: Iterable[float]) -> float | None:
    v = list(xs)
    return stats.median(v) if v else None



# ---- figures ------------------------------------------------------------------------------------------------
SCALES = {"bit/s": (1e9, "Gbit/s"), "s": (1e-6, "µs"), "1/s": (1e3, "k/s"), "ratio": (0.01, "%")}


def figure(ncols: int = 1, height: float = 4.0, width: float = 11.0) -> tuple[Figure, list]:
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.set_axisbelow(True)
    return fig, list(axes)


def scale(unit: str, values: Sequence[float]) -> tuple[float, str]:
    """Divide by the first number to show values in the second unit; bit/s picks G or M from the data."""
    if unit == "bit/s":
        top = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
        return (1e9, "Gbit/s") if top >= 1e9 else (1e6, "Mbit/s")
    return SCALES.get(unit, (1.0, unit))


def style(i: int) -> dict:
    return {"color": f"C{i % 10}", "linestyle": ("-", "--", ":", "-.")[(i // 10) % 4]}


# ---- one printed family of tests ------------------------------------------------------------------------------
class Family:
    """Holm over every test one printed list (a findings list, a table's marks) makes, without reshaping the code
    that writes it: the list is built twice with the same Family, the first pass records each test's p, the second
    reads the Holm-adjusted p of the same test (the code is deterministic: the tests come in the same order)."""

    def __init__(self, alpha: float = 0.05):
        self.alpha, self.p, self.adjusted, self.i = alpha, [], None, 0

    def _p(self, p: float) -> float:
        if self.adjusted is None:
            self.p.append(p)
            return p
        p, self.i = self.adjusted[self.i], self.i + 1
        return p

    def adjusted_p(self, p: float) -> float:
        """A test's p as one member of the family: the raw p on the first pass, Holm-adjusted on the second."""
        return self._p(p)

    def significant(self, a: Sequence[float], b: Sequence[float]) -> bool:
        """Welch's test of a against b, as one member of the family (False when it cannot judge)."""
        c = stats.compare(a, b)
        return bool(self._p(c.p) < self.alpha)

    def above(self, values: Sequence[float], limit: float) -> bool:
        """One-sided exact sign test that the per-trial values sit above `limit` (their median does), one member:
        under the null each trial is at most as likely above as below, whatever the trials' shape (a one-sample t
        leaned on normal trials). Trials at the limit say nothing and are dropped; 4 trials all above give
        p = 1/16, too few for a test."""
        x = [v for v in values if math.isfinite(v) and v != limit]
        above = sum(v > limit for v in x)
        p = math.nan if len(x) < 2 or 0.5 ** len(x) >= self.alpha else \
            sum(math.comb(len(x), k) for k in range(above, len(x) + 1)) / 2 ** len(x)
        return bool(self._p(p) < self.alpha)

    @property
    def size(self) -> int:
        return sum(math.isfinite(p) for p in self.p)

    def build(self, make):
        """make() twice: the second time with the adjusted p-values; returns its result."""
        make()
        self.adjusted, self.i = stats.holm(self.p), 0
        return make()
