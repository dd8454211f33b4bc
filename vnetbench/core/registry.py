"""The plug-in registry, one implementation for datapaths, workloads, probes and analyses: a package's modules
register their classes by name when the package loads them."""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from types import ModuleType
from typing import Callable, TypeVar

T = TypeVar("T")


class Registry(dict):
    """name -> class, filled by the @register decorator of the package's modules. With `group`, two levels:
    group -> name -> class (the datapaths: kind -> name). `on_register` sees each class as it registers (to collect
    what it declares)."""

    def __init__(self, package: ModuleType, key: str, group: str | None = None, groups: tuple[str, ...] = (),
                 on_register: Callable[[type], None] | None = None):
        super().__init__({g: {} for g in groups})
        self.package, self.key, self.group, self.on_register = package, key, group, on_register
        self._seen: tuple | None = None  # the package folders' mtimes when every module was last imported

    def register(self, cls: T) -> T:
        if self.on_register is not None:
            self.on_register(cls)
        table = self.setdefault(getattr(cls, self.group), {}) if self.group else self
        table[getattr(cls, self.key)] = cls
        return cls

    def load_all(self) -> "Registry":
        """Import every module of the package but its interface (base), and those of a folder in it (the SSH lab),
        so that each registers its classes. Called per scenario (the matrix of 780 spent 2.7 s listing folders): done
        again only when a folder changed (a new module, one new file)."""
        seen = tuple(os.stat(p).st_mtime_ns for p in self.package.__path__)
        if seen == self._seen:
            return self
        for mod in pkgutil.iter_modules(self.package.__path__):
            if mod.name != "base":
                found = importlib.import_module(f"{self.package.__name__}.{mod.name}")
                for sub in pkgutil.iter_modules(found.__path__) if mod.ispkg else ():  # a backend that is a folder
                    importlib.import_module(f"{found.__name__}.{sub.name}")
        self._seen = seen
        return self


def plugins(package_name: str, key: str, **options) -> tuple[Registry, Callable, Callable]:
    """(REGISTRY, register, load_all) for a package's __init__."""
    reg = Registry(sys.modules[package_name], key, **options)
    return reg, reg.register, reg.load_all
