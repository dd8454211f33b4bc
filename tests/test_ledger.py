"""The cleanup ledger: objects recorded before creation; clean removes exactly those of dead runs."""
import json
import time
import os
import shutil
import subprocess
import sys

import pytest

from vnetbench.system import ledger
from conftest import netns_names, vnetbench

pytestmark = pytest.mark.net


def test_record_forget_and_torn_lines(state_dir):
    led = ledger.Ledger.create()
    led.record("netns", "a")
    led.record_many([{"kind": "netns", "name": "b"}, {"kind": "dir", "name": "c"}])
    led.forget("netns", "a")
    with open(led.dir / "objects.jsonl", "a") as fh:
        fh.write('{"op": "add", "kind": "netns", "na')  # kill -9 in the middle of a write
    assert [(o.kind, o.name) for o in led.objects()] == [("netns", "b"), ("dir", "c")]
    assert led.prefix.startswith("vb") and len(led.prefix) == ledger.PREFIX_LEN
    led.forget_many([("netns", "b"), ("dir", "c")])
    assert led.objects() == []
    led.remove_all()
    assert not led.dir.exists()


def test_clean_removes_dead_runs_only_and_nothing_foreign(state_dir):
    foreign = f"vbforeign{os.getpid()}"
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    try:
        child = subprocess.Popen([sys.executable, "-c",
                                  "import time; from vnetbench.system.ledger import Ledger; l = Ledger.create();"
                                  "l.record('netns', l.prefix + '-h1');"
                                  "import subprocess; subprocess.run(['ip','netns','add', l.prefix + '-h1']);"
                                  "print(l.prefix, flush=True); time.sleep(60)"],
                                 stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        prefix = child.stdout.readline().strip()
        alive_led = ledger.Ledger.create()  # this test process: a live run
        alive_led.record("netns", alive_led.prefix + "-x")
        removed, running = ledger.clean()
        assert removed == [] and sorted(running) == sorted([prefix, alive_led.prefix])
        assert f"{prefix}-h1" in netns_names()
        child.kill()
        child.wait()
        dry, _ = ledger.clean(dry_run=True)
        assert any(f"netns {prefix}-h1" in line for line in dry) and f"{prefix}-h1" in netns_names()
        removed, running = ledger.clean()
        assert any(f"netns {prefix}-h1" in line for line in removed)
        assert running == [alive_led.prefix]
        names = netns_names()
        assert f"{prefix}-h1" not in names and foreign in names
        assert not (state_dir / prefix).exists()
        alive_led.remove_all()
    finally:
        subprocess.run(["ip", "netns", "del", foreign])


def test_clean_removes_a_killed_runs_cgroup_and_moves_what_is_left_out(state_dir):
    """A run killed with -9 leaves its cgroup (recorded in its ledger before it was made) with what it started still
    in it; `clean` moves those out (it kills what the run recorded or left in its namespaces, as before) and removes
    the group: none is left however the run ended."""
    from vnetbench.system import cgroup
    child = subprocess.Popen([sys.executable, "-c",
                              "import subprocess, time; from vnetbench.system import cgroup; from vnetbench.system.ledger import Ledger;"
                              "l = Ledger.create(); cgroup.join(l); p = subprocess.Popen(['sleep', '30']);"
                              "print(l.prefix, p.pid, flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    prefix, pid = child.stdout.readline().split()
    group = cgroup.path_for(prefix)
    try:
        assert group.is_dir() and cgroup.current(pid) == group
        child.kill()
        child.wait()
        assert any(f"cgroup {group}" in line for line in ledger.clean(dry_run=True)[0]) and group.is_dir()
        removed, _ = ledger.clean()
        assert any(f"cgroup {group}" in line for line in removed)
        assert not group.exists() and cgroup.current(pid) == group.parent
        assert not (state_dir / prefix).exists()
    finally:
        subprocess.run(["kill", pid])


def test_clean_removes_an_empty_run_cgroup_whose_ledger_is_gone_and_nothing_else(state_dir, monkeypatch):
    """A run killed with -9 whose ledger was wiped too leaves an empty cgroup no ledger names: `clean` removes it. A
    group with a process in it (a live run, whatever its state dir) and one whose run has a ledger are left alone."""
    from vnetbench.system import cgroup
    monkeypatch.setattr(cgroup, "ORPHAN_AGE_S", 0)
    here = cgroup.current()
    orphan, busy = (here / f"{cgroup.NAME}vbt{os.getpid() % 1000:03d}{k}" for k in "ob")
    recorded = ledger.Ledger.create()
    kept = here / f"{cgroup.NAME}{recorded.prefix}"
    sleeper = None
    try:
        for g in (orphan, busy, kept):
            g.mkdir()
        sleeper = subprocess.Popen(["sleep", "30"])
        (busy / "cgroup.procs").write_text(str(sleeper.pid))
        dry, _ = ledger.clean(dry_run=True)
        assert [line for line in dry if "cgroup" in line] == [f"{orphan.name[len(cgroup.NAME):]}: cgroup {orphan} "
                                                               "(empty; its run's ledger is gone)"]
        assert orphan.is_dir()
        ledger.clean()
        assert not orphan.exists() and busy.is_dir() and kept.is_dir()
    finally:
        if sleeper:
            sleeper.kill()
            sleeper.wait()
        for g in (orphan, busy, kept):
            cgroup.dissolve(str(g), g.name[len(cgroup.NAME):])
        recorded.remove_all()


def test_reused_pid_is_not_taken_for_a_live_owner(state_dir):
    led = ledger.Ledger.create()
    owner = json.loads((led.dir / "owner.json").read_text())
    owner["start"] -= 1  # same pid, different start time: a different process
    (led.dir / "owner.json").write_text(json.dumps(owner))
    assert not led.owner_alive()
    led.remove_all()


def test_appends_after_a_torn_line_start_a_fresh_line(state_dir):
    led = ledger.Ledger.create()
    led.record("netns", "a")
    led.record("netns", "b")
    assert (led.dir / "objects.jsonl").read_text().count("\n") == 2  # no blank lines in the normal case
    with open(led.dir / "objects.jsonl", "a") as fh:
        fh.write('{"op": "add", "kind": "ne')
    led.forget("netns", "a")
    assert [o.name for o in led.objects()] == ["b"]
    led.remove_all()


def test_an_owner_that_cannot_be_checked_is_left_alone(state_dir):
    """owner.json of the wrong shape (valid JSON), or of a process in another pid namespace: left alone with why,
    and clean goes on with the other runs."""
    odd = ledger.Ledger.create()
    (odd.dir / "owner.json").write_text('["not", "an", "owner"]')
    other = ledger.Ledger.create()
    owner = json.loads((other.dir / "owner.json").read_text())
    (other.dir / "owner.json").write_text(json.dumps(owner | {"pidns": owner["pidns"] + 1}))
    dead = ledger.Ledger.create()
    owner = json.loads((dead.dir / "owner.json").read_text())
    (dead.dir / "owner.json").write_text(json.dumps(owner | {"start": owner["start"] - 1}))
    removed, left, _ = ledger.clean_all()
    assert dict(left) == {odd.prefix: "its owner cannot be checked: its owner.json is not a vnetbench owner record",
                          other.prefix: "its owner cannot be checked: its process is in another pid namespace"}
    assert any(line.startswith(dead.prefix) for line in removed) and not dead.dir.exists()
    for led in (odd, other):
        (led.dir / "owner.json").unlink()
        led.remove_all()


def test_delete_namespaces_kills_what_runs_inside_and_spares_the_rest(state_dir):
    """The one function that removes local namespaces: a process left inside one is killed (else the namespace
    would outlive `ip netns del` with its interfaces), a namespace not named survives, a missing name is passed over."""
    led = ledger.Ledger.create()
    mine, other = f"{led.prefix}-del", f"{led.prefix}-keep"
    for ns in (mine, other):
        led.record("netns", ns)
        subprocess.run(["ip", "netns", "add", ns], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", mine, "sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while not ledger.pids_in_namespaces([mine]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ledger.pids_in_namespaces([mine])
        ledger.delete_namespaces([mine, f"{led.prefix}-absent"])
        assert sleeper.wait(timeout=5) == -9
        names = netns_names()
        assert mine not in names and other in names
    finally:
        sleeper.kill()
        led.remove_all()
    assert other not in netns_names()


def test_only_the_ledger_deletes_local_namespaces():
    """Deleting namespaces of this machine is ledger.delete_namespaces; the others listed delete them elsewhere (in a
    guest, on a testbed host, in plan's printed script) or are on their way to it."""
    from pathlib import Path
    root = Path(ledger.__file__).parent
    elsewhere = {"cli.py": "plan prints the teardown script a user can run",
                 "testbed.py": "on a testbed host, in its clean script",
                 "hosts/base.py": "plan's printed teardown, and the teardown inside a guest (kernel: guest)",
                 "hosts/namespaces.py": "a guest VM's namespace, inside its guest",
                 "guests/probe.py": "the OVS probe's scratch namespaces, inside the guest",
                 "capabilities.py": "the kernel probe script removes its scratch namespace where it runs",
                 "agent.py": "drop_netns: the agent deletes namespaces where it runs, in a guest",
                 "executor.py": "names the agent's drop as the command of its error",
                 "ledger.py": "the function itself"}
    found = {str(p.relative_to(root)) for p in root.rglob("*.py")
             if "netns del" in p.read_text() or '"netns", "del"' in p.read_text()}
    assert found <= set(elsewhere), found - set(elsewhere)


@pytest.mark.net
def test_a_namespace_that_outlives_its_delete_keeps_the_run_recorded(tmp_path, monkeypatch):
    """The run's directory (its ledger) goes only once every recorded namespace is gone: a delete that left them
    (two 256-pair runs left 500 namespaces with no ledger) must leave the run for the next clean."""
    from vnetbench.system import ledger as lg
    monkeypatch.setenv("VNETBENCH_STATE_DIR", str(tmp_path / "state"))
    run = lg.Ledger.create()
    ns = f"{run.prefix}-h1v1"
    run.record("netns", ns)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        monkeypatch.setattr(lg, "delete_namespaces", lambda names: None)  # a delete that does nothing
        run.remove_all()
        assert run.pending and ns in run.pending[0] and run.dir.exists()
        assert ("netns", ns) in {(o.kind, o.name) for o in run.objects()}
        monkeypatch.undo()
        monkeypatch.setenv("VNETBENCH_STATE_DIR", str(tmp_path / "state"))
        lg.Ledger(run.prefix, run.dir.parent).remove_all()
        assert ns not in lg._netns_names() and not run.dir.exists()
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.net
def test_a_namespace_that_outlives_a_topologys_teardown_stays_recorded(state_dir, monkeypatch):
    """A topology's teardown forgets only the namespaces that are gone: one whose delete failed stays in the ledger,
    and the run's own remove_all (or `clean`) removes it (they were forgotten regardless: 500 namespaces of two
    256-pair runs were left that no ledger knew)."""
    from vnetbench.build import topology
    from vnetbench.capabilities import detect
    from vnetbench.experiment.matrix import expand
    from vnetbench.experiment.spec import loads
    (sc,) = expand(loads("name: t\nfactors: {placement: same-host}\nworkloads: [{type: ping, count: 1}]\n").experiment,
                   detect())
    run = ledger.Ledger.create()
    topo = topology.Topology(sc, run)
    names = {n.netns for n in topo.nodes.values() if n.netns}
    try:
        topo.build()
        with monkeypatch.context() as m:
            m.setattr(ledger, "_netns_del", lambda name: None)  # the teardown's delete does nothing
            topo.teardown()
        assert names <= set(ledger._netns_names())
        assert names <= {o.name for o in run.objects() if o.kind == "netns"}
    finally:
        run.remove_all()
        left = names & set(ledger._netns_names())
        ledger.delete_namespaces(sorted(left))  # (without the fix no ledger knows them: the test removes them)
    assert not left and not run.dir.exists()


def _dead_run_with_netns() -> "ledger.Ledger":
    """A run whose process is gone (same pid, another start time), with a real namespace named with its prefix."""
    run = ledger.Ledger.create()
    owner = json.loads((run.dir / "owner.json").read_text())
    (run.dir / "owner.json").write_text(json.dumps(owner | {"start": owner["start"] - 1}))
    run.record("netns", f"{run.prefix}-h1")
    subprocess.run(["ip", "netns", "add", f"{run.prefix}-h1"], check=True)
    return run


def test_a_malformed_ledger_line_is_skipped_with_a_warning_and_every_run_is_cleaned(state_dir):
    """A line with a kind and a name but no op (and other lines that are no record of ours) made `clean` crash with
    a traceback, and no run was cleaned: each is skipped with a warning naming it, and both runs are cleaned."""
    broken, other = _dead_run_with_netns(), _dead_run_with_netns()
    with open(broken.dir / "objects.jsonl", "a") as fh:
        fh.write('{"kind": "netns", "name": "vbx-h1"}\n' 'garbage\n'
                 '{"op": "add", "kind": "process", "name": "p", "pid": "12"}\n')
    try:
        with pytest.warns(ledger.LedgerWarning) as got:
            assert [o.name for o in broken.objects()] == [f"{broken.prefix}-h1"]
        assert [str(w.message).split(" skipped: ")[1].split(" ")[:2] for w in got] == [["not", "an"], ["not", "JSON"],
                                                                                      ["its", "pid"]]
        assert str(got[0].message).startswith(f"run {broken.prefix}: line 2 of {broken.dir / 'objects.jsonl'}")
        proc = vnetbench("clean", check=False)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
        warned = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"warning: run {broken.prefix}: line ")]
        assert len(warned) == 3, proc.stderr
        for run in (broken, other):
            assert f"removed {run.prefix}: netns {run.prefix}-h1" in proc.stdout, proc.stdout
            assert f"{run.prefix}-h1" not in netns_names() and not run.dir.exists()
    finally:
        ledger.delete_namespaces([f"{run.prefix}-h1" for run in (broken, other)])
        for run in (broken, other):
            shutil.rmtree(run.dir, ignore_errors=True)


def test_a_run_whose_owner_cannot_be_checked_is_removed_when_named_and_nothing_of_it_runs(state_dir):
    """A run whose owner is in another pid namespace is left alone for good by `clean`, which says how to remove it:
    `clean --run PREFIX`, which leaves it while its owner or a process it recorded runs, and removes it after."""
    run = ledger.Ledger.create()  # its owner: this process, seen as one of another pid namespace
    owner = json.loads((run.dir / "owner.json").read_text())
    (run.dir / "owner.json").write_text(json.dumps(owner | {"pidns": owner["pidns"] + 1}))
    ns = f"{run.prefix}-h1"
    run.record("netns", ns)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    sleeper = subprocess.Popen(["sleep", "60"])
    run.record_process(sleeper.pid, "sleeper")
    try:
        said = vnetbench("clean").stdout
        assert f"left alone: run {run.prefix}: its owner cannot be checked: its process is in another pid namespace; " \
               f"`vnetbench clean --run {run.prefix}` removes it once no process of it is alive" in said, said
        alive = vnetbench("clean", "--run", run.prefix, check=False)
        assert alive.returncode == 1 and f"its owner (pid {os.getpid()})" in alive.stdout, alive.stdout + alive.stderr
        (run.dir / "owner.json").write_text(json.dumps(owner | {"pidns": owner["pidns"] + 1, "start": 1}))
        alive = vnetbench("clean", "--run", run.prefix, check=False)
        assert alive.returncode == 1 and f"process sleeper (pid {sleeper.pid}) still running" in alive.stdout
        assert ns in netns_names() and run.dir.exists()
        sleeper.kill()
        sleeper.wait()
        done = vnetbench("clean", "--run", run.prefix)
        assert f"removed {run.prefix}: netns {ns}" in done.stdout and ns not in netns_names() and not run.dir.exists()
        for bad in (run.prefix, "../etc", "vb-1"):  # gone now, or no prefix at all: one line, exit 2
            proc = vnetbench("clean", "--run", bad, check=False)
            assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
            assert proc.stderr.startswith("error: --run ") and bad in proc.stderr, proc.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
        ledger.delete_namespaces([ns])
        shutil.rmtree(run.dir, ignore_errors=True)


def test_a_lab_run_whose_controller_rebooted_is_removed_when_named(lab, state_dir):
    """A run found on a testbed host, owned by a controller of another boot (it crashed, then rebooted: no local
    ledger): `clean --testbed` leaves it alone and says how to remove it; `clean --run PREFIX --testbed FILE` keeps it
    while a process it recorded there runs, then removes its namespace and directory there."""
    node1, bed = lab.hosts[0], str(lab.dir / "testbed.yaml")
    prefix, d = f"vbr{os.getpid() % 1000:03d}", f"/run/vnetbench/vbr{os.getpid() % 1000:03d}"
    owner = {"controller": "crashed", "boot": "0" * 36, "pidns": 1, "pid": 1, "start": 1}
    pid = int(lab.on(node1, "sh", "-c", f"mkdir -p {d} && echo '{json.dumps(owner)}' > {d}/owner.json && "
                                        f"ip netns add {prefix}-h1 && {{ sleep 300 >/dev/null 2>&1 & echo $!; }}"))
    records = [{"op": "add", "kind": "netns", "name": f"{prefix}-h1"},
               {"op": "add", "kind": "process", "name": "sleeper", "pid": pid, "start": ledger.process_start_time(pid)}]
    lab.on(node1, "sh", "-c", f"cat > {d}/objects.jsonl <<'E'\n" + "".join(json.dumps(r) + "\n" for r in records) + "E")
    try:
        said = vnetbench("clean", "--testbed", bed).stdout
        assert f"left alone: run {prefix} on node1: its owner cannot be checked: it was started by another machine, " \
               f"or before this one rebooted (crashed); `vnetbench clean --run {prefix} --testbed {bed}` removes it " \
               f"once no process of it is alive" in said, said
        alive = vnetbench("clean", "--run", prefix, "--testbed", bed, check=False)
        assert alive.returncode == 1 and f"run {prefix} on node1: process sleeper (pid {pid}) still running" \
            in alive.stdout, alive.stdout + alive.stderr
        assert lab.objects(node1, prefix) == {"netns": [f"{prefix}-h1"], "links": [], "dirs": [prefix]}
        os.kill(pid, 9)
        deadline = time.monotonic() + 10
        while ledger.process_start_time(pid) == records[1]["start"] and time.monotonic() < deadline:
            time.sleep(0.05)  # a zombie until its new parent reaps it
        done = vnetbench("clean", "--run", prefix, "--testbed", bed)
        assert f"removed {prefix}: node1: netns {prefix}-h1" in done.stdout, done.stdout
        assert lab.objects(node1, prefix) == {"netns": [], "links": [], "dirs": []}
        gone = vnetbench("clean", "--run", prefix, "--testbed", bed, check=False)
        assert gone.returncode == 2 and f"no run {prefix} in {state_dir} nor on the hosts of {bed}" in gone.stderr
    finally:
        if ledger.process_start_time(pid) == records[1]["start"]:
            os.kill(pid, 9)
        lab.on(node1, "sh", "-c", f"ip netns del {prefix}-h1 2>/dev/null; rm -rf {d}")


def test_a_record_read_mid_write_is_no_warning_and_a_torn_middle_line_is(state_dir):
    """A live run read its own ledger while another thread appended (a read sees part of a write that crosses a page:
    three 'not JSON' warnings in one S2 run): an unfinished last line is skipped silently, and is the record once its
    write ends; a torn line that a later append ended is still said."""
    import warnings
    led = ledger.Ledger.create()
    led.record("netns", "a")
    line = json.dumps({"op": "add", "kind": "netns", "name": "b"}) + "\n"
    with open(led.dir / "objects.jsonl", "a") as fh:
        fh.write(line[:20])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [o.name for o in led.objects()] == ["a"]
    with open(led.dir / "objects.jsonl", "a") as fh:
        fh.write(line[20:])
    assert [o.name for o in led.objects()] == ["a", "b"]
    with open(led.dir / "objects.jsonl", "a") as fh:
        fh.write('{"op": "add", "kind": "ne')
    led.record("netns", "c")
    with pytest.warns(ledger.LedgerWarning, match="line 3 .* not JSON"):
        assert [o.name for o in led.objects()] == ["a", "b", "c"]
    led.remove_all()
