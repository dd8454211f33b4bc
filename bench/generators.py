"""Which packet generator reaches furthest where? ndrpdr with each generator (trafgen, the kernel's pktgen, iperf3
UDP) at 64-byte frames over a flat Linux bridge between two emulated hosts, in each kernel asked for (`shared`: this
machine's namespaces; `qemu`: host guests with Debian's cloud kernel; `guest`: one User-Mode Linux guest). A
generator a kernel lacks is a skip with the reason, printed as such.

Per kernel and generator: the ceiling over a bare veth pair, flat out and paced (the highest rate offered in full as a
trial offers it), then NDR and PDR over the bridge, or the upper bound the search stopped at when no load was offered
in full. Prints a markdown table (docs/packet-rates.md quotes it).

    .venv/bin/python bench/generators.py --kernels shared,qemu        # (takes about 3 minutes)
"""
from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

import runspec  # bench/ is this script's own folder on sys.path

GENERATORS = ("trafgen", "pktgen", "iperf3")
SPEC = """name: generators
repetitions: 1
order: sequential
factors: {{switch: linuxbridge, overlay: none, placement: cross-host, kernel: [{kernels}]}}
workloads:
{workloads}
"""
WORKLOAD = "  - {{type: ndrpdr, generator: {g}, frame_sizes: [64], search_time: 30, latency: []}}"


def collect(db: Path) -> list[str]:
    """One table row per scenario and generator."""
    rows = []
    with sqlite3.connect(db) as c:
        for idx, labels, status, reason in c.execute("SELECT idx, labels, status, reason FROM scenarios ORDER BY idx"):
            kernel = json.loads(labels)["kernel"]
            if status == "skipped":
                rows.append(f"| {kernel} | all | skipped: {reason} | | | |")
                continue
            for kind, params, tid, st, err in c.execute(
                    "SELECT kind, params, id, status, error FROM trials WHERE scenario = ? ORDER BY workload", (idx,)):
                g = json.loads(params).get("generator", "trafgen")
                if st != "ok":
                    rows.append(f"| {kernel} | {g} | trial {st}: {err} | | | |")
                    continue
                m = {metric: (value, json.loads(meta)) for metric, value, meta in c.execute(
                    "SELECT metric, value, metadata FROM samples WHERE trial = ?", (tid,))}
                ceiling = m.get("generator_ceiling_pps")
                flat = f"{ceiling[1].get('flat_out_pps', 0):,.0f}" if ceiling else "-"
                rows.append(f"| {kernel} | {g} | {flat} | {ceiling[0]:,.0f} | {_rate(m, 'ndr')} | {_rate(m, 'pdr')} |"
                            if ceiling else f"| {kernel} | {g} | - | - | {_rate(m, 'ndr')} | {_rate(m, 'pdr')} |")
    return rows


def _rate(m: dict, goal: str) -> str:
    if f"{goal}_pps" in m:
        value, meta = m[f"{goal}_pps"]
        return f"{value:,.0f}" + (" (generator-bound)" if meta.get("generator_bound") else "")
    if f"{goal}_upper_pps" in m:
        return f"below {m[f'{goal}_upper_pps'][0]:,.0f} (no load offered in full)"
    return "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default="shared,qemu", help="comma-separated kernel levels")
    ap.add_argument("--db", type=Path, help="read this results file instead of running (a previous run's)")
    args = ap.parse_args()
    db = runspec.results(args.db, "generators", SPEC.format(
        kernels=", ".join(args.kernels.split(",")), workloads="\n".join(WORKLOAD.format(g=g) for g in GENERATORS)))
    print("| kernel | generator | ceiling flat out (64 B frames/s) | ceiling paced | NDR | PDR |\n|---|---|---|---|---|---|")
    print("\n".join(collect(db)))


if __name__ == "__main__":
    main()
