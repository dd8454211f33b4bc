"""What the traffic cost in CPU: CPU time per gigabit and per million packets delivered, over the tool's window.

Made from a trial's own samples once the probes have stopped (one place for these two statistics):
- the work: the bits the foreground tool delivered (receiver goodput x its window, summed over pairs and
  directions), and the packets they took, counted at the path's MTU (goodput / payload of a full packet: with
  segmentation offloads the tool cannot see wire packets, so the full-MTU count is the one comparable across paths);
- the CPU: each CPU account the probes measured over the same window: the machine (busy share x its CPUs), each
  testbed host (the same, per host), each guest VM's kernel (its own /proc/stat), each datapath daemon's process.

Each account gives its own pair of samples with the account's identity (scope, host, vm, process) in metadata: they
are never added together (a VM's CPU time is already inside the machine's).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from ..core.sample import Sample

IDENTITY = ("scope", "host", "vm", "process", "pid")  # what tells one CPU account from another


def delivered_bits(samples: Iterable[Sample]) -> float:
    """Bits the foreground tool delivered in its window: receiver goodput x each pair's (direction's) window."""
    bits = 0.0
    for s in samples:
        m = s.metadata
        if s.metric != "throughput_bps" or m.get("role") == "background" or m.get("series") or not m.get("window"):
            continue
        bits += s.value * (m["window"][1] - m["window"][0])
    return bits


def packet_payload(vm_mtu: int, protocol: str, ip_version: int = 4) -> int:
    """Payload bytes of one full-MTU packet: the MTU less IP and TCP (with timestamps, 32 B) or UDP (8 B) headers."""
    ip = 40 if ip_version == 6 else 20
    return max(1, vm_mtu - ip - (32 if protocol == "tcp" else 8))


def payload_of(sc, wl) -> int | None:
    """Payload bytes per packet of a scenario's workload (None: the tool sends no stream, e.g. ping)."""
    protocol = getattr(wl.params, "protocol", None)
    if protocol not in ("tcp", "udp") or not getattr(sc, "vm_mtu", None):
        return None
    return packet_payload(sc.vm_mtu, protocol, int(sc.levels.get("ip_version", 4)))


def _cpu_seconds(samples: list[Sample]) -> list[tuple[dict, float]]:
    """(identity, CPU seconds over the window) of every CPU account the probes measured."""
    ncpus: dict[tuple, set] = defaultdict(set)
    for s in samples:  # the per-CPU busy shares say how many CPUs an account has
        if s.metric == "cpu_busy_ratio" and "cpu" in s.metadata and not s.metadata.get("series"):
            ncpus[_key(s.metadata)].add(s.metadata["cpu"])
    out = []
    for s in samples:
        m = s.metadata
        if m.get("series") or "cpu" in m or not m.get("window"):
            continue
        seconds = m["window"][1] - m["window"][0]
        if s.metric == "cpu_busy_ratio" and ncpus.get(_key(m)):
            out.append((_identity(m), s.value * len(ncpus[_key(m)]) * seconds))
        elif s.metric == "process_cpu_ratio":
            out.append((_identity(m), s.value * seconds))
    return out


def _key(meta: dict) -> tuple:
    return tuple(meta.get(k) for k in IDENTITY)


def _identity(meta: dict) -> dict:
    return {k: meta[k] for k in IDENTITY if k in meta} | {"window": meta["window"]}


def _own_packets(samples: list[Sample]) -> list[Sample]:
    """Each profiled mechanism's CPU time per packet where the profile's window counted its own packets (ndrpdr's
    trial at an NDR: frames received in it), not the trial's delivered bits."""
    return [Sample.of("profile_cpu_s_per_mpacket", s.metadata["cpu_s"] / s.metadata["mpackets"],
                      **{k: v for k, v in s.metadata.items() if k not in ("cpu_s", "profile_samples")})
            for s in samples if s.metric == "profile_share_ratio" and "cpu_s" in s.metadata
            and (s.metadata.get("mpackets") or 0) > 0]


def derive(samples: list[Sample], payload: int | None) -> list[Sample]:
    """cpu_s_per_gbit and cpu_s_per_mpacket of every CPU account; none when the trial delivered no bits (a ping,
    a request/response test) or no probe measured CPU. payload: bytes per packet (packet_payload), None: no packets."""
    out = _own_packets(samples)
    bits = delivered_bits(samples)
    if bits <= 0:
        return out
    gbit, mpackets = bits / 1e9, bits / 8 / payload / 1e6 if payload else None
    for who, cpu_s in _cpu_seconds(samples):
        # the parts, so that a summary over trials is sum(cpu_s) / sum(work) (dataset.RATIO_OF_SUMS)
        out.append(Sample.of("cpu_s_per_gbit", cpu_s / gbit, cpu_s=cpu_s, gbit=gbit, **who))
        if mpackets:
            out.append(Sample.of("cpu_s_per_mpacket", cpu_s / mpackets, payload_bytes=payload, cpu_s=cpu_s,
                                 mpackets=mpackets, **who))
    for s in samples:  # each profiled mechanism's CPU time per packet
        if s.metric == "profile_share_ratio" and mpackets and "cpu_s" in s.metadata and "mpackets" not in s.metadata:
            out.append(Sample.of("profile_cpu_s_per_mpacket", s.metadata["cpu_s"] / mpackets, payload_bytes=payload,
                                 **{k: v for k, v in s.metadata.items() if k not in ("cpu_s", "profile_samples")}))
    return out
