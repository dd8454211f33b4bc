"""Host backends: where a scenario's hosts are. One module per backend (namespaces on this machine, one guest, one guest
per host, an SSH testbed), each a class registered by name behind hosts/base.py's interface; `choose` is the one
place that picks a scenario's backend, for run, plan, doctor and clean alike. A new backend is one new module here."""
from __future__ import annotations

import os
from typing import Mapping

from ..core.registry import plugins
from .base import Backend, Placement, Unavailable

REGISTRY, register, load_all = plugins(__name__, "name")

# The backend of `kernel: shared` scenarios off a testbed; VNETBENCH_HOSTS names another registered one (a backend
# of the same kind kept outside this package, or one under test).
DEFAULT = "namespaces"


def choose(levels: Mapping, testbed=None) -> type[Backend]:
    """The backend that runs a scenario with these levels: the SSH testbed when one is given, else the one serving
    its `kernel` level (shared: namespaces here, or the backend VNETBENCH_HOSTS names)."""
    reg = load_all()
    if testbed is not None:
        return reg["testbed"]
    kernel = levels.get("kernel", "shared")
    if kernel == "shared":
        name = os.environ.get("VNETBENCH_HOSTS") or DEFAULT
        if name not in reg:
            raise KeyError(f"VNETBENCH_HOSTS: no host backend '{name}'; known: {', '.join(sorted(reg))}")
        return reg[name]
    return next(cls for cls in reg.values() if cls.kernel == kernel)


class Hosts:
    """A run's (or a plan's) host backends, opened as its scenarios ask for them; one kind of guests at a time."""

    def __init__(self, ledger=None, testbed=None):
        self.ledger, self.testbed = ledger, testbed
        self.opened: dict[str, Backend] = {}

    def backend(self, sc) -> Backend:
        cls = choose(sc.levels, self.testbed)
        if cls.name not in self.opened:
            self.opened[cls.name] = cls(self.ledger, self.testbed)
        return self.opened[cls.name]

    def environment(self) -> dict:
        """What the campaign records of where it ran (a testbed's hosts)."""
        if self.testbed is None:
            return {}
        return {"testbed": self.backend_named("testbed").environment()}

    def backend_named(self, name: str) -> Backend:
        if name not in self.opened:
            self.opened[name] = load_all()[name](self.ledger, self.testbed)
        return self.opened[name]

    def open(self, sc) -> Placement:
        """The placement of a topology of this scenario; Unavailable when it cannot be had (a guest that did not
        boot). Guests of another backend go first: they share the run's guest namespace and keys."""
        b = self.backend(sc)
        if b.wants_guests(sc):
            for other in self.opened.values():
                if other is not b and other.has_guests():
                    other.close()
        return b.open(sc)

    def plan(self, sc) -> Placement:
        """The same placement for `plan`: nothing booted, connected or created."""
        return self.backend(sc).plan(sc)

    def close(self) -> None:
        """Guests down (before the run's ledger removes what is left)."""
        for b in self.opened.values():
            b.close()

    def disconnect(self) -> None:
        """Connections to other machines closed (after the run's ledger cleaned them)."""
        for b in self.opened.values():
            b.disconnect()
