"""Guards on a trial's numbers: what cannot be true makes the trial invalid (stored with the reason, never reported
as a result); what was measured on a busy or stolen machine makes it noisy (kept, flagged with a note).

Invalid: a NaN or infinite value, a negative one, a ratio above 1, a goodput above the underlay's payload ceiling,
an interval series whose time-weighted mean disagrees with the total it belongs to.
Noisy: CPU steal, or load that was not ours (the machine's busy share just before the trial), above a threshold.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from .sample import Sample

TOLERANCE = 0.03           # measurement-window jitter allowed above a ceiling
SERIES_TOLERANCE = 0.05    # series mean vs total: the receiver's last stub interval (a few ms) is left out
STUB_S = 0.05              # ... and what arrives after the last interval closed: a larger share of a short run
STEAL_NOISY = 0.05         # share of CPU time stolen by the hypervisor
FOREIGN_NOISY = 0.25       # share of the machine busy before the trial started (someone else's work)
ETH_HEADER = 14            # tbf counts each frame from the Ethernet header on (no preamble, no FCS)
UNBOUNDED_RATIOS = {"process_cpu_ratio", "sender_cpu_ratio", "receiver_cpu_ratio", "cpuload_cpu_ratio"}


@dataclass
class Verdict:
    samples: list[Sample]                        # the finite ones: NaN never reaches the store
    invalid: list[str] = field(default_factory=list)
    noisy: list[str] = field(default_factory=list)


def payload_ceiling(rate: float, vm_mtu: int, overhead: int = 0, protocol: str = "tcp", ip_version: int = 4) -> float:
    """The most payload bit/s a NIC limited to `rate` (tbf) carries in full-size packets: each frame of
    vm_mtu + tunnel overhead + 14 bytes carries vm_mtu - IP - TCP/UDP header bytes of payload. TCP counts its
    timestamp option (on by default in Linux): 1500-byte MTU, IPv4 -> 1448 / 1514."""
    ip = 20 if ip_version == 4 else 40
    l4 = 32 if protocol == "tcp" else 8
    return rate * (vm_mtu - ip - l4) / (vm_mtu + overhead + ETH_HEADER)


def _host(label: str) -> str:
    m = re.match(r"h\d+", label or "")
    return m[0] if m else label


def crosses(pair_meta: dict) -> bool:
    """Whether a pair's traffic leaves its host, i.e. passes a rate-limited NIC."""
    return _host(pair_meta.get("client", "")) != _host(pair_meta.get("server", ""))


def check_values(samples: Iterable[Sample]) -> tuple[list[Sample], list[str]]:
    keep, problems = [], []
    for s in samples:
        where = _where(s)
        if not math.isfinite(s.value) or (s.t is not None and not math.isfinite(s.t)):
            problems.append(f"{s.metric}{where} is {s.value} (not a number)")
            continue
        keep.append(s)
        if s.value < 0:
            problems.append(f"{s.metric}{where} is negative ({s.value:g})")
        elif s.unit == "ratio" and s.metric not in UNBOUNDED_RATIOS and s.value > 1 + 1e-9:
            problems.append(f"{s.metric}{where} is above 1 ({s.value:g})")
    return keep, problems


def _where(s: Sample) -> str:
    bits = [f"{k} {s.metadata[k]}" for k in ("pair", "direction", "cpu") if k in s.metadata]
    return f" ({', '.join(bits)})" if bits else ""


def check_ceiling(samples: Sequence[Sample], ceiling: float, crossing: set[int]) -> list[str]:
    """Per pair and direction, and summed over the pairs that cross the NIC (all clients sit on one host and all
    servers on another, so they share it), goodput must stay below the payload ceiling."""
    problems, limit = [], ceiling * (1 + TOLERANCE)
    total: dict[str, float] = defaultdict(float)
    for s in samples:
        if s.metric != "throughput_bps" or s.metadata.get("pair") not in crossing \
                or s.metadata.get("role") == "background":
            continue
        total[s.metadata.get("direction", "")] += s.value
        if s.value > limit:
            problems.append(f"throughput_bps{_where(s)} = {s.value / 1e9:.3f} Gbit/s is above the underlay's payload "
                            f"ceiling {ceiling / 1e9:.3f} Gbit/s (+{TOLERANCE:.0%})")
    for direction, value in total.items():
        if value > limit and len([s for s in samples if s.metric == "throughput_bps"]) > 1:
            problems.append(f"throughput_bps summed over the pairs ({direction}) = {value / 1e9:.3f} Gbit/s is above "
                            f"the underlay's payload ceiling {ceiling / 1e9:.3f} Gbit/s (+{TOLERANCE:.0%})")
    return problems


def check_interval_ceiling(samples: Sequence[Sample], ceiling: float, crossing: set[int]) -> list[str]:
    """Intervals above the ceiling make a trial noisy, not invalid: over one interval the receiving application can
    read faster than the wire for a while, draining what its socket buffers held from before."""
    over = [s for s in samples if s.metric == "throughput_interval_bps" and s.metadata.get("pair") in crossing
            and s.metadata.get("role") != "background" and s.value > ceiling * (1 + TOLERANCE)]
    if not over:
        return []
    top = max(s.value for s in over)
    return [f"{len(over)} throughput intervals above the payload ceiling {ceiling / 1e9:.3f} Gbit/s (highest "
            f"{top / 1e9:.3f}): the receiver read data buffered before the interval"]


def check_series(samples: Sequence[Sample]) -> list[str]:
    """The time-weighted mean of a pair's interval series must match its total over the same window."""
    totals = {(s.metadata.get("pair"), s.metadata.get("direction"), s.metadata.get("role")): s.value
              for s in samples if s.metric == "throughput_bps"}
    acc: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for s in samples:
        if s.metric == "throughput_interval_bps" and s.metadata.get("seconds"):
            a = acc[(s.metadata.get("pair"), s.metadata.get("direction"), s.metadata.get("role"))]
            a[0] += s.value * s.metadata["seconds"]
            a[1] += s.metadata["seconds"]
    problems = []
    for key, (bits, seconds) in acc.items():
        total = totals.get(key)
        if not total or seconds <= 0:
            continue
        mean = bits / seconds
        short = SERIES_TOLERANCE + STUB_S / seconds  # a series may fall short of its total by the tail it leaves out
        if mean / total - 1 > SERIES_TOLERANCE or 1 - mean / total > short:
            problems.append(f"throughput_interval_bps (pair {key[0]}, {key[1]}): its mean {mean / 1e6:.1f} Mbit/s "
                            f"disagrees with throughput_bps {total / 1e6:.1f} Mbit/s by {mean / total - 1:+.1%}")
    return problems


def check_noise(samples: Sequence[Sample], foreign_busy: float | None) -> list[str]:
    noisy = []
    for s in samples:
        if s.metric == "cpu_steal_ratio" and s.metadata.get("scope") == "machine" and "cpu" not in s.metadata \
                and not s.metadata.get("series") and s.value > STEAL_NOISY:
            noisy.append(f"CPU steal {s.value:.1%} of the window (> {STEAL_NOISY:.0%})")
    if foreign_busy is not None and foreign_busy > FOREIGN_NOISY:
        noisy.append(f"the machine was {foreign_busy:.0%} busy just before the trial (> {FOREIGN_NOISY:.0%}): "
                     f"other work shared the CPUs")
    return noisy


def judge(samples: Sequence[Sample], *, ceiling: float | None = None, crossing: set[int] = frozenset(),
          foreign_busy: float | None = None) -> Verdict:
    keep, invalid = check_values(samples)
    if ceiling:
        invalid += check_ceiling(keep, ceiling, crossing)
    invalid += check_series(keep)
    noisy = check_noise(keep, foreign_busy) + (check_interval_ceiling(keep, ceiling, crossing) if ceiling else [])
    return Verdict(keep, invalid, noisy)
