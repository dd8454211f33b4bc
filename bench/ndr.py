"""How repeatable is an NDR search here, and how far does the generator reach? N searches of each frame size over a
flat Linux bridge and VXLAN between two emulated hosts, in random order, each with the generator's ceiling over a
bare veth pair measured beside it.

Per path and frame size: NDR and PDR as mean, standard deviation and coefficient of variation over the searches, the
search's seconds (median and maximum) and how many searches were flagged generator-bound; per frame size: the
ceiling (median, min .. max over every search). Prints a markdown table (docs/packet-rates.md quotes it).

    .venv/bin/python bench/ndr.py --repetitions 5                 # (takes about 10 minutes)
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
from collections import defaultdict
from pathlib import Path

import runspec  # bench/ is this script's own folder on sys.path


SPEC = """name: ndr-repeatability
repetitions: {reps}
order: random
factors:
  overlay: [none, vxlan]
  placement: cross-host
  mtu_policy: raise-underlay
workloads:
  - type: ndrpdr
    frame_sizes: {frames}
    latency: []
"""
WANTED = ("ndr_pps", "pdr_pps", "generator_ceiling_pps", "ndrpdr_search_s")


def collect(db: Path) -> dict[tuple[str, str], dict[str, list]]:
    """(overlay, frame) -> metric -> one value per search; 'bound' -> one flag per search."""
    out: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT sc.labels, s.metric, s.value, s.metadata FROM samples s JOIN trials t ON s.trial = t.id "
                         "JOIN scenarios sc ON sc.campaign = t.campaign AND sc.idx = t.scenario "
                         "WHERE t.status = 'ok' AND s.metric IN (%s)" % ",".join("?" * len(WANTED)), WANTED)
        for labels, metric, value, meta in rows:
            m = json.loads(meta)
            key = (json.loads(labels)["overlay"], m["frame"])
            out[key][metric].append(value)
            if metric == "ndr_pps":
                out[key]["bound"].append(bool(m.get("generator_bound")))
    return out


def _k(pps: float) -> str:
    return f"{pps / 1e3:.1f} k"


def table(got: dict) -> str:
    lines = ["| path | frame | NDR mean ± sd (CV) | PDR mean ± sd (CV) | ceiling median (min .. max) | search s median "
             "(max) | generator-bound | n |", "|---|---|---|---|---|---|---|---|"]
    for (overlay, frame), m in sorted(got.items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
        cells = []
        for metric in ("ndr_pps", "pdr_pps"):
            v = m[metric]
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            cells.append(f"{_k(statistics.mean(v))} ± {_k(sd)} ({sd / statistics.mean(v):.1%})")
        ceiling, search = m["generator_ceiling_pps"], m["ndrpdr_search_s"]
        lines.append(f"| {'flat' if overlay == 'none' else overlay} | {frame} | {cells[0]} | {cells[1]} | "
                     f"{_k(statistics.median(ceiling))} ({_k(min(ceiling))} .. {_k(max(ceiling))}) | "
                     f"{statistics.median(search):.1f} ({max(search):.1f}) | {sum(m['bound'])}/{len(m['bound'])} | "
                     f"{len(m['ndr_pps'])} |")
    return "\n".join(lines)


def _order(frame: str) -> tuple:
    head = frame.split()[0]
    return (0, int(head)) if head.isdigit() else (1, head)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--frames", default="[64, 1518, imix]", help="the frame_sizes list, as YAML")
    ap.add_argument("--db", type=Path, help="read this results file instead of running (a previous run's)")
    args = ap.parse_args()
    db = runspec.results(args.db, "ndr", SPEC.format(reps=args.repetitions, frames=args.frames))
    print(table(collect(db)))


if __name__ == "__main__":
    main()
