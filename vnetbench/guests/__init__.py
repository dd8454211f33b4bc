"""Guests: hosts and VMs with a kernel of their own. A backend (User-Mode Linux here; qemu+KVM where a machine has a
real /dev/kvm) boots a set of guests for one run and hands back, for each, an executor that runs commands inside
it, so the rest of vnetbench treats a guest as just another host. Backends register by name."""
from __future__ import annotations

from ..core.registry import plugins

REGISTRY, register, load_all = plugins(__name__, "name")


def backend(name: str):
    """The backend class registered under name (KeyError names the known ones)."""
    load_all()
    if name not in REGISTRY:
        raise KeyError(f"no guest backend '{name}'; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]
