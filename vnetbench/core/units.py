"""Human units in spec files ('100M', '10gbit', '1.5 Gbit/s') to SI base units, and back for display."""
from __future__ import annotations

import math
import re

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(?:bit(?:/s)?|bps|b/s)?\s*$")
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_rate(value: object) -> int:
    """A bit rate in bit/s; raises ValueError with the accepted forms."""
    if isinstance(value, bool):
        raise ValueError("a rate is a number of bit/s or a string like '100M', '10gbit'")
    if isinstance(value, (int, float)):
        rate = float(value)
    else:
        m = _RATE.match(str(value))
        if not m:
            raise ValueError(f"'{value}' is not a rate; write bit/s as a number or like '100M', '10gbit', '1.5G'")
        rate = float(m.group(1)) * _SCALE[m.group(2).lower()]
    if not (1e3 <= rate <= 1e12):
        raise ValueError(f"{rate:g} bit/s is out of range; use 1 kbit/s to 1 Tbit/s")
    return int(rate)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|ms|us|µs)\s*$")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


def parse_duration(value: object) -> float:
    """A duration in seconds from '10ms', '250us', '0.1s' or a number of seconds; raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '10ms', '250us'")
    if isinstance(value, (int, float)):
        secs = float(value)
    elif m := _DURATION.match(str(value)):
        secs = float(m.group(1)) * {"s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}[m.group(2)]
    else:
        raise ValueError(f"'{value}' is not a duration; write it like '10ms', '250us' or a number of seconds")
    if not 0 <= secs <= 10:
        raise ValueError(f"{secs:g} s is out of range; use 0 to 10 s")
    return secs


_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|min|m|h)?\s*$")


def parse_span(value: object) -> float:
    """A wall-time budget in seconds from '15m', '90s', '1.5h' or a number of seconds (10 s .. 24 h); raises
    ValueError."""
    m = None if isinstance(value, bool) else _SPAN.match(str(value))
    if m is None:
        raise ValueError(f"'{value}' is not a time span; write it like '15m', '90s', '2h' or a number of seconds")
    secs = float(m.group(1)) * {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
    if not 10 <= secs <= 86400:
        raise ValueError(f"{secs:g} s is out of range; use 10 s to 24 h")
    return secs


def parse_percent(value: object) -> float:
    """A ratio (0..1) from '0.5%' or a number of percent; raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("a loss is a percentage like '0.5%'")
    if isinstance(value, (int, float)):
        pct = float(value)
    elif m := _PERCENT.match(str(value)):
        pct = float(m.group(1))
    else:
        raise ValueError(f"'{value}' is not a percentage; write it like '0.5%'")
    if not 0 <= pct <= 100:
        raise ValueError(f"{pct:g} % is out of range; use 0 to 100 %")
    return pct / 100


def scale(value: float, unit: str) -> tuple[float, str]:
    """(divisor, unit name) a person reads `value` in: 1e9 and 'Gbit/s' for 9.41e9 bit/s, 1e-6 and 'µs' ..."""
    if unit == "ratio":
        return 0.01, "%"
    if unit == "s":
        for div, name in ((1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
            if abs(value) >= div or div == 1e-9:
                return div, name
    if unit in ("bit/s", "1/s"):
        suffix = "bit/s" if unit == "bit/s" else "/s"
        for div, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")):
            if abs(value) >= div or div == 1:
                return div, prefix + suffix
    return 1, "" if unit == "1" else unit


def human(value: float, unit: str) -> str:
    """A value in its SI unit as a person reads it: 9.41 Gbit/s, 45.2 µs, 3.1 %."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    div, name = scale(value, unit)
    digits = ".4g" if div == 1 and unit not in ("s", "bit/s", "1/s") else ".3g"
    return f"{value / div:{digits}}" + (f" {name}" if name else "")


def human_interval(value: float, lo: float, hi: float, unit: str) -> str:
    """'431 [374 .. 490] µs': a value and its interval in the value's own scale, the unit once."""
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (value, lo, hi)):
        return human(value, unit) + " [-]"
    div, name = scale(value, unit)
    # a count (unit 1) in whole numbers: 1376 retransmits, not 1.38e+03
    f = (lambda v: f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}") if unit == "1" else (lambda v: f"{v:.3g}")  # noqa: E731
    return f"{f(value / div)} [{f(lo / div)} .. {f(hi / div)}]" + (f" {name}" if name else "")
