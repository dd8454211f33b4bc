"""Packet and drop counters of the interfaces of one network namespace, from `ip -s -j link show`."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from ..executor import CommandError, Executor
from ..sample import Sample
from . import register
from .base import Probe


@dataclass(frozen=True)
class IfCounters:
    ifindex: int
    rx_packets: int
    tx_packets: int
    rx_dropped: int
    tx_dropped: int


def parse_ip_link_json(text: str) -> dict[str, IfCounters]:
    out = {}
    for link in json.loads(text):
        st = link.get("stats64") or link.get("stats")
        if st:
            rx, tx = st["rx"], st["tx"]
            out[link["ifname"]] = IfCounters(link["ifindex"], rx["packets"], tx["packets"],
                                             rx["dropped"], tx["dropped"])
    return out


@register
class InterfaceProbe(Probe):
    """Per-interface packet rates and drops over the window in the executor's namespace (lo skipped)."""

    kind = "interfaces"

    def __init__(self, executor: Executor):
        self.executor = executor
        self.elapsed: float | None = None
        self._first: tuple[float, dict[str, IfCounters]] | None = None

    def _read(self) -> tuple[float, dict[str, IfCounters]]:
        t = time.monotonic()
        return t, parse_ip_link_json(self.executor.run(["ip", "-s", "-j", "link", "show"]).stdout)

    def start(self) -> None:
        self._first = self._read()

    def stop(self) -> list[Sample]:
        if self._first is None:
            raise RuntimeError("InterfaceProbe.stop() before start()")
        try:
            t1, last = self._read()
        except CommandError:  # the namespace is gone: nothing to report
            return []
        t0, first = self._first
        self.elapsed = dt = t1 - t0
        out = []
        for name, a in first.items():
            b = last.get(name)
            # A different ifindex means the interface was recreated: its counters restarted from zero.
            if name == "lo" or b is None or b.ifindex != a.ifindex:
                continue
            meta = {"interface": name, "node": self.executor.name}
            out += [Sample.of("if_rx_packets_per_s", (b.rx_packets - a.rx_packets) / dt, **meta),
                    Sample.of("if_tx_packets_per_s", (b.tx_packets - a.tx_packets) / dt, **meta),
                    Sample.of("if_drops", (b.rx_dropped + b.tx_dropped) - (a.rx_dropped + a.tx_dropped), **meta)]
        return out
