"""Probe registry: a new measurement is one new module here with a class decorated by @register."""
from __future__ import annotations

from .base import Probe  # noqa: F401
from ..registry import plugins

REGISTRY, register, load_all = plugins(__name__, "kind")
