"""Datapath registry: REGISTRY[kind][name] -> Element class. Modules here register themselves on import.
Element objects are made here from a scenario's levels (plain data), by whoever checks or builds them."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Mapping

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


def element(kind: str, level: Any) -> Element:
    """The element a level names: a name, or a mapping {type: name, option: value...}. Raises KeyError for a name
    the registry lacks and pydantic's ValidationError for a bad option (validate turns both into the fix)."""
    opts = dict(level) if isinstance(level, dict) else {"type": level}
    name = opts.pop("type", None)
    reg = load_all()[kind]
    if not isinstance(name, str) or name not in reg:
        raise KeyError(name)
    cls = reg[name]
    return cls(cls.Options.model_validate(opts))


def elements(levels: Mapping[str, Any], implementation: Mapping[str, str] | None = None) -> dict[str, Element]:
    """One element of each kind for a scenario's levels; given the implementations the matrix chose, each element
    adopts its own."""
    out = {kind: element(kind, levels[kind]) for kind in REGISTRY}
    for kind, el in out.items():
        if implementation and kind in implementation:
            el.adopt(implementation[kind])
    return out
