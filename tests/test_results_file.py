"""The results file: every fault one line and exit 2, reading a read-only file, the schema version, and the run's
own promises around it (exit codes, signals during the capability probe, cleanup despite a failed status write,
one process per campaign)."""
import errno
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import ROOT, netns_names, vnetbench
from vnetbench.system.ledger import process_start_time
from vnetbench.core.sample import Sample
from vnetbench.results.store import SCHEMA_VERSION, Store, StoreError

SKIPPED_ONLY = "name: s\nrepetitions: 1\nfactors: {overlay: vxlan, attach: host}\nworkloads: [{type: ping, count: 2}]\n"
V1_SCHEMA = """
CREATE TABLE campaigns (id INTEGER PRIMARY KEY, name TEXT NOT NULL, created REAL NOT NULL, finished REAL,
    status TEXT NOT NULL, source TEXT, spec_text TEXT NOT NULL, spec_sha256 TEXT NOT NULL, environment TEXT,
    prefix TEXT);
CREATE TABLE scenarios (campaign INTEGER NOT NULL, idx INTEGER NOT NULL, key TEXT NOT NULL, levels TEXT NOT NULL,
    labels TEXT NOT NULL, status TEXT NOT NULL, reason TEXT, implementation TEXT, notes TEXT,
    PRIMARY KEY (campaign, idx));
CREATE TABLE trials (id INTEGER PRIMARY KEY, campaign INTEGER NOT NULL, scenario INTEGER NOT NULL,
    repetition INTEGER NOT NULL, workload INTEGER NOT NULL, kind TEXT NOT NULL, params TEXT, status TEXT NOT NULL,
    error TEXT, started REAL, finished REAL, metadata TEXT, UNIQUE (campaign, scenario, repetition, workload));
CREATE TABLE samples (trial INTEGER NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL, unit TEXT NOT NULL,
    t REAL, metadata TEXT);
INSERT INTO campaigns VALUES (1, 'old', 1.0, 2.0, 'done', 'old.yaml', 'name: old', 'x', '{}', 'vb0000');
"""


def small_db(path, owner=None) -> None:
    """A campaign with one scenario and two trials of pings, written through the Store."""
    store = Store(path)
    cid = store.new_campaign("t", "t.yaml", "name: t\nworkloads: [{type: ping}]\n", "sha", {}, owner=owner)
    store.put_scenario(cid, 1, "switch=linuxbridge", {"switch": "linuxbridge"}, {"switch": "linuxbridge"}, "done",
                       None, {"switch": "linux-bridge"}, [])
    for rep in (1, 2):
        store.save_trial(cid, 1, rep, 0, "ping", {}, "ok", None, 0.0, 1.0,
                         [Sample("rtt_s", 1e-4 * (rep + k), "s") for k in range(5)])
    store.close()


def one_line_exit_2(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


# ---- faults: one line, exit 2 ------------------------------------------------------------------------------------
def test_a_directory_a_missing_directory_and_a_corrupt_file_are_one_line(tmp_path):
    assert "is a directory" in one_line_exit_2(vnetbench("list", "--db", tmp_path, check=False))
    spec = tmp_path / "s.yaml"
    spec.write_text(SKIPPED_ONLY)
    if os.geteuid() == 0:
        assert "does not exist" in one_line_exit_2(vnetbench("run", spec, "--db", tmp_path / "no" / "r.db",
                                                             check=False))
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite at all " * 300)
    for cmd in (("list",), ("show",), ("export",), ("report", "1")):
        assert "not a vnetbench results file or is damaged" in one_line_exit_2(
            vnetbench(*cmd, "--db", bad, check=False))
    with pytest.raises(StoreError, match="not a vnetbench results file"):
        Store(bad)


def test_a_lock_held_past_the_timeout_is_one_line(tmp_path):
    db = tmp_path / "r.db"
    small_db(db)
    holder = sqlite3.connect(db)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError, match=r"locked by another process \(waited 0.3 s\)"):
            Store(db, timeout=0.3).new_campaign("x", "x", "x", "x", {})
        assert time.monotonic() - t0 < 10
    finally:
        holder.rollback()
        holder.close()


def test_a_full_disk_is_one_line(tmp_path):
    db = tmp_path / "r.db"
    small_db(db)
    store = Store(db)
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages}")  # what SQLite answers on a full disk: SQLITE_FULL
    with pytest.raises(StoreError, match="is full"):
        store.save_trial(1, 1, 3, 0, "ping", {}, "ok", None, 0.0, 1.0, [Sample("rtt_s", 1e-4, "s")] * 5000)
    assert len(Store(db, readonly=True).trials(1)) == 2  # the failed trial left nothing half-written


def test_reading_commands_work_on_a_read_only_file(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    db = d / "r.db"
    small_db(db)
    spec = tmp_path / "s.yaml"
    spec.write_text(SKIPPED_ONLY)
    if os.geteuid() != 0:
        pytest.skip("needs root for a read-only bind mount in a private mount namespace")
    # Root ignores file modes: a read-only bind mount (in a mount namespace of the command's own) is read-only.
    script = (f"mount --bind {d} {d} && mount -o remount,bind,ro {d} && "
              f"for c in list show export 'report 1 -o {tmp_path}/r.html'; do "
              f"{sys.executable} -m vnetbench $c --db {db} >/dev/null || echo FAILED $c; done; "
              f"{sys.executable} -m vnetbench run {spec} --db {db}; echo rc=$?")
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert "FAILED" not in proc.stdout, proc.stdout + proc.stderr
    assert (tmp_path / "r.html").exists()
    # run needs to write: one line, exit 2 (its spec is never reached)
    assert "rc=2" in proc.stdout and "read-only" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# ---- schema version ----------------------------------------------------------------------------------------------
def test_a_newer_file_is_refused_and_an_older_one_migrated(tmp_path):
    newer = tmp_path / "newer.db"
    small_db(newer)
    with sqlite3.connect(newer) as c:
        c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    assert "written by a newer vnetbench" in one_line_exit_2(vnetbench("list", "--db", newer, check=False))
    with pytest.raises(StoreError, match="newer vnetbench"):
        Store(newer)
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as c:
        c.executescript(V1_SCHEMA)
    assert Store(old, readonly=True).campaign(1).name == "old"  # read as it is
    assert Store(old).campaign(1).pid is None                 # opened for writing: migrated
    with sqlite3.connect(old) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert "pid_start" in [r[1] for r in c.execute("PRAGMA table_info(campaigns)")]
    assert Store(tmp_path / "new.db").db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


# ---- run: resume, exit codes, signals, cleanup -----------------------------------------------------------------------
@pytest.mark.net
def test_resume_of_a_campaign_whose_process_lives_is_refused(tmp_path, state_dir):
    db = tmp_path / "r.db"
    other = subprocess.Popen(["sleep", "60"])
    try:
        small_db(db, owner=(other.pid, process_start_time(other.pid)))
        proc = vnetbench("run", "--resume", "1", "--db", db, "--no-progress", check=False)
        assert f"still being run by process {other.pid}" in one_line_exit_2(proc)
    finally:
        other.kill()
        other.wait()
    with sqlite3.connect(db) as c:  # the holder is gone (its pid may even be reused): the resume goes ahead
        c.execute("UPDATE campaigns SET spec_text = ?", (SKIPPED_ONLY,))
    proc = vnetbench("run", "--resume", "1", "--db", db, "--no-progress", check=False)
    assert "still being run" not in proc.stderr, proc.stderr


@pytest.mark.net
def test_run_where_nothing_can_run_exits_non_zero(tmp_path, state_dir):
    spec = tmp_path / "s.yaml"
    spec.write_text(SKIPPED_ONLY)
    proc = vnetbench("run", spec, "--db", tmp_path / "r.db", "--no-progress", check=False)
    assert proc.returncode == 1 and "nothing ran: every scenario was skipped" in proc.stderr, proc.stderr


@pytest.mark.net
def test_run_exits_non_zero_and_counts_failed_trials(tmp_path, state_dir, monkeypatch):
    from typer.testing import CliRunner
    from vnetbench import cli
    from vnetbench.run import campaign as runner

    db = tmp_path / "r.db"
    small_db(db)

    def fake_run(self, spec=None, resume=None, order=None):
        return runner.Outcome(1, "done", trials_ok=3, trials_failed=2, scenarios_runnable=1)
    monkeypatch.setattr(runner.Runner, "run", fake_run)
    spec = tmp_path / "s.yaml"
    spec.write_text(SKIPPED_ONLY)
    res = CliRunner().invoke(cli.app, ["run", str(spec), "--db", str(db), "--no-progress"])
    assert res.exit_code == 1 and "2 of 5 trials failed" in res.output, res.output


@pytest.mark.net
def test_a_failed_final_status_write_still_removes_the_run(tmp_path, state_dir, monkeypatch):
    from vnetbench.run.campaign import Runner
    from vnetbench.experiment.spec import loads

    store = Store(tmp_path / "r.db")
    real = store.set_campaign

    def disk_full_at_the_end(cid, **fields):
        if fields.get("status") in ("done", "interrupted"):
            raise StoreError("the disk holding r.db is full")
        return real(cid, **fields)
    monkeypatch.setattr(store, "set_campaign", disk_full_at_the_end)
    with pytest.raises(StoreError) as info:
        Runner(store, progress=False).run(loads(SKIPPED_ONLY, "s.yaml"))
    assert not list(state_dir.glob("vb*")), "the ledger directory was left behind"
    assert info.value.campaign == 1  # what `run` names in its --resume hint


@pytest.mark.net
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_the_capability_probe_leaks_nothing(tmp_path, state_dir, sig, code):
    spec = tmp_path / "s.yaml"
    spec.write_text(SKIPPED_ONLY)
    proc = subprocess.Popen([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(tmp_path / "r.db"),
                             "--no-progress"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:
        probing = [d.name for d in state_dir.glob("vb*") if (d / "objects.jsonl").exists()]  # the probe's ledger
        if probing:
            break
        assert proc.poll() is None and time.monotonic() < deadline, "the run never started its probe"
        time.sleep(0.002)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert not [n for n in netns_names() if n.startswith(probing[0] + "-")], "a namespace was left behind"
    assert not list(state_dir.glob("vb*")), "a ledger directory was left behind"


@pytest.mark.net
def test_a_full_disk_during_a_run_is_one_line_with_the_resume_hint(tmp_path, state_dir, monkeypatch):
    from typer.testing import CliRunner
    from vnetbench import cli
    from vnetbench.run import campaign as runner

    db = tmp_path / "r.db"
    small_db(db)

    def disk_full(self, spec=None, resume=None, order=None):  # as Runner.run reports it once its campaign exists
        exc = StoreError(f"the disk holding {db} is full (database or disk is full); free some space")
        exc.campaign = 1
        raise exc
    monkeypatch.setattr(runner.Runner, "run", disk_full)
    spec = tmp_path / "s.yaml"
    spec.write_text(SKIPPED_ONLY)
    res = CliRunner().invoke(cli.app, ["run", str(spec), "--db", str(db), "--no-progress"])
    assert res.exit_code == 2 and "is full" in res.output and f"vnetbench run --resume 1 --db {db}" in res.output, \
        res.output


PING = "name: p\nrepetitions: 2\nfactors: {overlay: none}\nworkloads: [{type: ping, count: 3, interval: 0.05}]\n"


@pytest.mark.net
def test_a_campaign_interrupted_before_its_scenarios_gets_them_on_resume(tmp_path, state_dir):
    """An interrupt between the campaign's creation and its scenarios (e.g. during the guest probe) left it without
    any: its resumed trials were committed but invisible to show, export and compare."""
    db = tmp_path / "r.db"
    store = Store(db)
    store.new_campaign("p", "p.yaml", PING, "sha", {"order": {"order": "sequential", "seed": None}})
    store.close()
    vnetbench("run", "--resume", "1", "--db", db, "--no-progress")
    lines = vnetbench("export", "1", "--db", db).stdout.splitlines()
    assert len(lines) >= 2 * 3 and all('"overlay": "none"' in ln for ln in lines[:3]), lines[:3]
    assert "rtt" in vnetbench("show", "1", "--db", db).stdout


def test_a_stored_spec_that_no_longer_validates_is_one_line_per_problem(tmp_path, state_dir):
    db = tmp_path / "r.db"
    store = Store(db)
    store.new_campaign("p", "p.yaml", PING.replace("count: 3", "count: 3, colour: red").replace("name: p\n", "")
                       , "sha", {})
    store.close()
    proc = vnetbench("run", "--resume", "1", "--db", db, "--no-progress", check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(lines) == 2, proc.stderr
    assert all(ln.startswith("campaign 1 cannot be resumed by this vnetbench (start a new campaign): p.yaml:")
               for ln in lines), lines
    assert any("colour" in ln for ln in lines) and any("name" in ln for ln in lines), lines


def test_a_resume_elsewhere_is_refused_and_never_creates_a_results_file(tmp_path, state_dir):
    """A testbed campaign resumed without its testbed (or a local one with a testbed) would mix two places in one
    campaign; a resume with a results file that does not exist must not create an empty one."""
    db = tmp_path / "r.db"
    store = Store(db)
    hosts = {"node1": "root@192.0.2.1", "node2": "root@192.0.2.2"}
    store.new_campaign("p", "p.yaml", PING, "sha", {"place": {"testbed": "/lab/tb.yaml", "hosts": hosts}})
    store.new_campaign("q", "q.yaml", PING, "sha", {"place": {"testbed": None}})
    store.close()
    proc = vnetbench("run", "--resume", "1", "--db", db, "--no-progress", check=False)
    assert "runs on a testbed (hosts node1 (root@192.0.2.1), node2 (root@192.0.2.2)), not on this machine: " \
           f"resume it with: vnetbench run --resume 1 --db {db} --testbed /lab/tb.yaml" in one_line_exit_2(proc)
    other = tmp_path / "other.yaml"
    other.write_text("hosts:\n  node1: {ssh: root@192.0.2.1, nic: eth1, address: 192.0.2.1}\n"
                     "  node2: {ssh: root@192.0.2.9, nic: eth1, address: 192.0.2.2}\n")
    proc = vnetbench("run", "--resume", "1", "--db", db, "--testbed", other, "--no-progress", check=False)
    assert f"{other} has other hosts (node1 (root@192.0.2.1), node2 (root@192.0.2.9))" in one_line_exit_2(proc)
    proc = vnetbench("run", "--resume", "2", "--db", db, "--testbed", other, "--no-progress", check=False)
    assert "ran on this machine, not on a testbed: resume it without --testbed" in one_line_exit_2(proc)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = vnetbench("run", "--resume", "1", "--db", elsewhere / "vnetbench.db", "--no-progress", check=False)
    assert "no results file" in one_line_exit_2(proc) and not list(elsewhere.iterdir())


@pytest.mark.net
def test_the_interrupt_hint_is_the_full_command(tmp_path, state_dir):
    spec = tmp_path / "s.yaml"
    spec.write_text(PING.replace("repetitions: 2", "repetitions: 50").replace("count: 3", "count: 20"))
    db = tmp_path / "r.db"
    from conftest import start_run, trial_rows
    proc = start_run(spec, db)
    deadline = time.monotonic() + 60
    while not trial_rows(db) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert f"Continue with: vnetbench run --resume 1 --db {db}\n" in err, err


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs of the test's own, unmounted at teardown."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=700", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


@pytest.mark.net
def test_a_full_disk_stops_the_run_at_the_first_trial_it_cannot_commit(small_disk, state_dir):
    """With its results file on a full disk a run measured on and discarded every trial (46 of them, 139 lines):
    the first trial that cannot be committed stops it, with one line naming the file and the fix."""
    spec = small_disk.parent / "s.yaml"
    spec.write_text(PING.replace("repetitions: 2", "repetitions: 40"))
    db = small_disk / "r.db"
    from conftest import start_run, trial_rows
    proc = start_run(spec, db)
    deadline = time.monotonic() + 60
    while not trial_rows(db) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:  # the disk fills up under the run (on a slow machine the run's own trials may have filled it already)
        with open(small_disk / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    out, err = proc.communicate(timeout=120)
    stored = len(trial_rows(db))
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"the disk holding {db} is full" in lines[0] and "free some space" in lines[0]
    assert f"continue with vnetbench run --resume 1 --db {db}" in lines[0]
    assert stored < 40, "the run went on measuring"
    assert not list(state_dir.glob("vb*")), "the run left its ledger directory behind"
