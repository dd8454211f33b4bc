"""The `steering` and `irq_affinity` levels as plain data: what is wrong with one, and its one spelling (the spec,
validate and the matrix; build/steering.py and hosts/lab/irq.py apply them)."""
from __future__ import annotations

from typing import Any

from .cpus import cpu_list, cpus_text, written
from .scenario import STEERING
from .strict import one_line

STEERING_FIX = 'write default or a mapping such as {rps: "0-1", xps: "0-1"} (CPU lists as taskset -c takes them)'


def steering_problem(level: Any) -> str | None:
    """What is wrong with a `steering` level, or None."""
    if level == "default":
        return None
    if not isinstance(level, dict) or not level:
        return f"{written(level)} is not allowed; {STEERING_FIX}"
    for k, v in level.items():
        if k not in STEERING:
            extra = (" (rps_flow_cnt needs the machine-wide rps_sock_flow_entries too, which a run does not change)"
                     if k == "rps_flow_cnt" else "")
            return f"{one_line(repr(k))} is not set by steering; allowed: {', '.join(STEERING)}{extra}"
        if why := _cpus_problem(v):
            return f"{k}: {why}"
    return None


def _cpus_problem(value: Any) -> str | None:
    """Why a CPU list does not parse (cpus.cpu_list's words), or None."""
    try:
        cpu_list(value)
    except ValueError as exc:
        return str(exc)
    return None


def steering_level(level: Any) -> Any:
    """A valid `steering` mapping in one spelling ({rps: '0-1'}: the CPU list as cpus_text writes it, so 1 and "1"
    are one level); anything else as written."""
    if isinstance(level, dict) and level and not steering_problem(level):
        return {k: cpus_text(cpu_list(v)) for k, v in level.items()}
    return level


def irq_affinity_problem(level: Any) -> str | None:
    if level == "default" or not (why := _cpus_problem(level)):
        return None
    return f"{why}; or write default (the NIC's interrupts as the host has them)"


def irq_affinity_level(level: Any) -> Any:
    return cpus_text(cpu_list(level)) if level != "default" and not irq_affinity_problem(level) else level
