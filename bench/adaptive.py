"""Adaptive vs fixed repetitions on S2's quick cells: how many trials does the adaptive rule need to reach the
precision of 30 fixed repetitions?

1. Runs S2's quick cells (suite:s2 --profile quick, 1-s iperf3 trials) with N fixed repetitions (default 30), in
   the default random block order, and records what building and tearing down a topology per block cost.
2. Precision of the fixed design: for each cell, the relative half-width of the 95 % CI of the mean of its main
   metric (one value per trial, throughput_bps); the design guarantees every cell within +-T, T = the widest.
3. The adaptive rule (repetitions: {min: 3, max: N, target: T}) replayed on the same trials in the order they were
   measured: the two-stage rule of vnetbench.run.adaptive (a pilot of 8 plans the total, at least 16). Reports the
   trials it needed.
4. With --live, also runs the adaptive campaign for real (new trials) and reports its trials and widest CI.

    .venv/bin/python bench/adaptive.py --reps 30 --only switch=linuxbridge --live
    .venv/bin/python bench/adaptive.py --db bench.db --campaign 1      # re-analyse a finished fixed campaign
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vnetbench.run import adaptive  # noqa: E402
from vnetbench.capabilities import detect  # noqa: E402
from vnetbench.experiment.matrix import expand  # noqa: E402
from vnetbench.run.campaign import Runner  # noqa: E402
from vnetbench.experiment.spec import load, loads  # noqa: E402
from vnetbench.results.store import Store  # noqa: E402


def spec_text(reps, only: dict, extra: dict | None = None) -> str:
    base = load("suite:s2", "quick")
    data = yaml.safe_load(base.text)
    data["repetitions"] = reps
    data["name"] = "bench-adaptive"
    for factor, level in only.items():
        data["factors"][factor] = [yaml.safe_load(level)]
    data.update(extra or {})
    return yaml.safe_dump(data, sort_keys=False)


def per_cell(store: Store, cid: int) -> dict[str, list[float]]:
    """scenario key -> main-metric value of each ok trial, in the order the trials ran."""
    camp = store.campaign(cid)
    spec = loads(camp.spec_text, camp.source)
    scenarios = [sc for sc in expand(spec.experiment, detect()) if sc.skip is None]
    values = adaptive.stored_values(store, cid, scenarios, spec.experiment.repetitions
                                    if not isinstance(spec.experiment.repetitions, int) else _AnyRule())
    keys = {sc.index: sc.key for sc in scenarios}
    return {keys[idx]: [v for w in sorted(ws) for _, v in ws[w]] for idx, ws in values.items()}


class _AnyRule:
    metric = None


def replay(values: list[float], target: float, lo: int, hi: int) -> int:
    """The trials the two-stage rule runs on these values (at most as many as there are)."""
    from vnetbench.experiment.spec import Repetitions
    rule = Repetitions(min=max(lo, 2), max=max(hi, lo, 2), target=min(max(target, 1e-6), 0.99))
    n0 = adaptive.pilot(rule)
    if len(values) < n0:
        return len(values)
    return min(adaptive.planned(values[:n0], rule), len(values))


def run(text: str, db: str) -> tuple[int, object, float]:
    spec = loads(text, "<bench>")
    store = Store(db)
    began = time.monotonic()
    outcome = Runner(store, progress=False).run(spec)
    return outcome.campaign, outcome, time.monotonic() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--min", type=int, default=3)
    ap.add_argument("--only", action="append", default=[], help="factor=level, to run a subset of the cells")
    ap.add_argument("--db", default="bench-adaptive.db")
    ap.add_argument("--campaign", type=int, help="analyse this finished fixed campaign instead of running one")
    ap.add_argument("--live", action="store_true", help="also run the adaptive campaign for real")
    a = ap.parse_args()
    only = dict(o.split("=", 1) for o in a.only)
    store = Store(a.db)
    if a.campaign is None:
        cid, outcome, took = run(spec_text(a.reps, only), a.db)
        print(f"fixed: campaign {cid}, {outcome.trials_ok} ok / {outcome.trials_failed} failed / "
              f"{outcome.trials_invalid} invalid trials in {took:.0f} s; {outcome.builds} topology builds, "
              f"build + teardown {outcome.topology_s:.1f} s in all = {outcome.topology_s / max(outcome.builds, 1):.3f} "
              f"s per build ({outcome.topology_s / took:.1%} of the run)")
    else:
        cid = a.campaign
    cells = {k: v for k, v in per_cell(store, cid).items() if len(v) >= a.min}
    widths = {k: adaptive.half_width(v) for k, v in cells.items()}
    target = max(widths.values())
    fixed = sum(len(v) for v in cells.values())
    stops = {k: replay(v, target, a.min, len(v)) for k, v in cells.items()}
    used = sum(stops.values())
    print(f"{len(cells)} cells; 95% CI half-width of the mean (throughput_bps) with all trials: "
          f"widest +-{target:.2%}, median +-{sorted(widths.values())[len(widths) // 2]:.2%}")
    for k, v in sorted(cells.items(), key=lambda kv: widths[kv[0]]):
        short = ", ".join(p for p in k.split(", ") if not p.startswith(("encryption", "attach", "mtu", "ip_version",
                                                                         "hops", "direction", "interference=none")))
        print(f"  {short}: n={len(v)} +-{widths[k]:.2%}; adaptive stops at n={stops[k]} "
              f"(+-{adaptive.half_width(v[:stops[k]]):.2%})")
    print(f"replayed adaptive rule (min {a.min}, max {a.reps}, target +-{target:.2%}): {used} trials instead of "
          f"{fixed}: {1 - used / fixed:.0%} fewer; widest CI +-"
          f"{max(adaptive.half_width(v[:stops[k]]) for k, v in cells.items()):.2%}")
    if a.live:
        extra = {"repetitions": {"min": a.min, "max": a.reps, "target": round(target, 6)}}
        lid, outcome, took = run(spec_text(a.reps, only, extra), a.db)
        live = per_cell(store, lid)
        n = sum(len(v) for v in live.values())
        widest = max(adaptive.half_width(v) for v in live.values())
        print(f"live adaptive: campaign {lid}, {n} trials instead of {fixed} ({1 - n / fixed:.0%} fewer) in "
              f"{took:.0f} s; widest CI +-{widest:.2%} (target +-{target:.2%})")


if __name__ == "__main__":
    main()
