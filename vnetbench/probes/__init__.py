"""Probe registry: a new measurement is one new module here with a class decorated by @register; it declares its metrics
(`catalogue`), which registering adds to sample.METRICS."""
from __future__ import annotations

from .base import Probe  # noqa: F401
from ..registry import plugins
from ..sample import declare

REGISTRY, register, load_all = plugins(__name__, "kind", on_register=lambda cls: declare(cls.catalogue,
                                                                                        f"probe {cls.kind}"))
