#!/usr/bin/env python3
"""What vnetbench's own time costs around the measurements (run as root from the repo). Alternating in one run:

  (a) per-trial overhead on the shared kernel: a campaign of --trials iperf3 trials of 1 s on one pair; the overhead
      is the campaign's trial time (first trial's start to last trial's end) per trial, minus the tool's measured
      window (each trial's stored phases say where the rest went)
  (b) the same in a guest kernel (`kernel: guest`, User-Mode Linux); the guest's boot is not counted
  (c) one command's round trip into a guest and to an SSH host (the emulated lab of tests/testlab.py), through
      the machine's agent: the channel alone (`echo`, no process there), `true` started there, and `true` over its
      own SSH session as before the agent; medians of --commands
  (d) a one-pair ping campaign (`vnetbench run`, one ping) and `vnetbench show` of it: wall time of the command

    .venv/bin/python bench/overhead.py [--rounds R] [--trials N] [--commands C]
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the emulated SSH lab is a test fixture

from vnetbench.hosts.lab import testbed as tb  # noqa: E402
from vnetbench.guests.probe import SharedGuest  # noqa: E402
from vnetbench.system.ledger import Ledger  # noqa: E402
from testlab import Lab  # noqa: E402

SPEC = "name: overhead\nrepetitions: {n}\norder: sequential\n{factors}workloads: [{{type: iperf3, duration: 1}}]\n"
PING = "name: ping\nrepetitions: 1\nworkloads: [{type: ping, count: 1}]\n"


def vnetbench(*args: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "vnetbench", *args], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode not in (0, 1):  # 1: a trial failed (said below); anything else ends the bench
        raise SystemExit(f"vnetbench {' '.join(args)} exited {proc.returncode}: {proc.stderr[-1000:]}")
    return time.perf_counter() - t0


def campaign(tmp: Path, n: int, guest: bool) -> dict:
    """Overhead per trial and the mean of each phase, from the stored trials of one campaign."""
    spec, db = tmp / "o.yaml", tmp / f"o-{time.monotonic_ns()}.db"
    spec.write_text(SPEC.format(n=n, factors="factors: {kernel: guest}\n" if guest else ""))
    vnetbench("run", str(spec), "--db", str(db))
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT started, finished, metadata, status, error FROM trials ORDER BY started").fetchall()
    for r in rows:
        if r[3] != "ok":  # said, and counted in the time per trial like any other
            print(f"  ({'guest' if guest else 'shared'} kernel) trial {r[3]}: {r[4]}", file=sys.stderr)
    rows = [r for r in rows if r[3] != "failed"] or rows
    phases = [json.loads(r[2])["phases"] for r in rows]
    measured = statistics.mean(p.get("measure", 0.0) for p in phases)
    per_trial = (rows[-1][1] - rows[0][0]) / len(rows)
    keys = sorted({k for p in phases for k in p}, key=lambda k: list(phases[0]).index(k) if k in phases[0] else 99)
    return {"overhead": per_trial - measured, "trial": per_trial,
            "phases": {k: statistics.mean(p.get(k, 0.0) for p in phases) for k in keys}}


def round_trips(ex, n: int) -> dict[str, float]:
    """Medians (s) of the channel's echo, `true` through the agent, and `true` over an SSH session of its own."""
    ch = ex.channel()
    assert ch is not None, f"no agent on {ex.name}"
    out = {"echo": [], "true": [], "ssh": []}
    for _ in range(n):
        t0 = time.perf_counter()
        ch.call("echo", 10)
        t1 = time.perf_counter()
        ex.run(["true"])
        t2 = time.perf_counter()
        ex.agent = False  # the same command, one SSH session (over the shared connection) as without the agent
        try:
            ex.run(["true"])
        finally:
            ex.agent = True
        t3 = time.perf_counter()
        out["echo"].append(t1 - t0)
        out["true"].append(t2 - t1)
        out["ssh"].append(t3 - t2)
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--commands", type=int, default=50)
    args = ap.parse_args()
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="vb-bench-") as d:
        tmp = Path(d)
        os.environ["VNETBENCH_STATE_DIR"] = str(tmp / "state")
        shared, guest, rtt_g, rtt_h, ping, show = [], [], [], [], [], []
        lab = Lab(tmp / "lab", 1).create()
        ledger = Ledger.create()
        machine = SharedGuest(ledger)
        try:
            bed = tb.load(lab.dir / "testbed.yaml")
            host = tb.executor(bed.hosts[0], ledger)
            host.agent = True
            gex = machine.executor()
            (tmp / "p.yaml").write_text(PING)
            for _ in range(args.rounds):
                shared.append(campaign(tmp, args.trials, guest=False))
                rtt_g.append(round_trips(gex, args.commands))
                guest.append(campaign(tmp, args.trials, guest=True))
                rtt_h.append(round_trips(host, args.commands))
                db = tmp / f"p-{time.monotonic_ns()}.db"
                ping.append(vnetbench("run", str(tmp / "p.yaml"), "--db", str(db)))
                show.append(vnetbench("show", "--db", str(db)))
            host.close()
        finally:
            machine.close()
            ledger.remove_all()
            lab.destroy()
    med = statistics.median
    print(f"load average at start {load0[0]:.2f}, at end {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs); "
          f"{args.rounds} rounds alternating, {args.trials} trials of iperf3 1 s per campaign")
    for name, got, target in (("(a) shared kernel", shared, 0.1), ("(b) guest kernel ", guest, 0.5)):
        over = [g["overhead"] for g in got]
        phases = {k: med([g["phases"].get(k, 0.0) for g in got]) for k in got[0]["phases"]}
        print(f"{name}: overhead per trial median {med(over):.3f} s (rounds: {', '.join(f'{o:.3f}' for o in over)}; "
              f"target <= {target} s); measurement share {1 - med(over) / med([g['trial'] for g in got]):.0%}; "
              f"phases (s): " + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()))
    for name, got in (("(c) into a guest", rtt_g), ("(c) to an SSH host", rtt_h)):
        print(f"{name}: agent echo {med([g['echo'] for g in got]) * 1e3:.2f} ms (target <= 5 ms), `true` through "
              f"the agent {med([g['true'] for g in got]) * 1e3:.1f} ms, `true` over its own SSH session "
              f"{med([g['ssh'] for g in got]) * 1e3:.1f} ms (medians of {args.commands} x {args.rounds})")
    print(f"(d) one-pair ping campaign: `vnetbench run` {med(ping):.2f} s wall (target < 1 s), `vnetbench show` "
          f"{med(show):.2f} s (target < 0.5 s); medians of {args.rounds}")


if __name__ == "__main__":
    main()
