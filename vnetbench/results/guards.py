"""Guards on a trial's numbers: what cannot be true makes the trial invalid (stored with the reason, never reported
as a result); what was measured on a busy or stolen machine makes it noisy (kept, flagged with a note).

Invalid: a NaN or infinite value, a negative one, a ratio above 1, a goodput above the underlay's payload ceiling
(with what tbf's bucket lets through on top), an interval series whose time-weighted mean disagrees with the total
it belongs to, a receiver that got more than its sender sent, percentiles out of order (p50 above p99, a minimum
above the median or the maximum), CPU shares of one CPU (or machine) that sum above 1, an aggregate goodput above the
sum of its pairs', one process using more cores than its machine has, an interrupt rate no CPU can take.
Noisy: CPU steal, or load that was not ours (the machine's busy share just before the trial less what the processes
the run started used: runner.py, probes/procstat.py LoadWatch), above a threshold.
Flagged: a rate-bounded sender that did not offer the rate asked ("offered 14.6 of 100 Mbit/s"), and a trial whose
goodput no ceiling could check (no underlay rate set).
"""
from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ..core.sample import Sample
from ..core.scenario import BURST_MIN, tbf_burst  # noqa: F401 (the bucket the ceiling counts)
from ..workloads.base import OFFERED_SHORT  # noqa: F401 (the workloads' own bound, named here too)

TOLERANCE = 0.03           # measurement-window jitter allowed above a ceiling
BYTES_TOLERANCE = 0.001   # bytes received vs sent: counters of one connection (iperf3's UDP header bytes aside)
SERIES_TOLERANCE = 0.05    # series mean vs total: the receiver's last stub interval (a few ms) is left out
STUB_S = 0.05              # ... and what arrives after the last interval closed: a larger share of a short run
STEAL_NOISY = 0.05         # share of CPU time stolen by the hypervisor
FOREIGN_NOISY = 0.25       # share of the machine busy before the trial started with work the run did not start
ETH_HEADER = 14            # tbf counts each frame from the Ethernet header on (no preamble, no FCS)
CPU_SHARES = ("cpu_user_ratio", "cpu_system_ratio", "cpu_irq_ratio", "cpu_softirq_ratio", "cpu_steal_ratio",
              "cpu_nice_ratio", "cpu_iowait_ratio")
PERCENTILES = ("latency_min_s", "latency_p50_s", "latency_p90_s", "latency_p99_s", "latency_max_s")
AGGREGATE_TOLERANCE = 0.05  # an aggregate over its own window vs the sum of its pairs' rates over theirs
CORES_TOLERANCE = 0.02     # a process's CPU time read at the window's edges, interpolated between readings
# Entering and leaving an interrupt handler alone takes hundreds of CPU cycles (~100 ns and more at any clock
# rate), so no CPU takes 1e8 interrupts a second (10 ns, ~30 cycles each); real rates stay below ~1e6 per CPU.
MAX_INTERRUPTS_PER_CPU = 1e8
UNBOUNDED_RATIOS = {"process_cpu_ratio", "hypervisor_cpu_ratio", "sender_cpu_ratio", "receiver_cpu_ratio", "cpuload_cpu_ratio"}


@dataclass
class Verdict:
    samples: list[Sample]                        # the finite ones: NaN never reaches the store
    invalid: list[str] = field(default_factory=list)
    noisy: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)   # shown with the trial's numbers: load not offered, no ceiling


def payload_ceiling(rate: float, vm_mtu: int, overhead: int = 0, protocol: str = "tcp", ip_version: int = 4,
                    datagram: int | None = None, duration: float | None = None) -> float:
    """The most payload bit/s a NIC limited to `rate` (tbf) carries: each frame of payload + IP + TCP/UDP header +
    tunnel overhead + 14 bytes carries the payload. Full-size packets carry vm_mtu - IP - L4 (TCP counts its
    timestamp option, on by default in Linux: 1500-byte MTU, IPv4 -> 1448 / 1514); smaller UDP datagrams carry
    `datagram` bytes each, so headers take a larger share (64-byte datagrams: 64 / 120 of the rate). Over a
    `duration`-second test the full bucket (tbf_burst) also passes on top: 10 Mbit/s for 1 s lets 10.07 through."""
    ip = 20 if ip_version == 4 else 40
    l4 = 32 if protocol == "tcp" else 8
    payload = vm_mtu - ip - l4
    if protocol == "udp" and datagram:
        payload = min(payload, datagram)
    share = payload / (payload + ip + l4 + overhead + ETH_HEADER)
    burst = tbf_burst(rate) * 8 / duration if duration else 0.0
    return (rate + burst) * share


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
    """A pair's interval series must agree with its total in rate and, where the total counted its bytes, in bytes:
    a split pair's bytes are its processes' whole runs, a rate is over the common window, so only both disagreeing
    is a fault."""
    totals = {(s.metadata.get("pair"), s.metadata.get("direction"), s.metadata.get("role")): s
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
        if total is None or not total.value or seconds <= 0:
            continue
        where = f"throughput_interval_bps (pair {key[0]}, {key[1]})"
        wrong = _series_rate(where, bits / seconds, seconds, total.value)
        counted, window = total.metadata.get("bytes"), total.metadata.get("window")
        if wrong and isinstance(counted, (int, float)) and counted > 0 and window:
            wrong = _series_bytes(where, bits / 8, seconds, counted, window[1] - window[0])
        problems += wrong
    return problems


def _series_bytes(where: str, got: float, seconds: float, counted: float, window: float) -> list[str]:
    """The intervals are a part of the total: they cannot hold more bytes than it, and hold all of them (within
    SERIES_TOLERANCE) when they cover its whole window. Where they leave a stub out (< 50 ms) the stub may hold any
    share: a one-CPU guest's receiver drained 10 % of a 1-s transfer in its last 24 ms."""
    if got > counted * (1 + SERIES_TOLERANCE):
        return [f"{where}: its intervals hold {got:.0f} bytes, {got / counted - 1:+.1%} more than the total counted "
                f"({counted:.0f})"]
    if window - seconds <= 1e-3 and got < counted * (1 - SERIES_TOLERANCE):
        return [f"{where}: its intervals cover the total's {window:.3f} s but hold {got / counted - 1:+.1%} of its "
                f"bytes ({got:.0f} of {counted:.0f})"]
    return []


def _series_rate(where: str, mean: float, seconds: float, total: float) -> list[str]:
    """Without the total's bytes: its window is the series' plus the tail after its last interval, and a tail
    slower or faster than the rest moves the series' mean off the total by up to the tail's share."""
    if abs(mean / total - 1) > SERIES_TOLERANCE + STUB_S / seconds:
        return [f"{where}: its mean {mean / 1e6:.1f} Mbit/s disagrees with throughput_bps {total / 1e6:.1f} Mbit/s "
                f"by {mean / total - 1:+.1%}"]
    return []


def _key(s: Sample, *drop: str) -> tuple:
    """What a sample is about, without its metric: pair, direction, scope, cpu, process ..."""
    return tuple(sorted((k, str(v)) for k, v in s.metadata.items()
                        if k not in ("window", "seconds", "bytes", "bytes_within", *drop)))


def check_consistency(samples: Sequence[Sample]) -> list[str]:
    """Numbers that cannot all be true: a receiver that got more than its sender sent (5 % for the two windows),
    percentiles out of order, CPU shares of one CPU or machine summing above 1 (+2 % for counter rounding)."""
    problems = []
    by_key: dict[tuple, dict[str, float]] = defaultdict(dict)
    counted: dict[tuple, dict[str, float]] = defaultdict(dict)   # bytes behind a rate, where the tool gave them
    for s in samples:
        if not s.metadata.get("series"):
            by_key[_key(s)][s.metric] = s.value
            if isinstance(s.metadata.get("bytes"), (int, float)):
                counted[_key(s)][s.metric] = s.metadata["bytes"]
                # as exact as the tool could count them: +- bytes_within (printed digits, a block a signal cut off)
                counted[_key(s)][s.metric + ".within"] = s.metadata.get("bytes_within", 0)
    for key, m in by_key.items():
        where = f" ({', '.join(f'{k} {v}' for k, v in key if k in ('pair', 'direction', 'scope', 'cpu', 'vm'))})"
        got, sent = m.get("throughput_bps"), m.get("sender_throughput_bps")
        n = counted.get(key, {})
        if "throughput_bps" in n and "sender_throughput_bps" in n:
            # each rate is over its own side's seconds (a busy receiver's were 6 % shorter: 581 "of" 544 Mbit/s);
            # what cannot be is more bytes received than sent
            within = n["throughput_bps.within"] + n["sender_throughput_bps.within"]
            if n["throughput_bps"] - within > n["sender_throughput_bps"] * (1 + BYTES_TOLERANCE):
                shown = f" (counted to within {within:.0f})" if within else ""
                problems.append(f"throughput_bps{where}: the receiver got {n['throughput_bps']:.0f} bytes{shown}, "
                                f"more than the sender sent ({n['sender_throughput_bps']:.0f})")
        elif got and sent is not None and got > sent * (1 + SERIES_TOLERANCE):
            problems.append(f"throughput_bps{where} = {got / 1e6:.2f} Mbit/s: the receiver got more than the sender "
                            f"sent ({sent / 1e6:.2f} Mbit/s)")
        pcts = [(p, m[p]) for p in PERCENTILES if p in m]
        for (lo_name, lo), (hi_name, hi) in zip(pcts, pcts[1:]):
            if lo > hi * (1 + 1e-9):
                problems.append(f"{lo_name}{where} = {lo:g} is above {hi_name} = {hi:g}: percentiles out of order")
        shares = sum(m.get(c, 0.0) for c in CPU_SHARES)
        if shares > 1 + 0.02:
            problems.append(f"CPU shares{where} sum to {shares:.2f} (> 1): user + system + irq + softirq + steal "
                            f"cannot exceed the time there was")
    return problems


def check_aggregate(samples: Sequence[Sample]) -> list[str]:
    """An aggregate goodput cannot be more than the sum of its pairs' (AGGREGATE_TOLERANCE for their windows)."""
    pairs: dict[tuple, float] = defaultdict(float)
    aggregate: dict[tuple, float] = {}
    for s in samples:
        m = s.metadata
        key = (m.get("direction", ""), m.get("role"), m.get("background_workload"))
        if s.metric == "throughput_bps" and not m.get("series"):
            pairs[key] += s.value
        elif s.metric == "aggregate_throughput_bps" and not m.get("series"):
            aggregate[key] = s.value
    return [f"aggregate_throughput_bps ({key[0] or 'one way'}) = {v / 1e6:.2f} Mbit/s is more than the sum of its "
            f"pairs ({pairs[key] / 1e6:.2f} Mbit/s, +{AGGREGATE_TOLERANCE:.0%})"
            for key, v in aggregate.items() if key in pairs and v > pairs[key] * (1 + AGGREGATE_TOLERANCE)]


def cpu_counts(samples: Sequence[Sample]) -> dict[tuple, int]:
    """(host, vm) -> how many CPUs the probes measured there one by one; this machine is (None, None)."""
    seen: dict[tuple, set] = defaultdict(set)
    for s in samples:
        if "cpu" in s.metadata and s.metric in ("cpu_busy_ratio", *CPU_SHARES):
            seen[(s.metadata.get("host"), s.metadata.get("vm"))].add(s.metadata["cpu"])
    return {k: len(v) for k, v in seen.items()}


def cpus_of(meta: dict, counts: dict[tuple, int]) -> int | None:
    """The CPUs of where a sample was measured: as its probes counted them, else this machine's for a sample taken
    here or in one of its guests (which have no more); None for another host whose CPUs no probe counted."""
    if n := counts.get((meta.get("host"), meta.get("vm"))):
        return n
    return os.cpu_count() if meta.get("host") is None else None


def check_machine_bounds(samples: Sequence[Sample]) -> list[str]:
    """Rates no machine reaches: one process using more cores than its machine has, interrupts above
    MAX_INTERRUPTS_PER_CPU a second per CPU."""
    counts, problems = cpu_counts(samples), []
    for s in samples:
        meta = {k: v for k, v in s.metadata.items() if k != "vm"} if s.metadata.get("scope") == "hypervisor" \
            else s.metadata  # a VM's emulator runs on the machine's CPUs, not the VM's
        cpus = 1 if "cpu" in meta else cpus_of(meta, counts)
        if not cpus or s.metadata.get("series"):  # a series point is checked through its window's total
            continue
        if s.metric == "process_cpu_ratio" and s.value > cpus * (1 + CORES_TOLERANCE):
            problems.append(f"process_cpu_ratio ({s.metadata.get('process', '?')}) = {s.value:.3g} cores: one process "
                            f"cannot use more than the {cpus} CPUs of the machine it ran on")
        elif s.metric == "hypervisor_cpu_ratio" and s.value > cpus * (1 + CORES_TOLERANCE):
            problems.append(f"hypervisor_cpu_ratio (VM {s.metadata.get('vm', '?')}, {s.metadata.get('part', '?')}) = "
                            f"{s.value:.3g} cores: more than the {cpus} CPUs of the machine running it")
        elif s.metric == "interrupts_per_s" and s.value > MAX_INTERRUPTS_PER_CPU * cpus:
            problems.append(f"interrupts_per_s{_where(s)} = {s.value:.3g}: more than {MAX_INTERRUPTS_PER_CPU:.0e} a "
                            f"second for each of {cpus} CPUs, more than a CPU can take")
    return problems


def check_offered(samples: Sequence[Sample], offer, role: str | None = None) -> list[str]:
    """A rate-bounded load (a workload's `Offer`: UDP at a rate per pair and direction, HTTP clients at a request rate)
    whose own count fell below OFFERED_SHORT of it: what was measured is not the load that was asked for. `role`:
    "background" checks a background load's samples (its own rate), None the foreground's."""
    if not offer:
        return []
    out = []
    for s in samples:
        mine = (s.metadata.get("role") == "background") == (role == "background")
        if s.metric == offer.metric and mine and s.value < OFFERED_SHORT * offer.rate:
            out.append(f"offered {s.value / offer.scale:.3g} of {offer.rate / offer.scale:.3g} {offer.unit}{_where(s)}: "
                       f"{offer.short}")
    return out


def reader_flags(trial_metadata: dict | None) -> list[str]:
    """The trial's flags a reader must see beside its numbers: all but the note that no ceiling was checked (which
    `show` states once for the campaign)."""
    return [str(f) for f in (trial_metadata or {}).get("flags", []) if str(f) != NO_CEILING]


def not_offered(trial_metadata: dict | None) -> bool:
    """Whether a stored trial carries a load-not-offered flag (its own sender's or a background flood's)."""
    return any(str(f).startswith(("offered ", "background offered ")) for f in (trial_metadata or {}).get("flags", []))


def check_noise(samples: Sequence[Sample], foreign_busy: float | None) -> list[str]:
    noisy = []
    for s in samples:
        if s.metric == "cpu_steal_ratio" and s.metadata.get("scope") == "machine" and "cpu" not in s.metadata \
                and not s.metadata.get("series") and s.value > STEAL_NOISY:
            noisy.append(f"CPU steal {s.value:.1%} of the window (> {STEAL_NOISY:.0%})")
    if foreign_busy is not None and foreign_busy > FOREIGN_NOISY:
        noisy.append(f"other work (not the run's) kept the machine {foreign_busy:.0%} busy just before the trial "
                     f"(> {FOREIGN_NOISY:.0%})")
    return noisy


NO_CEILING = "no throughput ceiling checked: the underlay has no rate set"


def judge(samples: Sequence[Sample], *, ceiling: float | None = None, crossing: set[int] = frozenset(),
          foreign_busy: float | None = None, offer=None) -> Verdict:
    keep, invalid = check_values(samples)
    if ceiling:
        invalid += check_ceiling(keep, ceiling, crossing)
    invalid += check_series(keep) + check_consistency(keep) + check_aggregate(keep) + check_machine_bounds(keep)
    noisy = check_noise(keep, foreign_busy) + (check_interval_ceiling(keep, ceiling, crossing) if ceiling else [])
    flags = check_offered(keep, offer)
    if not ceiling and any(s.metric == "throughput_bps" for s in keep):
        flags.append(NO_CEILING)
    return Verdict(keep, invalid, noisy, flags)
