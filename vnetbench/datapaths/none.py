"""No encryption."""
from __future__ import annotations

from . import register
from .base import Encryption


@register
class NoEncryption(Encryption):
    name = "none"
    summary = "traffic in clear"
