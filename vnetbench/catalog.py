"""What the plug-ins declare, collected from their registries: every metric (sample.METRICS, which each workload
and probe fills as it registers), every tool a workload needs, each workload's main metric and the metrics that
are one sample per event (distributions). A new workload or probe is one module: nothing here names one."""
from __future__ import annotations

from . import probes, workloads
from .core.sample import METRICS, Metric  # noqa: F401 (METRICS: complete once the registries below have loaded)
from .workloads.base import Tool

WORKLOADS = workloads.load_all()
PROBES = probes.load_all()


def workload_tools() -> dict[str, Tool]:
    """tool -> how to find it and read its version, for every registered workload."""
    return {name: tool for cls in WORKLOADS.values() for name, tool in cls.tools.items()}


def main_metric(kind: str, params) -> str:
    """What adaptive repetitions judge a workload by: its class says, for its parameters."""
    cls = WORKLOADS.get(kind)
    return cls.main_metric_for(params) if cls is not None else "throughput_bps"


def distributions() -> frozenset[str]:
    """Metrics with one sample per event (an echo, a request): summarised by their median and tails."""
    return frozenset(name for name, m in METRICS.items() if m.per_event)
