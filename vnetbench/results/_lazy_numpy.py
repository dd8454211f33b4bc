"""numpy, imported on first use: `show` summarises in Python and never needs it (its import is 80 ms of the
command's 0.5 s); tests, bootstraps and permutation p-values use it as usual."""
from __future__ import annotations

from typing import Any


class _Numpy:
    def __getattr__(self, name: str) -> Any:
        import numpy
        return getattr(numpy, name)


np: Any = _Numpy()
