"""Whole-machine CPU time shares and event rates from /proc/stat and /proc/softirqs.

/proc/stat counts CPU time in clock ticks (USER_HZ, usually 10 ms): shares are ratios of tick deltas, so they
are exact fractions of the time the kernel accounted, while event rates divide by wall-clock time.

The counters are read every 0.25 s with absolute times; a measurement window's figures are the differences of the
counters interpolated linearly at the window's edges, and the series is a 1-s grid starting at the window's start.
Busy time excludes steal (time the hypervisor gave to someone else is not work done here); steal is its own share.
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.sample import Metric, Sample
from ..system import cgroup
from ..system.executor import Executor
from . import register
from .base import Probe, span, value_at

log = logging.getLogger(__name__)

# guest/guest_nice are already included in user/nice, so these eight fields add up to all accounted time.
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
SERIES_METRICS = ("cpu_busy_ratio", "interrupts_per_s", "context_switches_per_s")
SCOPE = "machine"
SERIES_S = 1.0      # step of the series
READ_S = 0.25       # how often the counters are read


@dataclass(frozen=True)
class ProcStat:
    cpus: dict[str, tuple[int, ...]]  # "cpu" (all CPUs), "cpu0", "cpu1"...: ticks in CPU_FIELDS order
    intr: int                         # interrupts since boot, all sources
    ctxt: int                         # context switches since boot


@dataclass(frozen=True)
class Snapshot:
    t: float                          # time.time() when read
    stat: ProcStat
    softirqs: dict[str, int]          # NET_RX, NET_TX...: totals over all CPUs


def parse_proc_stat(text: str) -> ProcStat:
    cpus: dict[str, tuple[int, ...]] = {}
    intr = ctxt = 0
    for line in text.splitlines():
        key, *values = line.split() or [""]
        if key.startswith("cpu"):
            ticks = [int(v) for v in values[:len(CPU_FIELDS)]]
            cpus[key] = tuple(ticks + [0] * (len(CPU_FIELDS) - len(ticks)))  # old kernels have fewer columns
        elif key == "intr":
            intr = int(values[0])
        elif key == "ctxt":
            ctxt = int(values[0])
    return ProcStat(cpus, intr, ctxt)


def parse_softirqs(text: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for line in text.splitlines()[1:]:  # the first line names the CPUs
        name, _, counts = line.partition(":")
        if counts.strip():
            totals[name.strip()] = sum(int(v) for v in counts.split())
    return totals


def cpu_shares(a: tuple[int, ...], b: tuple[int, ...]) -> dict[str, float] | None:
    """Share of each CPU_FIELDS in the ticks between two readings; None when no tick elapsed."""
    # iowait (and, on some hypervisors, idle) can step backwards: count a negative delta as 0.
    deltas = [max(0, y - x) for x, y in zip(a, b)]
    total = sum(deltas)
    return {f: d / total for f, d in zip(CPU_FIELDS, deltas)} if total else None


def busy(shares: dict[str, float]) -> float:
    value = 1.0 - shares["idle"] - shares["iowait"] - shares["steal"]
    # a fully idle CPU's shares sum to 1 only to rounding: -5.6e-17 would read as an impossible value
    return 0.0 if -1e-9 < value < 0 else value


def _counters(s: Snapshot) -> dict[str, int]:
    raw = {"interrupts_per_s": s.stat.intr, "context_switches_per_s": s.stat.ctxt,
           "net_rx_softirqs_per_s": s.softirqs.get("NET_RX"), "net_tx_softirqs_per_s": s.softirqs.get("NET_TX")}
    return {k: v for k, v in raw.items() if v is not None}


def rates(a: Snapshot, b: Snapshot) -> dict[str, float]:
    dt = b.t - a.t
    ca, cb = _counters(a), _counters(b)
    return {k: (cb[k] - ca[k]) / dt for k in ca if k in cb} if dt > 0 else {}


def window_samples(a: Snapshot, b: Snapshot, **meta) -> list[Sample]:
    """Samples over the whole window a..b: time shares (all CPUs, then per CPU) and event rates."""
    out: list[Sample] = []
    meta = {"scope": SCOPE} | meta  # a guest VM's probe says scope=vm, vm=<label>
    shares = cpu_shares(a.stat.cpus["cpu"], b.stat.cpus["cpu"])
    if shares:
        out.append(Sample.of("cpu_busy_ratio", busy(shares), **meta))
        out.append(Sample.of("cpu_user_ratio", shares["user"] + shares["nice"], **meta))
        out += [Sample.of(f"cpu_{f}_ratio", shares[f], **meta) for f in ("system", "irq", "softirq", "steal")]
    for key in sorted(k for k in a.stat.cpus if k != "cpu" and k in b.stat.cpus):
        if per_cpu := cpu_shares(a.stat.cpus[key], b.stat.cpus[key]):
            out.append(Sample.of("cpu_busy_ratio", busy(per_cpu), cpu=int(key[3:]), **meta))
    out += [Sample.of(metric, value, **meta) for metric, value in rates(a, b).items()]
    return out


def series_samples(snaps: list[Snapshot], min_gap: float, **meta) -> list[Sample]:
    """One point per consecutive pair of snapshots, t = the (absolute) end of the interval.

    Intervals shorter than min_gap are dropped: a few milliseconds hold too few ticks to mean anything."""
    out: list[Sample] = []
    for a, b in zip(snaps, snaps[1:]):
        if b.t - a.t < min_gap:
            continue
        values = {k: v for k, v in rates(a, b).items() if k in SERIES_METRICS}
        if shares := cpu_shares(a.stat.cpus["cpu"], b.stat.cpus["cpu"]):
            values["cpu_busy_ratio"] = busy(shares)
        out += [Sample.of(m, values[m], t=b.t, series=True, seconds=b.t - a.t, **({"scope": SCOPE} | meta))
                for m in SERIES_METRICS if m in values]
    return out


def _lerp(x, y, f: float):
    if isinstance(x, tuple):
        return tuple(p + (q - p) * f for p, q in zip(x, y))
    return x + (y - x) * f


def interpolate(snaps: list[Snapshot], t: float) -> Snapshot:
    """The counters at time t, linear between the two readings around it (clamped to the first and last)."""
    if t <= snaps[0].t:
        return snaps[0]
    for a, b in zip(snaps, snaps[1:]):
        if t <= b.t:
            f = (t - a.t) / (b.t - a.t) if b.t > a.t else 1.0
            cpus = {k: _lerp(v, b.stat.cpus[k], f) for k, v in a.stat.cpus.items() if k in b.stat.cpus}
            soft = {k: _lerp(v, b.softirqs[k], f) for k, v in a.softirqs.items() if k in b.softirqs}
            return Snapshot(t, ProcStat(cpus, _lerp(a.stat.intr, b.stat.intr, f), _lerp(a.stat.ctxt, b.stat.ctxt, f)),
                            soft)
    return snaps[-1]


def read_snapshot(executor: Executor) -> Snapshot:
    t0 = time.time()
    stat, soft = executor.read_text("/proc/stat"), executor.read_text("/proc/softirqs")
    return Snapshot((t0 + time.time()) / 2, parse_proc_stat(stat), parse_softirqs(soft))


def busy_ratio_now(executor: Executor, seconds: float) -> float | None:
    """The machine's busy share (all CPUs, steal excluded) over the next `seconds` (None if no tick elapsed)."""
    a = parse_proc_stat(executor.read_text("/proc/stat"))
    time.sleep(seconds)
    shares = cpu_shares(a.cpus["cpu"], parse_proc_stat(executor.read_text("/proc/stat")).cpus["cpu"])
    return busy(shares) if shares else None


def steal_ratio_now(executor: Executor, seconds: float = 0.5) -> float:
    """Share of CPU time stolen by the hypervisor over the next `seconds` (nan if no tick elapsed)."""
    a = parse_proc_stat(executor.read_text("/proc/stat"))
    time.sleep(seconds)
    shares = cpu_shares(a.cpus["cpu"], parse_proc_stat(executor.read_text("/proc/stat")).cpus["cpu"])
    return shares["steal"] if shares else math.nan


# what the load watch counted as the run's own CPU (a trial's `own_cpu`): without a cgroup, and with one
OWN_PROCESS = "the run's process and the children it reaped"
OWN_CGROUP = "every process the run started (its cgroup)"


@dataclass(frozen=True)
class Load:
    """The machine's CPUs over a span just past: shares of all CPU time (steal excluded from busy)."""
    busy: float        # all work
    own: float         # the run's own work (`counted` says what that covered)
    foreign: float     # busy and not ours: other work that shared the CPUs
    counted: str       # OWN_CGROUP or OWN_PROCESS


class LoadWatch:
    """The machine's CPU shares over the last few seconds, at any moment and without waiting for them: a thread reads
    the "cpu" line of /proc/stat (a file read, no process) and the CPU the run has used itself every `step` s.
    `load(s)` is the last s seconds' busy share, split into ours and not ours (`foreign(s)`), `steal()` the share
    stolen since the watch began. (A sleep before each trial to sample the load cost every trial 0.2 s of its 0.24 s
    overhead; one at the start, 0.5 s of every run.)

    The run's own CPU is its cgroup's once `count` names one (cgroup.py: every process it started, wherever it went:
    guest kernels, kept servers, detached daemons), else this process's threads and the children it has reaped: the
    tools it ran and waited for, not the guests or daemons still running (they made trials in guests look noisy)."""

    def __init__(self, step: float = 0.05, keep: float = 5.0):
        self.step, self.keep = step, keep
        self.hz = os.sysconf("SC_CLK_TCK")
        self.points: list[tuple[float, tuple[int, ...], float, float | None]] = []
        self.group: Path | None = None
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def count(self, group: Path | None) -> None:
        """Count the CPU of this cgroup as ours from now on (None: this process's own again). A reading at once: a
        span that began before is ours by this process's count up to it, by the group's after it."""
        with self._lock:
            self.group = group
            if self._thread is not None:
                self.points.append(self._read())

    def _read(self) -> tuple[float, tuple[int, ...], float, float | None]:
        """(time, the "cpu" ticks, this process's CPU s, the cgroup's CPU s or None)."""
        with open("/proc/stat") as fh:
            cpu = parse_proc_stat(fh.readline()).cpus["cpu"]
        t, group = os.times(), self.group
        try:
            in_group = cgroup.usage_s(group) if group is not None else None
        except OSError:  # removed at the run's end while we read
            in_group = None
        return time.monotonic(), cpu, t.user + t.system + t.children_user + t.children_system, in_group

    def start(self) -> "LoadWatch":
        self.points = [self._read()]
        self._halt.clear()
        self._thread = threading.Thread(target=self._loop, name="vnetbench-load-watch", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._halt.wait(self.step):
            with self._lock:  # read in the lock: count() adds readings too, and they stay in order
                point = self._read()
                self.points.append(point)
                while len(self.points) > 3 and point[0] - self.points[2][0] > self.keep:
                    del self.points[1]  # (the first reading stays: steal() is since the start)

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join()

    def _span(self, seconds: float | None) -> list[tuple]:
        """The readings from the last one at or before `seconds` ago (None: the first) to one taken now."""
        now = self._read()
        with self._lock:
            points = [*self.points, now]
        if seconds is None:
            return points
        k = max([i for i, p in enumerate(points) if p[0] <= now[0] - seconds] or [0])
        return points[k:]

    def _since(self, seconds: float | None) -> tuple[tuple, tuple]:
        points = self._span(seconds)
        return points[0], points[-1]

    def load(self, seconds: float) -> Load | None:
        """The last `seconds`: the busy share of all CPUs (steal excluded), ours and not ours; None if no tick
        elapsed."""
        points = self._span(seconds)
        a, b = points[0], points[-1]
        shares = cpu_shares(a[1], b[1])
        if not shares:
            return None
        total_s = sum(max(0, y - x) for x, y in zip(a[1], b[1])) / self.hz
        machine = busy(shares)
        # ticks (/proc/stat) against nanoseconds (the cgroup): ours can pass the busy share by a tick
        own_s, counted = self._own_s(points)
        own = min(machine, own_s / total_s)
        return Load(machine, own, max(0.0, machine - own), counted)

    @staticmethod
    def _own_s(points: list[tuple]) -> tuple[float, str]:
        """Our CPU seconds over the readings: the group's from the first reading that has it (the run started
        nothing before it joined its group, so up to then this process's count is the run's)."""
        a, b = points[0], points[-1]
        k = len(points)
        while k and points[k - 1][3] is not None:  # the readings since the group was named
            k -= 1
        if k == len(points):
            return b[2] - a[2], OWN_PROCESS
        j = points[k]
        return (j[2] - a[2]) + (b[3] - j[3]), OWN_CGROUP

    def foreign(self, seconds: float) -> float | None:
        """The share of all CPUs busy over the last `seconds` that was not ours; None if no tick elapsed."""
        got = self.load(seconds)
        return got.foreign if got else None

    def steal(self, at_least: float = 0.2) -> float:
        """The share stolen by the hypervisor since the watch began (waiting until it has watched `at_least` s)."""
        if self.points:
            time.sleep(max(0.0, self.points[0][0] + at_least - time.monotonic()))
        a, b = self._since(None)
        shares = cpu_shares(a[1], b[1])
        return shares["steal"] if shares else math.nan


@register
class SystemProbe(Probe):
    """Whole-machine CPU shares and interrupt/context-switch/softirq rates over the window, and as a series every
    `series` s; counters read every `interval` s (interval=None: window totals only, from the two end readings)."""

    kind = "system"
    catalogue = (
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
    )

    def __init__(self, executor: Executor, interval: float | None = READ_S, series: float = SERIES_S,
                 meta: dict | None = None):
        self.executor, self.interval, self.series = executor, interval, series
        self.meta = meta or {}  # tags every sample (e.g. a guest VM's scope=vm, vm=h2v1)
        self.elapsed: float | None = None
        self._snaps: list[Snapshot] = []
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._snaps = [read_snapshot(self.executor)]
        self._halt.clear()
        if self.interval:
            self._thread = threading.Thread(target=self._sample, name="vnetbench-system-probe", daemon=True)
            self._thread.start()

    def _sample(self) -> None:
        t0, k = time.monotonic(), 1
        # Deadlines from t0 rather than sleep(interval): points stay on a grid instead of drifting.
        while not self._halt.wait(max(0.0, t0 + k * self.interval - time.monotonic())):
            try:
                self._snaps.append(read_snapshot(self.executor))
            except Exception as exc:  # a series gap must not lose the window totals
                log.warning("system probe on %s: series stopped: %s", self.executor.name, exc)
                return
            k += 1

    def stop(self, window=None) -> list[Sample]:
        if not self._snaps:
            raise RuntimeError("SystemProbe.stop() before start()")
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
        return self._samples([*self._snaps, read_snapshot(self.executor)], window)

    def _samples(self, snaps: list[Snapshot], window) -> list[Sample]:
        start = snaps[0].t if window is None else max(snaps[0].t, min(window[0], snaps[-1].t))
        end = snaps[-1].t if window is None else min(snaps[-1].t, max(window[1], start))
        self.elapsed = end - start
        meta = self.meta | {"window": [start, end]}
        out = window_samples(interpolate(snaps, start), interpolate(snaps, end), **meta)
        if self.interval:
            n = int(self.elapsed / self.series + 0.5)  # a last step shorter than half a step is left out
            grid = [start + k * self.series for k in range(n)] + [end]
            out += series_samples([interpolate(snaps, t) for t in grid], self.series / 2, **meta)
        return out


# Runs inside a guest VM for the length of a trial: reads its kernel's counters on a grid and writes each reading
# down the SSH channel (no process started per reading: a probe must not make the context switches it counts).
GUEST_READER = """
import sys, time
t0, k = time.monotonic(), 0
while True:
    text = (open("/proc/stat").read() + "@@S\\n" + open("/proc/softirqs").read() + "@@N\\n" +
            open("/proc/net/dev").read() + "@@E\\n")
    sys.stdout.write(text)
    sys.stdout.flush()
    k += 1
    time.sleep(max(0.0, t0 + k * %r - time.monotonic()))
"""
GUEST_READ_S = 0.25
GUEST_START_S = 20.0  # python starting in a busy one-CPU guest


class _Stream:
    """One reader in a guest and the readings it sent, each stamped on this machine's clock when it arrived."""

    KEEP = 2400  # readings kept: 10 min at 0.25 s, far more than a trial

    def __init__(self, executor: Executor, interval: float, label: str):
        self.interval, self.error = interval, None
        self.snaps: list[Snapshot] = []
        self.rx: list[tuple[float, dict[str, float]]] = []
        self.got = threading.Condition()
        self.proc = executor.spawn(["python3", "-u", "-c", GUEST_READER % interval], label=f"procstat {label}")
        self.thread = threading.Thread(target=self._receive, name="vnetbench-guest-probe", daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive() and self.proc.poll() is None

    def _receive(self) -> None:
        stat, soft, dev, part = [], [], [], None
        for line in self.proc.stdout:
            if line == "@@S\n":
                part = soft
            elif line == "@@N\n":
                part = dev
            elif line == "@@E\n":
                t = time.time()
                snap = Snapshot(t, parse_proc_stat("".join(stat)), parse_softirqs("".join(soft)))
                with self.got:
                    self.rx.append((t, rx_packets("".join(dev))))
                    self.snaps.append(snap)
                    del self.snaps[:-self.KEEP], self.rx[:-self.KEEP]
                    self.got.notify_all()
                stat, soft, dev, part = [], [], [], None
            else:
                (stat if part is None else part).append(line)
        self.error = (self.proc.stderr.read() or "").strip()[-300:] if self.proc.stderr else None
        with self.got:
            self.got.notify_all()

    def wait_after(self, t: float, timeout: float) -> bool:
        """Wait for a reading that arrived after t."""
        with self.got:
            return self.got.wait_for(lambda: (self.snaps and self.snaps[-1].t > t) or not self.thread.is_alive(),
                                     timeout) and bool(self.snaps) and self.snaps[-1].t > t

    def since(self, t: float) -> tuple[list[Snapshot], list]:
        """The readings from the last one at or before t on."""
        with self.got:
            k = max([i for i, snap in enumerate(self.snaps) if snap.t <= t] or [0])
            return self.snaps[k:], self.rx[k:]

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except Exception:
            pass
        self.thread.join(timeout=10)


@register
class StreamedSystemProbe(SystemProbe):
    """SystemProbe's metrics for a guest kernel: one reader runs in the guest and streams its counters; each reading
    is stamped on this machine's clock when it arrives (the trial's one timebase). A command over SSH per reading
    would cost a one-CPU UML guest ~90 ms of its CPU each (measured: 105 ms per read), a third of the guest at
    0.25 s: the probe would eat the throughput it measures. The reader is kept for the guest's life and shared by the
    trials' probes (`shared`): starting python in a one-CPU guest for every trial cost each trial ~0.3 s."""

    kind = "streamed-system"
    shared = True

    def __init__(self, executor: Executor, interval: float = GUEST_READ_S, series: float = SERIES_S,
                 meta: dict | None = None, label: str = "guest"):
        super().__init__(executor, interval, series, meta=meta)
        self.label = label
        self._stream: _Stream | None = None
        self._t0 = 0.0
        self._rx: list = []

    def _open(self) -> _Stream:
        kept = getattr(self.executor, "_vb_procstat", None) if self.shared else None
        if kept is not None and kept.alive() and kept.interval == self.interval:
            return kept
        stream = _Stream(self.executor, self.interval, self.label)
        if self.shared:
            self.executor._vb_procstat = stream
        return stream

    def start(self) -> None:
        self._stream, self._t0 = self._open(), time.time()
        if not self._stream.wait_after(0.0, GUEST_START_S):
            self._stream.end()
            raise RuntimeError(f"probe of guest {self.label}: no reading within {GUEST_START_S:.0f} s"
                               f"{': ' + self._stream.error if self._stream.error else ''}")

    def stop(self, window=None) -> list[Sample]:
        if self._stream is None:
            raise RuntimeError(f"{type(self).__name__}.stop() before start()")
        end = window[1] if window else time.time()  # one reading after the window's end (often there already)
        self._stream.wait_after(end, 4 * self.interval + 2)
        self._snaps, self._rx = self._stream.since(self._t0)
        if not self.shared:
            self._stream.end()
        return self._samples(list(self._snaps), window)


@register
class GuestSystemProbe(StreamedSystemProbe):
    """A guest VM's own /proc/stat: its CPU shares, interrupts, context switches and softirqs, as SystemProbe's
    metrics with scope=vm and vm=<label>. Run in the VM's namespace, it also counts the packets the VM's own NIC
    received (if_rx_packets_per_s with scope=vm: what reached the VM, e.g. of a flood)."""

    kind = "vm-system"
    shared = False  # its reader runs in the VM's namespace, which the topology's teardown removes

    def __init__(self, executor: Executor, vm: str, interval: float = GUEST_READ_S, series: float = SERIES_S):
        super().__init__(executor, interval, series, meta={"scope": "vm", "vm": vm}, label=f"VM {vm}")

    def stop(self, window=None) -> list[Sample]:
        out = super().stop(window)
        start, end = span(self._rx, window)
        for dev in self._rx[-1][1] if end > start else ():
            a, b = value_at(self._rx, dev, start), value_at(self._rx, dev, end)
            if a is not None and b is not None:
                out.append(Sample.of("if_rx_packets_per_s", (b - a) / (end - start), interface=dev,
                                     **self.meta, window=[start, end]))
        return out


def rx_packets(text: str) -> dict[str, float]:
    """Packets received per interface from /proc/net/dev (loopback left out)."""
    out = {}
    for line in text.splitlines()[2:]:
        name, _, counts = line.partition(":")
        if counts.split() and name.strip() != "lo":
            out[name.strip()] = float(counts.split()[1])
    return out
