"""A `cpu_pinning` level as plain data: `none`, `spread`, or {node: CPU list}. Parsing, one spelling and what is
wrong with a level, for the spec, validate, matrix and the record of a trial (build/pinning.py applies it); its label
and the node names it may use are scenario.py's (which imports nothing but strict)."""
from __future__ import annotations

from typing import Any

from .cpus import MAX_CPU, cpu_list, cpus_text
from .scenario import NODE_RE
from .strict import one_line

NONE, SPREAD = "none", "spread"
FIX = ("write none, spread, or a mapping from a node to CPUs, e.g. {h1: 0, h2: '1-2'} (a CPU number, a list such "
       "as [0, 1], or text such as '0,2-3')")


def cpus(value: Any) -> list[int] | None:
    """The CPU numbers of 0, '0', '0-1', '0,2-3' or [0, 1] (sorted, each once); None when malformed or empty."""
    try:
        return cpu_list(value)
    except ValueError:
        return None


as_text = cpus_text  # [0, 1, 2, 5] -> '0-2,5' (the form taskset -c takes and /proc's Cpus_allowed_list shows)


def level(value: Any) -> Any:
    """A level in one spelling: 'none', 'spread', or {node: '0-1'}; one not valid is returned as written (problems
    names it)."""
    if isinstance(value, dict) and not problems(value):
        return {k: as_text(cpus(v)) for k, v in value.items()}
    return value


def problems(value: Any) -> list[tuple[tuple, str]]:
    """(where in the level, what is wrong) for each problem of a level: each bad node and each bad CPU list."""
    if value in (NONE, SPREAD):
        return []
    if not isinstance(value, dict):
        return [((), f"{one_line(repr(value))} is not allowed; {FIX}")]
    if not value:
        return [((), f"an empty mapping pins nothing; {FIX}")]
    out = []
    for node, cpu in value.items():
        if not (isinstance(node, str) and NODE_RE.fullmatch(node)):
            out.append(((node,), f"{one_line(repr(node))} is not a node name; name a host (h1, h2...), a VM (h1v1, "
                                 f"h2v2...), a router (r1...) or tor"))
        elif cpus(cpu) is None:
            out.append(((node,), f"{one_line(repr(cpu))} is not a CPU list; write a CPU number (0), a list ([0, 1]) "
                                 f"or text such as '0-1' or '0,2-3' (CPUs 0 to {MAX_CPU})"))
    return out


def summary(record: dict) -> str:
    """A trial's record (build/pinning.py Reader.end) in one line: 'h1 on 0 (1 process), h2 on 1 (2 processes)'."""
    if "error" in record:
        return f"not read: {record['error']}"
    counts: dict[str, int] = {}
    for g in record.get("groups", []):
        key = f"{g['node']} on {g['cpus']}"
        counts[key] = counts.get(key, 0) + len(g["what"])
    return ", ".join(f"{k} ({n} process{'es' * (n != 1)})" for k, n in counts.items()) or "no process read"
