"""The hypervisor's side of a guest VM: the CPU this machine spends running it, per VM and per trial window. A guest
kind says which of its processes and threads are the VM's and what each does (GuestKind.host_cpu: the emulator's
vCPU threads, its I/O and main-loop threads, vhost's kernel workers, its file servers); this probe reads them around
the window. Its samples are their own scope (scope=hypervisor): the vantage point of S5's Dom0 and S1's host CPU,
never pooled with the VM's own counters (scope=vm) or the machine's."""
from __future__ import annotations

from typing import Callable, Mapping

from ..core.sample import Metric, Sample
from . import register
from .base import Probe, Sampler, span, value_at

PARTS = ("all", "vcpu", "io", "vhost", "fs")  # what GuestKind.host_cpu may report, in reading order


@register
class HypervisorProbe(Probe):
    """hypervisor_cpu_ratio per guest VM and part over the window (1.0 = one of this machine's cores)."""

    kind = "hypervisor"
    catalogue = (
        Metric("hypervisor_cpu_ratio", "ratio", "none", "CPU time this machine spent running one guest VM (1.0 = "
                                                        "one core): all of it, its vCPU threads, its emulator's I/O "
                                                        "threads, vhost, its file servers"),
    )

    def __init__(self, readers: Mapping[str, Callable[[], dict[str, float]]], interval: float | None = 0.5):
        """readers: VM label -> a function giving that VM's CPU seconds so far, by part."""
        self.readers = dict(readers)
        self._sampler = Sampler(self._read_all, interval, "hypervisor-probe")

    def _read_all(self) -> dict[str, float]:
        out = {}
        for vm, read in self.readers.items():
            try:
                parts = read()
            except OSError:  # the guest's process is gone: no reading, so no sample for its window
                continue
            out.update({f"{vm}\0{part}": seconds for part, seconds in parts.items()})
        return out

    def start(self) -> None:
        self._sampler.start()

    def stop(self, window=None) -> list[Sample]:
        points = self._sampler.stop()
        if not points:
            return []
        start, end = span(points, window)
        out = []
        for key in sorted(points[-1][1], key=_order):
            a, b = value_at(points, key, start), value_at(points, key, end)
            if a is None or b is None or end <= start:
                continue
            vm, part = key.split("\0")
            out.append(Sample.of("hypervisor_cpu_ratio", max(0.0, b - a) / (end - start), scope="hypervisor", vm=vm,
                                 part=part, window=[start, end]))
        return out


def _order(key: str) -> tuple:
    vm, part = key.split("\0")
    return vm, PARTS.index(part) if part in PARTS else len(PARTS), part
