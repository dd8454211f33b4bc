"""The workload interface: one class per traffic tool, registered by name.

A workload gets the pairs of a scenario (all pairs run at once), runs its tool on every pair concurrently,
bounded in time, and returns Samples. Parsing of the tool's output lives in the tool's own module, in one place.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, NamedTuple, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ..core.sample import Metric, Sample
from ..core.strict import not_a_bool
from ..system import rawlog
from ..system.agent import LISTEN_STEP_S, listener
from ..system.executor import Executor, LocalExecutor, NetnsExecutor


class Tool(NamedTuple):
    """An executable a workload runs: doctor and the matrix look for it and record its version."""
    package: str          # the Debian package that installs it (what a user is told to install)
    version: list[str]    # argv printing its version
    pattern: str          # regex picking the version out of that output


# Metrics more than one workload gives (one definition each: sample.declare refuses two different ones).
OFFERED_SHORT = 0.95  # a rate-bounded sender below this share of its rate did not offer the load asked
THROUGHPUT = Metric("throughput_bps", "bit/s", "higher", "goodput counted at the receiver over the whole test",
                    additive=True)
SENDER_THROUGHPUT = Metric("sender_throughput_bps", "bit/s", "higher",
                           "rate offered by the sender: bytes handed to its stack, which over TCP include what was "
                           "still queued in its socket buffers at the end (S4's 512 streams in 2 s: above line rate)",
                           additive=True)
TRANSACTIONS = Metric("transactions_per_s", "1/s", "higher", "request/response transactions per second")
LATENCY_SUMMARY = (
    Metric("latency_p50_s", "s", "lower", "median request/response latency"),
    Metric("latency_p90_s", "s", "lower", "90th percentile request/response latency"),
    Metric("latency_p99_s", "s", "lower", "99th percentile request/response latency"),
    Metric("latency_min_s", "s", "lower", "minimum request/response latency"),
    Metric("latency_max_s", "s", "lower", "maximum request/response latency"),
    Metric("latency_mean_s", "s", "lower", "mean request/response latency over every round trip, as the tool reports it"),
)


class WorkloadError(RuntimeError):
    """The tool failed: the trial is marked failed with this message (the tool's stderr), the campaign goes on."""


class ToolHung(WorkloadError):
    """The tool overran its time bound (iperf3 3.12 can stay in its end-of-test exchange for good): the runner
    tries such a trial once more and keeps the first attempt's reason in the trial's metadata."""


class Params(BaseModel):
    """Base of every workload's parameters; unknown fields are errors so typos are caught."""
    # defer_build: a model is built when it first validates (`run`, `plan`), not when its module is imported by
    # every command through the registry (`show` spent 30 ms building the workloads' models)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)
    type: str
    profile: bool = Field(False, description="sample every CPU's stacks with perf over the tool's window and say which "
                                             "mechanism (VXLAN, bridge, TCP, AES, ovs-vswitchd ...) the CPU went to")

    @field_validator("*", mode="before")
    @classmethod
    def _not_a_bool(cls, v: Any, info: ValidationInfo) -> Any:
        return not_a_bool(cls, v, info)


@dataclass
class Endpoint:
    node: Executor          # where the tool runs
    addr: str               # address the peer uses to reach this endpoint (IPv4 or IPv6 literal)
    label: str              # human name, e.g. "h1-vm1"


@dataclass
class Pair:
    index: int              # 1-based
    client: Endpoint
    server: Endpoint
    meta: dict = field(default_factory=dict)  # e.g. {"tenant": 1, "placement": "cross-host"}


@dataclass
class Command:
    """One command as `plan` prints it."""
    where: str
    argv: list[str]
    background: bool = False


@dataclass(frozen=True)
class Offer:
    """A load a workload was asked to offer per pair and direction, and the metric of its own samples that says what it
    offered (the sender's count, not the receiver's: what the network dropped is a result, not a shortfall)."""
    metric: str        # e.g. sender_throughput_bps
    rate: float        # asked, in the metric's unit
    unit: str = "Mbit/s"
    scale: float = 1e6  # metric units per printed unit
    short: str = "the sender did not reach its rate"  # what the flag says happened


class EarlyEnd:
    """A background load's tools that the runner may end once the foreground's measurement window is over, instead of
    waiting for the rest of their `duration` (S5's 18-s loads around a 5-s window: 7-12 s of each trial). A workload
    registers only tools whose figures stay whole when interrupted (SIGINT: stress-ng and an iperf3 client print
    their figures so far); one that registers none runs its course. Tools registered after the ask are interrupted
    at once."""

    def __init__(self):
        self._lock = threading.Lock()
        self._procs: list = []
        self.asked = False

    @property
    def taken(self) -> bool:
        """The load registered tools: asked, it ended early (its duration was an upper bound)."""
        return bool(self._procs)

    def add(self, procs: Sequence) -> None:
        with self._lock:
            self._procs += procs
            asked = self.asked
        if asked:
            _interrupt(procs)

    def ask(self) -> None:
        with self._lock:
            self.asked = True
            procs = list(self._procs)
        _interrupt(procs)


def _interrupt(procs: Sequence) -> None:
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGINT)
            except ProcessLookupError:  # it ended meanwhile
                pass


class Workload(ABC):
    kind: ClassVar[str]
    Params: ClassVar[type[Params]]
    tool: ClassVar[str]  # the executable doctor checks for: a key of `tools`
    tools: ClassVar[dict[str, Tool]] = {}  # every executable it runs (the registry adds them to capabilities.TOOLS)
    catalogue: ClassVar[tuple[Metric, ...]] = ()  # every metric it writes (the registry adds them to sample.METRICS)
    main_metric: ClassVar[str]  # what adaptive repetitions judge, unless the spec's rule names another
    # the metrics its trials give one value per pair of (not series): what adaptive repetitions can judge
    metrics: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def main_metric_for(cls, params: Params) -> str:
        """The main metric for these parameters (a workload whose tests differ in kind overrides this)."""
        return cls.main_metric

    def __init__(self, params: Params, only_pairs: list[int] | None = None, background: bool = False,
                 target_pair: int | None = None, name: str | None = None):
        self.params = params
        self.name = name or self.describe(params.model_dump())  # what tables call it (the spec's `name:` wins)
        self.only_pairs = only_pairs  # run on these pair indices only (None: all pairs)
        self.background = background  # runs alongside every foreground trial (a load, a flood), no trial of its own
        self.target_pair = target_pair  # send to this pair's server instead of each pair's own (None: own server)
        self.ready: threading.Event | None = None  # set by a background runner; run() sets it once its load runs
        self.early: EarlyEnd | None = None  # set by a background runner: the load may be ended with the window
        # set by the runner while a profiler runs: switches its sampling on or off (a workload whose profile_parts
        # marks windows of its own keeps it off between them)
        self.spotlight: Callable[[bool], bool] | None = None

    @classmethod
    def describe(cls, params: dict) -> str:
        """A short name saying what the workload is, from its parameters (e.g. 'iperf3 tcp x10'): tables and
        figures name it so. Each tool says what sets its entries apart."""
        return cls.kind

    def refuse(self, labels: dict[str, str]) -> str | None:
        """Why this workload cannot measure a scenario with these levels (it is then left out, saying so), or None."""
        return None

    def profile_parts(self, samples: Sequence[Sample]) -> list[tuple[dict, tuple[float, float]]] | None:
        """Windows of its own to profile, each with the labels its profile's samples carry (None: the tool's
        window, unlabelled). ndrpdr profiles the trial at each NDR it found, not its search."""
        return None

    def kernel_features(self) -> tuple[str, ...]:
        """Kernel features (capabilities.KERNEL_PROBES and the rest of the kernel probe) the workload needs where
        its endpoints run: a scenario whose kernel lacks one is skipped with the kernel's reason."""
        return ()

    def signal_ready(self) -> None:
        """The load is running (servers listen, clients started): a background workload lets the foreground start."""
        if self.ready is not None:
            self.ready.set()

    def signal_running(self, procs: Sequence[subprocess.Popen], settle: float = 0.1) -> None:
        """signal_ready once every started tool has survived `settle` seconds (only when someone waits for it)."""
        if self.ready is None:
            return
        time.sleep(settle)
        if all(p.poll() is None for p in procs):
            self.ready.set()

    def select(self, pairs: Sequence[Pair]) -> list[Pair]:
        """The pairs this workload runs on. With target_pair, each keeps its index (so per-pair ports stay apart)
        and its client, but its server is the target pair's: several clients, one server (e.g. attackers, one victim)."""
        chosen = [p for p in pairs if self.only_pairs is None or p.index in self.only_pairs]
        if self.target_pair is None:
            return chosen
        target = next(p for p in pairs if p.index == self.target_pair)  # the matrix skips scenarios without it
        return [Pair(p.index, p.client, target.server, p.meta | {"server": target.server.label, "target_pair": target.index})
                for p in chosen]

    def listen_ports(self, index: int) -> list[int]:
        """The ports this workload's server(s) for pair `index` listen on (checked for clashes before a run)."""
        return []

    def offer(self) -> Offer | None:
        """The rate-bounded load it was asked to offer, if any (checked on every trial: guards.check_offered)."""
        return None

    def largest_datagram(self) -> int | None:
        """Bytes above IP of the largest datagram it sends whole (ICMP or UDP header included), which the sending
        stack fragments only after any transform of its own; None when the stack cuts the stream itself (TCP)."""
        return None

    @abstractmethod
    def expected_duration(self) -> float:
        """Seconds one trial takes, for the progress estimate."""

    @abstractmethod
    def commands(self, pairs: Sequence[Pair]) -> list[Command]:
        """The exact commands `run` will start, for `plan`."""

    @abstractmethod
    def run(self, pairs: Sequence[Pair]) -> list[Sample]:
        """Run on all pairs at once; every sample carries metadata {"pair": index}."""


def bounded(proc: subprocess.Popen, timeout: float, what: str) -> tuple[str, str]:
    """Wait for a bounded tool and return what it printed; kill it and raise WorkloadError if it overruns."""
    try:
        out, err = proc.communicate(timeout=timeout)
        rawlog.output(proc, out, err)
        return out, err
    except subprocess.TimeoutExpired:
        out, err = stop(proc)  # SIGTERM first: iperf3 and ping then print where they were
        said = (err.strip() or out.strip())[-300:]
        raise ToolHung(f"{what} did not finish within {timeout:.0f} s" + (f": {said}" if said else "")) from None


class Stamped:
    """A running tool's stdout read as it comes, each line stamped (time.time()) when it arrived here: the one
    timebase for tools that report intervals relative to their own start. Start it once the tool is up (it owns the
    pipe from then on); `lines()` waits for the tool's end of output."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self._chunks = proc, []
        self._seen, self._rest = 0, b""  # what fresh() has handed out
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def fresh(self) -> list[tuple[float, str]]:
        """(arrival, line) of the complete lines that arrived since the last call, while the tool runs."""
        chunks = self._chunks[self._seen:]  # (the reader only appends)
        self._seen += len(chunks)
        out = []
        for t, chunk in chunks:
            *done, self._rest = (self._rest + chunk).split(b"\n")
            out += [(t, line.decode(errors="replace")) for line in done]
        return out

    def _read(self) -> None:
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, 65536):
            self._chunks.append((time.time(), chunk))

    def lines(self, timeout: float) -> list[tuple[float, str]]:
        """(arrival, line) of every complete line; a tool still running after `timeout` s is stopped first."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            stop(self.proc)
            self._thread.join(2.0)
        out, rest = [], b""
        for t, chunk in list(self._chunks):
            *done, rest = (rest + chunk).split(b"\n")
            out += [(t, line.decode(errors="replace")) for line in done]
        rawlog.output(self.proc, "".join(line + "\n" for _, line in out), None, [t for t, _ in out])
        return out


def said(text: str, limit: int = 500) -> str:
    """What a failed tool said, within `limit` characters: its first line (a tool that prints its usage after an
    error names the error there) and as much of its end as fits."""
    if len(text) <= limit:
        return text
    first = text.splitlines()[0][:limit // 2]
    return f"{first} ... {text[-(limit - len(first) - 5):]}"


def finish(proc: subprocess.Popen, timeout: float, what: str) -> tuple[str, str]:
    """Wait for a bounded tool; kill it if it overruns. Raises WorkloadError on failure."""
    out, err = bounded(proc, timeout, what)
    if proc.returncode != 0:
        raise WorkloadError(f"{what} exited {proc.returncode}: {said(err.strip() or out.strip())}")
    return out, err


def stop(proc: subprocess.Popen, grace: float = 2.0) -> tuple[str, str]:
    """Stop a server process and what it forked (netserver serves each test in a child, which outlived its parent on
    a busy machine): SIGTERM, then SIGKILL; return what it printed."""
    _signal_group(proc, signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        out, err = proc.communicate()
    rawlog.output(proc, out, err)
    return out, err


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """A local process that leads its own group (spawn starts each in a session of its own) is signalled with its
    group, while it is not yet reaped (so the group id cannot have been reused); a remote one's signal goes through
    its own send_signal (the agent signals the group there)."""
    if proc.poll() is not None:
        return
    try:
        if type(proc) is subprocess.Popen and os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except ProcessLookupError:  # it ended meanwhile
        pass


def wait_listening(node: Executor, port: int, proto: str = "tcp", timeout: float = 5.0,
                   proc: subprocess.Popen | None = None, other_than: int | None = None) -> int | None:
    """Wait until something listens on port inside node (servers need a moment to bind). With `proc`, a process in
    that namespace (the server itself): its /proc/<pid>/net is read where it runs, every few ms, by the machine's
    agent or here, with no process started per look; with `other_than` too, a listening socket other than that one
    (inode: a kept server's next listener). Once it has exited (or without it), `ss` is asked every 20 ms: whatever
    else listens there counts, as it always did. Returns the listening socket's inode when it was read (else None)."""
    deadline = time.monotonic() + timeout
    if proc is not None and hasattr(proc, "listener"):  # run by a machine's agent: it waits there
        if (inode := proc.listener(port, proto, timeout, other_than)) is not None:
            return inode
    elif proc is not None and isinstance(node, (NetnsExecutor, LocalExecutor)):
        while time.monotonic() < deadline and proc.poll() is None:
            if (inode := listener(proc.pid, port, proto)) is not None and inode != other_than:
                return inode
            time.sleep(LISTEN_STEP_S)
    flag = "-t" if proto == "tcp" else "-u"
    while other_than is None:
        out = node.run(["ss", "-Hln", flag, f"sport = :{port}"], check=False).stdout
        if out.strip():
            return None
        if time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    raise WorkloadError(f"nothing listens on {proto} port {port} in {node.name} after {timeout:.0f} s")


@dataclass(eq=False)
class KeptServer:
    node: Executor
    port: int
    argv: list[str]
    proc: subprocess.Popen
    owner: int = 0            # id() of the workload that started it: only it takes it again
    inode: int | None = None  # its listening socket when it was last found ready
    used: bool = False        # a test ran against it since: it listens on a new socket once that test is over
    output: Any = None        # its output read as it comes, when a workload needs it (iperf3: a background's reports)


class KeptServers:
    """Servers that stay up between the trials of one standing topology instead of starting for each (a process
    start and a wait for its socket: 0.5-1.3 s of a trial in a busy one-CPU guest). Off unless a campaign turns
    it on (`enabled`); the runner stops them all before it tears the topology down. Only a server whose readiness
    can be told by its own socket is kept (iperf3 -s opens a new listening socket after each test: the next trial
    waits for that one); a trial that failed stops the servers it used."""

    def __init__(self):
        self.enabled = False
        self._lock = threading.Lock()
        self._kept: dict[tuple[int, int], KeptServer] = {}

    def can_keep(self, node: Executor, proc: subprocess.Popen) -> bool:
        return self.enabled and (hasattr(proc, "listener") or isinstance(node, (NetnsExecutor, LocalExecutor)))

    def take(self, node: Executor, port: int, argv: Sequence[str], owner: object) -> KeptServer | None:
        """The server `owner` (a workload) keeps on this node and port if it runs `argv` and is still up; one that
        does not is stopped."""
        with self._lock:
            kept = self._kept.get((id(node), port))
            if kept is None:
                return None
            if kept.node is node and kept.argv == list(argv) and kept.owner == id(owner) and kept.proc.poll() is None:
                return kept
            del self._kept[(id(node), port)]
        stop(kept.proc)
        return None

    def keep_only(self, owners, pairs: Sequence[Pair]) -> None:
        """Stop every kept server that none of `owners` (the workloads of the trial about to run) started and that
        holds a port one of them listens on at that node: this trial's server could not bind it (a split pair's
        servers on the same ports, another tool), and a listening check reads the namespace's sockets. The others
        stay up, idle in accept() (S5's ten flood servers in its one-CPU guest VM took 1.2-1.5 s to start again
        after each control round)."""
        ids = {id(o) for o in owners}
        held = {(id(p.server.node), port) for o in owners for p in o.select(pairs) for port in o.listen_ports(p.index)}
        with self._lock:
            gone = [k for k in self._kept.values() if k.owner not in ids and (id(k.node), k.port) in held]
            for k in gone:
                del self._kept[(id(k.node), k.port)]
        for k in gone:
            stop(k.proc)

    def keep(self, node: Executor, port: int, argv: Sequence[str], proc: subprocess.Popen,
             owner: object, output: Any = None) -> KeptServer:
        kept = KeptServer(node, port, list(argv), proc, id(owner), output=output)
        with self._lock:
            self._kept[(id(node), port)] = kept  # (the node is held: its id is not reused while kept)
        return kept

    def drop(self, servers: Sequence[KeptServer]) -> None:
        with self._lock:
            for k in servers:
                if self._kept.get((id(k.node), k.port)) is k:
                    del self._kept[(id(k.node), k.port)]
        for k in servers:
            stop(k.proc)

    def stop_all(self) -> None:
        with self._lock:
            kept, self._kept = list(self._kept.values()), {}
        for k in kept:
            stop(k.proc)


KEPT = KeptServers()
