"""Datapath registry: REGISTRY[kind][name] -> Element class. Modules here register themselves on import."""
from __future__ import annotations

import importlib
import pkgutil

from .base import Element

REGISTRY: dict[str, dict[str, type[Element]]] = {"switch": {}, "overlay": {}, "encryption": {}, "attach": {}}


def register(cls: type[Element]) -> type[Element]:
    REGISTRY[cls.kind][cls.name] = cls
    return cls


def load_all() -> dict[str, dict[str, type[Element]]]:
    for mod in pkgutil.iter_modules(__path__):
        if mod.name != "base":
            importlib.import_module(f"{__name__}.{mod.name}")
    return REGISTRY
