"""How often does vnetbench call two identical scenarios different? (The test's false-positive rate, on real traffic.)

Each round is a small campaign with two identical scenarios (a factor `copy: [a, b]` that changes nothing), 4
repetitions each; `vnetbench compare` then compares copy a with copy b (Welch on per-trial values, Holm over the
table). A calibrated test at alpha 0.05 calls at most about 1 round in 20 different.

    .venv/bin/python bench/ties.py --rounds 20
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SPEC = """name: ties-{i}
repetitions: 4
underlay: {{rate: 200mbit}}
factors:
  overlay: none
  attach: switch
  placement: cross-host
  copy: [a, b]
workloads:
  - type: iperf3
    when: {{copy: [a, b]}}          # a factor of one's own must select something; this selects both copies
    duration: 1
  - type: ping
    count: 20
    interval: 0.02
"""


def vnetbench(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vnetbench", *args], capture_output=True, text=True, check=check)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--metrics", default="throughput_bps,rtt_s")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="vnetbench-ties-"))
    db = tmp / "ties.db"
    ties = 0
    for i in range(1, args.rounds + 1):
        spec = tmp / f"ties-{i}.yaml"
        spec.write_text(SPEC.format(i=i))
        vnetbench("run", str(spec), "--db", str(db), "--no-progress")
        metrics = [a for m in args.metrics.split(",") for a in ("-m", m)]
        out = json.loads(vnetbench("compare", str(i), "--a-where", "copy=a", "--b-where", "copy=b", "--db", str(db),
                                   "--format", "json", *metrics).stdout)
        same = all(r["verdict"] == "same" for r in out["rows"])
        ties += same
        print(f"round {i:2d}: " + "; ".join(f"{r['metric']} ({r['workload']}) B/A {r['ratio']:.4f} p(Holm) "
                                             f"{r['p_holm']:.3g} {r['verdict']}" for r in out["rows"]), flush=True)
    print(f"{ties} of {args.rounds} rounds: the identical scenarios tie (results in {db})")


if __name__ == "__main__":
    main()
