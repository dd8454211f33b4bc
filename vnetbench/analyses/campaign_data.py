"""A campaign's samples arranged for a study's analysis: by scenario, by workload entry of the spec, by metric.

Only trials that finished ok count; samples of background workloads (role=background: a flood, a CPU load) are
kept apart from the foreground ones. Every analysis cell that has no data says why, in the words of
`missing_text` ("n/a (skipped: reason)").
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

from ..store import Store


@dataclass
class Point:
    value: float
    meta: dict
    trial: int


@dataclass
class CampaignData:
    scenarios: dict[int, dict]                                  # idx -> scenario row (labels, status, reason, ...)
    trials: dict[int, dict]                                     # trial id -> trial row (params, status, workload)
    params: dict[tuple[int, int], dict] = field(default_factory=dict)  # (scenario, workload entry) -> params + _kind
    points: dict[tuple[int, int, str, bool], list[Point]] = field(default_factory=lambda: defaultdict(list))
    # (scenario, workload entry, metric, background) -> points of the trials that finished ok

    def values(self, scenario: int, workload: int, metric: str, background: bool = False,
               where: Callable[[dict], bool] | None = None) -> list[float]:
        return [p.value for p in self.points.get((scenario, workload, metric, background), [])
                if where is None or where(p.meta)]

    def entries(self, kind: str | None = None) -> dict[int, dict]:
        """Workload entry (index in the spec) -> its parameters, as run in the campaign's first scenario that ran it."""
        out: dict[int, dict] = {}
        for (_, w), p in sorted(self.params.items()):
            if kind is None or p["_kind"] == kind:
                out.setdefault(w, p)
        return out

    def failed_trials(self, scenario: int, workload: int | None = None) -> list[dict]:
        return [t for t in self.trials.values() if t["scenario"] == scenario and t["status"] != "ok"
                and (workload is None or t["workload"] == workload)]


def load(store: Store, cid: int) -> CampaignData:
    data = CampaignData({s["idx"]: s for s in store.scenarios(cid)}, {t["id"]: t for t in store.trials(cid)})
    for t in data.trials.values():
        data.params.setdefault((t["scenario"], t["workload"]), t["params"] | {"_kind": t["kind"]})
    for row in store.samples(cid):
        trial = data.trials[row["trial"]]
        if trial["status"] != "ok":
            continue
        background = row["metadata"].get("role") == "background"
        data.points[(row["scenario"], trial["workload"], row["metric"], background)].append(
            Point(row["value"], row["metadata"], row["trial"]))
    return data


def missing_text(scenario: dict | None, data: CampaignData | None = None, workload: int | None = None) -> str:
    """Why a scenario has no numbers, for a table cell: "n/a (skipped: reason)" and the like."""
    if scenario is None:
        return "n/a (not in this campaign)"
    status, reason = scenario["status"], scenario.get("reason") or ""
    if status == "skipped":
        return f"n/a (skipped: {reason})"
    if status == "failed":
        return f"n/a (failed: {reason})"
    if status in ("pending", "running"):
        return "n/a (not run: the campaign was interrupted)"
    failed = data.failed_trials(scenario["idx"], workload) if data is not None else []
    if failed:
        return f"n/a (trials failed: {failed[0].get('error') or 'no error recorded'})"
    return "n/a (no samples)"
