"""A constant synthetic CPU load inside the VMs (a tenant's own work), with stress-ng (0.15).

`stress-ng --cpu W --cpu-load P` keeps each of W workers busy P % of the time: a worker does one bogo operation,
measures how long it took, then sleeps in proportion. When the machine is contended an operation takes longer in
wall time, so the bogo operations done per second of wall time fall: that rate is how much work the tenant got
done, and how a noisy neighbour shows in a tenant's CPU. Usually a background workload (`background: true`).

stress-ng prints its metrics on stderr (`--metrics-brief`), one `metrc:` line per stressor, columns: bogo ops,
real time, usr time, sys time (seconds, summed over the workers), bogo ops/s (real time), bogo ops/s (usr+sys).
Later versions append columns; only the first five numbers are read.
"""
from __future__ import annotations

import re
import time
from typing import Literal, Sequence

from pydantic import Field

from ..core.sample import Metric, Sample
from . import register
from .base import Command, Endpoint, Pair, Params, Tool, Workload, WorkloadError, finish, stop

_METRICS = re.compile(r"metrc: \[\d+\] cpu\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
START_SLACK_S = 10  # stress-ng's own start and stop, on a loaded machine


def parse_stress_ng(text: str, workers: int, **meta) -> list[Sample]:
    """cpuload_ops_per_s (bogo ops per second of wall time, all workers) and cpuload_cpu_ratio (CPU time the
    load got per worker, 1.0 = one core) from stress-ng's --metrics-brief output."""
    for line in text.splitlines():
        if m := _METRICS.search(line):
            ops, real, usr, sys_, _ = (float(v) for v in m.groups())
            if real <= 0:
                break
            return [Sample.of("cpuload_ops_per_s", ops / real, **meta),
                    Sample.of("cpuload_cpu_ratio", (usr + sys_) / real / workers, **meta)]
    raise WorkloadError(f"stress-ng printed no cpu metrics: {text.strip()[-300:]}")


class CpuLoadParams(Params):
    type: Literal["cpuload"] = "cpuload"
    load: int = Field(50, ge=1, le=100, description="percent of one CPU each worker keeps busy (--cpu-load)")
    workers: int = Field(1, ge=1, le=16, description="busy processes in each VM (--cpu)")
    duration: int = Field(10, ge=1, le=3600, description="seconds the load runs (--timeout)")
    side: Literal["server", "client", "both"] = Field("server", description="which VM of each pair carries the load")


@register
class CpuLoad(Workload):
    kind = "cpuload"
    metrics = frozenset({"cpuload_cpu_ratio", "cpuload_ops_per_s"})
    Params = CpuLoadParams
    tool = "stress-ng"
    tools = {"stress-ng": Tool("stress-ng", ["stress-ng", "--version"], r"version (\S+)")}
    main_metric = "cpuload_ops_per_s"
    catalogue = (
        Metric("cpuload_ops_per_s", "1/s", "higher", "work a synthetic CPU load got done (stress-ng bogo ops per second)"),
        Metric("cpuload_cpu_ratio", "ratio", "none", "CPU time a synthetic load got, per worker (1.0 = one core)"),
    )

    @classmethod
    def describe(cls, p: dict) -> str:
        """'cpuload 50% x1': the share of a CPU each worker keeps busy, and the workers."""
        return f"{cls.kind} {p.get('load') or 50}% x{p.get('workers') or 1}"

    def expected_duration(self) -> float:
        return self.params.duration + 0.5

    def argv(self) -> list[str]:
        p = self.params
        # One fixed method (int64 arithmetic): the default cycles through methods of very different cost per op.
        return ["stress-ng", "--cpu", str(p.workers), "--cpu-load", str(p.load), "--cpu-method", "int64",
                "--timeout", f"{p.duration}s", "--metrics-brief",
                # stress-ng maps a buffer the size of the last-level cache at start; a guest kernel (UML) shows no
                # cache sizes and that mmap fails: size it from L1 (the cpu stressor does not use it)
                "--cache-level", "1"]

    def places(self, pairs: Sequence[Pair]) -> list[tuple[Pair, str, Endpoint]]:
        """(pair, side, endpoint) for every VM that carries a load; a VM shared by several pairs (target_pair)
        gets one load, not one per pair."""
        sides = ("server", "client") if self.params.side == "both" else (self.params.side,)
        out, seen = [], set()
        for pair in pairs:
            for side in sides:
                end = getattr(pair, side)
                if end.node.name not in seen:
                    seen.add(end.node.name)
                    out.append((pair, side, end))
        return out

    def commands(self, pairs: Sequence[Pair]) -> list[Command]:
        return [Command(end.node.name, self.argv(), background=True) for _, _, end in self.places(pairs)]

    def run(self, pairs: Sequence[Pair]) -> list[Sample]:
        procs = []
        try:
            for pair, side, end in self.places(pairs):
                procs.append((pair, side, end, end.node.spawn(self.argv(), label=f"stress-ng {side} pair {pair.index}")))
            if self.early is not None:  # stress-ng prints its metrics when interrupted: over the time it ran
                self.early.add([proc for *_, proc in procs])
            self.signal_running([proc for *_, proc in procs])
            deadline = time.monotonic() + self.params.duration + START_SLACK_S
            samples = []
            for pair, side, end, proc in procs:
                _, err = finish(proc, max(deadline - time.monotonic(), 1.0), f"stress-ng {side} pair {pair.index}")
                samples += parse_stress_ng(err, self.params.workers, pair=pair.index, side=side, node=end.label)
            return samples
        finally:
            for *_, proc in procs:
                stop(proc)
