"""Guests: hosts and VMs with a kernel of their own. A guest kind (User-Mode Linux here; qemu where a machine has it)
boots a set of guests for one run and hands back, for each, an executor that runs commands inside
it, so the rest of vnetbench treats a guest as just another host. Kinds register by name; a new kind is one
new module here."""
from __future__ import annotations

from ..core.registry import plugins

REGISTRY, register, load_all = plugins(__name__, "name")
DEFAULT_KIND = "uml"  # the guest kind a level that says only `guest` gets


def kind_class(name: str):
    """The guest kind registered under name (KeyError names the known ones)."""
    load_all()
    if name not in REGISTRY:
        raise KeyError(f"no guest kind '{name}'; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def kinds() -> list[str]:
    return sorted(load_all())
