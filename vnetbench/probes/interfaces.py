"""Packet and drop counters of the interfaces of one network namespace, from `ip -s -j link show`."""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..core.sample import Metric, Sample
from ..system.executor import CommandError, Executor
from . import register
from .base import Probe, Sampler, span, value_at


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


FIELDS = ("rx_packets", "tx_packets", "rx_dropped", "tx_dropped")


@register
class InterfaceProbe(Probe):
    """Per-interface packet rates and drops over the window in the executor's namespace (lo skipped), from
    readings every `interval` s interpolated at the window's edges."""

    kind = "interfaces"
    catalogue = (
        Metric("if_rx_packets_per_s", "1/s", "none", "packets received per second on an interface"),
        Metric("if_tx_packets_per_s", "1/s", "none", "packets sent per second on an interface"),
        Metric("if_drops", "1", "lower", "packets dropped on an interface during the trial"),
    )

    def __init__(self, executor: Executor, interval: float | None = 1.0):
        self.executor = executor
        self.elapsed: float | None = None
        self._sampler = Sampler(self._read, interval, f"interface-probe-{executor.name}")
        self._started = False

    def _read(self) -> dict[str, float]:
        got = self.executor.link_counters()  # a machine's agent reads them over rtnetlink, with no process
        links = {d["ifname"]: IfCounters(d["ifindex"], d["rx_packets"], d["tx_packets"], d["rx_dropped"], d["tx_dropped"])
                 for d in got} if got is not None else parse_ip_link_json(self.executor.run_ip(["-s", "-j", "link", "show"]).stdout)
        # The ifindex is in the key: an interface recreated under the same name restarts its counters from zero.
        return {f"{name}/{c.ifindex}/{f}": getattr(c, f) for name, c in links.items() if name != "lo" for f in FIELDS}

    def start(self) -> None:
        self._sampler.start()
        self._started = True

    def stop(self, window=None) -> list[Sample]:
        if not self._started:
            raise RuntimeError("InterfaceProbe.stop() before start()")
        try:
            points = self._sampler.stop()
        except CommandError:  # the namespace is gone: nothing to report
            return []
        start, end = span(points, window)
        self.elapsed = dt = end - start
        if dt <= 0:
            return []
        out = []
        for key in sorted({k.rsplit("/", 1)[0] for k in points[0][1]}):
            d = {f: _delta(points, f"{key}/{f}", start, end) for f in FIELDS}
            if any(v is None for v in d.values()):
                continue
            meta = {"interface": key.split("/")[0], "node": self.executor.name, "window": [start, end]}
            out += [Sample.of("if_rx_packets_per_s", d["rx_packets"] / dt, **meta),
                    Sample.of("if_tx_packets_per_s", d["tx_packets"] / dt, **meta),
                    Sample.of("if_drops", round(d["rx_dropped"] + d["tx_dropped"]), **meta)]
        return out


def _delta(points, key: str, start: float, end: float) -> float | None:
    a, b = value_at(points, key, start), value_at(points, key, end)
    return None if a is None or b is None or key not in points[-1][1] else b - a
