"""The probe interface: something measured over a trial window, next to the workload.

`start` takes the first snapshot of the counters, `stop` the last one and turns the difference into
Samples. A probe must never fail a trial because what it watches went away: it then returns fewer samples.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from ..sample import Sample


class Probe(ABC):
    kind: ClassVar[str]

    @abstractmethod
    def start(self) -> None:
        """Take the first snapshot (and start a sampling thread if the probe has series)."""

    @abstractmethod
    def stop(self) -> list[Sample]:
        """Take the last snapshot and return the samples of the window."""
