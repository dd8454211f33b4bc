"""One measured value with its unit and the metadata needed to trust it (after PerfKitBenchmarker's Sample)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: str  # "higher" | "lower" | "none": which direction the report calls best
    description: str
    additive: bool = False  # the directions of a bidirectional test add up (goodput, retransmits): their sum is shown
    per_event: bool = False  # one sample per event (an echo, a request): a distribution, summarised by its median


def declare(metrics: "Iterable[Metric]", owner: str) -> None:
    """Add the metrics a workload or probe declares to the catalogue (its registry calls this as it registers the
    class): a new workload is one module. One name, one meaning: a second, different definition is an error."""
    for m in metrics:
        if METRICS.get(m.name, m) != m:
            raise ValueError(f"{owner} redefines metric {m.name!r}: {m} != {METRICS[m.name]}")
        METRICS[m.name] = m


# The metrics no plug-in owns. Values are in SI base units: bit/s, s, ratio 0-1, events/s. Each workload and probe
# declares its own (its class's `catalogue`); `catalog.METRICS` is this table once every plug-in has registered.
METRICS: dict[str, Metric] = {m.name: m for m in [
    Metric("packet_rate_pps", "1/s", "higher", "throughput converted to packets per second", additive=True),
    # derived from the probes and the traffic (efficiency.py, probes/profile.py): owned by no one workload or probe
    Metric("cpu_s_per_gbit", "s/Gbit", "lower", "CPU time one account (machine, host, VM or daemon) spent per gigabit "
                                                "the tool delivered, over its window (= cores per Gbit/s)"),
    Metric("cpu_s_per_mpacket", "s/Mpacket", "lower", "CPU time one account spent per million packets delivered "
                                                      "(= µs per packet), packets counted at the path's MTU (goodput / "
                                                      "full payload)"),
    Metric("profile_share_ratio", "ratio", "none", "share of the profiled CPU samples attributed to one mechanism "
                                                   "over the tool's window"),
    Metric("profile_cpu_s_per_mpacket", "s/Mpacket", "lower", "CPU time one mechanism took per million packets "
                                                              "delivered, from the kernel profile"),
]}


@dataclass(frozen=True, order=True)
class Dims:
    """What one sample measures, beyond its metric, workload and scenario: a summary never pools two samples whose
    Dims differ (a host's CPU with a VM's, one direction with the other, pair 1 with pair 2, a flood with the
    measured traffic)."""
    scope: str = "traffic"   # traffic (a workload's own numbers) | machine (this one) | host (a testbed host) | vm
                             # | hypervisor (this machine's CPU for a guest VM) | process | interface
    which: str = ""          # the host, VM, process or interface; the side of a pair for a load in VMs; '' else
    direction: str = ""      # forward | reverse | both (the sum of the two); '' when a test has no direction
    pair: str = ""           # "1", "2"...; "all": summed over the pairs; '' when not about one pair
    role: str = ""           # '' for the measured workload; "background <name>" for a load beside it

    def label(self, varying: frozenset[str] | set[str] = frozenset({"scope", "direction", "pair"})) -> str:
        """Words for a table row ('' for a workload's own numbers): the role, a VM, host, process or interface
        always; the machine, the direction and the pair when `varying` names them (a table whose rows are all the
        machine's, all 'forward' or all pair 1 need not say so)."""
        what = {"traffic": self.which, "machine": "machine", "host": f"host {self.which}", "vm": f"VM {self.which}",
                "process": self.which, "interface": f"if {self.which}"}.get(self.scope, f"{self.scope} {self.which}")
        named = "scope" in varying or self.scope not in ("machine", "traffic")  # a VM, host or process: always
        way = {"both": "both directions"}.get(self.direction, self.direction)
        bits = [self.role, what if named else "", way if "direction" in varying else "",
                {"": "", "all": "all pairs"}.get(self.pair, f"pair {self.pair}") if "pair" in varying else ""]
        return ", ".join(b for b in bits if b)

    def order(self) -> tuple:
        """Rows in reading order: the workload's own before a background load's, by scope, then pair 1, 2 ...,
        then forward, reverse and their sum."""
        return (self.role, self.scope != "traffic", self.scope, self.which,
                (0, int(self.pair)) if self.pair.isdigit() else (1, self.pair),
                ("", "forward", "reverse", "both").index(self.direction) if self.direction in ("", "forward", "reverse",
                                                                                              "both") else 9)

    def as_dict(self) -> dict[str, str]:
        return {"scope": self.scope, "which": self.which, "direction": self.direction, "pair": self.pair,
                "role": self.role}


_RUN_PREFIX = re.compile(r"\bvb[0-9a-f]{4}-")  # ledger's "vb" + 4 hex digits, different in every run


def _unprefixed(name: object) -> str:
    """A namespace or interface name without its run's prefix ('vb3f2a-h1' -> 'h1'), so that two campaigns'
    rows about the same interface match."""
    return _RUN_PREFIX.sub("", str(name))


def dimensions(meta: dict) -> Dims:
    """The Dims of a stored sample from its metadata; samples of older campaigns lack some keys and get defaults."""
    host = meta.get("host")
    role = f"background {meta.get('background_name') or meta.get('background_workload') or 'load'}" \
        if meta.get("role") == "background" else ""
    pair = "" if meta.get("pair") is None else str(meta["pair"])
    direction = str(meta.get("direction") or "")
    if meta.get("mechanism"):  # a profiled mechanism's share of the machine's CPU (ndrpdr's: in one frame size's trial)
        scope, which = "mechanism", " ".join(str(b) for b in (meta["mechanism"], meta.get("frame")) if b)
    elif "process" in meta:
        name = str(meta["process"])
        scope, which = "process", name if not host or host in name else f"{name}@{host}"
    elif meta.get("scope") == "hypervisor":  # this machine's CPU for one guest VM, by part
        scope, which = "hypervisor", " ".join(str(x) for x in (meta.get("vm"), meta.get("part")) if x)
    elif meta.get("scope") == "vm":
        scope, which = "vm", " ".join(_unprefixed(x) for x in (meta.get("vm"), meta.get("interface")) if x)
    elif meta.get("scope") == "machine":
        scope, which = ("host", str(host)) if host else ("machine", "")
    elif "interface" in meta:
        scope = "interface"
        which = " ".join(_unprefixed(x) for x in (host, meta.get("node"), meta["interface"]) if x)
    else:
        scope, which = "traffic", _traffic(meta)
    return Dims(scope, which, direction, pair, role)


def _traffic(meta: dict) -> str:
    """What a workload's own sample is about: the side of a pair (a load in VMs), a packet-rate search's frame size
    and the share of its PDR a latency stream ran at ('64 B at 50 % PDR')."""
    at = f"at {meta['at_pdr']:.0%} PDR".replace("%", " %") if isinstance(meta.get("at_pdr"), (int, float)) else ""
    return " ".join(str(b) for b in (meta.get("side"), meta.get("frame"), at) if b)


@dataclass(frozen=True)
class Sample:
    metric: str
    value: float
    unit: str
    metadata: dict[str, Any] = field(default_factory=dict)
    t: float | None = None  # absolute UNIX time (s) on the machine's clock: when an event happened or a series
                            # interval ended; metadata["window"] = [start, end] is the tool's measurement window

    @classmethod
    def of(cls, metric: str, value: float, t: float | None = None, **metadata: Any) -> "Sample":
        """A sample of a registered metric; the unit comes from the registry so it cannot drift."""
        if metric not in METRICS:
            raise KeyError(f"metric {metric!r} is not declared: a workload or probe declares its metrics in its "
                           f"`catalogue` (vnetbench.catalog loads them all)")
        return cls(metric, float(value), METRICS[metric].unit, metadata, t)


# Before timestamps were absolute, t counted seconds from the trial's start: anything below this is such a t.
_ABSOLUTE_AFTER = 1e9


def elapsed(t: float | None, metadata: dict, origin: float | None = None) -> float | None:
    """Seconds from the start of the sample's measurement window (or `origin`) to t, for plotting series of
    several trials on one axis. Campaigns stored before absolute timestamps already hold that offset."""
    if t is None or t < _ABSOLUTE_AFTER:
        return t
    window = metadata.get("window")
    start = window[0] if window else origin
    return t - start if start is not None else None


def absolute(t: float | None, started: float) -> float | None:
    """The UNIX time of t: t itself, or (old campaigns) the trial's start plus t."""
    if t is None:
        return None
    return t if t >= _ABSOLUTE_AFTER else started + t
