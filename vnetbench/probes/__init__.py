"""Probe registry: a new measurement is one new module here with a class decorated by @register; it declares its metrics
(`catalogue`), which registering adds to sample.METRICS."""
from __future__ import annotations

from ..core.registry import plugins
from ..core.sample import declare
from .base import Probe  # noqa: F401

REGISTRY, register, load_all = plugins(__name__, "kind", on_register=lambda cls: declare(cls.catalogue,
                                                                                        f"probe {cls.kind}"))
