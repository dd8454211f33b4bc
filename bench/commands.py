#!/usr/bin/env python3
"""The commands a person runs after every campaign, timed as a user runs them (run as root from the repo):

    .venv/bin/python bench/commands.py [--db FILE] [--rounds 7] [--before DIR]

Without --db it first makes the demo's results file (`./install.sh demo`: `vnetbench run examples/quick.yaml`, about
3 minutes). Then, in turn for --rounds rounds, the whole process's wall time of `vnetbench show last` (its output
piped) and of `vnetbench report last -o FILE`; it prints each command's median and range, the load average before
and after, and whether vnetbench's own modules and the environment's libraries are compiled (.pyc up to date: with
PYTHONDONTWRITEBYTECODE set, nothing else compiles them). The goals: `show` at most 0.5 s, `report` at most 3 s.
With --before DIR (a checkout of other code, e.g. `git worktree add DIR main`), each command of that code runs
right before the same command of this one, round after round: both meet the same load.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOALS = {"show": 0.5, "report": 3.0}


def compiled(directory: Path) -> str:
    """'N of M' modules under directory whose .pyc is there and not older than the source."""
    sources = list(directory.rglob("*.py"))
    fresh = 0
    for src in sources:
        pyc = Path(importlib.util.cache_from_source(str(src)))
        fresh += pyc.exists() and pyc.stat().st_mtime >= src.stat().st_mtime
    return f"{fresh} of {len(sources)}"


def demo(directory: Path) -> Path:
    """The demo's results file, made as `./install.sh demo` makes it."""
    db = directory / "quick.db"
    print("making the demo's results file (vnetbench run examples/quick.yaml, about 3 minutes)", flush=True)
    proc = subprocess.run([sys.executable, "-m", "vnetbench", "run", "examples/quick.yaml", "--db", str(db),
                           "--no-progress"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"vnetbench run exited {proc.returncode}: {proc.stderr[-1500:]}")
    return db


def timed(argv: list[str], root: Path = ROOT) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "vnetbench", *argv], cwd=root, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"vnetbench {' '.join(argv)} exited {proc.returncode}: {proc.stderr[-1500:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, help="an existing results file (default: make the demo's first)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of both commands, in turn (default 7)")
    ap.add_argument("--before", type=Path, help="a checkout of other code, timed in alternation with this one")
    args = ap.parse_args()
    roots = {"before": args.before.resolve(), "now": ROOT} if args.before else {"now": ROOT}
    for label, root in roots.items():
        print(f"{label} ({root}): compiled (.pyc up to date): vnetbench {compiled(root / 'vnetbench')} modules, "
              f"site-packages {compiled(Path(sysconfig.get_paths()['purelib']))}; PYTHONDONTWRITEBYTECODE="
              f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}", flush=True)
    with tempfile.TemporaryDirectory(prefix="vb-commands-") as d:
        db = (args.db or demo(Path(d))).resolve()
        commands = {"show": ["show", "last", "--db", str(db)],
                    "report": ["report", "last", "--db", str(db), "-o", str(Path(d) / "report.html")]}
        for root in roots.values():  # one untimed run: the results file and the libraries in the page cache
            timed(commands["show"], root)
        load0 = os.getloadavg()
        took: dict[tuple[str, str], list[float]] = {(label, name): [] for label in roots for name in commands}
        for _ in range(args.rounds):
            for name, argv in commands.items():
                for label, root in roots.items():
                    took[(label, name)].append(timed(argv, root))
        load1 = os.getloadavg()
    print(f"load average before {' '.join(f'{v:.2f}' for v in load0)}, after {' '.join(f'{v:.2f}' for v in load1)} "
          f"({os.cpu_count()} CPUs); {args.rounds} rounds, each command's whole process")
    print(f"{'command':<40} {'median':>8} {'min':>7} {'max':>7} {'goal':>7}")
    for (label, name), ts in took.items():
        title = f"vnetbench {name} last" + (f" ({label})" if args.before else "")
        print(f"{title:<40} {statistics.median(ts):>7.2f}s {min(ts):>6.2f}s {max(ts):>6.2f}s {GOALS[name]:>6.1f}s")


if __name__ == "__main__":
    main()
