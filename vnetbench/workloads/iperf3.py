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
- end.cpu_utilization_percent: host_total is the client process's CPU time over the test's wall time, remote_total
  the server's (100 = one core; iperf3 3.12 is single-threaded). The client sends unless -R: sender_cpu_ratio and
  receiver_cpu_ratio follow the direction. With --bidir both processes send and receive: no CPU samples.
- One iperf3 process takes at most 128 streams (-P). `processes` runs several client/server pairs on consecutive
  ports, splitting the streams. Their goodput is NOT the sum of their totals (each process times its own window):
  each process's interval bytes are placed on one timebase and summed over the window all of them were measuring
  (the overlap), on a common grid of `interval` s. Counts (retransmits, datagrams, CPU) are added up.
- Timebase: start.timestamp.timesecs is when the client connected, in whole seconds; interval start/end are seconds
  from the test's start (after -O, from the end of the omitted seconds). The test's start on the machine's clock is
  the later of timesecs and the moment we spawned the client (a few ms before it connects): every t is absolute.
  Several processes of a pair: each server prints its intervals as text every 0.1 s (-f k --forceflush), read and
  stamped here as the lines arrive (over SSH too: the servers of a pair share one host and its delay). A line cannot
  arrive before its interval ends, so the least delayed one places the process: its arrival minus its interval's
  end. (Placing by spawn or exit times was off by up to a second, the time 128 streams take to connect or a late
  result exchange, and a process's time alone on the link was then summed with the others': 11.1 Gbit/s on a
  10 Gbit/s underlay.) Those 0.1-s lines hold the server's side of the bytes (rate x printed length, or the
  transfer column where the length's rounding shows; they must add up to the total the server reported, within 2 %
  and one interval). Processes whose windows never overlap (through
  OVS's userspace datapath 128 streams took seconds to connect) did not run together: that trial fails.
- Stopping a split pair: each client may run SPLIT_SLACK_S longer than asked, so that all of them measure together
  for the duration asked even when one connects later; a TCP pair in one direction is stopped (SIGTERM to its
  clients) as soon as its servers' lines show that they have, so it pays the skew that happened, not the whole slack.
  What iperf3 3.12 then does (checked here): the client prints its JSON with "error": "interrupt - the client has
  terminated" and exits 1, the sender's figures valid (bytes, intervals up to the stop, retransmits, its own CPU) and
  the receiver's sums zero; the server prints its last interval line again, then its summary with the bytes it
  received, and exits 0; it never prints the interval it was in, nor its CPU (a receiving server's text has none).
  So the receiver's bytes are the server's summary (the lines must add up to it, short of up to two intervals: the
  first after -O and the one it was in), the repeated line is dropped, and receiver_cpu_ratio is left out (the
  samples say `stopped`). UDP, -R and --bidir run the whole slack: their receiver's loss and jitter, or their
  sending server's figures, come only with the results exchange a stopped client skips.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Collection, Literal, Sequence

from pydantic import Field, field_validator, model_validator

from ..core.sample import Metric, Sample
from ..core.units import parse_rate
from . import register
from .base import (KEPT, SENDER_THROUGHPUT, THROUGHPUT, Command, KeptServer, Offer, Pair, Params, Stamped, Tool,
                   Workload, WorkloadError, bounded, finish, said, stop, wait_listening)
from .ping import PING_TOOLS, collect_ping, parse_ping, parse_rtts, ping_argv

PING_INTERVAL_S = 0.2
IDLE_PINGS = 5           # echoes before the load starts: the idle baseline beside rtt_loaded_s
IDLE_PING_INTERVAL_S = 0.05
MIN_INTERVAL_S = 0.05  # iperf3's shortest -i is 0.1 s
MAX_UDP_RATE = 100_000_000_000  # UDP is never sent unbounded (-b 0): cap the offered rate at 100 Gbit/s
MAX_STREAMS_PER_PROCESS = 128  # iperf3 3.12 refuses -P above 128
FINE_INTERVAL_S = 0.1  # the receiver's interval when a pair's streams are split over several processes
# Each process of a split pair may run this much longer than asked, so that all of them measure together for the
# duration asked even when the last one connects its streams later than the first (1.0 s seen in a guest, where
# 1-s tests then never overlapped); the window is cut to the duration asked, and a TCP pair is stopped as soon as
# it has measured that long (module doc).
SPLIT_SLACK_S = 2.0
INTERRUPTED = "interrupt - the client has terminated"  # a client's JSON "error" after SIGTERM or SIGINT (iperf3 3.12)
STOP_POLL_S = 0.02  # how often a split pair's server lines are looked at for whether it has measured long enough


def _direction(doc: dict, bidir_reverse: bool) -> str:
    reverse = bool(doc["start"]["test_start"].get("reverse"))
    return "reverse" if reverse or bidir_reverse else "forward"


def _t0(doc: dict, began: float | None) -> float:
    """When the test started on the machine's clock (see the module doc)."""
    secs = float(doc["start"].get("timestamp", {}).get("timesecs", 0))
    return max(began, secs) if began is not None else secs


def _measuring(doc: dict, began: float | None) -> float:
    """When the measured part began: the test's start plus the omitted seconds."""
    return _t0(doc, began) + doc["start"]["test_start"].get("omit", 0)


def _end_samples(doc: dict, udp: bool, meta: dict, windows: dict | None = None) -> list[Sample]:
    """windows: direction -> [start, end] of the receiver's and sender's figures; rates over the common window of
    several processes come in `doc["end"]` already."""
    end, out = doc["end"], []
    for suffix in ("", "_bidir_reverse"):
        recv, sent = end.get("sum_received" + suffix), end.get("sum_sent" + suffix)
        if recv is None:
            continue
        direction = _direction(doc, bool(suffix))
        m = meta | {"direction": direction} | ({"window": windows[direction]} if windows and direction in windows
                                               else {})
        # each rate over its own side's seconds (a busy receiver's can be shorter): the bytes say what is possible
        out += [Sample.of("throughput_bps", recv["bits_per_second"], **m, **_counted(recv)),
                Sample.of("sender_throughput_bps", sent["bits_per_second"], **m, **_counted(sent))]
        if udp:
            out += [Sample.of("udp_loss_ratio", _udp_loss(recv, sent), **m),
                    Sample.of("jitter_s", recv["jitter_ms"] / 1e3, **m)]
        else:
            out.append(Sample.of("tcp_retransmits", sent.get("retransmits", 0), **m))
    return out


def _counted(side: dict) -> dict:
    """The bytes behind one side's rate, and how exact they are where that is known (bytes_within: +- bytes)."""
    return {"bytes": side.get("bytes")} | ({"bytes_within": side["bytes_within"]} if side.get("bytes_within") else {})


def _udp_loss(recv: dict, sent: dict) -> float:
    """1 - arrived/sent. The receiver's `packets` is the highest sequence number it saw, so its lost_packets misses
    datagrams lost after the last one that arrived; the sender's count of datagrams sent includes them."""
    arrived = recv["packets"] - recv["lost_packets"]
    total = sent["packets"] or recv["packets"]
    return min(max(1 - arrived / total, 0.0), 1.0) if total else 0.0


Interval = tuple[float, float, float]  # absolute start, absolute end, bytes


def _intervals(doc: dict, start: float, sender: bool = False) -> dict[str, list[Interval]]:
    """direction -> the measured (not omitted) intervals counted by the receiver (or the sender), on the
    absolute timebase that starts at `start`."""
    out: dict[str, list[Interval]] = {}
    for side, client in ((doc, True), (doc.get("server_output_json") or {}, False)):
        for interval in side.get("intervals", []):
            for s in (interval.get("sum"), interval.get("sum_bidir_reverse")):
                if s and bool(s["sender"]) == sender and not s["omitted"]:
                    # The client receives in the reverse direction and sends in the forward one.
                    direction = "forward" if client == sender else "reverse"
                    out.setdefault(direction, []).append((start + s["start"], start + s["end"], s["bytes"]))
    return out


def _windows(intervals: dict[str, list[Interval]]) -> dict[str, list[float]]:
    return {d: [iv[0][0], iv[-1][1]] for d, iv in intervals.items() if iv}


def _interval_samples(doc: dict, meta: dict, began: float | None = None) -> list[Sample]:
    """Receiver-side throughput per interval, t = the interval's end (absolute), with its length in seconds."""
    out = []
    for direction, ivs in _intervals(doc, _measuring(doc, began)).items():
        window = [ivs[0][0], ivs[-1][1]]
        for a, b, nbytes in ivs:
            # The receiver often ends with a stub interval of a few µs: as a rate it is noise.
            if b - a >= MIN_INTERVAL_S:
                out.append(Sample.of("throughput_interval_bps", nbytes * 8 / (b - a), t=b, direction=direction,
                                     seconds=b - a, window=window, **meta))
    return out


def _cpu_samples(doc: dict, meta: dict) -> list[Sample]:
    """sender_cpu_ratio and receiver_cpu_ratio (1.0 = one core); none for --bidir, where both sides do both, and
    none for a side whose figure is missing (a stopped split pair's servers never reported theirs)."""
    cpu, end = doc["end"].get("cpu_utilization_percent"), doc["end"]
    if not cpu or "sum_received_bidir_reverse" in end:
        return []
    reverse = bool(doc["start"]["test_start"].get("reverse"))
    sender, receiver = ("remote_total", "host_total") if reverse else ("host_total", "remote_total")
    m = meta | {"direction": "reverse" if reverse else "forward"}
    return [Sample.of(metric, cpu[side] / 100, **m) for metric, side in
            (("sender_cpu_ratio", sender), ("receiver_cpu_ratio", receiver)) if side in cpu]


def _load(text: str, stopped: bool = False) -> dict:
    """A client's JSON; WorkloadError if it failed. stopped: we stopped it (SIGTERM), so its interrupt is no failure."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        raise WorkloadError(f"iperf3 printed no JSON: {text.strip()[-300:]}") from None
    if doc.get("error") and not (stopped and doc["error"] == INTERRUPTED):
        raise WorkloadError(f"iperf3: {doc['error']}")
    return doc


def _udp(doc: dict) -> bool:
    return doc["start"]["test_start"]["protocol"] == "UDP"


def parse_iperf3(text: str, began: float | None = None, **meta: Any) -> list[Sample]:
    """Samples of one client's JSON output (began: when the client was spawned, time.time()); raises
    WorkloadError if iperf3 reported an error."""
    doc = _load(text)
    windows = _windows(_intervals(doc, _measuring(doc, began)))
    return (_end_samples(doc, _udp(doc), meta, windows) + _cpu_samples(doc, meta)
            + _interval_samples(doc, meta, began))


# One interval or summary line of a split pair's server (text, -f k): [id or SUM][role]  a-b sec  transfer  rate
# Kbits/sec ... (a summary line ends with sender or receiver).
_SERVER_LINE = re.compile(r"^\[(?P<id>SUM|\s*\d+)\](?:\[(?P<role>TX|RX)-S\])?\s+(?P<a>\d+\.\d+)-\s*(?P<b>\d+\.\d+)"
                          r"\s+sec\s+(?P<xfer>\d+(?:\.\d+)?)\s+(?P<unit>[KMGT]?)Bytes\s+(?P<rate>\d+(?:\.\d+)?)"
                          r"\s+Kbits/sec(?P<rest>.*)$")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}  # iperf3's byte units are binary
_SUMMARY = re.compile(r"\b(sender|receiver)\s*$")
ServerLine = tuple[str, str, float, float, float]  # role ("rx", "tx"), "sum" or "streams", start, end, bytes


def _line_bytes(m: re.Match) -> float:
    """The bytes of one interval or summary line: its rate (kbit/s, 1000 bits, to the unit) times its printed length,
    unless the rounding of that length to 0.01 s shows, when its transfer column (3 digits) is nearer. Both come
    from the same byte count; they agree within the transfer's rounding when the printed length is right. A starved
    server's 12-ms interval printed as 1.03-1.05 counted 60 % too many bytes by its rate (a guest's 512 streams: the
    lines added up to 5-8 % more than the total, and the trial failed)."""
    by_rate = float(m["rate"]) * 1e3 / 8 * (float(m["b"]) - float(m["a"]))
    transfer = float(m["xfer"]) * _UNITS[m["unit"]]
    return by_rate if abs(by_rate - transfer) <= _rounding(m) else transfer


def _rounding(m: re.Match) -> float:
    """Half the last printed digit of a line's transfer column, in bytes."""
    return 0.5 * 10 ** -len(m["xfer"].partition(".")[2]) * _UNITS[m["unit"]]


def server_line(line: str, reverse: bool) -> ServerLine | None:
    """One measured interval of a split pair's server text; None for anything else (headers, summaries, omitted
    intervals)."""
    m = _SERVER_LINE.match(line)
    if not m or "(omitted)" in m["rest"] or _SUMMARY.search(m["rest"]):
        return None
    role = (m["role"] or ("TX" if reverse else "RX")).lower()
    return role, "sum" if m["id"] == "SUM" else "streams", float(m["a"]), float(m["b"]), _line_bytes(m)


def server_intervals(lines: Sequence[tuple[float, str]], reverse: bool) -> tuple[float, dict[str, list[Interval]]]:
    """A split pair's server on our timebase, from its stamped text (-i 0.1 -f k --forceflush): when its measured
    part began (the earliest arrival of an interval line minus that interval's end: a line cannot come before its
    interval ends; the least delayed one is the best) and its measured intervals per role ("rx", "tx"), relative to
    that start. The summary lines (sender, receiver) and omitted intervals are not intervals. A server whose client
    was stopped prints its last intervals again before its summary: a line seen before (same stream, role and
    interval) is that repeat, not more bytes."""
    rows: dict[str, dict[str, list]] = {}
    seen: set[tuple] = set()
    for t, line in lines:
        iv = server_line(line, reverse)
        key = (line.split("]", 1)[0], iv and iv[0], iv and iv[2], iv and iv[3])
        if iv is None or key in seen:
            continue
        seen.add(key)
        role, kind, a, b, n = iv
        rows.setdefault(role, {}).setdefault(kind, []).append((t, a, b, n))
    # With one stream a process prints no [SUM] line: its stream's lines are the sums.
    picked = {role: by.get("sum") or by["streams"] for role, by in rows.items()}
    if not picked:
        raise WorkloadError("an iperf3 server of a split pair printed no interval lines")
    start = min(t - b for ivs in picked.values() for t, _, b, _ in ivs)
    return start, {role: [(a, b, n) for _, a, b, n in ivs] for role, ivs in picked.items()}


def server_total(lines: Sequence[tuple[float, str]], side: str = "receiver") -> float | None:
    """The bytes a split pair's server counted over its whole test (its summary line: the [SUM] line, or its one
    stream's), read like its intervals; None if it printed none."""
    m = _summary_line(lines, side)
    return _line_bytes(m) if m else None


def server_total_within(lines: Sequence[tuple[float, str]], side: str = "receiver") -> float:
    """How far server_total can be from the count behind it: read by its rate, it agrees with the transfer column to
    within that column's rounding, which is itself that far from the count (3 digits: 1.42 GBytes is +-5.4 MB)."""
    m = _summary_line(lines, side)
    return 2 * _rounding(m) if m else 0.0


def _summary_line(lines: Sequence[tuple[float, str]], side: str) -> re.Match | None:
    totals: dict[str, list[re.Match]] = {}
    for _, line in lines:
        m = _SERVER_LINE.match(line)
        if m and (end := _SUMMARY.search(m["rest"])) and end[1] == side:
            totals.setdefault("sum" if m["id"] == "SUM" else "streams", []).append(m)
    picked = totals.get("sum") or (totals["streams"] if len(totals.get("streams", [])) == 1 else [])
    return picked[-1] if picked else None


def _checked(ivs: Sequence[Interval], exact: float | None, what: str, stopped: bool = False) -> None:
    """The server's printed intervals must add up to the total it reported (two counters of the same bytes): a
    misread line would show here. The printed rates are rounded, and after -O iperf3 prints the first measured
    interval with no length (its bytes count in the total only): the total may hold one interval more than the
    lines, as large as the largest printed (a process a busy machine starved prints mostly empty intervals and a
    burst: S4 smoke at load 6 missed 2.1 % against a typical interval of a few kB); the lines never more. A server
    whose client was stopped goes on counting what was queued before the stop, after its last line, in no line: its
    lines may fall short by any amount (wireguard-go beside two busy loops: 0.95 of 1.16 MB), all of it after the
    window, which ends with the lines."""
    got = sum(n for *_, n in ivs)
    if stopped and got < (exact or 0):
        return
    missing = max((n for *_, n in ivs), default=0) if got < (exact or 0) else 0
    if exact and abs(got - exact) > 0.02 * exact + missing:
        raise WorkloadError(f"{what}: its 0.1-s intervals add up to {got:.0f} bytes, its total says {exact:.0f}")


def _merge_end(ends: list[dict]) -> dict:
    """One `end` whose sums add up those of several processes (rates, bytes, packets, retransmits, CPU); UDP
    jitter is the mean weighted by each receiver's packets."""
    out: dict = {}
    for key in ("sum_received", "sum_sent", "sum_received_bidir_reverse", "sum_sent_bidir_reverse"):
        parts = [e.get(key) for e in ends]
        if any(x is None for x in parts):
            continue
        total = {f: sum(x.get(f, 0) for x in parts) for f in ("bits_per_second", "bytes", "retransmits", "packets",
                                                                "lost_packets", "bytes_within")}
        if all("jitter_ms" in x for x in parts):
            weights = [x.get("packets", 0) or 1 for x in parts]
            total["jitter_ms"] = sum(x["jitter_ms"] * w for x, w in zip(parts, weights)) / sum(weights)
        out[key] = total
    cpus = [e.get("cpu_utilization_percent") for e in ends]
    if all(cpus):
        out["cpu_utilization_percent"] = {k: sum(c[k] for c in cpus) for k in ("host_total", "remote_total")
                                          if all(k in c for c in cpus)}
    return out


def bytes_in(ivs: Sequence[Interval], lo: float, hi: float) -> float:
    """Bytes of a series of intervals that fall in [lo, hi], each interval's bytes spread evenly over it."""
    return sum(n * (min(b, hi) - max(a, lo)) / (b - a) for a, b, n in ivs if b > a and min(b, hi) > max(a, lo))


def common_window(per_process: Sequence[Sequence[Interval]], length: float | None = None) -> tuple[float, float]:
    """The window every process was measuring: from the latest start to the earliest end, at most `length` s."""
    lo, hi = max(ivs[0][0] for ivs in per_process), min(ivs[-1][1] for ivs in per_process)
    hi = min(hi, lo + length) if length else hi
    if hi <= lo:  # e.g. through OVS's userspace datapath one process took seconds longer to connect its streams
        t0 = min(ivs[0][0] for ivs in per_process)
        spans = ", ".join(f"{ivs[0][0] - t0:.1f}-{ivs[-1][1] - t0:.1f}" for ivs in per_process)
        raise WorkloadError(f"the {len(per_process)} iperf3 processes of a pair never measured at the same time "
                            f"(their windows, in s from the first one's start: {spans}): their streams were not "
                            f"concurrent, so their sum is no measurement")
    return lo, hi


def _grid_series(per_process: Sequence[Sequence[Interval]], step: float, direction: str,
                 meta: dict, window: tuple[float, float]) -> list[Sample]:
    """Throughput per `step` s on one grid from the common window's start, summed over the processes."""
    lo, hi = window
    out, k = [], 0
    while lo + k * step < hi - MIN_INTERVAL_S:
        a, b = lo + k * step, min(lo + (k + 1) * step, hi)
        if b - a >= step / 2 or k == 0:
            bits = sum(bytes_in(ivs, a, b) for ivs in per_process) * 8
            out.append(Sample.of("throughput_interval_bps", bits / (b - a), t=b, direction=direction, seconds=b - a,
                                 window=[lo, hi], **meta))
        k += 1
    return out


def _step(doc: dict) -> float:
    """The series' step: the typical interval (the median: a busy machine stretches some of them)."""
    lengths = sorted(iv["sum"]["seconds"] for iv in doc.get("intervals", []) if not iv["sum"]["omitted"])
    return max(round(lengths[len(lengths) // 2], 1), 0.1) if lengths else 1.0


def parse_iperf3_processes(texts: Sequence[str], servers: Sequence[Sequence[tuple[float, str]]] | None = None,
                           step: float | None = None, duration: float | None = None, stopped: Collection[int] = (),
                           **meta: Any) -> list[Sample]:
    """Samples of one pair whose streams were split over several client processes (one JSON output each).
    servers: each server's stamped text (see server_intervals), which places the process on our timebase and holds
    the server's side of the intervals; without them (recorded fixtures) the servers' JSON is in each client's
    output and every process is taken to have started at 0.
    step: the series' step, the -i asked for (without it, the client's typical interval); duration: the seconds
    asked for (each process ran SPLIT_SLACK_S longer, unless stopped earlier): the window is at most that long.
    stopped: the processes (0-based) whose clients were stopped once the pair had measured long enough (their
    interrupt is no failure; see _stopped_end).
    Goodput (receiver and sender) is the processes' bytes summed over the window all of them were measuring; counts
    are added up; metadata says how many processes, their server ports and streams (as each iperf3 reported them)."""
    docs = [_load(t, k in stopped) for k, t in enumerate(texts)]
    if len(docs) == 1:
        return parse_iperf3(texts[0], **meta)
    for doc, lines in zip(docs, servers or [None] * len(docs)):
        if doc.get("error"):  # (one we stopped: _load let no other error through)
            _stopped_end(doc, lines)
    m = meta | {"processes": len(docs),
                "ports": [d["start"]["connected"][0]["remote_port"] for d in docs],
                "process_streams": [d["start"]["test_start"]["num_streams"] for d in docs]}
    if any(d.get("error") for d in docs):
        m["stopped"] = True  # once measured long enough: the servers' CPU is unknown
    placed = [_placed_server(d, lines, meta.get("pair"), k) for k, (d, lines)
              in enumerate(zip(docs, servers or [None] * len(docs)))]
    merged = {"start": docs[0]["start"], "end": _merge_end([d["end"] for d in docs])}
    windows, series = {}, []
    for sender in (False, True):
        per = [_process_intervals(d, start, side, sender) for d, (start, side) in zip(docs, placed)]
        for direction in per[0]:
            ivs = [p.get(direction) for p in per]
            if not all(ivs):
                raise WorkloadError(f"an iperf3 process of pair {meta.get('pair')} reported no {direction} intervals")
            lo, hi = common_window(ivs, duration)
            key = ("sum_received" if not sender else "sum_sent") + ("" if _direction(docs[0], False) == direction
                                                                    else "_bidir_reverse")
            if key in merged["end"]:
                merged["end"][key]["bits_per_second"] = sum(bytes_in(iv, lo, hi) for iv in ivs) * 8 / (hi - lo)
            if not sender:
                windows[direction] = [lo, hi]
                series += _grid_series(ivs, step or _step(docs[0]), direction, m, (lo, hi))
    return _end_samples(merged, _udp(docs[0]), m, windows) + _cpu_samples(merged, m) + series


def _stopped_end(doc: dict, lines: Sequence[tuple[float, str]] | None) -> None:
    """A stopped client never exchanged results with its server: its JSON has the sender's figures (bytes, intervals,
    retransmits, its own CPU) and zeros for the receiver's. The receiver's bytes are then the total its server printed
    (our TCP split pairs only: UDP's loss and jitter, and a server's sending, are known only from that exchange);
    the server's CPU is not known and is left out."""
    end = doc["end"]
    total = server_total(lines) if lines else None
    if total is None or _udp(doc) or "sum_sent_bidir_reverse" in end or doc["start"]["test_start"].get("reverse"):
        raise WorkloadError(f"a stopped iperf3 process has no receiver's total: {doc['error']}")
    end["sum_received"] = end.get("sum_received", {}) | {"bytes": total, "bytes_within": server_total_within(lines)}
    test = doc["start"]["test_start"]  # the signal's longjmp may leave a block per stream sent but not counted
    end["sum_sent"] = end.get("sum_sent", {}) | {"bytes_within": test.get("blksize", 0) * test.get("num_streams", 1)}
    for key in ("remote_total", "remote_user", "remote_system"):
        end.get("cpu_utilization_percent", {}).pop(key, None)


def _placed_server(doc: dict, lines: Sequence[tuple[float, str]] | None, pair: Any,
                   k: int) -> tuple[float, dict[str, list[Interval]]]:
    """(when process k's measured part began on our timebase, its server's intervals per direction and side)."""
    if lines is None:
        return doc["start"]["test_start"].get("omit", 0), {}
    start, roles = server_intervals(lines, bool(doc["start"]["test_start"].get("reverse")))
    what = f"iperf3 server of pair {pair} process {k + 1}"
    side = {}
    # The server receives the forward direction and sends the reverse one (-R, or --bidir's second direction).
    for role, direction, sender, total in (("rx", "forward", False, "sum_received"),
                                           ("tx", "reverse", True, "sum_sent_bidir_reverse"
                                            if "sum_sent_bidir_reverse" in doc["end"] else "sum_sent")):
        if role in roles:
            side[(direction, sender)] = ivs = [(start + a, start + b, n) for a, b, n in roles[role]]
            _checked(ivs, doc["end"].get(total, {}).get("bytes"), what, bool(doc.get("error")))
    return start, side


def _process_intervals(doc: dict, start: float, side: dict, sender: bool) -> dict[str, list[Interval]]:
    """direction -> one process's intervals on our timebase: the client's own, and the server's (from its stamped
    text, or from its JSON in the client's output)."""
    out = _intervals(doc, start, sender)
    for (direction, is_sender), ivs in side.items():
        if is_sender == sender:
            out[direction] = ivs
    return out


def aggregate(samples: Sequence[Sample]) -> list[Sample]:
    """aggregate_throughput_bps per direction: the sum of the pairs' receiver throughput (window: from the first
    pair's start to the last one's end)."""
    totals: dict[str, float] = {}
    windows: dict[str, list[float]] = {}
    for s in samples:
        if s.metric == "throughput_bps":
            d = s.metadata["direction"]
            totals[d] = totals.get(d, 0.0) + s.value
            if w := s.metadata.get("window"):
                windows[d] = [min(w[0], windows.get(d, w)[0]), max(w[1], windows.get(d, w)[1])]
    return [Sample.of("aggregate_throughput_bps", v, pair="all", direction=d,
                      **({"window": windows[d]} if d in windows else {})) for d, v in totals.items()]


def pair_window(samples: Sequence[Sample], pair: int) -> list[float] | None:
    """From the earliest start to the latest end of a pair's goodput windows (all directions)."""
    ws = [s.metadata["window"] for s in samples if s.metric == "throughput_bps" and s.metadata.get("pair") == pair
          and s.metadata.get("window")]
    return [min(w[0] for w in ws), max(w[1] for w in ws)] if ws else None


class Iperf3Params(Params):
    type: Literal["iperf3"] = "iperf3"
    protocol: Literal["tcp", "udp"] = "tcp"
    streams: int = Field(1, ge=1, le=4096, description="parallel streams per pair (-P), split over `processes`")
    processes: int | Literal["auto"] = Field(
        1, description="iperf3 client/server process pairs per pair, on consecutive ports, sharing the streams (each "
                       "takes at most 128); auto: as few as that allows")
    direction: Literal["uni", "reverse", "bidir"] = "uni"
    # iperf3 3.12 reads -t and -O with atoi: 0.5 would become 0, which means "run forever". Whole seconds only.
    duration: int = Field(10, ge=1, le=3600, description="seconds measured (-t)")
    omit: int = Field(0, ge=0, le=600, description="warm-up seconds left out of the results (-O)")
    message_size: int | None = Field(None, ge=1, le=1_048_576, description="bytes per write (-l); UDP: datagram")
    window: int | None = Field(None, ge=4096, le=1 << 30, description="socket buffer bytes, sets the TCP window (-w)")
    udp_rate: int = Field(100_000_000, ge=1000, le=MAX_UDP_RATE, description="UDP bit/s per stream (-b)")
    interval: float = Field(1.0, ge=0.1, le=60, description="seconds per reported interval (-i)")
    latency: Literal["none", "ping"] = "none"
    ping_interval: float = Field(PING_INTERVAL_S, ge=0.01, le=10,
                                 description="seconds between the echoes under load (latency: ping); below 0.2 s "
                                             "ping needs root")
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

    @property
    def n_processes(self) -> int:
        return math.ceil(self.streams / MAX_STREAMS_PER_PROCESS) if self.processes == "auto" else self.processes

    @model_validator(mode="after")
    def _split(self) -> "Iperf3Params":
        n = self.n_processes
        if not 1 <= n <= 64:
            raise ValueError("processes is a whole number from 1 to 64, or auto")
        if n > self.streams:
            raise ValueError(f"{n} processes need at least {n} streams (each process runs one or more)")
        if math.ceil(self.streams / n) > MAX_STREAMS_PER_PROCESS:
            raise ValueError(f"iperf3 takes at most {MAX_STREAMS_PER_PROCESS} streams per process: {self.streams} "
                             f"streams need processes >= {math.ceil(self.streams / MAX_STREAMS_PER_PROCESS)} "
                             f"(or processes: auto)")
        return self

    def process_streams(self) -> list[int]:
        """Streams of each process: as even as possible, the first ones take the remainder."""
        n = self.n_processes
        return [self.streams // n + (k < self.streams % n) for k in range(n)]


@register
class Iperf3(Workload):
    kind = "iperf3"
    metrics = frozenset({"throughput_bps", "sender_throughput_bps", "tcp_retransmits", "udp_loss_ratio", "jitter_s", "sender_cpu_ratio", "receiver_cpu_ratio", "rtt_idle_s", "rtt_loaded_s"})
    Params = Iperf3Params
    tool = "iperf3"
    tools = {"iperf3": Tool("iperf3", ["iperf3", "--version"], r"iperf (\S+)"), **PING_TOOLS}
    main_metric = "throughput_bps"
    catalogue = (
        THROUGHPUT,
        SENDER_THROUGHPUT,
        Metric("throughput_interval_bps", "bit/s", "higher", "receiver goodput per reporting interval (series)"),
        Metric("aggregate_throughput_bps", "bit/s", "higher", "sum of throughput_bps over all pairs of a trial", additive=True),
        Metric("tcp_retransmits", "1", "lower", "TCP segments retransmitted by the sender", additive=True),
        Metric("udp_loss_ratio", "ratio", "lower", "UDP datagrams lost, counted at the receiver"),
        Metric("jitter_s", "s", "lower", "UDP inter-arrival jitter at the receiver (RFC 3550)"),
        Metric("rtt_loaded_s", "s", "lower", "ICMP echo round-trip time during the measurement window of a throughput test", per_event=True),
        Metric("rtt_idle_s", "s", "lower", "ICMP echo round-trip time just before a throughput test starts (its baseline)"),
        Metric("sender_cpu_ratio", "ratio", "lower", "CPU time of the traffic generator's sending process(es) over the "
                                                     "test, as iperf3 reports it (1.0 = one core)"),
        Metric("receiver_cpu_ratio", "ratio", "lower", "CPU time of the traffic generator's receiving process(es) over "
                                                       "the test, as iperf3 reports it (1.0 = one core)"),
    )

    @classmethod
    def describe(cls, p: dict) -> str:
        """'iperf3 tcp x10 bidir', 'iperf3 udp 250M': protocol, streams, direction, rate and write size."""
        bits = [cls.kind, str(p.get("protocol") or "tcp")]
        bits += [f"x{p['streams']}"] if (p.get("streams") or 1) > 1 else []
        bits += [str(p["direction"])] if p.get("direction") not in (None, "uni") else []
        bits += [_short_rate(p["udp_rate"])] if p.get("protocol") == "udp" and p.get("udp_rate") else []
        bits += [f"{p['message_size']} B"] if p.get("message_size") else []
        return " ".join(bits)

    def expected_duration(self) -> float:
        return self._seconds() + 1 - (SPLIT_SLACK_S if self._stoppable() else 0)

    def _stoppable(self) -> bool:
        """A split TCP pair in one direction is stopped once its processes have measured together for the duration
        asked (_stop_when_measured). UDP, -R and --bidir run the whole slack: their receiver's loss and jitter, or
        their sending server's figures, reach the client only in the results exchange a stopped client skips."""
        p = self.params
        return p.n_processes > 1 and p.protocol == "tcp" and p.direction == "uni"

    def _seconds(self) -> float:
        """How long each client runs: its omitted seconds, the duration, and a split pair's slack."""
        p = self.params
        return p.omit + p.duration + (SPLIT_SLACK_S if p.n_processes > 1 else 0)

    def offer(self) -> Offer | None:
        """UDP at -b per stream: the pair's rate in each direction, against the sender's own count."""
        p = self.params
        if p.protocol == "udp" and p.udp_rate:
            return Offer("sender_throughput_bps", float(p.udp_rate) * getattr(p, "streams", 1))
        return None

    def largest_datagram(self) -> int | None:
        udp = self.params.protocol == "udp" and self.params.message_size
        return self.params.message_size + 8 if udp else None

    def listen_ports(self, index: int) -> list[int]:
        """Process k of pair i listens on port + (i - 1) * processes + k: one process, port + i - 1."""
        n = self.params.n_processes
        return [self.params.port + (index - 1) * n + k for k in range(n)]

    def _port(self, pair: Pair, k: int = 0) -> int:
        return self.listen_ports(pair.index)[k]

    def _server(self, pair: Pair, k: int = 0) -> list[str]:
        # -J so that --get-server-output hands back the receiver's intervals as JSON; -i: the client's does not
        # reach the server. One server per pair serves test after test (no -1): a campaign keeps it up while the
        # topology stands (base.KeptServers); otherwise it is stopped after its test. The servers of a split pair
        # print text as it happens (every 0.1 s, rates in kbit/s), read and stamped here: that places each process on
        # our timebase (module doc); each serves one test (-1) and its end of output ends the reading.
        port = ["-p", str(self._port(pair, k))]
        if self.params.n_processes > 1:
            return ["iperf3", "-s", "-1", "-i", f"{FINE_INTERVAL_S:g}", "-f", "k", "--forceflush", *port]
        return ["iperf3", "-s", "-J", "-i", f"{self.params.interval:g}", *port]

    def _client(self, pair: Pair, k: int = 0) -> list[str]:
        p, addr = self.params, pair.server.addr
        argv = ["iperf3", "-c", addr, "-p", str(self._port(pair, k)), "-J", "--get-server-output",
                "-t", f"{p.duration + (SPLIT_SLACK_S if p.n_processes > 1 else 0):g}", "-i", f"{p.interval:g}",
                "-P", str(p.process_streams()[k])]
        argv += ["-6"] if ":" in addr else []
        argv += ["-O", str(p.omit)] if p.omit else []
        argv += ["-u", "-b", str(p.udp_rate)] if p.protocol == "udp" else []
        argv += ["-l", str(p.message_size)] if p.message_size else []
        argv += ["-w", str(p.window)] if p.window else []
        argv += {"uni": [], "reverse": ["-R"], "bidir": ["--bidir"]}[p.direction]
        return argv

    def _idle_ping(self, pair: Pair) -> list[str]:
        return ping_argv(pair.server.addr, IDLE_PINGS, IDLE_PING_INTERVAL_S, 56, 3)

    def _ping(self, pair: Pair) -> list[str]:
        every = self.params.ping_interval
        return ping_argv(pair.server.addr, self._pings(), every, 56, math.ceil(self._seconds()) + 1)

    def _pings(self) -> int:
        """Echoes under load: one every ping_interval over the test's whole seconds."""
        return math.ceil(math.ceil(self._seconds()) / self.params.ping_interval)

    def commands(self, pairs: Sequence[Pair]) -> list[Command]:
        """In run()'s order: servers; the idle echoes, done before the load starts; the clients and, with them, the
        echoes under load; the script waits on the last client, so every ping runs during the transfer."""
        procs = range(self.params.n_processes)
        cmds = [Command(p.server.node.name, self._server(p, k), background=True) for p in pairs for k in procs]
        clients = [Command(p.client.node.name, self._client(p, k), background=True) for p in pairs for k in procs]
        if self.params.latency == "ping":
            cmds += [Command(p.client.node.name, self._idle_ping(p), background=i < len(pairs) - 1)
                     for i, p in enumerate(pairs)]
            clients[:0] = [Command(p.client.node.name, self._ping(p), background=True) for p in pairs]
        clients[-1].background = False
        return cmds + clients

    def _await_server(self, pair: Pair, proc, k: int = 0, kept: KeptServer | None = None) -> None:
        try:
            inode = wait_listening(pair.server.node, self._port(pair, k), proc=proc,
                                   other_than=kept.inode if kept and kept.used else None)
            if kept:
                kept.inode, kept.used = inode, False
        except WorkloadError as exc:
            if proc.poll() is None:
                raise
            said = " ".join(x or "" for x in stop(proc)).strip()[-300:]
            raise WorkloadError(f"iperf3 server pair {pair.index}{_nth(k, self.params)} exited: {said}") from exc

    def _start_server(self, pair: Pair, k: int) -> tuple[object, KeptServer | None]:
        """Pair `pair`'s server process k: the one a campaign kept up since the last trial, or a new one (kept from
        now on when the campaign keeps servers)."""
        argv, port, node = self._server(pair, k), self._port(pair, k), pair.server.node
        single = self.params.n_processes == 1
        if single and (kept := KEPT.take(node, port, argv, self)):
            return kept.proc, kept
        label = f"iperf3 server pair {pair.index}{_nth(k, self.params)}"
        if single and KEPT.enabled:
            # A foreground's test JSON comes back with its client's (--get-server-output): the server's output is not
            # read. A background's client may be interrupted with the window (EarlyEnd): its server's own report of
            # that test is then the receiver's figures, read from the server as it prints them.
            reports = self.background and self._ends_early()
            proc = node.spawn(argv, label=label, stdout=subprocess.PIPE if reports else subprocess.DEVNULL)
            if KEPT.can_keep(node, proc):
                return proc, KEPT.keep(node, port, argv, proc, self, ServerReports(proc) if reports else None)
            if reports:
                proc.stdout.close()  # not kept: stopped after its test like any other (its reports unread)
            return proc, None
        return node.spawn(argv, label=label), None

    def _ends_early(self) -> bool:
        """Whether an interrupted test of these parameters can be made whole from its server's report: one process
        a pair, one direction, no pings under load."""
        p = self.params
        return p.n_processes == 1 and p.direction != "bidir" and p.latency == "none" and not p.omit

    def run(self, pairs: Sequence[Pair]) -> list[Sample]:
        p = self.params
        procs = range(p.n_processes)
        servers, clients, pings = [], [], []  # appended one by one, so a failed spawn still stops the others
        kept: dict[int, KeptServer] = {}  # id(process) -> the kept server it is
        ok = False
        try:
            for pair in pairs:
                for k in procs:
                    proc, keeping = self._start_server(pair, k)
                    servers.append((pair, k, proc))
                    if keeping:
                        kept[id(proc)] = keeping
            for pair, k, server in servers:
                self._await_server(pair, server, k, kept.get(id(server)))
            stamped = {(pair.index, k): Stamped(server) for pair, k, server in servers if p.n_processes > 1}
            idle = self._idle_rtts(pairs, pings) if p.latency == "ping" else []
            pings.clear()
            for pair in pairs:
                for k in procs:
                    began = time.time()
                    clients.append((pair, k, pair.client.node.spawn(
                        self._client(pair, k), label=f"iperf3 client pair {pair.index}{_nth(k, p)}"), began))
                if p.latency == "ping":
                    pings.append(pair.client.node.spawn(self._ping(pair), label=f"ping under load pair {pair.index}"))
            reports = {pair.index: kept[id(s)].output for pair, _, s in servers if id(s) in kept}
            if self.early is not None and len(reports) == len(pairs) and all(reports.values()):
                self.early.add([c for _, _, c, _ in clients])
            self.signal_running([c for _, _, c, _ in clients] + pings)
            end = time.monotonic() + self._seconds() + 10
            stopped = _stop_when_measured(clients, stamped, pings, p, end) if self._stoppable() else set()
            samples = [s for pair in pairs
                       for s in _client_samples(pair, [(k, c, b) for q, k, c, b in clients if q is pair], end, p,
                                                [stamped[(pair.index, k)] for k in procs] if stamped else None,
                                                {k for i, k in stopped if i == pair.index}, reports.get(pair.index))]
            for pair, proc in zip(pairs, pings):
                out = collect_ping(proc, _left(end), f"ping under load pair {pair.index}")
                # Only echoes sent while iperf3 was measuring: not its connection set-up, omitted seconds or tail.
                samples += parse_ping(out, "rtt_loaded_s", pair_window(samples, pair.index), count=self._pings(),
                                      pair=pair.index)
            ok = True
        finally:
            for proc in [*(c for _, _, c, _ in clients), *pings, *(s for *_, s in servers if id(s) not in kept)]:
                stop(proc)
            for k in kept.values():
                k.used = True  # it served a test (or tried to): its next listening socket is a new one
            if not ok:  # a failed or hung test may leave a server stuck in it: the next trial starts new ones
                KEPT.drop(list(kept.values()))
        return samples + idle + aggregate(samples)

    def _idle_rtts(self, pairs: Sequence[Pair], procs: list) -> list[Sample]:
        """rtt_idle_s: a few echoes on every pair before the load starts (servers listening, nothing sent)."""
        for pair in pairs:
            procs.append(pair.client.node.spawn(self._idle_ping(pair), label=f"idle ping pair {pair.index}"))
        end = time.monotonic() + 10
        return [s for pair, proc in zip(pairs, procs)
                for s in parse_rtts(collect_ping(proc, _left(end), f"idle ping pair {pair.index}"), "rtt_idle_s",
                                    pair=pair.index, baseline=True)]


REPORT_WAIT_S = 5.0  # how long an interrupted test's server report may take to arrive (a busy one-CPU guest)


class ServerReports:
    """A kept server's JSON reports (-J: one per test), read as it prints them (its pipe must not fill), the last
    few kept by the test's cookie. An interrupted client's JSON holds the sender's figures only (the results are
    never exchanged); the server reports the same test when its client ends, with the receiver's figures."""

    KEEP = 8

    def __init__(self, proc):
        self._docs: dict[str, dict] = {}
        self._cond = threading.Condition()
        self._closed = False
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, stream) -> None:
        decoder, text = json.JSONDecoder(), ""
        try:
            while chunk := os.read(stream.fileno(), 65536):
                text += chunk.decode(errors="replace")
                while (rest := text.lstrip()):
                    try:
                        doc, n = decoder.raw_decode(rest)
                    except json.JSONDecodeError:
                        break  # a report not yet whole
                    text = rest[n:]
                    self._add(doc)
                text = text[-(1 << 24):]
        except (OSError, ValueError):  # the pipe was closed under us: the server is being stopped
            pass
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _add(self, doc: dict) -> None:
        cookie = doc.get("start", {}).get("cookie") if isinstance(doc, dict) else None
        with self._cond:
            if cookie:
                self._docs[cookie] = doc
                while len(self._docs) > self.KEEP:
                    del self._docs[next(iter(self._docs))]
            self._cond.notify_all()

    def take(self, cookie: str, timeout: float = REPORT_WAIT_S) -> dict | None:
        with self._cond:
            self._cond.wait_for(lambda: cookie in self._docs or self._closed, timeout)
            return self._docs.pop(cookie, None)

    def complete(self, out: str) -> str | None:
        """An interrupted client's output made whole with the server's report of its test (JSON text); None if the
        client was not interrupted. Raises WorkloadError if the server never reported that test."""
        try:
            doc = json.loads(out)
        except json.JSONDecodeError:
            return None
        if doc.get("error") != INTERRUPTED or not (cookie := doc.get("start", {}).get("cookie")):
            return None
        if (server := self.take(cookie)) is None:
            raise WorkloadError(f"iperf3 was ended with the measurement window, and its server did not report the "
                                f"test within {REPORT_WAIT_S:.0f} s")
        return json.dumps(completed(doc, server))


def completed(client: dict, server: dict) -> dict:
    """A client's JSON after SIGINT, whole: each side's sums from the side that counted them (the server receives
    the forward direction and sends the reverse one), the server's report as --get-server-output hands it, each
    side's CPU; `ended_early` says so.
    A server whose client ended reports (iperf3 3.12, checked by hand on loopback) every byte it counted but its
    seconds only up to its last whole interval, and prints that interval twice instead of the part after it: its
    rate would be too high by the missing part (270 instead of 250 kbit/s after 5.4 s). Its seconds are the client's
    own (both sides counted until the client ended), and the part after its last interval is its total less its
    printed intervals."""
    reverse = bool(client["start"]["test_start"].get("reverse"))
    served, own = ("sum_sent", "sum_received") if reverse else ("sum_received", "sum_sent")
    seen, intervals = set(), []
    for iv in server.get("intervals", []):
        if (key := (iv["sum"]["start"], iv["sum"]["end"])) not in seen:
            seen.add(key)
            intervals.append(iv)
    span = client["end"][own]["seconds"]
    theirs = server["end"][served] | {"end": span, "seconds": span}
    theirs["bits_per_second"] = theirs["bytes"] * 8 / span if span > 0 else 0.0
    last = intervals[-1]["sum"]["end"] if intervals else 0.0
    if span > last and (rest := theirs["bytes"] - sum(iv["sum"]["bytes"] for iv in intervals)) >= 0:
        intervals.append({"streams": [], "sum": {"start": last, "end": span, "seconds": span - last, "bytes": rest,
                                                 "bits_per_second": rest * 8 / (span - last), "omitted": False,
                                                 "sender": reverse, "from_total": True}})
    end = dict(client["end"]) | {served: theirs}
    if not reverse:
        end[own] = _uncounted_blocks(client, end[own], theirs["bytes"])
    cpu, their_cpu = end.get("cpu_utilization_percent"), server["end"].get("cpu_utilization_percent")
    if cpu and their_cpu:
        end["cpu_utilization_percent"] = cpu | {"remote_total": their_cpu["host_total"]}
    doc = {k: v for k, v in client.items() if k != "error"}
    return doc | {"end": end, "server_output_json": server | {"intervals": intervals}, "ended_early": True}


def _uncounted_blocks(client: dict, sent: dict, received: float) -> dict:
    """The sender's sums of an interrupted client, with what its server proves it sent. iperf3 leaves its send loop
    for the signal with a longjmp, which can fall between a write and the count of its bytes: a block per stream at
    most went out uncounted (a 1-Mbit/s UDP load: the server got 97 datagrams of 1448 B, the client counted 96).
    More than that stays as counted, for the consistency check to flag."""
    test = client["start"]["test_start"]
    block, streams = test.get("blksize") or 0, test.get("num_streams") or 1
    missing = received - sent.get("bytes", 0)
    if not 0 < missing <= block * streams:
        return sent
    fixed = sent | {"bytes": received, "uncounted_bytes": missing}
    if sent.get("seconds"):
        fixed["bits_per_second"] = received * 8 / sent["seconds"]
    if "packets" in sent and block:
        fixed["packets"] = sent["packets"] + -(-missing // block)
    return fixed


def _left(end: float) -> float:
    return max(end - time.monotonic(), 1.0)


def _nth(k: int, params: Iperf3Params) -> str:
    return f" process {k + 1}/{params.n_processes}" if params.n_processes > 1 else ""


def _client_samples(pair: Pair, procs: list, end: float, params: Iperf3Params,
                    servers: list[Stamped] | None, stopped: Collection[int] = (),
                    reports: "ServerReports | None" = None) -> list[Sample]:
    """The pair's samples; a split pair's processes are waited for at once, then their servers' stamped text.
    stopped: its processes whose clients we stopped (SIGTERM: iperf3 prints its JSON and exits 1); reports: the
    pair's server's own reports, which make a client interrupted with the window whole (a background load)."""
    def one(item):
        k, proc, _ = item
        what = f"iperf3 pair {pair.index}{_nth(k, params)}"
        if reports is not None:
            out, err = bounded(proc, _left(end), what)
            if (whole := reports.complete(out)) is not None:
                return whole
            if proc.returncode != 0:
                raise WorkloadError(f"{what} exited {proc.returncode}: {said(err.strip() or out.strip())}")
        else:  # every process ran for the same seconds: one deadline for all
            out, _ = bounded(proc, _left(end), what) if k in stopped else finish(proc, _left(end), what)
        try:
            _load(out, k in stopped)
        except WorkloadError as exc:
            raise WorkloadError(f"{what}: {exc}") from None
        return out
    if len(procs) == 1:
        return parse_iperf3(one(procs[0]), procs[0][2], pair=pair.index)
    with ThreadPoolExecutor(max_workers=len(procs)) as pool:
        done = list(pool.map(one, procs))
    # A one-off server (-1) exits once its client has its results.
    return parse_iperf3_processes(done, [s.lines(_left(end)) for s in servers], params.interval, params.duration,
                                  stopped, pair=pair.index)


class _Reach:
    """How far one split process has measured so far, from its server's lines as they arrive, on our timebase: when
    it began (placed as server_intervals places it: the least delayed line's arrival minus its interval's end) and
    the end of its last interval."""

    def __init__(self, server: Stamped, sums: bool):
        self.server, self.sums = server, sums  # sums: several streams, whose [SUM] lines server_intervals reads
        self.start: float | None = None
        self.upto = 0.0

    def update(self) -> None:
        for t, line in self.server.fresh():
            if (not self.sums or line.startswith("[SUM]")) and (iv := server_line(line, False)):
                self.start = t - iv[3] if self.start is None else min(self.start, t - iv[3])
                self.upto = max(self.upto, iv[3])


def _together(reach: Sequence[_Reach]) -> float:
    """Seconds all these processes have measured at the same time so far (<= 0: not yet)."""
    if any(r.start is None for r in reach):
        return 0.0
    return min(r.start + r.upto for r in reach) - max(r.start for r in reach)


def _stop_when_measured(clients: list, servers: dict, pings: list, params: Iperf3Params,
                        end: float) -> set[tuple[int, int]]:
    """Stop the clients of every split pair (SIGTERM) once each pair's processes have measured together for the
    duration asked, as their servers' lines tell so far: a pair pays the skew between its processes' starts that
    happened, not the whole slack. The pairs stop together (none loses its neighbours' load while another still
    measures), and so do their pings (SIGINT: ping prints what it has). Returns (pair, process) of the clients
    stopped; none if a client ends first (it failed, or its processes never measured together for that long within
    the slack: the parser says which)."""
    reach = {key: _Reach(server, params.process_streams()[key[1]] > 1) for key, server in servers.items()}
    pairs = {i for i, _ in reach}
    while True:
        if time.monotonic() > end or any(proc.poll() is not None for _, _, proc, _ in clients):
            return set()
        for r in reach.values():
            r.update()
        if all(_together([r for (i, _), r in reach.items() if i == pair]) >= params.duration for pair in pairs):
            break
        time.sleep(STOP_POLL_S)
    stopped = set()
    for pair, k, proc, _ in clients:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            stopped.add((pair.index, k))
    for ping in pings:
        ping.send_signal(signal.SIGINT)
    return stopped


def _short_rate(bps: float) -> str:
    """100000000 -> '100M' (as a spec writes it)."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if bps >= scale:
            return f"{bps / scale:g}{suffix}"
    return f"{bps:g}"
