"""Real end to end: a tiny campaign through the CLI, kill -9 then clean, resume without loss or repeats."""
import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import ROOT, netns_names, vnetbench
from vnetbench.system.ledger import pids_in_namespaces

pytestmark = pytest.mark.net

TINY = """\
name: tiny
repetitions: 2
factors:
  overlay: [none, vxlan]
  placement: cross-host
  pairs: 2
workloads:
  - type: iperf3
    duration: 1
    latency: ping
  - type: ping
    count: 5
    interval: 0.05
"""


def our_namespaces(state_dir):
    prefixes = {p.name for p in state_dir.iterdir()} if state_dir.exists() else set()
    return {n for n in netns_names() if any(n.startswith(p + "-") for p in prefixes)}


def test_tiny_campaign_show_export(tmp_path, state_dir):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    db = tmp_path / "r.db"
    run = vnetbench("run", spec, "--db", db, "--no-progress")
    assert "campaign 1: done, 8 trials ok, 0 failed" in run.stdout
    with sqlite3.connect(db) as c:
        (prefix,) = c.execute("SELECT prefix FROM campaigns WHERE id = 1").fetchone()
    assert prefix and not [n for n in netns_names() if n.startswith(prefix + "-")], "the run left namespaces behind"
    assert not any(state_dir.iterdir()), "the run left its ledger directory behind"
    show = vnetbench("show", "1", "--db", db).stdout
    for metric in ("throughput_bps", "rtt_s", "cpu_busy_ratio", "interrupts_per_s", "context_switches_per_s"):
        assert metric in show, metric
    assert "kernel-vxlan" in show and "95% CI" in show
    lines = vnetbench("export", "1", "--db", db, "--format", "jsonl").stdout.splitlines()
    recs = [json.loads(line) for line in lines]
    for field in ("campaign", "trial", "repetition", "scenario", "metric", "value", "unit", "implementation", "timestamp"):
        assert all(field in r for r in recs), field
    tput = [r for r in recs if r["metric"] == "throughput_bps"]
    assert len(tput) == 2 * 2 * 2  # scenarios x repetitions x pairs
    assert all(r["unit"] == "bit/s" and r["value"] > 50e6 for r in tput)
    # consistency: the aggregate of a trial is the sum of its pairs
    for trial in {r["trial"] for r in tput}:
        pairs = sum(r["value"] for r in tput if r["trial"] == trial)
        agg = [r["value"] for r in recs if r["trial"] == trial and r["metric"] == "aggregate_throughput_bps"]
        assert agg and abs(agg[0] - pairs) <= 1e-6 * pairs
    rtts = [r["value"] for r in recs if r["metric"] == "rtt_s"]
    assert len(rtts) == 2 * 2 * 2 * 5 and all(0 < v < 0.05 for v in rtts)
    assert {r["scenario"]["overlay"] for r in recs} == {"none", "vxlan"}
    csv_out = vnetbench("export", "1", "--db", db, "--format", "csv").stdout.splitlines()
    assert len(csv_out) == len(lines) + 1


def iperf3_in(namespaces) -> list[int]:
    pids = []
    for pid in pids_in_namespaces(sorted(namespaces)):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == "iperf3":
                pids.append(pid)
        except OSError:
            pass
    return pids


def running(pid: int) -> bool:
    """Alive and not a zombie (PID 1 here may be slow to reap orphans)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_kill9_then_clean_leaves_nothing(tmp_path, state_dir):
    spec = tmp_path / "long.yaml"
    spec.write_text(TINY.replace("duration: 1", "duration: 20"))
    proc = subprocess.Popen([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(tmp_path / "r.db"),
                             "--no-progress"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: len(iperf3_in(our_namespaces(state_dir))) >= 4, 30, "the run's iperf3 servers and clients")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    left = our_namespaces(state_dir)
    assert left, "kill -9 should leave the run's namespaces (that is what clean is for)"
    orphans = pids_in_namespaces(sorted(left))
    assert orphans, "the tools of the killed run should still be running"
    out = vnetbench("clean").stdout
    assert "removed" in out
    assert not our_namespaces(state_dir) and not (netns_names() & left)
    prefix = next(iter(left)).split("-")[0]
    assert not (state_dir / prefix).exists()
    time.sleep(0.2)
    assert not [pid for pid in orphans if running(pid)], "clean left processes running"
    assert "nothing to clean" in vnetbench("clean").stdout


def test_interrupt_then_resume_neither_loses_nor_repeats(tmp_path, state_dir):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.replace("repetitions: 2", "repetitions: 3"))
    db = tmp_path / "r.db"
    from conftest import start_run, trial_rows
    proc = start_run(spec, db)

    def trials():
        return trial_rows(db)
    _wait(lambda: len(trials()) >= 3, 60, "three trials")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err  # 128 + SIGTERM
    assert "--resume 1" in err
    first = trials()
    assert 3 <= len(first) < 12
    assert not our_namespaces(state_dir)
    vnetbench("run", "--resume", "1", "--db", db, "--no-progress")
    final = trials()
    assert len(final) == 2 * 3 * 2
    assert len({t[1:4] for t in final}) == len(final)
    assert set(first) <= set(final)  # nothing finished before the interrupt was lost or redone
