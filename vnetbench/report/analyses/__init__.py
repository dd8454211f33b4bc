"""Analysis registry: a study's analysis is one module here with a class decorated by @register."""
from __future__ import annotations

from ...core.registry import plugins
from .base import Analysis  # noqa: F401

REGISTRY, register, load_all = plugins(__name__, "name")
