"""The cleanup ledger: objects recorded before creation; clean removes exactly those of dead runs."""
import json
import time
import os
import subprocess
import sys

import pytest

from vnetbench import ledger
from conftest import netns_names

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
                                  "import time; from vnetbench.ledger import Ledger; l = Ledger.create();"
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
    from vnetbench import cgroup
    child = subprocess.Popen([sys.executable, "-c",
                              "import subprocess, time; from vnetbench import cgroup; from vnetbench.ledger import Ledger;"
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
    from vnetbench import cgroup
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
                 "guests/machine.py": "the OVS probe's scratch namespaces, inside the guest",
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
    from vnetbench import ledger as lg
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
    from vnetbench import topology
    from vnetbench.capabilities import detect
    from vnetbench.matrix import expand
    from vnetbench.spec import loads
    (sc,) = expand(loads("name: t\nfactors: {placement: same-host}\nworkloads: [{type: ping, count: 1}]\n").experiment,
                   detect())
    run = ledger.Ledger.create()
    topo = topology.Topology(sc, run)
    real = subprocess.run

    def no_delete(argv, *a, **kw):  # the teardown's delete does nothing
        if "netns del" in (kw.get("input") or ""):
            return subprocess.CompletedProcess(argv, 0, "", "")
        return real(argv, *a, **kw)
    names = {n.netns for n in topo.nodes.values() if n.netns}
    try:
        topo.build()
        with monkeypatch.context() as m:
            m.setattr(topology.subprocess, "run", no_delete)
            topo.teardown()
        assert names <= set(ledger._netns_names())
        assert names <= {o.name for o in run.objects() if o.kind == "netns"}
    finally:
        run.remove_all()
        left = names & set(ledger._netns_names())
        ledger.delete_namespaces(sorted(left))  # (without the fix no ledger knows them: the test removes them)
    assert not left and not run.dir.exists()
