"""The probe interface: something measured over a trial window, next to the workload.

`start` takes the first snapshot of the counters, `stop` the last one and turns the difference into
Samples. A probe must never fail a trial because what it watches went away: it then returns fewer samples.
"""
from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from typing import Callable, ClassVar, Sequence

from ..core.sample import Metric, Sample

log = logging.getLogger(__name__)
Window = Sequence[float]  # [start, end], absolute UNIX times


class Probe(ABC):
    kind: ClassVar[str]
    catalogue: ClassVar[tuple[Metric, ...]] = ()  # every metric it writes (the registry adds them to sample.METRICS)

    @abstractmethod
    def start(self) -> None:
        """Take the first snapshot (and start a sampling thread if the probe has series)."""

    @abstractmethod
    def stop(self, window: Window | None = None) -> list[Sample]:
        """Take the last snapshot and return the samples over `window` (the tool's measurement window, inside the
        probe's own span), or over the whole span when no window is given."""


class Sampler:
    """Reads cumulative counters every `interval` seconds on a thread, each reading stamped with time.time(), so
    that counters can be interpolated at the exact edges of a measurement window."""

    def __init__(self, read: Callable[[], dict[str, float]], interval: float | None, name: str):
        self.read, self.interval, self.name = read, interval, name
        self.points: list[tuple[float, dict[str, float]]] = []
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def _reading(self) -> tuple[float, dict[str, float]]:
        t0 = time.time()
        values = self.read()
        return (t0 + time.time()) / 2, values

    def start(self) -> None:
        self.points = [self._reading()]
        self._halt.clear()
        if self.interval:
            self._thread = threading.Thread(target=self._loop, name=f"vnetbench-{self.name}", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        t0, k = time.monotonic(), 1
        # Deadlines from t0 rather than sleep(interval): readings stay on a grid instead of drifting.
        while not self._halt.wait(max(0.0, t0 + k * self.interval - time.monotonic())):
            try:
                self.points.append(self._reading())
            except Exception as exc:  # a gap in the series must not lose the window totals
                log.warning("%s: series stopped: %s", self.name, exc)
                return
            k += 1

    def stop(self) -> list[tuple[float, dict[str, float]]]:
        """All readings, the last one taken now. Raises what the last read raises (e.g. the namespace is gone)."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
        self.points.append(self._reading())
        return self.points


def value_at(points: Sequence[tuple[float, dict[str, float]]], key: str, t: float) -> float | None:
    """A cumulative counter at time t, linear between the readings around t (clamped to the first and last);
    None when a reading next to t lacks the key (the process or interface was not there)."""
    if not points:
        return None
    if t <= points[0][0]:
        return points[0][1].get(key)
    for (ta, a), (tb, b) in zip(points, points[1:]):
        if t <= tb:
            if key not in a or key not in b:
                return None
            return a[key] + (b[key] - a[key]) * ((t - ta) / (tb - ta) if tb > ta else 1.0)
    return points[-1][1].get(key)


def span(points: Sequence[tuple[float, dict]], window: Window | None) -> tuple[float, float]:
    """The window clamped to the readings' span (the whole span without a window)."""
    first, last = points[0][0], points[-1][0]
    if window is None:
        return first, last
    return max(first, min(window[0], last)), min(last, max(window[1], first))
