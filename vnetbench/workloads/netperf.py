"""Throughput and request/response with netperf (2.7.0) omni tests, read through keyval output selectors.

Checked on real runs (tests/fixtures/netperf):
- `-P 0 -- -k A,B` prints exactly `A=value` lines, so parsing is a lookup table. With -f m, throughputs are in
  10^6 bit/s (THROUGHPUT_UNITS says so and is checked); latencies are in µs and are full round trips
  (MEAN_LATENCY = 1 / TRANSACTION_RATE with one transaction in flight).
- UDP_STREAM: THROUGHPUT is REMOTE_RECV_THROUGHPUT (the receiver), LOCAL_SEND_THROUGHPUT is what was offered;
  they differ when datagrams are dropped. We read the REMOTE_ and LOCAL_ selectors explicitly.
- UDP_STREAM cannot be rate-bounded here: -w/-b need netperf built with --enable-intervals, and this build says
  "Packet rate control is not compiled in." and floods anyway. So UDP_STREAM is refused; use iperf3 udp.
- netperf exits 255 and explains on stdout when no netserver answers.
"""
from __future__ import annotations

import re
import subprocess
import time
from typing import Literal, Sequence

from pydantic import Field, model_validator

from ..core.sample import Sample
from . import register
from .base import (KEPT, LATENCY_SUMMARY, SENDER_THROUGHPUT, THROUGHPUT, TRANSACTIONS, Command, KeptServer, Pair,
                   Params, Tool, Workload, WorkloadError, finish, stop, wait_listening)

_UNIT = re.compile(r"^10\^(\d+)bits/s$")
# selector -> (metric, factor to SI); throughputs get the unit factor of THROUGHPUT_UNITS on top.
STREAM = {"REMOTE_RECV_THROUGHPUT": ("throughput_bps", 1.0), "LOCAL_SEND_THROUGHPUT": ("sender_throughput_bps", 1.0)}
RR = {"TRANSACTION_RATE": ("transactions_per_s", 1.0), "MEAN_LATENCY": ("latency_mean_s", 1e-6),
      "MIN_LATENCY": ("latency_min_s", 1e-6), "P50_LATENCY": ("latency_p50_s", 1e-6),
      "P90_LATENCY": ("latency_p90_s", 1e-6), "P99_LATENCY": ("latency_p99_s", 1e-6),
      "MAX_LATENCY": ("latency_max_s", 1e-6)}
DEFAULT_SIZE = {"STREAM": 16384, "RR": 64}  # RR matches sockperf's default message size


def selectors(test: str) -> list[str]:
    return [*STREAM, "THROUGHPUT_UNITS"] if test.endswith("STREAM") else [*RR, "ELAPSED_TIME"]


def parse_netperf(text: str, test: str, **meta) -> list[Sample]:
    """Samples from `-k` keyval output of one netperf run of `test`."""
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    table = STREAM if test.endswith("STREAM") else RR
    missing = [k for k in table if k not in values]
    if missing:
        raise WorkloadError(f"netperf printed no {', '.join(missing)}: {text.strip()[-300:]}")
    scale = 1.0
    if table is STREAM:
        unit = _UNIT.match(values.get("THROUGHPUT_UNITS", ""))
        if not unit:
            raise WorkloadError(f"netperf throughput unit {values.get('THROUGHPUT_UNITS')!r} is not 10^N bits/s")
        scale = 10.0 ** int(unit[1])
    if table is RR:  # the percentiles are over the test's transactions: 30 of them carry no p99 (dataset.uncarried)
        meta = meta | _transactions(values, meta.get("window"))
    return [Sample.of(metric, float(values[key]) * factor * scale, **meta) for key, (metric, factor) in table.items()]


def _transactions(values: dict[str, str], window: list[float] | None) -> dict[str, int]:
    """{'observations': the transactions of an RR test}: its rate times its elapsed time (else the -l window)."""
    try:
        seconds = float(values["ELAPSED_TIME"]) if "ELAPSED_TIME" in values else window[1] - window[0]
        return {"observations": round(float(values["TRANSACTION_RATE"]) * seconds)}
    except (TypeError, ValueError, IndexError):
        return {}


class NetperfParams(Params):
    type: Literal["netperf"] = "netperf"
    test: Literal["TCP_STREAM", "UDP_STREAM", "TCP_RR", "UDP_RR"] = "TCP_STREAM"
    duration: int = Field(10, ge=1, le=3600, description="seconds (-l)")
    message_size: int | None = Field(None, ge=1, le=65507,
                                     description="bytes per send (STREAM, default 16384) or per request and "
                                                 "response (RR, default 64)")
    port: int = Field(12865, ge=1024, le=65000, description="netserver port of pair 1; pair i uses port + i - 1")

    @model_validator(mode="after")
    def _bounded(self) -> "NetperfParams":
        if self.test == "UDP_STREAM":
            raise ValueError("netperf UDP_STREAM cannot be rate-limited (no --enable-intervals), so it would flood; "
                             "use iperf3 with protocol: udp and udp_rate")
        return self


@register
class Netperf(Workload):
    kind = "netperf"
    metrics = frozenset({"throughput_bps", "sender_throughput_bps", "transactions_per_s", "latency_mean_s", "latency_min_s", "latency_max_s", "latency_p50_s", "latency_p90_s", "latency_p99_s"})
    Params = NetperfParams
    tool = "netperf"
    tools = {"netperf": Tool("netperf (non-free)", ["netperf", "-V"], r"[Vv]ersion ([\d.]+)"),
             "netserver": Tool("netperf (non-free)", ["netserver", "-V"], r"[Vv]ersion ([\d.]+)")}
    main_metric = "throughput_bps"
    catalogue = (
        THROUGHPUT,
        SENDER_THROUGHPUT,
        TRANSACTIONS,
        *LATENCY_SUMMARY,
    )

    @classmethod
    def main_metric_for(cls, params: Params) -> str:
        """A stream test is judged by its throughput, a request/response test by its transaction rate."""
        return "throughput_bps" if params.test.endswith("STREAM") else "transactions_per_s"

    @classmethod
    def describe(cls, p: dict) -> str:
        return f"{cls.kind} {p.get('test') or 'TCP_STREAM'}" + (f" {p['message_size']} B" if p.get("message_size") else "")

    def expected_duration(self) -> float:
        return self.params.duration + 1

    def largest_datagram(self) -> int | None:
        return (self.params.message_size or 64) + 8 if self.params.test == "UDP_RR" else None

    def listen_ports(self, index: int) -> list[int]:
        return [self.params.port + index - 1]

    def _port(self, pair: Pair) -> int:
        return self.listen_ports(pair.index)[0]

    def _server(self, pair: Pair) -> list[str]:
        return ["netserver", "-D", "-p", str(self._port(pair))]

    def _client(self, pair: Pair) -> list[str]:
        p, addr = self.params, pair.server.addr
        rr = p.test.endswith("_RR")
        size = p.message_size or DEFAULT_SIZE["RR" if rr else "STREAM"]
        return ["netperf", *(["-6"] if ":" in addr else []), "-H", addr, "-p", str(self._port(pair)),
                "-t", p.test, "-l", str(p.duration), "-f", "m", "-P", "0", *(["-j"] if rr else []),
                "--", "-k", ",".join(selectors(p.test)), *(["-r", f"{size},{size}"] if rr else ["-m", str(size)])]

    def commands(self, pairs: Sequence[Pair]) -> list[Command]:
        return ([Command(p.server.node.name, self._server(p), background=True) for p in pairs]
                + [Command(p.client.node.name, self._client(p)) for p in pairs])

    def _start_server(self, pair: Pair) -> tuple[subprocess.Popen, KeptServer | None]:
        """The pair's netserver: the one a campaign kept up since the last trial (it serves test after test, each in
        a child, on the same listening socket), or a new one (kept from now on when the campaign keeps servers)."""
        argv, port, node = self._server(pair), self._port(pair), pair.server.node
        if kept := KEPT.take(node, port, argv, self):
            return kept.proc, kept
        label = f"netserver pair {pair.index}"
        if not KEPT.enabled:
            return node.spawn(argv, label=label), None
        proc = node.spawn(argv, label=label, stdout=subprocess.DEVNULL)  # its banner is not read
        return proc, KEPT.keep(node, port, argv, proc, self) if KEPT.can_keep(node, proc) else None

    def run(self, pairs: Sequence[Pair]) -> list[Sample]:
        servers, clients = [], []  # appended one by one, so a failed spawn still stops the others
        kept: dict[int, KeptServer] = {}
        ok = False
        try:
            for pair in pairs:
                proc, keeping = self._start_server(pair)
                servers.append(proc)
                if keeping:
                    kept[id(proc)] = keeping
            for pair, server in zip(pairs, servers):
                wait_listening(pair.server.node, self._port(pair), proc=server)  # netserver -D stays in front
            began = []
            for pair in pairs:
                began.append(time.time())
                clients.append(pair.client.node.spawn(self._client(pair), label=f"netperf pair {pair.index}"))
            self.signal_running(clients)
            end = time.monotonic() + self.params.duration + 10
            outs = [finish(c, max(end - time.monotonic(), 1), f"netperf pair {pair.index}")[0]
                    for pair, c in zip(pairs, clients)]
            ok = True
        finally:
            for proc in [*clients, *(s for s in servers if id(s) not in kept)]:
                stop(proc)
            if not ok:  # a failed test may have left a server in a bad state: the next trial starts new ones
                KEPT.drop(list(kept.values()))
        # netperf prints no time stamps: its window is taken as -l seconds from the client's start.
        return [s for pair, out, b in zip(pairs, outs, began)
                for s in parse_netperf(out, self.params.test, pair=pair.index, window=[b, b + self.params.duration],
                                       window_source="client start + duration")]
