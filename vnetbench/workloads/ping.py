"""ICMP echo round-trip time with iputils ping.

The parser here is used twice: for the `ping` workload (rtt_s) and for iperf3's latency under load (rtt_loaded_s);
both also get ping_loss_ratio and ping_jitter_s (under load they belong to the iperf3 workload's trials).
"""
from __future__ import annotations

import math
import re
import subprocess
import time
from typing import Literal, Sequence

from pydantic import Field

from ..core.sample import Metric, Sample
from . import register
from .base import Command, Pair, Params, Tool, Workload, WorkloadError, bounded, stop

# `[1795316499.979524] 64 bytes from 127.0.0.1: icmp_seq=47 ttl=64 time=0.029 ms` (-D puts the epoch first).
_REPLY = re.compile(r"^\[(?P<ts>\d+\.\d+)\] \d+ bytes from .*?icmp_seq=(?P<seq>\d+) .*?time=(?P<ms>[\d.]+) ms"
                    r"(?P<dup> \(DUP!\))?")
# `47 packets transmitted, 40 received, +2 errors, 14.8936% packet loss, time 1103ms`
_SUMMARY = re.compile(r"^(?P<tx>\d+) packets transmitted, (?P<rx>\d+) received")
_ERRORS = re.compile(r", \+(\d+) errors")
REPLY_WAIT_S = 2  # -W: how long ping waits for the last reply

# ping is also run by iperf3 (latency under load): one definition of how to find it
PING_TOOLS = {"ping": Tool("iputils-ping", ["ping", "-V"], r"iputils[- ](\S+)")}


def ping_argv(addr: str, count: int, interval: float, size: int, deadline: int) -> list[str]:
    family = ["-6"] if ":" in addr else []
    return ["ping", *family, "-n", "-D", "-c", str(count), "-i", f"{interval:g}", "-s", str(size),
            "-W", str(REPLY_WAIT_S), "-w", str(deadline), addr]


def parse_rtts(text: str, metric: str = "rtt_s", window: Sequence[float] | None = None, **metadata) -> list[Sample]:
    """One sample per echo reply (duplicates skipped); t = when the echo was sent (UNIX time, from ping -D's
    receive stamp minus the RTT). With a window, only echoes sent inside it; every sample carries the window
    (by default from the first echo sent to the last reply)."""
    replies = [m for m in map(_REPLY.match, text.splitlines()) if m and not m["dup"]]
    sent = [float(m["ts"]) - float(m["ms"]) / 1e3 for m in replies]
    if window is None and replies:
        window = [min(sent), max(float(m["ts"]) for m in replies)]
    keep = [(m, s) for m, s in zip(replies, sent) if window is None or window[0] <= s <= window[1]]
    meta = metadata | ({"window": list(window)} if window is not None else {})
    return [Sample.of(metric, float(m["ms"]) / 1e3, t=s, icmp_seq=int(m["seq"]), **meta) for m, s in keep]


def ping_counts(text: str) -> tuple[int, int, int]:
    """(transmitted, received, errors) from ping's statistics line."""
    for line in text.splitlines():
        if m := _SUMMARY.match(line):
            errors = _ERRORS.search(line)
            return int(m["tx"]), int(m["rx"]), int(errors[1]) if errors else 0
    raise WorkloadError(f"ping printed no statistics: {text.strip()[-300:]}")


def judged(text: str, count: int | None) -> tuple[int, int]:
    """(echoes judged, replies). With a deadline (-w), ping stops once `count` replies are in: echoes it sent after
    the last of them were still in flight then, neither answered nor lost (a busy machine's 20-ms pings had one
    such echo, read as 9 % loss). Echoes after the last reply of a run cut by its deadline stay lost."""
    tx, rx, _ = ping_counts(text)
    if count is not None and rx >= count:
        seqs = [int(m["seq"]) for m in map(_REPLY.match, text.splitlines()) if m and not m["dup"]]
        tx = min(tx, max(seqs, default=tx))
    return tx, rx


def parse_ping(text: str, rtt_metric: str = "rtt_s", window: Sequence[float] | None = None,
               count: int | None = None, **metadata) -> list[Sample]:
    """rtt_s (or rtt_metric, e.g. rtt_loaded_s under load) per reply, ping_loss_ratio, ping_jitter_s (mean
    |difference| of consecutive RTTs). With a window, RTTs and jitter are of the echoes sent inside it; the loss
    ratio is over the whole ping run (lost echoes leave no time stamp). count: the -c asked, see judged()."""
    rtts = parse_rtts(text, rtt_metric, window, **metadata)
    tx, rx = judged(text, count)
    meta = metadata | ({"window": rtts[0].metadata["window"]} if rtts else {})
    out = rtts + [Sample.of("ping_loss_ratio", 1 - rx / tx if tx else 1.0, **meta)]
    values = [s.value for s in rtts]
    if len(values) >= 2:
        out.append(Sample.of("ping_jitter_s", sum(abs(b - a) for a, b in zip(values, values[1:])) / (len(values) - 1),
                             **meta))
    return out


def check_ping(returncode: int, out: str, err: str, what: str = "ping") -> str:
    """ping exits 1 when replies are missing: that is a measurement. Exit 2, or local errors only, is a failure."""
    if returncode not in (0, 1):
        raise WorkloadError(f"{what} exited {returncode}: {(err.strip() or out.strip())[-500:]}")
    tx, rx, errors = ping_counts(out)
    if rx == 0 and errors:
        raise WorkloadError(f"{what}: {err.strip()[-300:] or f'{errors} errors'}")
    return out


def collect_ping(proc: subprocess.Popen, timeout: float, what: str) -> str:
    out, err = bounded(proc, timeout, what)
    return check_ping(proc.returncode, out, err, what)


class PingParams(Params):
    type: Literal["ping"] = "ping"
    # Payload bytes. Below 16 ping has no room for its timestamp and prints no RTT. 65507 is the largest IPv4
    # payload (65535 - 20 IP - 8 ICMP); ping then reports "65515 bytes from" (payload + 8-byte ICMP header),
    # which is the "65515-byte packet" of the study.
    ping_size: int = Field(56, ge=16, le=65507)
    count: int = Field(20, ge=1, le=100_000)
    interval: float = Field(0.2, ge=0.002, le=60, description="seconds between echoes (non-root minimum 0.002)")

    def deadline(self) -> int:
        # With -w, ping goes on past -c until `count` replies arrive or the deadline passes, so under loss it
        # sends more than `count`; the loss ratio uses the transmitted count from ping's statistics.
        return math.ceil(self.count * self.interval) + REPLY_WAIT_S + 1


@register
class Ping(Workload):
    kind = "ping"
    metrics = frozenset({"rtt_s", "ping_loss_ratio", "ping_jitter_s"})
    Params = PingParams
    tool = "ping"
    tools = PING_TOOLS
    main_metric = "rtt_s"
    catalogue = (
        Metric("rtt_s", "s", "lower", "ICMP echo round-trip time, one sample per echo", per_event=True),
        Metric("ping_loss_ratio", "ratio", "lower", "ICMP echoes without reply"),
        Metric("ping_jitter_s", "s", "lower", "mean absolute difference of consecutive RTTs"),
    )

    @classmethod
    def describe(cls, p: dict) -> str:
        """'ping', or 'ping 1400 B' when the payload is not ping's default 56 bytes."""
        size = p.get("ping_size") or 56
        return cls.kind + (f" {size} B" if size != 56 else "")

    def expected_duration(self) -> float:
        return self.params.count * self.params.interval

    def largest_datagram(self) -> int:
        return self.params.ping_size + 8  # the ICMP header

    def _argv(self, pair: Pair) -> list[str]:
        p = self.params
        return ping_argv(pair.server.addr, p.count, p.interval, p.ping_size, p.deadline())

    def commands(self, pairs: Sequence[Pair]) -> list[Command]:
        return [Command(pair.client.node.name, self._argv(pair)) for pair in pairs]

    def run(self, pairs: Sequence[Pair]) -> list[Sample]:
        procs = []
        try:
            for pair in pairs:
                procs.append(pair.client.node.spawn(self._argv(pair), label=f"ping pair {pair.index}"))
            self.signal_running(procs)
            end = time.monotonic() + self.params.deadline() + 5
            outs = [collect_ping(proc, max(end - time.monotonic(), 1), f"ping pair {pair.index}")
                    for pair, proc in zip(pairs, procs)]
        finally:
            for proc in procs:
                stop(proc)
        return [s for pair, out in zip(pairs, outs) for s in parse_ping(out, count=self.params.count, pair=pair.index)]
