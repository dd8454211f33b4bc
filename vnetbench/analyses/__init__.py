"""Analysis registry: a study's analysis is one module here with a class decorated by @register."""
from __future__ import annotations

import importlib
import pkgutil

from .base import Analysis

REGISTRY: dict[str, type[Analysis]] = {}


def register(cls: type[Analysis]) -> type[Analysis]:
    REGISTRY[cls.name] = cls
    return cls


def load_all() -> dict[str, type[Analysis]]:
    for mod in pkgutil.iter_modules(__path__):
        if mod.name != "base":
            importlib.import_module(f"{__name__}.{mod.name}")
    return REGISTRY
