"""Where the CPU went: system-wide stack sampling with the kernel's profiler over exactly the tool's window.

`perf record -a -g -e cpu-clock` samples every CPU, idle included, every PERIOD_NS of CPU time (the cpu-clock
software event: hardware counters are often not there in a VM), kernel and user stacks (frame pointers), stamped on
CLOCK_MONOTONIC. It runs from before the tool starts to after it ends; only the samples inside the tool's window
(converted to that clock) are kept, folded (one line per distinct stack, stackcollapse-perf's format, kernel frames
marked `_[k]`) and attributed to mechanisms (mechanisms.py). Each sample stands for PERIOD_NS of one CPU's time, so a
mechanism's samples x PERIOD_NS is its CPU time.

Where it cannot run, the trial says why instead (runner: profile_skipped): a User-Mode Linux guest's kernel is one
stripped process of this machine, with nothing in it to attribute; a testbed host is not profiled from here.
"""
from __future__ import annotations

import logging
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
import zlib
from collections import Counter

from ..core.sample import Sample
from ..system.executor import Executor, LocalExecutor
from . import mechanisms, register
from .base import Probe
from .process import parse_pid_stat

log = logging.getLogger(__name__)

# 2 ms of CPU per sample (500 per CPU-second), a little off the round figure so the sampling does not run in step
# with the kernel's periodic timers. bench/profile_overhead.py measures what this costs the traffic.
PERIOD_NS = 1_999_993
START_S = 20.0     # perf setting up its events on every CPU of a busy machine
MIN_COVERAGE = 0.95  # a profile missing more of the tool's window is not the window's: the trial says so instead
STOP_S = 30.0      # perf writing its file out after SIGINT
SWITCH_S = 5.0     # perf switching its events on or off on every CPU
SCRIPT_S = 180.0   # perf script resolving symbols of a busy trial
_HEADER = re.compile(r"^(?P<comm>.*?)\s+(?:(?P<pid>-?\d+)/)?(?P<tid>-?\d+)\s+(?P<time>\d+\.\d+):")
OWN = "vnetbench[self]"  # the root frame of this process's own samples (its probes' threads), whatever their comm
_FRAME = re.compile(r"^\s*(?P<ip>[0-9a-f]+)\s+(?P<sym>.*?)(?:\s+\((?P<dso>[^()]*)\))?$")


def unavailable(executor: Executor | None = None) -> str | None:
    """Why perf cannot profile here (None: it can)."""
    if shutil.which("perf") is None:
        return "perf is not installed (Debian package linux-perf)"
    return None


def monotonic_offset() -> float:
    """time.time() - CLOCK_MONOTONIC now: converts the tool's window to perf's timestamps."""
    a = time.time()
    m = time.monotonic()
    return (a + time.time()) / 2 - m


def parse_script(text: str, start: float, end: float, own_pid: int | None = None) -> tuple[Counter, float, float]:
    """Folded stacks of the samples with start <= time <= end (perf's clock), and the first and last sample times
    seen at all (to tell whether the profile covered the window). Samples of own_pid (vnetbench) are rooted at OWN:
    other Python processes on the machine are not vnetbench's."""
    folded: Counter = Counter()
    first, last = float("inf"), float("-inf")
    comm, t, frames = None, 0.0, []

    def flush():
        if comm is not None and start <= t <= end:
            folded[fold(comm, frames)] += 1

    for line in text.splitlines():
        if not line.strip():
            flush()
            comm, frames = None, []
            continue
        if line[0] not in " \t":
            flush()
            m = _HEADER.match(line)
            comm, frames = (m["comm"].strip(), []) if m else (None, [])
            if m and own_pid is not None and m["pid"] == str(own_pid):
                comm = OWN
            if m:
                t = float(m["time"])
                first, last = min(first, t), max(last, t)
            continue
        if comm is not None and (f := _FRAME.match(line)):
            frames.append((f["sym"], f["dso"] or ""))
    flush()
    return folded, first, last


def _frame(sym: str, dso: str) -> str:
    kernel = dso.startswith("[kernel") or dso.endswith(".ko") or dso.startswith("[") and dso != "[unknown]"
    if sym.startswith("[unknown]") or not sym:
        sym = f"[{os.path.basename(dso)}]" if dso and dso != "[unknown]" else "[unknown]"
    sym = sym.split("+0x")[0].replace(";", ":").replace(" ", "_")
    return sym + "_[k]" if kernel else sym


def fold(comm: str, frames: list[tuple[str, str]]) -> str:
    """'comm;root;...;leaf' (frames arrive leaf first); runs of unresolved user frames collapse into one."""
    out: list[str] = []
    for sym, dso in reversed(frames):
        f = _frame(sym, dso)
        if not (out and out[-1] == f and f.startswith("[")):
            out.append(f)
    return ";".join([comm.replace(";", ":").replace(" ", "_") or "?", *out])


def _cpu_seconds(pid: int) -> float | None:
    """A process's CPU time so far (user + system), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return parse_pid_stat(fh.read()).cpu_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def compress(folded: dict[str, int]) -> bytes:
    return zlib.compress("".join(f"{k} {v}\n" for k, v in sorted(folded.items())).encode(), 9)


def decompress(blob: bytes) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in zlib.decompress(blob).decode().splitlines():
        stack, _, n = line.rpartition(" ")
        out[stack] = out.get(stack, 0) + int(n)
    return out


@register
class ProfileProbe(Probe):
    """profile_share_ratio per mechanism over the window, with the mechanism's CPU seconds in metadata; the folded
    stacks stay on the probe (`folded`) for the runner to store with the trial."""

    kind = "profile"

    def __init__(self, executor: Executor | None = None, period_ns: int = PERIOD_NS):
        self.executor = executor or LocalExecutor()
        self.period_ns = period_ns
        self.folded: dict[str, int] = {}
        self.coverage: float | None = None
        self.started = False
        self.own_cpu_s: float | None = None  # perf record's own CPU time until it was told to stop
        self.note: str | None = None  # why this trial's profile was left out, when it was
        self._dir: str | None = None
        self._proc: subprocess.Popen | None = None
        self._fifo: tuple[int, int] | None = None  # perf's control FIFO and its acknowledgements

    @property
    def data(self) -> str:
        return os.path.join(self._dir or "", "perf.data")

    def start(self) -> None:
        """Start perf with its events disabled, enable them through its control FIFO and wait for its
        acknowledgement: from then on every CPU is sampled (on a busy machine perf took over a second to get there,
        and a trial profiled from its file appearing missed a quarter of its window)."""
        # in the run's work directory when there is one: `clean` removes it after a crash, perf.data with it
        work = getattr(getattr(self.executor, "ledger", None), "work", None)
        if work is not None:
            os.makedirs(work, mode=0o700, exist_ok=True)
        self._dir = tempfile.mkdtemp(prefix="perf-", dir=work)
        ctl, ack = os.path.join(self._dir, "ctl"), os.path.join(self._dir, "ack")
        os.mkfifo(ctl, 0o600)
        os.mkfifo(ack, 0o600)
        argv = ["perf", "record", "-a", "-g", "-e", "cpu-clock", "-c", str(self.period_ns), "-k", "monotonic",
                "--no-buildid", "--no-buildid-cache", "-q", "-D", "-1", "--control", f"fifo:{ctl},{ack}",
                "-o", self.data]
        # O_RDWR: opening a FIFO so never blocks, whether perf has opened its end yet or not
        self._fifo = (os.open(ctl, os.O_RDWR), os.open(ack, os.O_RDWR))
        try:
            self._proc = self.executor.spawn(argv, label="perf record")
            self._offset = monotonic_offset()
            self.started = self.switch(True, START_S)
        except OSError:
            self._close()
            raise
        if not self.started:
            log.warning("profile: perf did not acknowledge its start within %.0f s", START_S)

    def switch(self, on: bool, timeout: float = SWITCH_S) -> bool:
        """Sampling on or off through perf's control FIFO, acknowledged before it returns (a workload that marks
        windows of its own keeps perf quiet between them: an ndrpdr search's minutes are not written out)."""
        if self._fifo is None or self._proc is None:
            return False
        ctl_fd, ack_fd = self._fifo
        os.write(ctl_fd, b"enable\n" if on else b"disable\n")
        deadline, ready = time.monotonic() + timeout, []
        while not ready and self._proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([ack_fd], [], [], 0.1)
        return bool(ready) and os.read(ack_fd, 64).startswith(b"ack")

    def _close(self) -> None:
        fds, self._fifo = self._fifo, None
        for fd in fds or ():
            os.close(fd)

    def _halt(self) -> str:
        """Stop perf record; its stderr ('' when it ended well)."""
        proc, self._proc = self._proc, None
        self._close()
        if proc is None:
            return "not started"
        if proc.poll() is None:
            self.own_cpu_s = _cpu_seconds(proc.pid)
            os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return f"perf record did not stop within {STOP_S:.0f} s"
        return "" if proc.returncode in (0, -signal.SIGINT, 130) else (err or "").strip()[-300:]

    def stop(self, window=None, parts: list[tuple[dict, tuple[float, float]]] | None = None) -> list[Sample]:
        """The mechanisms' shares over the tool's window, or over each of `parts` (labels, window) when the workload
        marks windows of its own (ndrpdr: the trial at each NDR found), each part's samples with its labels."""
        script = self._script()
        if script is None:
            return []
        if parts is not None and not parts:
            self.note = "the workload ran no trial to profile (ndrpdr profiles the trial at an NDR found: none was)"
            return []
        out, total, coverages = [], Counter(), []
        for labels, win in parts or [({}, window)]:
            folded, coverage = self._fold(script, win)
            coverages.append(coverage)
            if coverage is not None and coverage < MIN_COVERAGE:
                self.note = (f"the profile covered {coverage:.0%} of the tool's window (perf started or stopped "
                             "late): left out")
                continue
            total.update(folded)
            out += self.samples(win, folded, coverage, labels)
        self.folded = dict(total)
        known = [c for c in coverages if c is not None]
        self.coverage = min(known) if known else None
        return out

    def _script(self) -> str | None:
        """perf script's text of the whole recording (None: the note says why there is none)."""
        try:
            err = self._halt()
            if err or not os.path.exists(self.data):
                self.note = f"perf record failed: {err or 'it wrote no data'}"
                log.warning("profile: %s", self.note)
                return None
            return subprocess.run(["perf", "script", "-i", self.data, "-F", "comm,pid,tid,time,ip,sym,dso"],
                                  capture_output=True, text=True, timeout=SCRIPT_S).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            self.note = f"perf failed: {exc}"
            log.warning("profile: %s", exc)
            return None
        finally:
            if self._dir:
                shutil.rmtree(self._dir, ignore_errors=True)

    def _fold(self, script: str, window) -> tuple[Counter, float | None]:
        """The folded stacks inside `window` (time.time()), and the share of it the recording covered."""
        w0, w1 = window if window else (float("-inf"), float("inf"))
        folded, first, last = parse_script(script, w0 - self._offset, w1 - self._offset, os.getpid())
        if not (window and last > first and w1 > w0):
            return folded, None
        covered = min(last, w1 - self._offset) - max(first, w0 - self._offset)
        return folded, max(0.0, covered / (w1 - w0))

    def samples(self, window, folded: dict[str, int], coverage: float | None, labels: dict) -> list[Sample]:
        per = mechanisms.attribute_folded(folded)
        total = sum(per.values())
        if not total:
            return []
        meta = {"scope": "machine", "window": list(window) if window else None, "profile_samples": total,
                "coverage": coverage, "profiler_cpu_s": self.own_cpu_s} | labels
        # every mechanism of the table, those without a sample at 0: a trial where VXLAN took nothing counts as 0
        every = sorted(set(mechanisms.labels()) | set(per))
        return [Sample.of("profile_share_ratio", per.get(m, 0) / total, mechanism=m,
                          cpu_s=per.get(m, 0) * self.period_ns / 1e9, **meta) for m in every]


def for_trial(sc, topo, wl, site=None) -> tuple[ProfileProbe | None, str | None]:
    """The profiler for this trial, or why there is none (None, None: not asked for)."""
    if not getattr(wl.params, "profile", False):
        return None, None
    if sc.levels.get("kernel") in ("guest", "guest-per-host"):
        return None, ("the hosts run inside a User-Mode Linux guest, whose kernel is one stripped process of this "
                      "machine: its CPU cannot be attributed to mechanisms")
    if sc.levels.get("kernel") == "qemu":
        return None, ("the hosts run inside qemu guests, whose kernels this machine's profiler does not see (it sees "
                      "qemu's own threads): their CPU cannot be attributed to mechanisms")
    if site is not None:
        return None, "the profiler runs on this machine only; a testbed's hosts are not profiled"
    if why := unavailable():
        return None, why
    return ProfileProbe(LocalExecutor(topo.ledger)), None
