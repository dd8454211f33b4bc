"""Bulk throughput with iperf3 (3.12): TCP or rate-bounded UDP, one server/client per pair, all pairs at once.

What iperf3 3.12's client JSON (-J --get-server-output) holds, checked on real runs (tests/fixtures/iperf3):
- end.sum_received is counted by the receiver in every mode (TCP and UDP, -R included): bytes, seconds,
  bits_per_second = bytes*8/seconds, and for UDP the receiver's jitter_ms and lost_packets. With UDP loss its bytes
  are (packets - lost_packets) * blksize. end.sum_sent is the sender's; it holds TCP retransmits.
- end.sum for UDP is a trap: its bytes/bits_per_second are the SENDER's while its jitter/loss are the receiver's.
  It is not used.
- --bidir adds end.sum_sent_bidir_reverse / sum_received_bidir_reverse for the server-to-client direction.
- Interval sums are measured by the process that prints them: the client's own intervals are the sender's in a
  forward test. Receiver-side series come from whichever side received: interval sums with sender=false, in the
  client JSON for the reverse direction and in server_output_json (the server runs with -J) for the forward one.
- With -J, iperf3 exits 0 even when it fails (e.g. connection refused): the failure is only the "error" key.
"""
from __future__ import annotations

import json
import math
import time
from typing import Any, Literal, Sequence

from pydantic import Field, field_validator

from ..sample import Sample
from ..units import parse_rate
from . import register
from .base import Command, Pair, Params, Workload, WorkloadError, finish, stop, wait_listening
from .ping import collect_ping, parse_ping, ping_argv

PING_INTERVAL_S = 0.2
MIN_INTERVAL_S = 0.05  # iperf3's shortest -i is 0.1 s
MAX_UDP_RATE = 100_000_000_000  # UDP is never sent unbounded (-b 0): cap the offered rate at 100 Gbit/s


def _direction(doc: dict, bidir_reverse: bool) -> str:
    reverse = bool(doc["start"]["test_start"].get("reverse"))
    return "reverse" if reverse or bidir_reverse else "forward"


def _end_samples(doc: dict, udp: bool, meta: dict) -> list[Sample]:
    end, out = doc["end"], []
    for suffix in ("", "_bidir_reverse"):
        recv, sent = end.get("sum_received" + suffix), end.get("sum_sent" + suffix)
        if recv is None:
            continue
        m = meta | {"direction": _direction(doc, bool(suffix))}
        out += [Sample.of("throughput_bps", recv["bits_per_second"], **m),
                Sample.of("sender_throughput_bps", sent["bits_per_second"], **m)]
        if udp:
            out += [Sample.of("udp_loss_ratio", _udp_loss(recv, sent), **m),
                    Sample.of("jitter_s", recv["jitter_ms"] / 1e3, **m)]
        else:
            out.append(Sample.of("tcp_retransmits", sent.get("retransmits", 0), **m))
    return out


def _udp_loss(recv: dict, sent: dict) -> float:
    """1 - arrived/sent. The receiver's `packets` is the highest sequence number it saw, so its lost_packets misses
    datagrams lost after the last one that arrived; the sender's count of datagrams sent includes them."""
    arrived = recv["packets"] - recv["lost_packets"]
    total = sent["packets"] or recv["packets"]
    return min(max(1 - arrived / total, 0.0), 1.0) if total else 0.0


def _interval_samples(doc: dict, meta: dict) -> list[Sample]:
    """Receiver-side throughput per interval; t counts from the client's start, so omitted seconds are added."""
    omit = doc["start"]["test_start"].get("omit", 0)
    out = []
    for side, direction in ((doc, "reverse"), (doc.get("server_output_json") or {}, "forward")):
        for interval in side.get("intervals", []):
            for s in (interval.get("sum"), interval.get("sum_bidir_reverse")):
                # The receiver often ends with a stub interval of a few µs: as a rate it is noise.
                if s and not s["sender"] and not s["omitted"] and s["seconds"] >= MIN_INTERVAL_S:
                    out.append(Sample.of("throughput_interval_bps", s["bits_per_second"], t=omit + s["end"],
                                         direction=direction, **meta))
    return out


def parse_iperf3(text: str, **meta: Any) -> list[Sample]:
    """Samples of one client's JSON output; raises WorkloadError if iperf3 reported an error."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        raise WorkloadError(f"iperf3 printed no JSON: {text.strip()[-300:]}") from None
    if doc.get("error"):
        raise WorkloadError(f"iperf3: {doc['error']}")
    udp = doc["start"]["test_start"]["protocol"] == "UDP"
    return _end_samples(doc, udp, meta) + _interval_samples(doc, meta)


def aggregate(samples: Sequence[Sample]) -> list[Sample]:
    """aggregate_throughput_bps per direction: the sum of the pairs' receiver throughput."""
    totals: dict[str, float] = {}
    for s in samples:
        if s.metric == "throughput_bps":
            totals[s.metadata["direction"]] = totals.get(s.metadata["direction"], 0.0) + s.value
    return [Sample.of("aggregate_throughput_bps", v, pair="all", direction=d) for d, v in totals.items()]


class Iperf3Params(Params):
    type: Literal["iperf3"] = "iperf3"
    protocol: Literal["tcp", "udp"] = "tcp"
    streams: int = Field(1, ge=1, le=128, description="parallel streams per pair (-P)")
    direction: Literal["uni", "reverse", "bidir"] = "uni"
    # iperf3 3.12 reads -t and -O with atoi: 0.5 would become 0, which means "run forever". Whole seconds only.
    duration: int = Field(10, ge=1, le=3600, description="seconds measured (-t)")
    omit: int = Field(0, ge=0, le=600, description="warm-up seconds left out of the results (-O)")
    message_size: int | None = Field(None, ge=1, le=1_048_576, description="bytes per write (-l); UDP: datagram")
    window: int | None = Field(None, ge=4096, le=1 << 30, description="socket buffer bytes, sets the TCP window (-w)")
    udp_rate: int = Field(100_000_000, ge=1000, le=MAX_UDP_RATE, description="UDP bit/s per stream (-b)")
    interval: float = Field(1.0, ge=0.1, le=60, description="seconds per reported interval (-i)")
    latency: Literal["none", "ping"] = "none"
    port: int = Field(5201, ge=1024, le=65000, description="server port of pair 1; pair i uses port + i - 1")

    @field_validator("udp_rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> int:
        return parse_rate(v)

    @field_validator("message_size")
    @classmethod
    def _size(cls, v: int | None, info) -> int | None:
        if v is not None and info.data.get("protocol") == "udp" and v > 65507:
            raise ValueError("a UDP datagram carries at most 65507 bytes")
        return v


@register
class Iperf3(Workload):
    kind = "iperf3"
    Params = Iperf3Params
    tool = "iperf3"

    def expected_duration(self) -> float:
        return self.params.duration + self.params.omit + 1

    def _port(self, pair: Pair) -> int:
        return self.params.port + pair.index - 1

    def _server(self, pair: Pair) -> list[str]:
        # -J so that --get-server-output hands back the receiver's intervals as JSON; -1 so it exits by itself.
        return ["iperf3", "-s", "-1", "-J", "-p", str(self._port(pair))]

    def _client(self, pair: Pair) -> list[str]:
        p, addr = self.params, pair.server.addr
        argv = ["iperf3", "-c", addr, "-p", str(self._port(pair)), "-J", "--get-server-output",
                "-t", str(p.duration), "-i", f"{p.interval:g}", "-P", str(p.streams)]
        argv += ["-6"] if ":" in addr else []
        argv += ["-O", str(p.omit)] if p.omit else []
        argv += ["-u", "-b", str(p.udp_rate)] if p.protocol == "udp" else []
        argv += ["-l", str(p.message_size)] if p.message_size else []
        argv += ["-w", str(p.window)] if p.window else []
        argv += {"uni": [], "reverse": ["-R"], "bidir": ["--bidir"]}[p.direction]
        return argv

    def _ping(self, pair: Pair) -> list[str]:
        seconds = self.params.duration + self.params.omit
        return ping_argv(pair.server.addr, math.ceil(seconds / PING_INTERVAL_S), PING_INTERVAL_S, 56, seconds + 1)

    def commands(self, pairs: Sequence[Pair]) -> list[Command]:
        cmds = [Command(p.server.node.name, self._server(p), background=True) for p in pairs]
        cmds += [Command(p.client.node.name, self._client(p)) for p in pairs]
        if self.params.latency == "ping":
            cmds += [Command(p.client.node.name, self._ping(p), background=True) for p in pairs]
        return cmds

    def _await_server(self, pair: Pair, proc) -> None:
        try:
            wait_listening(pair.server.node, self._port(pair))
        except WorkloadError as exc:
            if proc.poll() is None:
                raise
            said = " ".join(stop(proc)).strip()[-300:]
            raise WorkloadError(f"iperf3 server pair {pair.index} exited: {said}") from exc

    def run(self, pairs: Sequence[Pair]) -> list[Sample]:
        p = self.params
        servers, clients, pings = [], [], []  # appended one by one, so a failed spawn still stops the others
        try:
            for pair in pairs:
                servers.append(pair.server.node.spawn(self._server(pair), label=f"iperf3 server pair {pair.index}"))
            for pair, server in zip(pairs, servers):
                self._await_server(pair, server)
            for pair in pairs:
                clients.append(pair.client.node.spawn(self._client(pair), label=f"iperf3 client pair {pair.index}"))
                if p.latency == "ping":
                    pings.append(pair.client.node.spawn(self._ping(pair), label=f"ping under load pair {pair.index}"))
            end = time.monotonic() + p.duration + p.omit + 10
            samples = [s for pair, proc in zip(pairs, clients) for s in _client_samples(pair, proc, end)]
            for pair, proc in zip(pairs, pings):
                out = collect_ping(proc, _left(end), f"ping under load pair {pair.index}")
                samples += parse_ping(out, "rtt_loaded_s", pair=pair.index)  # + loss, jitter
        finally:
            for proc in [*clients, *pings, *servers]:
                stop(proc)
        return samples + aggregate(samples)


def _left(end: float) -> float:
    return max(end - time.monotonic(), 1.0)


def _client_samples(pair: Pair, proc, end: float) -> list[Sample]:
    what = f"iperf3 pair {pair.index}"
    out, _ = finish(proc, _left(end), what)
    try:
        return parse_iperf3(out, pair=pair.index)
    except WorkloadError as exc:
        raise WorkloadError(f"{what}: {exc}") from None
