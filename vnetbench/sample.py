"""One measured value with its unit and the metadata needed to trust it (after PerfKitBenchmarker's Sample)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: str  # "higher" | "lower" | "none": which direction the report calls best
    description: str
    additive: bool = False  # the directions of a bidirectional test add up (goodput, retransmits): their sum is shown


def _additive(names: str) -> None:
    for name in names.split():
        METRICS[name] = Metric(*(getattr(METRICS[name], f) for f in ("name", "unit", "better", "description")), True)


# Every metric vnetbench writes. Values are in SI base units: bit/s, s, ratio 0-1, events/s.
METRICS: dict[str, Metric] = {m.name: m for m in [
    Metric("throughput_bps", "bit/s", "higher", "goodput counted at the receiver over the whole test"),
    Metric("throughput_interval_bps", "bit/s", "higher", "receiver goodput per reporting interval (series)"),
    Metric("aggregate_throughput_bps", "bit/s", "higher", "sum of throughput_bps over all pairs of a trial"),
    Metric("sender_throughput_bps", "bit/s", "higher", "rate offered by the sender"),
    Metric("tcp_retransmits", "1", "lower", "TCP segments retransmitted by the sender"),
    Metric("udp_loss_ratio", "ratio", "lower", "UDP datagrams lost, counted at the receiver"),
    Metric("jitter_s", "s", "lower", "UDP inter-arrival jitter at the receiver (RFC 3550)"),
    Metric("rtt_s", "s", "lower", "ICMP echo round-trip time, one sample per echo"),
    Metric("rtt_loaded_s", "s", "lower", "ICMP echo round-trip time during the measurement window of a throughput test"),
    Metric("rtt_idle_s", "s", "lower", "ICMP echo round-trip time just before a throughput test starts (its baseline)"),
    Metric("ping_loss_ratio", "ratio", "lower", "ICMP echoes without reply"),
    Metric("ping_jitter_s", "s", "lower", "mean absolute difference of consecutive RTTs"),
    Metric("latency_s", "s", "lower", "request/response round-trip latency (sockperf ping-pong)"),
    Metric("latency_p50_s", "s", "lower", "median request/response latency"),
    Metric("latency_p90_s", "s", "lower", "90th percentile request/response latency"),
    Metric("latency_p99_s", "s", "lower", "99th percentile request/response latency"),
    Metric("latency_min_s", "s", "lower", "minimum request/response latency"),
    Metric("latency_max_s", "s", "lower", "maximum request/response latency"),
    Metric("latency_mean_s", "s", "lower", "mean request/response latency over every round trip, as the tool reports it"),
    Metric("transactions_per_s", "1/s", "higher", "request/response transactions per second"),
    # Raw CPU is not judged better or worse (a datapath that carries more traffic uses more): its efficiency is,
    # cpu_s_per_gbit and cpu_s_per_mpacket below.
    Metric("cpu_busy_ratio", "ratio", "none", "whole machine: share of CPU time not idle"),
    Metric("cpu_user_ratio", "ratio", "lower", "whole machine: user time share"),
    Metric("cpu_system_ratio", "ratio", "lower", "whole machine: system time share"),
    Metric("cpu_irq_ratio", "ratio", "lower", "whole machine: hard interrupt time share"),
    Metric("cpu_softirq_ratio", "ratio", "lower", "whole machine: soft interrupt time share"),
    Metric("cpu_steal_ratio", "ratio", "lower", "whole machine: time stolen by the hypervisor"),
    Metric("interrupts_per_s", "1/s", "lower", "hardware interrupts per second, whole machine"),
    Metric("context_switches_per_s", "1/s", "lower", "context switches per second, whole machine"),
    Metric("net_rx_softirqs_per_s", "1/s", "lower", "NET_RX soft interrupts per second, whole machine"),
    Metric("net_tx_softirqs_per_s", "1/s", "lower", "NET_TX soft interrupts per second, whole machine"),
    Metric("process_cpu_ratio", "ratio", "none", "CPU time of one datapath process (1.0 = one core)"),
    Metric("sender_cpu_ratio", "ratio", "lower", "CPU time of the traffic generator's sending process(es) over the "
                                                 "test, as iperf3 reports it (1.0 = one core)"),
    Metric("receiver_cpu_ratio", "ratio", "lower", "CPU time of the traffic generator's receiving process(es) over "
                                                   "the test, as iperf3 reports it (1.0 = one core)"),
    Metric("if_rx_packets_per_s", "1/s", "none", "packets received per second on an interface"),
    Metric("if_tx_packets_per_s", "1/s", "none", "packets sent per second on an interface"),
    Metric("if_drops", "1", "lower", "packets dropped on an interface during the trial"),
    Metric("packet_rate_pps", "1/s", "higher", "throughput converted to packets per second"),
    Metric("http_response_time_s", "s", "lower", "HTTP request to complete response (connect included), one per request"),
    Metric("http_requests_per_s", "1/s", "higher", "HTTP responses completed per second, all clients of a pair"),
    Metric("http_errors", "1", "lower", "HTTP requests that failed (refused, timed out, wrong status or length)"),
    Metric("cpuload_ops_per_s", "1/s", "higher", "work a synthetic CPU load got done (stress-ng bogo ops per second)"),
    Metric("cpuload_cpu_ratio", "ratio", "none", "CPU time a synthetic load got, per worker (1.0 = one core)"),
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


_additive("throughput_bps aggregate_throughput_bps sender_throughput_bps tcp_retransmits packet_rate_pps")


@dataclass(frozen=True, order=True)
class Dims:
    """What one sample measures, beyond its metric, workload and scenario: a summary never pools two samples whose
    Dims differ (a host's CPU with a VM's, one direction with the other, pair 1 with pair 2, a flood with the
    measured traffic)."""
    scope: str = "traffic"   # traffic (a workload's own numbers) | machine (this one) | host (a testbed host) | vm
                             # | process | interface
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
    if meta.get("mechanism"):  # a profiled mechanism's share of the machine's CPU
        scope, which = "mechanism", str(meta["mechanism"])
    elif "process" in meta:
        name = str(meta["process"])
        scope, which = "process", name if not host or host in name else f"{name}@{host}"
    elif meta.get("scope") == "vm":
        scope, which = "vm", " ".join(_unprefixed(x) for x in (meta.get("vm"), meta.get("interface")) if x)
    elif meta.get("scope") == "machine":
        scope, which = ("host", str(host)) if host else ("machine", "")
    elif "interface" in meta:
        scope = "interface"
        which = " ".join(_unprefixed(x) for x in (host, meta.get("node"), meta["interface"]) if x)
    else:
        scope, which = "traffic", str(meta.get("side") or "")
    return Dims(scope, which, direction, pair, role)


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
