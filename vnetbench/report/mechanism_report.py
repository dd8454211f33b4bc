"""The report's "Where the CPU went": per profiled scenario, each mechanism's share of the CPU and its CPU time per
packet (median [95 % CI] over trials, one value per trial), the difference against the scenario's baseline (the same
scenario with the element at its default: overlay none, encryption none...) as the mechanism's measured cost, and
an interactive flame graph of the scenario's stacks."""
from __future__ import annotations

import math
from collections import defaultdict

from ..core.scenario import DEFAULT_LEVELS, ELEMENT_FACTORS
from ..core.units import human, human_interval
from ..probes import mechanisms
from ..results import cpu_profiles as profiles
from ..results import dataset
from ..results.stats import diff_ci, summarize
from ..results.store import Store
from .analyses.base import TableData
from .flamegraph import FlameGraph

MIN_SHARE = 0.005  # mechanisms below this median share in the scenario and its baseline are left out of the table
NOTE = ("Share: the mechanism's part of all CPU samples over the tool's window, every CPU of the machine counted, "
        "idle included (median [95 % CI] over trials). CPU per Mpacket: its CPU time per million packets delivered "
        "(packets of the path's MTU), the trials' CPU seconds over their packets, each summed (a ratio of sums, "
        "delta-method 95 % CI). Cost vs baseline: the difference of those ratios (this scenario minus the "
        "baseline's) with Welch's 95 % interval ('[-]': fewer than 2 trials a side); "
        "its sign says whether the mechanism added CPU per packet. The profile is of the whole machine: load that is "
        "not the run's own (see each trial's foreign_busy_ratio) is in it too.")
PART_NOTE = (" Here the window is not the tool's: it is one more trial at the NDR's relevant lower bound, after the "
             "search, and a packet is a frame the receiver counted in it (its loss ratio: ndr_profile_loss_ratio).")


def baseline(scenarios: dict[int, dict], idx: int) -> tuple[int, str] | None:
    """The scenario equal to idx but for one element at its default level (and the element), if it was run."""
    levels = scenarios[idx]["levels"]
    for factor in ELEMENT_FACTORS:
        if levels.get(factor, DEFAULT_LEVELS[factor]) == DEFAULT_LEVELS[factor]:
            continue
        want = {**levels, factor: DEFAULT_LEVELS[factor]}
        for j, s in scenarios.items():
            if j != idx and s["status"] != "skipped" and {**DEFAULT_LEVELS, **s["levels"]} == {**DEFAULT_LEVELS, **want}:
                return j, factor
    return None


def part(meta: dict) -> str:
    """Which profiled window of a trial a sample is of: '' for the tool's whole window, else e.g. 'NDR trial,
    64 B' (ndrpdr profiles the trial at each frame size's NDR)."""
    return f"{meta['at'].upper()} trial, {meta.get('frame', '?')}" if meta.get("at") else ""


def _per_trial(data: dataset.Dataset, metric: str, **meta) -> dict[tuple[int, tuple[int, str], str], list[float]]:
    """(scenario, (workload, part), mechanism or '') -> one value per trial."""
    return data.trial_values(metric, background=None, window=True, key=lambda t, s: (
        t.scenario, (t.workload, part(s["metadata"])), s["metadata"].get("mechanism", "")), **meta)


def _cpu_parts(data: dataset.Dataset) -> tuple[dict, dict]:
    """Each trial's (CPU seconds, Mpackets) behind its CPU per Mpacket: per mechanism, keyed as _per_trial keys it,
    and for the whole machine per (scenario, (workload, '')). A mechanism's packets are its window's (ndrpdr's trial
    at NDR counts its own) or, for the tool's window, the trial's, as the machine's row counts them."""
    machine: dict = defaultdict(dict)
    for t, s in data.select("cpu_s_per_mpacket", background=None, scope="machine",
                            where=lambda m: "host" not in m and "process" not in m):
        if "cpu_s" in s["metadata"] and s["metadata"].get("mpackets"):
            machine[(t.scenario, (t.workload, ""))][t.id] = (s["metadata"]["cpu_s"], s["metadata"]["mpackets"])
    mech: dict = defaultdict(dict)
    for t, s in data.select("profile_share_ratio", background=None):
        m = s["metadata"]
        mpk = m.get("mpackets") or machine.get((t.scenario, (t.workload, "")), {}).get(t.id, (0, 0))[1]
        if "cpu_s" in m and mpk:
            mech[(t.scenario, (t.workload, part(m)), m.get("mechanism", ""))][t.id] = (m["cpu_s"], mpk)
    return {k: list(v.values()) for k, v in mech.items()}, {k: list(v.values()) for k, v in machine.items()}


def _of_sums(parts: list[tuple[float, float]]):
    """The summary of per-trial CPU per Mpacket with its mean the ratio of sums (delta-method interval)."""
    return dataset.ratio_of_sums(summarize([c / w for c, w in parts]), parts)


def _share_cell(values: list[float] | None) -> str:
    if not values:
        return "-"
    s = summarize(values)
    return human_interval(s.median, *s.ci_median, "ratio") + ("*" if not s.ci_median_exact else "")


def _cell(parts: list[tuple[float, float]] | None, unit: str) -> str:
    if not parts:
        return "-"
    s = _of_sums(parts)
    return human(s.mean, unit) + " [-]" if len(parts) < 2 else human_interval(s.mean, *s.ci_mean, unit)


def _diff(a: list[tuple[float, float]] | None, b: list[tuple[float, float]] | None, unit: str) -> str:
    """b's ratio of sums minus a's with Welch's 95 % interval over the trials' linearised shares ('[-]': fewer
    than 2 trials a side). A percentile bootstrap covered 63-67 % at 2 trials a side and 89 % at 3."""
    if not a or not b:
        return "-"
    sa, sb = _of_sums(a), _of_sums(b)
    d = sb.mean - sa.mean
    lo, hi = diff_ci(sa, sb) if len(a) > 1 and len(b) > 1 else (math.nan, math.nan)
    text = human(d, unit) + " [-]" if lo != lo else human_interval(d, lo, hi, unit)
    return ("+" if d >= 0 else "") + text


def _median(values: list[float] | None) -> float:
    return summarize(values).median if values else 0.0


def _shown(share: dict, wl: tuple[int, str], scs: list[int]) -> list[str]:
    """The mechanisms with a median share of at least MIN_SHARE in one of the scenarios, largest first in the first."""
    mechs = {m for (s, w, m) in share if s in scs and w == wl and m and _median(share[(s, w, m)]) >= MIN_SHARE}
    return sorted(mechs, key=lambda m: -_median(share.get((scs[0], wl, m))))


def skipped(store: Store, cid: int) -> list[str]:
    """Why trials that asked for a profile have none, once per reason."""
    trials = dataset.load(store, cid).trials.values()  # the report's one read of the campaign
    return sorted({t["metadata"]["profile_skipped"] for t in trials if t["metadata"].get("profile_skipped")})


def section_blocks(store: Store, cid: int, label) -> list:
    """The blocks of the section ([] when no trial was profiled); label(idx) names a scenario."""
    profiled = profiles.trials(store, cid)
    if not profiled:
        return []
    data = dataset.load(store, cid)
    scenarios = {s["idx"]: s for s in store.scenarios(cid)}
    share = _per_trial(data, "profile_share_ratio")
    per_pkt, machine = _cpu_parts(data)
    names = mechanisms.labels()
    blocks: list = []
    parts = {(sc, w) for (sc, w, _) in share if (sc, w[0]) in set(profiled.values())}
    drawn: set[tuple[int, int]] = set()  # one flame graph per scenario and workload, whatever its parts
    for sc, (wl, what) in sorted(parts):
        base = baseline(scenarios, sc)
        b_idx = base[0] if base else None
        key = (wl, what)
        mechs = _shown(share, key, [s for s in (sc, b_idx) if s is not None])
        cols = ["mechanism", "share of CPU", "CPU per Mpacket"]
        if base:
            cols += [f"baseline ({base[1]}={DEFAULT_LEVELS[base[1]]}) CPU per Mpacket", "cost vs baseline"]
        rows = []
        if (sc, key) in machine:
            row = ["whole machine (all CPU)", "100 %", _cell(machine[(sc, key)], "s/Mpacket")]
            if base:
                row += [_cell(machine.get((b_idx, key)), "s/Mpacket"),
                        _diff(machine.get((b_idx, key)), machine[(sc, key)], "s/Mpacket")]
            rows.append(row)
        for m in mechs:
            row = [names.get(m, m), _share_cell(share.get((sc, key, m))), _cell(per_pkt.get((sc, key, m)), "s/Mpacket")]
            if base:
                row += [_cell(per_pkt.get((b_idx, key, m)), "s/Mpacket"),
                        _diff(per_pkt.get((b_idx, key, m)), per_pkt.get((sc, key, m)), "s/Mpacket")]
            rows.append(row)
        n = sum(1 for v in profiled.values() if v == (sc, wl))
        title = f"Scenario {sc} ({label(sc)}), workload {wl + 1}{f' ({what})' if what else ''}: {n} profiled trials" + (
            f"; baseline scenario {b_idx} ({label(b_idx)})" if base else "; no baseline scenario was run")
        blocks.append(TableData(title, cols, rows, NOTE + (PART_NOTE if what else "")))
        folded = profiles.of_scenario(store, cid, sc, wl) if (sc, wl) not in drawn else None
        drawn.add((sc, wl))
        if folded:
            blocks.append(FlameGraph(f"flame-{sc}-{wl}", f"Flame graph of scenario {sc} ({label(sc)})", folded,
                                     f"{sum(folded.values())} samples of {n} trials added up; frames coloured by "
                                     "mechanism; click a frame to zoom, type a function name to highlight it. "
                                     "`vnetbench export --format folded --scenario "
                                     f"{sc}` writes these stacks for FlameGraph or speedscope."))
    return blocks
