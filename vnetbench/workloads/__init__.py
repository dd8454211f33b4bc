"""Workload registry: a new traffic tool is one new module here with a class decorated by @register. The class
declares what it needs (its tools) and what it gives (its metrics, its main metric); registering it adds those to
the catalogues (sample.METRICS, capabilities.TOOLS, adaptive's main metric, the loader's distributions)."""
from __future__ import annotations

from ..core.registry import plugins
from ..core.sample import declare
from .base import Workload  # noqa: F401


def _declare(cls: type[Workload]) -> None:
    declare(cls.catalogue, f"workload {cls.kind}")
    if cls.tool not in cls.tools:
        raise TypeError(f"workload {cls.kind}: its tool {cls.tool!r} is not among its tools")
    undeclared = (cls.metrics | {cls.main_metric}) - {m.name for m in cls.catalogue}
    if undeclared:
        raise TypeError(f"workload {cls.kind}: metrics {sorted(undeclared)} are not in its catalogue")


REGISTRY, register, load_all = plugins(__name__, "kind", on_register=_declare)
