#!/usr/bin/env python3
"""Would a paired design decide S2's card? Its best rows compare three technologies whose trials ran minutes apart;
if the spread of a cell's trials were the machine drifting, interleaving the technologies in blocks (one trial of
each, shuffled, seconds apart) and comparing them block by block would cancel it. This measures whether it does
(run as root from the repo):

    .venv/bin/python bench/s2_pairing.py [--repetitions 12] [--duration 1] [--order random] [--db RESULTS]

It runs S2's card cells with 2 VMs under TCP, on one host and across two (6 scenarios: the three technologies of the
study x 2 placements), in the random order: block r is one trial of each of the 6 scenarios, shuffled. For each
metric a best row reads (TCP throughput, each trial's median ping under load, its jitter) and placement it prints the
standard deviation of each technology's log values over trials, and for each pair of technologies that of their
per-block log ratio beside what unpaired trials would give (the root of the sum of the two squared): pairing helps
only where the first is well below the second. --duration 4 --order sequential measures instead what longer tests,
in the card's order, do to each technology's spread (the paired figures then pair trials of the same number only).
"""
from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runspec import ROOT, results  # noqa: E402

sys.path.insert(0, str(ROOT))
METRICS = (("throughput_bps", "sum"), ("rtt_loaded_s", "median"), ("ping_jitter_s", "mean"))
SHORT = {("linuxbridge", "vxlan"): "LB+VXLAN", ("ovs", "vxlan"): "OVS+VXLAN", ("ovs", "gre"): "OVS+GRE"}


def spec_text(repetitions: int, duration: int = 1, order: str = "random") -> str:
    """S2's card profile, narrowed to its 2-VM TCP cells, in the random (blocked) order or another, its tests
    `duration` seconds long (the card's 1 s)."""
    suite = yaml.safe_load((ROOT / "vnetbench/experiment/suites/s2.yaml").read_text())
    card = suite["profiles"]["card"]
    spec = {k: v for k, v in suite.items() if k not in ("profiles", "scorecard")}
    spec["factors"] = {**spec["factors"], **card["factors"], "pairs": [1], "protocol": ["tcp"],
                       "direction": ["uni"]}
    for f in ("udp_rate", "study_rate"):
        spec["factors"].pop(f)
    tcp = {**card["workloads"][0], "duration": duration}
    spec.update(name="s2-pairing", repetitions=repetitions, order=order, workloads=[tcp],
                exclude=[{"switch": "linuxbridge", "overlay": "gre"}])
    return yaml.safe_dump(spec, sort_keys=False)


def per_block(db: Path) -> dict[tuple[str, str], dict[str, dict[int, float]]]:
    """(metric, placement) -> technology -> block (repetition) -> the trial's value."""
    from vnetbench.results.dataset import load
    from vnetbench.results.store import Store
    data = load(Store(db, readonly=True), 1)
    out: dict = defaultdict(lambda: defaultdict(dict))
    for t in data.ok:
        tech = SHORT.get((t.labels.get("switch"), t.labels.get("overlay")))
        for metric, how in METRICS:
            vals = t.values(metric)
            if tech and vals:
                value = sum(vals) if how == "sum" else getattr(statistics, how)(vals)
                out[(metric, t.labels["placement"])][tech][t.repetition] = value
    return out


def lines(got: dict) -> list[str]:
    rows = []
    for (metric, placement), techs in sorted(got.items()):
        sd = {k: statistics.stdev(math.log(x) for x in v.values() if x > 0) for k, v in techs.items()}
        rows.append(f"{metric} {placement}: SD of the log values " + ", ".join(f"{k} {100 * c:.1f} %"
                                                                         for k, c in sorted(sd.items())))
        for a, b in itertools.combinations(sorted(techs), 2):
            common = sorted(set(techs[a]) & set(techs[b]))
            d = [math.log(techs[a][r] / techs[b][r]) for r in common if techs[a][r] > 0 and techs[b][r] > 0]
            if len(d) > 2:
                rows.append(f"  {a} / {b}: paired SD of the log ratio {100 * statistics.stdev(d):.1f} %, "
                            f"unpaired {100 * math.hypot(sd[a], sd[b]):.1f} % ({len(d)} blocks)")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repetitions", type=int, default=12, help="blocks (one trial of each scenario a block)")
    ap.add_argument("--duration", type=int, default=1, help="seconds a test (the card's: 1)")
    ap.add_argument("--order", default="random", choices=("random", "sequential"),
                    help="random: the blocks above; sequential: each scenario's trials in a row, as the card runs")
    ap.add_argument("--db", type=Path, help="read this results file instead of running")
    args = ap.parse_args()
    db = results(args.db, "s2-pairing", spec_text(args.repetitions, args.duration, args.order))
    print("\n".join(lines(per_block(db))))


if __name__ == "__main__":
    main()
