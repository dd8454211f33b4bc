"""CPU lists as taskset -c takes them ("0-2,5") and the hex masks sysfs writes: the one parser and printer the tuning
factors share (cpu_pinning: core/pinning.py; steering and irq_affinity: core/tuning.py)."""
from __future__ import annotations

from typing import Any

from .strict import one_line

MAX_CPU = 4095  # CONFIG_NR_CPUS' largest value


def written(value: Any) -> str:
    """A value as the user wrote it: YAML reads an unquoted on/off as true/false."""
    return ("'on'" if value else "'off'") if isinstance(value, bool) else one_line(repr(value))


def cpu_list(value: Any) -> list[int]:
    """The CPUs of "0-2,5", a number, or a list of numbers: sorted, each once. ValueError: why not."""
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return sorted({c for v in value for c in cpu_list(v)})
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{written(value)} is not a CPU list; write CPUs as taskset -c takes them, e.g. \"0-1\" "
                         f"or \"0,2\"")
    out: set[int] = set()
    for part in value.replace(" ", "").split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or int(hi or lo) < int(lo):
            raise ValueError(f"{one_line(repr(part))} in {one_line(repr(value))} is not a CPU or a range low-high; "
                             f"write CPUs as taskset -c takes them, e.g. \"0-1\" or \"0,2\"")
        if int(hi or lo) > MAX_CPU:
            raise ValueError(f"CPU {int(hi or lo)} is beyond any kernel's (at most {MAX_CPU})")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


def cpus_text(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (as taskset and /sys/devices/system/cpu/online write them); '' for none."""
    runs: list[list[int]] = []
    for c in cpus:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def cpu_mask(cpus: list[int]) -> str:
    """The hex mask sysfs writes and shows for CPUs, in 32-bit groups joined by commas: [0, 1] -> '3'."""
    digits = f"{sum(1 << c for c in cpus):x}"
    if len(digits) > 8:
        digits = digits.zfill(-(-len(digits) // 8) * 8)
    return ",".join(digits[i:i + 8] for i in range(0, len(digits), 8))


def mask_cpus(mask: str) -> list[int]:
    """The CPUs of a sysfs mask ('00000000,00000003' -> [0, 1]); ValueError for text that is no mask."""
    bits = int(mask.strip().replace(",", "") or "0", 16)
    return [c for c in range(bits.bit_length()) if bits >> c & 1]
