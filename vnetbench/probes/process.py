"""CPU time of named processes (a datapath daemon, a VM's emulator) from /proc/PID/stat."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from ..core.sample import Metric, Sample
from ..system.executor import CommandError, Executor
from . import register
from .base import Probe, Sampler, span, value_at


@dataclass(frozen=True)
class PidStat:
    state: str
    cpu_ticks: int   # utime + stime: the process-level line sums all its threads, live and exited
    start: int       # start time since boot in ticks: tells a reused pid from the original process


def parse_pid_stat(text: str) -> PidStat:
    # The command name may contain spaces and parentheses: fields start after the last ')'.
    f = text.rsplit(")", 1)[1].split()
    return PidStat(state=f[0], cpu_ticks=int(f[11]) + int(f[12]), start=int(f[19]))


@register
class ProcessProbe(Probe):
    """process_cpu_ratio per named pid over the window (1.0 = one full core), from readings every `interval` s
    interpolated at the window's edges. A process not there at both edges of the window gives no sample."""

    kind = "process"
    catalogue = (
        Metric("process_cpu_ratio", "ratio", "none", "CPU time of one datapath process (1.0 = one core)"),
    )

    def __init__(self, executor: Executor, pids: Mapping[str, int], interval: float | None = 0.5):
        self.executor, self.pids = executor, dict(pids)
        self.clk_tck = os.sysconf("SC_CLK_TCK")
        self._starts: dict[str, int] = {}
        self._sampler = Sampler(self._read_all, interval, "process-probe")

    def _read(self, pid: int) -> PidStat | None:
        try:
            st = parse_pid_stat(self.executor.read_text(f"/proc/{pid}/stat"))
        except (OSError, CommandError):
            return None
        return None if st.state in ("Z", "X") else st  # a zombie has exited: its window is incomplete

    def _read_all(self) -> dict[str, float]:
        out = {}
        for name, pid in self.pids.items():
            st = self._read(pid)
            # A different start time means the pid was reused by another process: not the one we watch.
            if st is not None and self._starts.setdefault(name, st.start) == st.start:
                out[name] = st.cpu_ticks / self.clk_tck
        return out

    def start(self) -> None:
        self._starts = {}
        self._sampler.start()

    def stop(self, window=None) -> list[Sample]:
        points = self._sampler.stop()
        start, end = span(points, window)
        out = []
        for name in self.pids:
            a, b = value_at(points, name, start), value_at(points, name, end)
            if a is None or b is None or end <= start or name not in points[-1][1]:
                continue
            out.append(Sample.of("process_cpu_ratio", (b - a) / (end - start), process=name, pid=self.pids[name],
                                 window=[start, end]))
        return out
