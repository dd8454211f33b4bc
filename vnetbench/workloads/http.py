"""Normal web traffic: a private nginx (1.22) in each server VM, several client processes in each client VM.

The server is a real web server, the one a tenant would run: nginx, event-driven, serving one static page with
sendfile. Each instance is private to the trial: its own configuration, pid file, error log and temporary paths in
a directory under the run's work directory (a temporary directory when there is no ledger), `daemon off` so the
process vnetbench started is the master, stopped with SIGTERM (then its process group is killed) and the directory
removed. Nothing is written under /etc/nginx, /var/log/nginx or /var/lib/nginx: the compiled-in error log is
replaced with -e and every temporary path is set. Workers run as root because the work directory is root-only.

The clients are `python -m vnetbench.workloads.httpclient` processes (standard library only, see that module): `clients` of
them per pair, each making `rate` requests per second for `duration` seconds, a new connection per request
(keepalive: false), staggered so the pair's requests are evenly spread. Every request's response time is kept.

Samples, per pair: http_response_time_s for every successful request (t = when it started, seconds since the
client's start; metadata client), http_requests_per_s (successful responses of all clients over `duration`, the
window in which requests start: clients x rate when every request succeeds), http_started_per_s (requests the
clients started over `duration`: the load offered, flagged on the trial when below what was asked) and http_errors
(requests that failed or got a wrong status or length).
"""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Literal, Sequence

from pydantic import Field

from ..core.sample import Metric, Sample
from . import register
from .base import Command, Offer, Pair, Params, Tool, Workload, WorkloadError, finish, stop, wait_listening

PAGE = "/index.html"
CLIENT_SLACK_S = 15  # client start and stop on a loaded machine, beyond duration + timeout


def parse_client(text: str, **meta) -> tuple[list[Sample], int, Counter, float]:
    """One client's output -> (response-time samples of the successful requests, successes, failures by outcome
    (timeout, refused, reset, error, short, or the HTTP status), seconds it ran). Raises WorkloadError if the output
    is not the client's."""
    samples, ok, failed, duration, t0 = [], 0, Counter(), None, 0.0
    for line in text.splitlines():
        if line.startswith("# duration "):
            duration = float(line.split()[2])
            continue
        if line.startswith("# t0 "):
            t0 = float(line.split()[2])
            continue
        parts = line.split()
        if len(parts) != 3:
            raise WorkloadError(f"http client printed an unexpected line: {line[:200]!r}")
        start, seconds, outcome = float(parts[0]), float(parts[1]), parts[2]
        if outcome == "200":
            ok += 1
            samples.append(Sample.of("http_response_time_s", seconds, t=start, **meta))
        else:
            failed[outcome] += 1
    if duration is None or duration <= 0:
        raise WorkloadError(f"http client printed no duration: {text.strip()[-300:]}")
    if t0:  # the client's clock started at t0 (UNIX time): every start becomes absolute
        samples = [Sample(s.metric, s.value, s.unit, s.metadata | {"window": [t0, t0 + duration]}, t0 + s.t)
                   for s in samples]
    return samples, ok, failed, duration


def nginx_conf(workdir: Path, addr: str, port: int, workers: int) -> str:
    listen = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
    tmp = workdir / "tmp"
    return f"""daemon off;
master_process on;
worker_processes {workers};
user root;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 5;
    types {{ text/html html; }}
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen {listen} backlog=4096;
        root {workdir}/www;
    }}
}}
"""


class HttpParams(Params):
    type: Literal["http"] = "http"
    clients: int = Field(6, ge=1, le=64, description="client processes per pair, all at once")
    rate: float = Field(10.0, gt=0, le=1000, description="requests per second each client makes")
    duration: float = Field(10.0, ge=0.5, le=3600, description="seconds during which the clients send requests")
    timeout: float = Field(2.0, gt=0, le=60, description="seconds one request may take before it counts as an error")
    page_size: int = Field(4096, ge=1, le=10_000_000, description="bytes of the page served")
    keepalive: bool = Field(False, description="each client keeps one connection (false: a new one per request)")
    server_workers: int = Field(1, ge=1, le=16, description="nginx worker processes per server")
    port: int = Field(8080, ge=1024, le=65000, description="server port of pair 1; pair i uses port + i - 1")


@register
class Http(Workload):
    kind = "http"
    metrics = frozenset({"http_errors", "http_requests_per_s", "http_response_time_s", "http_started_per_s"})
    Params = HttpParams
    tool = "nginx"
    tools = {"nginx": Tool("nginx", ["nginx", "-v"], r"nginx/(\S+)")}
    main_metric = "http_response_time_s"
    catalogue = (
        Metric("http_response_time_s", "s", "lower", "HTTP request to complete response (connect included), one per request", per_event=True),
        Metric("http_requests_per_s", "1/s", "higher", "HTTP responses completed per second, all clients of a pair"),
        Metric("http_errors", "1", "lower", "HTTP requests that failed (refused, timed out, wrong status or length)"),
        Metric("http_started_per_s", "1/s", "higher", "HTTP requests started per second, all clients of a pair: the "
               "load offered (clients x rate asked)"),
    )

    def offer(self) -> Offer:
        return Offer("http_started_per_s", self.params.clients * self.params.rate, "requests/s", 1.0,
                     "the clients did not start the requests asked")

    @classmethod
    def describe(cls, p: dict) -> str:
        """'http x6 10/s': clients per pair and requests per second each."""
        return f"{cls.kind} x{p.get('clients') or 6} {p.get('rate') or 10:g}/s"

    def expected_duration(self) -> float:
        return self.params.duration + 1.0

    def listen_ports(self, index: int) -> list[int]:
        return [self.params.port + index - 1]

    def _port(self, pair: Pair) -> int:
        return self.listen_ports(pair.index)[0]

    def _dir(self, pair: Pair) -> Path:
        node = pair.server.node
        name = f"http-{pair.server.label}-{self._port(pair)}"
        if node.files_dir():  # a machine with files of its own (a testbed host): its run directory
            return Path(node.files_dir()) / name
        if node.ledger is not None:
            return Path(node.ledger.work) / name
        return Path(tempfile.gettempdir()) / f"vnetbench-http-{os.getpid()}-{self._port(pair)}"

    def _server(self, pair: Pair) -> list[str]:
        d = self._dir(pair)
        return ["nginx", "-p", f"{d}/", "-e", f"{d}/error.log", "-c", f"{d}/nginx.conf"]

    def _client(self, pair: Pair, k: int) -> list[str]:
        p = self.params
        phase = k / (p.clients * p.rate)  # client k of n: the pair's requests evenly spread
        argv = [*pair.client.node.python("workloads.httpclient"), "--host", pair.server.addr, "--port", str(self._port(pair)),
                "--path", PAGE, "--size", str(p.page_size), "--rate", f"{p.rate:g}", "--duration", f"{p.duration:g}",
                "--timeout", f"{p.timeout:g}", "--phase", f"{phase:.6f}"]
        return argv + (["--keepalive"] if p.keepalive else [])

    def commands(self, pairs: Sequence[Pair]) -> list[Command]:
        cmds = [Command(p.server.node.name, self._server(p), background=True) for p in pairs]
        return cmds + [Command(p.client.node.name, self._client(p, k), background=True)
                       for p in pairs for k in range(self.params.clients)]

    def _prepare(self, pair: Pair) -> Path:
        d, node = self._dir(pair), pair.server.node
        node.remove_dirs([str(d)])
        node.make_dirs([str(d / "www"), str(d / "tmp")])
        node.write_file(str(d / "nginx.conf"), nginx_conf(d, pair.server.addr, self._port(pair),
                                                         self.params.server_workers), 0o644)
        node.write_file(str(d / "www" / PAGE.lstrip("/")), "x" * self.params.page_size, 0o644)
        return d

    def _await_server(self, pair: Pair, proc: subprocess.Popen, timeout: float = 10.0) -> None:
        """nginx writes its pid file only once it holds its listening socket (a port taken by someone else makes it
        retry for ~2 s, then exit): wait for the pid file, then check the port listens."""
        node = pair.server.node
        pidfile, deadline = str(self._dir(pair) / "nginx.pid"), time.monotonic() + timeout
        while not node.exists(pidfile) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            if not node.exists(pidfile) or proc.poll() is not None:
                raise WorkloadError("exited" if proc.poll() is not None else f"no pid file after {timeout:.0f} s")
            wait_listening(node, self._port(pair))
        except WorkloadError as exc:
            _, err = stop_server(proc)
            said = (err or "").strip() or node.tail(str(self._dir(pair) / "error.log"), 2)
            last = " | ".join(line.strip() for line in said.splitlines()[-2:])
            raise WorkloadError(f"nginx pair {pair.index} did not start ({exc}): {last[-400:]}") from None

    def run(self, pairs: Sequence[Pair]) -> list[Sample]:
        p = self.params
        servers, clients, dirs = [], [], []  # appended one by one, so a failed start still stops the others
        try:
            for pair in pairs:
                dirs.append(self._prepare(pair))
                servers.append(pair.server.node.spawn(self._server(pair), label=f"nginx pair {pair.index}"))
            for pair, proc in zip(pairs, servers):
                self._await_server(pair, proc)
            for pair in pairs:
                for k in range(p.clients):
                    clients.append((pair, k, pair.client.node.spawn(self._client(pair, k),
                                                                    label=f"http client {k + 1} pair {pair.index}")))
            self.signal_running([proc for *_, proc in clients])
            end = time.monotonic() + p.duration + p.timeout + CLIENT_SLACK_S
            per_pair: dict[int, list[tuple[int, Counter]]] = {}
            samples: list[Sample] = []
            for pair, k, proc in clients:
                out, _ = finish(proc, max(end - time.monotonic(), 1.0), f"http client {k + 1} pair {pair.index}")
                got, ok, failed, _ = parse_client(out, pair=pair.index, client=k + 1)
                samples += got
                per_pair.setdefault(pair.index, []).append((ok, failed))
            for index, counts in per_pair.items():
                # Requests start only within [0, duration): rate x duration of them when all goes well.
                samples.append(Sample.of("http_requests_per_s", sum(ok for ok, _ in counts) / p.duration, pair=index))
                failed = sum((f for _, f in counts), Counter())  # by outcome: a timeout is a slow reply, not a refusal
                samples.append(Sample.of("http_errors", failed.total(), pair=index, outcomes=dict(sorted(failed.items()))))
                samples.append(Sample.of("http_started_per_s", sum(ok + f.total() for ok, f in counts) / p.duration,
                                         pair=index))
            return samples
        finally:
            for _, _, proc in clients:
                stop(proc)
            for proc in servers:
                stop_server(proc)
            for pair, d in zip(pairs, dirs):
                pair.server.node.remove_dirs([str(d)])


def stop_server(proc: subprocess.Popen, grace: float = 3.0) -> tuple[str, str]:
    """SIGTERM to the nginx master: a fast shutdown, in which the master exits only after its workers. If it overruns,
    SIGKILL its whole process group while the master is not yet reaped (so the group id cannot have been reused):
    workers must not outlive a killed master (spawn starts each process in a session of its own)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            getattr(proc, "kill_group", lambda: os.killpg(proc.pid, signal.SIGKILL))()  # a remote one: its group there
        except ProcessLookupError:
            pass
        return proc.communicate()
