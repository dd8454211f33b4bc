"""Datapath registry: REGISTRY[kind][name] -> Element class. Modules here register themselves on import.
Element objects are made here from a scenario's levels (plain data), by whoever checks or builds them."""
from __future__ import annotations

from typing import Any, Mapping

from ..core.registry import plugins
from .base import Element

REGISTRY, register, load_all = plugins(__name__, "name", group="kind",
                                       groups=("switch", "overlay", "encryption", "attach"))


def element(kind: str, level: Any, registry: dict | None = None) -> Element:
    """The element a level names: a name, or a mapping {type: name, option: value...}. Raises KeyError for a name
    the registry lacks and pydantic's ValidationError for a bad option (validate turns both into the fix).
    `registry`: load_all()'s, when the caller has it already (elements() makes four)."""
    opts = dict(level) if isinstance(level, dict) else {"type": level}
    name = opts.pop("type", None)
    reg = (registry if registry is not None else load_all())[kind]
    if not isinstance(name, str) or name not in reg:
        raise KeyError(name)
    cls = reg[name]
    return cls(cls.Options.model_validate(opts))


def elements(levels: Mapping[str, Any], implementation: Mapping[str, str] | None = None) -> dict[str, Element]:
    """One element of each kind for a scenario's levels; given the implementations the matrix chose, each element
    adopts its own."""
    reg = load_all()
    out = {kind: element(kind, levels[kind], reg) for kind in reg}
    for kind, el in out.items():
        if implementation and kind in implementation:
            el.adopt(implementation[kind])
    return out
