#!/usr/bin/env python3
"""`vnetbench trend` over 100 campaigns (a results file made here: 2 scenarios x 6 one-sample trials a campaign,
one of them 20 % lower from campaign 71 on), timed as a user runs it (the whole process), 5 times:

    .venv/bin/python bench/trend.py
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    from test_trend import lab
    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "h.db"
        lab(db, {"ovs": [1e9] * 70 + [0.8e9] * 30, "linuxbridge": [2e9] * 100}, ["6.1.0"] * 100)
        took = []
        for _ in range(5):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "vnetbench", "trend", "--db", str(db)], cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout
            took.append(time.perf_counter() - t0)
        assert "regression at campaign 71" in out, out
        print(f"trend over 100 campaigns: median {statistics.median(took):.2f} s (min {min(took):.2f}, "
              f"max {max(took):.2f}) over 5 runs; found: {out.splitlines()[2].strip()}")


if __name__ == "__main__":
    main()
