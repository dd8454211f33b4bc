"""What the load watch counts as the run's own CPU before a trial (and so what the noisy flag calls other load): every
process the run started, through the run's cgroup, wherever the process went (detached, reparented to init, a guest
kernel's host processes), and nothing else: busy loops the run did not start stay foreign.

Each check compares two counters of one span: the share a process used (its /proc/PID/stat) against the share the
watch counted as ours or as foreign. Other work on the machine only adds to the foreign side, so the bounds hold on a
busy machine too."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vnetbench.system import cgroup
from vnetbench.results import guards
from vnetbench.guests import kind_class
from vnetbench.system.ledger import Ledger
from vnetbench.probes.procstat import OWN_CGROUP, LoadWatch

HZ = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1
SPAN_S = 1.0
TICKS = 0.05  # share: /proc counts in ticks, the watch reads every 0.05 s; either end of a span may be off by that
BURN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {s}: pass\n"
UML = pytest.mark.skipif(not kind_class("uml").support().ok, reason="User-Mode Linux not installed")


def cpu_s(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) of each of these processes that is there."""
    out = {}
    for pid in pids:
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = (int(f[11]) + int(f[12])) / HZ
        except (OSError, IndexError):
            pass
    return out


def share(a: dict[int, float], b: dict[int, float], seconds: float) -> float:
    """The share of all CPUs the processes there at both readings used between them."""
    return sum(b[p] - a[p] for p in a if p in b) / (seconds * CPUS)


def busy_loops(seconds: float) -> list[subprocess.Popen]:
    """One busy loop pinned to each CPU: together they keep the whole machine busy, whatever else runs."""
    return [subprocess.Popen(["taskset", "-c", str(k), sys.executable, "-c", BURN.format(s=seconds)])
            for k in range(CPUS)]


def in_group(pid: int, group: Path) -> bool:
    return cgroup.current(pid) == group


def measured(watch: LoadWatch, ours: callable, loops: list[int]):
    """Over SPAN_S: (the share the processes `ours()` lists used, the share the loops used, the watch's load)."""
    t0, a_ours, a_loops = time.monotonic(), cpu_s(ours()), cpu_s(loops)
    time.sleep(SPAN_S)
    pids = ours()
    b_ours, b_loops = cpu_s(pids), cpu_s(loops)
    seconds = time.monotonic() - t0
    load = watch.load(seconds)
    return share(a_ours, b_ours, seconds), share(a_loops, b_loops, seconds), load


def check(own_share: float, loops_share: float, load) -> None:
    assert own_share > 0.05, own_share  # the run's process did work in the span
    assert load.counted == OWN_CGROUP
    assert load.own >= own_share - TICKS, (load, own_share)           # what the run started is its own
    assert load.foreign >= loops_share - TICKS, (load, loops_share)   # what it did not start is not
    # the loops keep both CPUs busy and the run's processes took at most its share: trials would be flagged
    assert load.foreign > guards.FOREIGN_NOISY, load


@pytest.fixture
def run_group(state_dir):
    """A run's ledger, its cgroup joined and a load watch counting it; afterwards the ledger removes the group and
    this process is back in its own."""
    home = cgroup.current()
    ledger = Ledger.create()
    watch = LoadWatch().start()
    try:
        group = cgroup.join(ledger)
        watch.count(group)
        yield ledger, group, watch
    finally:
        watch.stop()
        ledger.remove_all()
    assert cgroup.current() == home
    assert not group.exists()


def test_a_detached_process_the_run_started_is_its_own_and_busy_loops_beside_it_are_not(run_group):
    """A process the run started that detached (its parent gone, reparented to init: never reaped by the run, so
    the run's own CPU times never had it) is counted as the run's; busy loops the run did not start, one per CPU,
    are foreign and flag the trial."""
    ledger, group, watch = run_group
    assert ("cgroup", str(group)) in {(o.kind, o.name) for o in ledger.objects()}  # recorded, for `clean`
    loops = busy_loops(SPAN_S + 3)
    for p in loops:  # started here, so in the run's group: moved out, as any process of someone else
        (group.parent / "cgroup.procs").write_text(str(p.pid))
    try:
        started = subprocess.run(["sh", "-c", f"{sys.executable} -c '{BURN.format(s=SPAN_S + 2)}' >/dev/null 2>&1 & "
                                              "echo $!"], capture_output=True, text=True, check=True)
        detached = int(started.stdout)
        assert in_group(detached, group) and not any(in_group(p.pid, group) for p in loops)
        time.sleep(0.3)
        check(*measured(watch, lambda: [detached], [p.pid for p in loops]))
    finally:
        for p in loops:
            p.kill()
            p.wait()


@UML
@pytest.mark.net
def test_a_guest_kernel_the_run_booted_is_its_own_work(run_group):
    """Every host process of a User-Mode Linux guest the run booted is in the run's cgroup, and a busy loop inside
    the guest is counted as the run's own work, not as other load; busy loops beside it on every CPU still are."""
    from vnetbench.guests.probe import SharedGuest
    ledger, group, watch = run_group
    loops = busy_loops(SPAN_S + 40)
    for p in loops:
        (group.parent / "cgroup.procs").write_text(str(p.pid))
    guest = SharedGuest(ledger)
    try:
        ex = guest.executor()
        fleet = guest.fleet
        pids = lambda: fleet.kind.pids(fleet, fleet.guests["m1"])  # noqa: E731
        assert pids() and all(in_group(pid, group) for pid in pids())
        ex.spawn(["timeout", "20", "sh", "-c", "while :; do :; done"], label="busy loop")
        # running before the span starts: on a busy machine a command into the guest takes a second or more
        deadline = time.monotonic() + 15
        while ex.run(["sh", "-c", "pgrep -x timeout || true"]).stdout.strip() == "" and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        check(*measured(watch, pids, [p.pid for p in loops]))
    finally:
        for p in loops:
            p.kill()
            p.wait()
        guest.close()


@pytest.mark.net
def test_each_trial_says_what_was_counted_as_the_runs_own(tmp_path, state_dir):
    """A campaign's trials store the busy share before them that was the run's own and what that covered (its
    cgroup); the run leaves no cgroup behind and this process back where it was."""
    import json
    import sqlite3

    from vnetbench.run.campaign import Runner
    from vnetbench.experiment.spec import loads
    from vnetbench.results.store import Store
    home = cgroup.current()
    db = tmp_path / "r.db"
    outcome = Runner(Store(db), progress=False).run(loads("name: p\nrepetitions: 2\nworkloads: [{type: ping, count: 1}]\n"))
    assert outcome.trials_ok == 2
    with sqlite3.connect(db) as c:
        prefix = c.execute("SELECT prefix FROM campaigns").fetchone()[0]
        metas = [json.loads(m) for (m,) in c.execute("SELECT metadata FROM trials")]
    for m in metas:
        assert m["own_cpu"] == OWN_CGROUP and 0 <= m["own_busy_ratio"] <= 1 and 0 <= m["foreign_busy_ratio"] <= 1
    assert cgroup.current() == home and not cgroup.path_for(prefix).exists()


@pytest.mark.net
def test_without_a_cgroup_the_run_says_so_and_its_trials_too(tmp_path, state_dir, monkeypatch, capsys):
    """Where no v2 hierarchy can be written (here: made to look like a v1-only machine), the run says so once and its
    trials say that only its own process and reaped children were counted as its own."""
    import json
    import sqlite3

    from vnetbench.probes.procstat import OWN_PROCESS
    from vnetbench.run.campaign import Runner
    from vnetbench.experiment.spec import loads
    from vnetbench.results.store import Store
    v1 = "30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu\n"
    assert cgroup._unified_mount(v1) is None
    assert cgroup._unified_mount(v1 + "31 25 0:27 / /sys/fs/cgroup rw shared:10 - cgroup2 cgroup2 rw\n") == \
        (Path("/sys/fs/cgroup"), "/")
    monkeypatch.setattr(cgroup, "_unified_mount", lambda text: None)
    db = tmp_path / "r.db"
    outcome = Runner(Store(db), progress=False).run(loads("name: p\nrepetitions: 1\nworkloads: [{type: ping, count: 1}]\n"))
    assert outcome.trials_ok == 1
    assert "no cgroup v2 hierarchy is mounted" in " ".join(capsys.readouterr().err.split())
    with sqlite3.connect(db) as c:
        (meta,) = [json.loads(m) for (m,) in c.execute("SELECT metadata FROM trials")]
    assert meta["own_cpu"] == OWN_PROCESS
