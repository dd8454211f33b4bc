"""Workload registry: a new traffic tool is one new module here with a class decorated by @register."""
from __future__ import annotations

import importlib
import pkgutil

from .base import Workload

REGISTRY: dict[str, type[Workload]] = {}


def register(cls: type[Workload]) -> type[Workload]:
    REGISTRY[cls.kind] = cls
    return cls


def load_all() -> dict[str, type[Workload]]:
    for mod in pkgutil.iter_modules(__path__):
        if mod.name != "base":
            importlib.import_module(f"{__name__}.{mod.name}")
    return REGISTRY
