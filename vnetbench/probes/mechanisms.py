"""Profiled CPU samples attributed to mechanisms (VXLAN, the Linux bridge, TCP, AES, ovs-vswitchd ...), by the table
in mechanisms.yaml: the one place function and process names are mapped (see the rules at its top)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

TABLE = Path(__file__).with_name("mechanisms.yaml")
OTHER_KERNEL, OTHER_USER = "other_kernel", "other_user"


@dataclass(frozen=True)
class Mechanism:
    name: str
    label: str
    symbols: re.Pattern | None
    comms: re.Pattern | None
    owns: bool  # the process's whole time is this mechanism's, its system calls included


def _union(patterns: list[str]) -> re.Pattern | None:
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None


@lru_cache(maxsize=1)
def table() -> tuple[Mechanism, ...]:
    import yaml  # here: the probes' registry imports this module for every command, `show` too
    rows = yaml.safe_load(TABLE.read_text())["mechanisms"]
    return tuple(Mechanism(r["name"], r["label"], _union(r.get("symbols") or []), _union(r.get("comms") or []),
                           bool(r.get("owns"))) for r in rows)


def labels() -> dict[str, str]:
    return {m.name: m.label for m in table()} | {OTHER_KERNEL: "other kernel functions",
                                                 OTHER_USER: "other user-space processes"}


@lru_cache(maxsize=65536)
def of_symbol(sym: str) -> str | None:
    """The mechanism of one function, or None."""
    for m in table():
        if m.symbols is not None and m.symbols.match(sym):
            return m.name
    return None


@lru_cache(maxsize=4096)
def of_comm(comm: str, owning: bool) -> str | None:
    for m in table():
        if m.owns == owning and m.comms is not None and m.comms.match(comm):
            return m.name
    return None


def attribute(comm: str, frames: list[tuple[str, bool]]) -> str:
    """The mechanism of one sample: frames leaf first as (function, in the kernel)."""
    if owner := of_comm(comm, True):
        return owner
    for sym, _kernel in frames:
        if mech := of_symbol(sym):
            return mech
    if by_comm := of_comm(comm, False):
        return by_comm
    return OTHER_KERNEL if frames and frames[0][1] else OTHER_USER


def attribute_folded(folded: dict[str, int]) -> dict[str, int]:
    """Samples per mechanism from folded stacks ('comm;root;...;leaf' -> count; kernel frames end in '_[k]')."""
    out: dict[str, int] = {}
    for stack, n in folded.items():
        comm, *frames = stack.split(";")
        parsed = [(f[:-4], True) if f.endswith("_[k]") else (f, False) for f in reversed(frames)]
        mech = attribute(comm, parsed)
        out[mech] = out.get(mech, 0) + n
    return out
