#!/usr/bin/env python3
"""Why S1's card reads its saturated rows on each trial's fastest echo: Reference and IPsec (kernel ESP) in one UML
guest, 12 trials of 20 echoes at 64 and 65434 bytes each, run --runs times, every other run with every thread of the
guest's processes here pinned to one CPU (the others as the machine schedules them). Per run and cell: the CV over
its trials of their median echo and of their fastest echo, and the trials' medians in order (the levels the
machine's speed moves between show there).

    .venv/bin/python bench/echo_levels.py [--runs 4] [--cpu 1]   # about 2.5 minutes a run
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = """name: echo-levels
repetitions: 12
order: sequential
factors:
  kernel: guest
  switch: ovs
  attach: switch
  encryption: [none, {type: ipsec, cipher: aes-256-cbc, integrity: hmac-sha512}]
  encryption_scope: vm-to-vm
  placement: cross-host
workloads:
  - {type: ping, ping_size: 56, count: 20, interval: 0.1}
  - {type: ping, ping_size: 65426, count: 20, interval: 0.1}
"""


def guest_threads() -> list[int]:
    """Every thread of the UML guests' processes here (a linux.uml kernel and its descendants)."""
    kids: dict[int, list[int]] = {}
    roots = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(p))
        if cmd.endswith(b"linux.uml"):
            roots.append(int(p))
    procs, todo = set(), roots
    while todo:
        p = todo.pop()
        if p not in procs:
            procs.add(p)
            todo += kids.get(p, [])
    tids = []
    for p in procs:
        try:
            tids += [int(t) for t in os.listdir(f"/proc/{p}/task")]
        except OSError:
            pass
    return tids


def pin(cpu: int, stop: threading.Event) -> None:
    while not stop.wait(0.3):  # the guest forks a host process per guest process: pin the new ones too
        for tid in guest_threads():
            try:
                os.sched_setaffinity(tid, {cpu})
            except OSError:
                pass


def cells(db: Path) -> dict[str, list[list[float]]]:
    names = {(1, 0): "Reference 64 B", (1, 1): "Reference 65434 B", (2, 0): "IPsec 64 B", (2, 1): "IPsec 65434 B"}
    out: dict[str, list[list[float]]] = {}
    with sqlite3.connect(db) as c:
        for tid, sc, w in c.execute("SELECT id, scenario, workload FROM trials WHERE status = 'ok' ORDER BY started"):
            xs = [v for (v,) in c.execute("SELECT value FROM samples WHERE trial = ? AND metric = 'rtt_s'", (tid,))]
            if xs:
                out.setdefault(names.get((sc, w), f"{sc}/{w}"), []).append(xs)
    return out


def cv(xs: list[float]) -> float:
    return 100 * statistics.stdev(xs) / statistics.fmean(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--cpu", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        spec = Path(d) / "echo.yaml"
        spec.write_text(SPEC)
        for r in range(args.runs):
            pinned, stop = r % 2 == 1, threading.Event()
            if pinned:
                threading.Thread(target=pin, args=(args.cpu, stop), daemon=True).start()
            db = Path(d) / f"r{r}.db"
            subprocess.run([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(db), "--no-progress"],
                           cwd=ROOT, capture_output=True, check=False)
            stop.set()
            print(f"run {r + 1} ({f'guest pinned to CPU {args.cpu}' if pinned else 'unpinned'}):")
            for name, trials in cells(db).items():
                meds, mins = [statistics.median(xs) for xs in trials], [min(xs) for xs in trials]
                print(f"  {name:18} CV of medians {cv(meds):4.1f} %, of fastest echoes {cv(mins):4.1f} %; medians (us): "
                      + " ".join(f"{1e6 * m:.0f}" for m in meds), flush=True)


if __name__ == "__main__":
    main()
