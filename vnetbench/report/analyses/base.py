"""The analysis interface: a study's own tables and figures, computed from a campaign's stored samples.
A suite names its analysis (`analysis: s1`); `report` adds its tables and figures to the generic ones."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from ...results.store import Store


@dataclass
class TableData:
    title: str
    columns: list[str]
    rows: list[list[str]]          # formatted cells, as the study lays them out
    note: str = ""                 # how the numbers were computed, caveats
    text: bool = False             # every cell is text (a configuration's '2 (SMT off)'): none is aligned as a number


@dataclass
class FigureData:
    name: str                      # file-safe slug, used for PNG/SVG export
    title: str
    figure: Any                    # a matplotlib Figure
    caption: str = ""

    @property
    def source(self) -> object:
        """What the figure is made from, read without making it: two FigureData of one source are one image."""
        return self.figure

    @property
    def made(self) -> bool:
        return True


class LaterFigure(FigureData):
    """A FigureData whose figure is made when it is first read: a report makes each figure in the process that
    encodes it (two processes at once), not every one in the process that builds the document."""

    def __init__(self, name: str, title: str, make: Callable[[], Any], caption: str = "") -> None:
        self.name, self.title, self.caption = name, title, caption
        self._make, self._figure = make, None

    @property
    def figure(self) -> Any:
        if self._figure is None:
            self._figure = self._make()
        return self._figure

    @property
    def source(self) -> object:
        return self._make

    @property
    def made(self) -> bool:
        return self._figure is not None


@dataclass
class AnalysisResult:
    tables: list[TableData] = field(default_factory=list)
    figures: list[FigureData] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # the study's findings, checked against this campaign


class Analysis(ABC):
    name: ClassVar[str]            # "s1"
    title: ClassVar[str]           # "S1 — IPsec combined with SR-IOV"

    @abstractmethod
    def run(self, store: Store, campaign: int) -> AnalysisResult:
        """Tables and figures of the study for one campaign."""
