"""Plug-in registries: a package's modules register their classes by name when the package loads them."""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Callable, TypeVar

T = TypeVar("T")


class Registry(dict):
    """name -> class, filled by the @register decorator of the package's modules."""

    def __init__(self, package: ModuleType, key: str):
        super().__init__()
        self.package, self.key = package, key

    def register(self, cls: T) -> T:
        self[getattr(cls, self.key)] = cls
        return cls

    def load_all(self) -> "Registry":
        for mod in pkgutil.iter_modules(self.package.__path__):
            if mod.name != "base":
                importlib.import_module(f"{self.package.__name__}.{mod.name}")
        return self


def plugins(package_name: str, key: str) -> tuple[Registry, Callable, Callable]:
    """(REGISTRY, register, load_all) for a package's __init__."""
    import sys
    reg = Registry(sys.modules[package_name], key)
    return reg, reg.register, reg.load_all
