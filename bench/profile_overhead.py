"""What does the kernel profile cost the traffic it profiles? Throughput and CPU with and without it, alternating.

One campaign, one topology (Linux bridge + VXLAN across two emulated hosts, the profiled case the report is about),
a factor `profile: [false, true]`, N repetitions in random order: each repetition is a block holding one trial of
each, in a random order, so a drift of the machine's load hits both alike. The figure is the paired ratio
profiled / unprofiled of each block's throughput: its geometric mean with a 95 % t interval over blocks, and the
same for the machine's CPU time per gigabit.

    .venv/bin/python bench/profile_overhead.py --repetitions 10
"""
from __future__ import annotations

import argparse
import json
import math
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vnetbench.results.stats import t_quantile  # noqa: E402

SPEC = """name: profile-overhead
repetitions: {reps}
order: random
factors:
  overlay: {overlay}
  placement: cross-host
  profile: [false, true]
workloads:
  - type: iperf3
    duration: {duration}
"""


def per_trial(db: Path) -> dict[int, dict[bool, dict[str, float]]]:
    """repetition -> profiled? -> {throughput_bps, cpu_s_per_gbit, seconds (the trial's wall time)}."""
    out: dict[int, dict[bool, dict[str, float]]] = defaultdict(dict)
    with sqlite3.connect(db) as c:
        trials = c.execute("SELECT id, repetition, params, started, finished FROM trials WHERE status = 'ok'").fetchall()
        for tid, rep, params, started, finished in trials:
            vals = {"seconds": finished - started}
            for metric, value, meta in c.execute("SELECT metric, value, metadata FROM samples WHERE trial = ?", (tid,)):
                m = json.loads(meta)
                if metric == "throughput_bps" and m.get("role") != "background":
                    vals["throughput_bps"] = vals.get("throughput_bps", 0.0) + value
                elif metric == "cpu_s_per_gbit" and m.get("scope") == "machine" and "host" not in m:
                    vals["cpu_s_per_gbit"] = value
                elif metric == "profile_share_ratio" and m.get("profiler_cpu_s") is not None:
                    # perf record's own CPU over its whole run (started before, stopped after the window)
                    vals["profiler_cpu_s"] = m["profiler_cpu_s"]
            out[rep][bool(json.loads(params).get("profile"))] = vals
    return out


def paired_ratio(blocks: dict[int, dict[bool, dict[str, float]]], key: str) -> dict:
    """Geometric mean of profiled/unprofiled over blocks with both, and its 95 % t interval (on the log scale)."""
    logs = [math.log(b[True][key] / b[False][key]) for b in blocks.values()
            if True in b and False in b and b[True].get(key) and b[False].get(key)]
    n = len(logs)
    if n < 2:
        return {"n": n}
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t_quantile(0.95, n - 1) * sd / math.sqrt(n)
    return {"n": n, "ratio": math.exp(mean), "ci95": [math.exp(mean - half), math.exp(mean + half)]}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repetitions", type=int, default=10)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--overlay", default="vxlan")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vnetbench-profile-overhead-") as tmp:
        spec, db = Path(tmp) / "spec.yaml", Path(tmp) / "r.db"
        spec.write_text(SPEC.format(reps=args.repetitions, overlay=args.overlay, duration=args.duration))
        began = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(db), "--no-progress"],
                             capture_output=True, text=True, cwd=ROOT)
        if run.returncode != 0:
            sys.exit(f"run failed: {run.stdout[-2000:]}{run.stderr[-2000:]}")
        blocks = per_trial(db)
    mean = {p: {k: sum(b[p][k] for b in blocks.values() if p in b and k in b[p]) /
                max(1, sum(1 for b in blocks.values() if p in b and k in b[p]))
                for k in ("throughput_bps", "cpu_s_per_gbit", "seconds")} for p in (False, True)}
    result = {"repetitions": args.repetitions, "overlay": args.overlay, "duration_s": args.duration,
              "run_s": round(time.monotonic() - began, 1),
              "throughput_ratio": paired_ratio(blocks, "throughput_bps"),
              "cpu_s_per_gbit_ratio": paired_ratio(blocks, "cpu_s_per_gbit"),
              "trial_seconds_ratio": paired_ratio(blocks, "seconds"),
              "means": {"unprofiled": mean[False], "profiled": mean[True]},
              "perf_record_cpu_s_per_trial": _mean([b[True]["profiler_cpu_s"] for b in blocks.values()
                                                    if True in b and "profiler_cpu_s" in b[True]])}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
