"""CPU time of named processes (a datapath daemon, a VM's emulator) from /proc/PID/stat."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Mapping

from ..executor import CommandError, Executor
from ..sample import Sample
from . import register
from .base import Probe


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
    """process_cpu_ratio per named pid (1.0 = one full core). A process gone by the end gives no sample."""

    kind = "process"

    def __init__(self, executor: Executor, pids: Mapping[str, int]):
        self.executor, self.pids = executor, dict(pids)
        self.clk_tck = os.sysconf("SC_CLK_TCK")
        self._first: dict[str, tuple[float, PidStat]] = {}

    def _read(self, pid: int) -> tuple[float, PidStat] | None:
        t = time.monotonic()
        try:
            st = parse_pid_stat(self.executor.read_text(f"/proc/{pid}/stat"))
        except (OSError, CommandError):
            return None
        return None if st.state in ("Z", "X") else (t, st)  # a zombie has exited: its window is incomplete

    def start(self) -> None:
        self._first = {name: snap for name, pid in self.pids.items() if (snap := self._read(pid))}

    def stop(self) -> list[Sample]:
        out = []
        for name, (t0, a) in self._first.items():
            last = self._read(self.pids[name])
            if last is None or last[1].start != a.start or last[0] <= t0:
                continue
            ratio = (last[1].cpu_ticks - a.cpu_ticks) / self.clk_tck / (last[0] - t0)
            out.append(Sample.of("process_cpu_ratio", ratio, process=name, pid=self.pids[name]))
        return out
