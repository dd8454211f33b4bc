"""A lab's history (`vnetbench trend`): per scenario and metric, the campaigns of one or more results files in the
order they ran, grouped where the level changes.

The grouping is FD.io CSIT's change detection, the `jumpavg` library: the split of the series into groups whose
description (each a normal population) is shortest (minimum description length). Each campaign enters as its trials
(one value per trial), so a campaign of many trials weighs more than one of few. A change is the step between two
neighbouring groups: its size is the later group's mean over the earlier's with Fieller's 95 % interval of that
ratio over their trials; it is a regression when the metric moved the way that is worse (lower throughput, higher
latency). Scenarios match across campaigns by their levels and workload, as in `compare`; a changed implementation
(a datapath the machine ran differently) or a changed kernel or tool version between two campaigns is an annotation
on the series, so a step that coincides with one says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..catalog import METRICS
from ..results import dataset, stats
from ..results.store import Campaign, Store
from .compare import Side, ratio_parts, trial_values

VERSIONS = ("ovs-vswitchd", "charon", "wg", "wireguard-go", "iperf3", "netperf", "ip")


@dataclass
class Point:
    store: str
    campaign: Campaign
    values: list[float]
    implementation: dict
    parts: list[tuple[float, float]] | None = None   # each trial's (CPU seconds, work) of a RATIO_OF_SUMS metric

    @property
    def mean(self) -> float:
        return _mean([self])


@dataclass
class Change:
    at: int                 # index of the first point of the later group
    before: float           # the earlier group's mean
    after: float            # the later group's mean
    ratio: float
    ci: tuple[float, float]
    worse: bool

    @property
    def kind(self) -> str:
        return "regression" if self.worse else "progression"


@dataclass
class Series:
    scenario: dict[str, str]
    workload: str
    metric: str
    what: str                               # a process or direction the row measures, '' for the workload itself
    points: list[Point] = field(default_factory=list)
    groups: list[tuple[int, int]] = field(default_factory=list)   # [start, end) of each group's points
    changes: list[Change] = field(default_factory=list)
    notes: dict[int, list[str]] = field(default_factory=dict)     # point index -> what changed before it

    @property
    def better(self) -> str:
        m = METRICS.get(self.metric)
        return m.better if m else "higher"

    @property
    def newest_regression(self) -> Change | None:
        """The last change when it starts at the newest campaign and is a regression: what a CI gate fails on."""
        last = self.changes[-1] if self.changes else None
        return last if last is not None and last.worse and last.at == len(self.points) - 1 else None


# The level a factor added later had in campaigns stored before it existed: a history does not break at the upgrade.
LEGACY_LABELS = {"offloads": "on", "steering": "default", "irq_affinity": "default"}  # nothing was changed


def history(stores: list[Store], metrics: list[str] | None = None, where: dict[str, str] | None = None) -> list[Series]:
    """Every scenario x workload x metric seen in two or more campaigns, its points in the order they ran, grouped."""
    runs = sorted(((s, c) for s in stores for c in s.campaigns() if c.status in ("done", "interrupted")),
                  key=lambda sc: sc[1].created)
    found: dict[tuple, Series] = {}
    previous_env: dict[tuple, dict] = {}
    for store, camp in runs:
        stored = {s["idx"]: s for s in store.scenarios(camp.id)}
        (values,) = trial_values([Side(store, camp)])
        (parts,) = ratio_parts([Side(store, camp)])
        for (idx, metric, workload, what), vals in values.items():
            sc = stored.get(idx)
            labels = levels(sc["labels"] if sc else {})
            if sc is None or (metrics and metric not in metrics) or len(vals) < 1 \
                    or any(str(labels.get(k)) != v for k, v in (where or {}).items()):
                continue
            key = (match_key(labels), workload, metric, what)
            series = found.setdefault(key, Series(labels, workload, metric, what))
            got = parts.get((idx, metric, workload, what))
            series.points.append(Point(str(store.path), camp, list(vals), sc.get("implementation") or {},
                                       got if got and len(got) == len(vals) else None))
            env = facts(camp, sc.get("implementation") or {})
            if key in previous_env and (moved := changed(previous_env[key], env)):
                series.notes[len(series.points) - 1] = moved
            previous_env[key] = env
    out = [s for s in found.values() if len(s.points) >= 2]
    for s in out:
        _classify(s)
    return out


def levels(labels: dict) -> dict:
    """A scenario's levels as campaigns are matched on them: a factor added later at its level before it existed."""
    return LEGACY_LABELS | labels


def match_key(labels: dict) -> tuple:
    """What makes two campaigns' scenarios the same one (here, in `report A B` and in `compare`'s terms): their
    levels, every factor of them."""
    return tuple(sorted(levels(labels).items()))


def facts(camp: Campaign, implementation: dict) -> dict[str, str]:
    """What a scenario ran on, as a change between two campaigns is told: the implementation of each datapath
    element, the kernel, the versions of the tools that carry or measure the packets."""
    env = camp.environment or {}
    tools = env.get("tools") or {}
    facts = {f"implementation {k}": str(v) for k, v in implementation.items()}
    facts["kernel"] = str(env.get("kernel", ""))
    facts.update({k: str(tools[k]) for k in VERSIONS if k in tools})
    return facts


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return [f"{k}: {before.get(k, '—')} -> {after.get(k, '—')}" for k in sorted(set(before) | set(after))
            if before.get(k) != after.get(k)]


def _classify(s: Series) -> None:
    """jumpavg's groups over the campaigns (each its trials), and the step between each two neighbours."""
    import jumpavg
    values = [p.values for p in s.points]
    groups = jumpavg.classify(values)
    start = 0
    for g in groups:
        s.groups.append((start, start + len(g.run_list)))
        start += len(g.run_list)
    for (a0, a1), (b0, b1) in zip(s.groups, s.groups[1:]):
        before, after = _summary(s.points[a0:a1]), _summary(s.points[b0:b1])
        mb, ma = before.mean, after.mean
        ratio = ma / mb if mb else math.nan
        ci = stats.ratio_ci(before, after) if min(before.n, after.n) >= 2 else (math.nan, math.nan)
        worse = ma < mb if s.better == "higher" else ma > mb
        s.changes.append(Change(b0, mb, ma, ratio, ci, worse))


def _summary(points: list[Point]) -> stats.Summary:
    """The trials of these campaigns; CPU per unit of work with its mean the ratio of their sums (a trial that
    delivered almost nothing weighs what it delivered, as in show and compare)."""
    got = stats.summarize([v for p in points for v in p.values])
    if all(p.parts for p in points):
        return dataset.ratio_of_sums(got, [x for p in points for x in p.parts])
    return got


def _mean(points: list[Point]) -> float:
    return _summary(points).mean


def _name(s: Series, varying: list[str]) -> str:
    levels = "/".join(s.scenario.get(k, "") for k in varying) or "all"
    return f"{levels} {s.workload}{' ' + s.what if s.what else ''} {s.metric}"


def _varying(series: list[Series]) -> list[str]:
    keys = dict.fromkeys(k for s in series for k in s.scenario)
    return [k for k in keys if len({s.scenario.get(k) for s in series}) > 1]


def _point(p: Point) -> str:
    return f"campaign {p.campaign.id} ({p.campaign.name})"


def text(series: list[Series], every: bool = False) -> list[str]:
    """The changed series first (regressions of the newest campaign at the top), each change with its size and
    interval and what changed beside it; then how many did not change."""
    varying = _varying(series)
    changed = sorted((s for s in series if s.changes), key=lambda s: (s.newest_regression is None, _name(s, varying)))
    lines = [f"{len(series)} series over {len({(p.store, p.campaign.id) for s in series for p in s.points})} "
             f"campaigns; {len(changed)} with a change (jumpavg groups; size: later / earlier mean, 95% CI)"]
    for s in changed:
        unit = METRICS[s.metric].unit if s.metric in METRICS else ""
        head = "NEWEST CAMPAIGN REGRESSES: " if s.newest_regression else ""
        lines.append(f"{head}{_name(s, varying)} ({len(s.points)} campaigns, {s.better} is better)")
        for c in s.changes:
            lo, hi = c.ci
            ci = f" ({lo:.3f}x .. {hi:.3f}x)" if math.isfinite(lo) and math.isfinite(hi) else ""
            lines.append(f"  {c.kind} at {_point(s.points[c.at])}: {c.before:.4g} -> {c.after:.4g} {unit}, "
                         f"{c.ratio:.3f}x{ci}")
            lines += [f"    beside: {n}" for n in s.notes.get(c.at, [])]
    rest = [s for s in series if not s.changes]
    if every:
        lines += [f"{_name(s, varying)}: no change over {len(s.points)} campaigns" for s in rest]
    elif rest:
        lines.append(f"{len(rest)} series without a change (--all lists them)")
    return lines


def as_json(series: list[Series]) -> list[dict]:
    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None
    return [{"scenario": s.scenario, "workload": s.workload, "metric": s.metric, "what": s.what, "better": s.better,
             "points": [{"store": p.store, "campaign": p.campaign.id, "name": p.campaign.name,
                         "created": p.campaign.created, "n": len(p.values),
                         "mean": p.mean, "mean_is": "ratio of sums" if p.parts else "mean", "notes": s.notes.get(i, [])}
                        for i, p in enumerate(s.points)],
             "groups": [list(g) for g in s.groups],
             "changes": [{"at": c.at, "campaign": s.points[c.at].campaign.id, "kind": c.kind, "before": c.before,
                          "after": c.after, "ratio": num(c.ratio), "ci": [num(c.ci[0]), num(c.ci[1])]}
                         for c in s.changes],
             "newest_regression": s.newest_regression is not None} for s in series]


def draw(series: list[Series], path, most: int = 12) -> None:
    """The series that changed (at most `most`): each campaign's trials and mean, each group's mean as a step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shown = [s for s in series if s.changes][:most] or series[:1]
    varying = _varying(series)
    fig, axes = plt.subplots(len(shown), 1, figsize=(8, 2.4 * len(shown)), squeeze=False)
    for ax, s in zip(axes[:, 0], shown):
        for i, p in enumerate(s.points):
            ax.plot([i] * len(p.values), p.values, ".", color="0.6")
            ax.plot(i, p.mean, "o", color="C0")
        for a, b in s.groups:
            ax.hlines(_mean(s.points[a:b]), a - 0.4, b - 0.6, color="C1")
        for c in s.changes:
            ax.axvline(c.at - 0.5, color="C3" if c.worse else "C2", linestyle="--")
        ax.set_title(_name(s, varying), fontsize=9)
        ax.set_xticks(range(len(s.points)), [str(p.campaign.id) for p in s.points], fontsize=7)
    axes[-1, 0].set_xlabel("campaign, in the order they ran")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
