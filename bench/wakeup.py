#!/usr/bin/env python3
"""What idle CPUs that halt cost a guest: one-stream TCP between two namespaces inside a User-Mode Linux guest
(`kernel: guest`, host to host, iperf3 1 s x 6 a campaign), with `cpu_idle: os` and `cpu_idle: poll` alternated:

    .venv/bin/python bench/wakeup.py [--rounds 2] [--reps 6]

Each campaign's trial values, mean and CV (one value per trial) per mode.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPEC = """name: wakeup-{mode}
repetitions: {reps}
cpu_idle: {mode}
factors: {{kernel: guest, attach: host, encryption: none}}
workloads: [{{type: iperf3, duration: 1}}]
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=6)
    args = ap.parse_args()
    from vnetbench.results.dataset import load
    from vnetbench.results.store import Store
    got: dict[str, list[tuple[float, float]]] = {"os": [], "poll": []}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            for mode in ("os", "poll"):
                spec, db = Path(d) / f"{mode}{r}.yaml", Path(d) / f"{mode}{r}.db"
                spec.write_text(SPEC.format(mode=mode, reps=args.reps))
                subprocess.run([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(db), "--no-progress"],
                               cwd=ROOT, capture_output=True, check=False)
                vals = [t.total("throughput_bps") / 1e9 for t in load(Store(db), 1).ok]
                mean = statistics.fmean(vals)
                got[mode].append((mean, statistics.stdev(vals) / mean))
                print(f"round {r + 1} cpu_idle {mode}: {', '.join(f'{v:.2f}' for v in vals)} Gbit/s; "
                      f"mean {mean:.2f}, CV {100 * got[mode][-1][1]:.1f} %", flush=True)
    for mode, runs in got.items():
        print(f"cpu_idle {mode}: means {', '.join(f'{m:.2f}' for m, _ in runs)} Gbit/s, "
              f"CVs {', '.join(f'{100 * c:.1f} %' for _, c in runs)}")


if __name__ == "__main__":
    main()
