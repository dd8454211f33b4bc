"""A trial's record of the offloads in force (build/offloads.py reads it back before each trial), as text: plain
functions of the stored record, for `show` and the report without the build's modules."""
from __future__ import annotations


def shown(value: str) -> str:
    """'off fixed' as ethtool -k prints it: 'off [fixed]'."""
    return value.replace(" fixed", " [fixed]")


def summary(record: dict, features: list[str]) -> str:
    """'tso off, gso off, gro off on 10 interfaces' (the features named, each group of devices that agree on them)."""
    if "error" in record:
        return f"not read: {record['error']}"
    counts: dict[str, int] = {}
    for g in record.get("groups", []):
        text = ", ".join(f"{k} {shown(g['features'].get(k, '?'))}" for k in features)
        counts[text] = counts.get(text, 0) + len(g["devices"])
    return "; ".join(f"{text} on {n} interface{'s' * (n != 1)}" for text, n in counts.items()) or "no interface"
