"""The client process of the `http` workload: normal web requests at a bounded rate for a bounded time.

Run as `python -m vnetbench.workloads.httpclient --host H --port P ...` inside a client namespace. Standard library only, on
purpose: it starts in about 0.1 s, while importing the vnetbench package (pydantic) takes most of a second on a
loaded machine, which would shift the clients' windows against the trial's.

Requests follow a fixed schedule, one every 1/rate s starting at `phase`. Each request opens a new TCP connection
(unless --keepalive), sends GET, reads the whole response and checks status 200 and the body length. A request
that is late (the previous one took longer than the interval) is sent at once, but missed slots are not caught up:
the client never bursts. No request starts after `duration`; each is bounded by `timeout`.

Output, printed once at the end (so printing never competes with the measurement), one line per request:
    <start s since the client's start> <response time s> <outcome>
where outcome is the HTTP status code, or timeout | refused | reset | error | short (a wrong body length);
then one line `# duration <s>`: the time the client actually ran. vnetbench.workloads.http parses it.
"""
from __future__ import annotations

import argparse
import socket
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when the client runs: the workloads' registry imports this module for every command
    import http.client


def request(conn: http.client.HTTPConnection, path: str, size: int, keepalive: bool) -> str:
    conn.request("GET", path, headers={} if keepalive else {"Connection": "close"})
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        return str(resp.status)
    return "200" if len(body) == size else "short"


def outcome_of(exc: BaseException) -> str:
    import http.client
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)):
        return "reset"
    return "error"


def main(argv: list[str] | None = None) -> int:
    import http.client
    ap = argparse.ArgumentParser(prog="python -m vnetbench.workloads.httpclient")
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--path", default="/")
    ap.add_argument("--size", type=int, required=True, help="expected body length, bytes")
    ap.add_argument("--rate", type=float, required=True, help="requests per second")
    ap.add_argument("--duration", type=float, required=True, help="seconds during which requests start")
    ap.add_argument("--timeout", type=float, default=2.0, help="seconds one request may take")
    ap.add_argument("--phase", type=float, default=0.0, help="seconds before the first request")
    ap.add_argument("--keepalive", action="store_true", help="one connection for every request")
    a = ap.parse_args(argv)
    if not (0 < a.rate <= 10_000 and 0 < a.duration <= 3600 and 0 < a.timeout <= 60):
        ap.error("rate, duration and timeout must be positive and bounded (rate <= 10000/s, duration <= 3600 s)")
    interval, lines = 1.0 / a.rate, []
    conn = None
    t0, wall0 = time.perf_counter(), time.time()
    n, shift = 0, 0.0  # the n-th request is due at phase + n / rate + shift (shift grows when late)
    due = a.phase
    while True:
        now = time.perf_counter() - t0
        if max(now, due) >= a.duration - 1e-9:  # (due is computed, not summed: no drift past the window)
            break
        if due > now:
            time.sleep(due - now)
        start = time.perf_counter()
        if start - t0 >= a.duration:  # a busy machine overslept the last slot: it would start after the window
            break
        try:
            if conn is None:
                conn = http.client.HTTPConnection(a.host, a.port, timeout=a.timeout)
            outcome = request(conn, a.path, a.size, a.keepalive)
        except (OSError, http.client.HTTPException) as exc:
            outcome = outcome_of(exc)
            if conn is not None:
                conn.close()
            conn = None
        end = time.perf_counter()
        if not a.keepalive and conn is not None:
            conn.close()
            conn = None
        lines.append(f"{start - t0:.6f} {end - start:.6f} {outcome}\n")
        n += 1
        due = a.phase + n * interval + shift
        if end - t0 > due:  # late: send at once, but do not catch up the missed slots
            shift += end - t0 - due
            due = end - t0
    if conn is not None:
        conn.close()
    lines.append(f"# duration {time.perf_counter() - t0:.6f}\n")
    lines.append(f"# t0 {wall0:.6f}\n")  # when the client's clock started, UNIX time: makes every start absolute
    sys.stdout.write("".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
