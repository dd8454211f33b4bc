"""Probe registry: a new measurement is one new module here with a class decorated by @register."""
from __future__ import annotations

import importlib
import pkgutil

from .base import Probe

REGISTRY: dict[str, type[Probe]] = {}


def register(cls: type[Probe]) -> type[Probe]:
    REGISTRY[cls.kind] = cls
    return cls


def load_all() -> dict[str, type[Probe]]:
    for mod in pkgutil.iter_modules(__path__):
        if mod.name != "base":
            importlib.import_module(f"{__name__}.{mod.name}")
    return REGISTRY
