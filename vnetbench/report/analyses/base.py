"""The analysis interface: a study's own tables and figures, computed from a campaign's stored samples.
A suite names its analysis (`analysis: s1`); `report` adds its tables and figures to the generic ones."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ...results.store import Store


@dataclass
class TableData:
    title: str
    columns: list[str]
    rows: list[list[str]]          # formatted cells, as the study lays them out
    note: str = ""                 # how the numbers were computed, caveats


@dataclass
class FigureData:
    name: str                      # file-safe slug, used for PNG/SVG export
    title: str
    figure: Any                    # a matplotlib Figure
    caption: str = ""


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
