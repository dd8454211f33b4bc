import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import vnetbench.catalog  # noqa: F401 (every workload and probe registered: their metrics, as the CLI has them)

ROOT = Path(__file__).resolve().parent.parent
# Modules whose tools run in the machine's own network namespace (loopback) and count them there: one worker.
LOOPBACK_MODULES = {"test_workloads_loopback", "test_suite_s5"}
# modules that share a session fixture run on one worker, so it is made once: S1's smoke campaign (1-2 minutes)
SHARED_FIXTURE = {"test_report": "s1-smoke", "test_suites_s1_s2": "s1-smoke"}
# About how long each group takes on one worker of the 2-core machine (seconds: the sum of its tests' times of 2 s
# or more in a CI run, `--durations-min=2`; a group not named here counts as short): the longest start first, so
# that the workers end together.
GROUP_SECONDS = {"test_testbed": 180, "test_suites_s3_s4": 130, "s1-smoke": 110, "test_guest_kernel": 100,
                 "test_qemu_hosts": 95, "test_lab_qemu": 75, "loopback": 55, "test_runner": 50, "test_docs": 50,
                 "test_bad_input": 45, "test_ndrpdr": 45, "test_scale": 45, "test_rounds": 45, "test_encryption": 40,
                 "test_verdicts": 35, "test_hosts": 35, "test_e2e": 35, "test_speed": 35, "test_trend": 30,
                 "test_ovs": 30, "test_compare": 30, "test_host_guests": 25, "test_card_verdicts": 25,
                 "test_vm_guests": 25, "test_cpu_pinning": 25, "test_results_file": 20, "test_results_model": 20,
                 "test_qemu_guests": 15, "test_offloads": 15, "test_ledger": 15, "test_steering": 10,
                 "test_testbed_file": 10, "test_ssh": 10}


def group_of(nodeid: str) -> str:
    """The group a test runs in: its module, or the group its module shares (above)."""
    name = Path(nodeid.split("::")[0]).stem
    return "loopback" if name in LOOPBACK_MODULES else SHARED_FIXTURE.get(name, name)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without xdist (-p no:xdist) it is not called
def pytest_xdist_make_scheduler(config, log):
    """With pytest-xdist's `--dist loadgroup` (what install.sh test runs, `-n 3`), a group runs whole on one worker,
    like --dist loadfile: module-scoped fixtures (the SSH lab) and the S1 smoke campaign are made once; the loopback
    modules share a worker. Not with xdist_group marks: xdist 3.8 appends a marked test's group to its node id through
    `item._nodeid`, which pytest 9.2 no longer reads (a node's id is `_id`), so the marks grouped nothing and every
    test was scheduled on its own. The groups are handed out longest first (GROUP_SECONDS), the next one only when a
    worker is about to run the last test it has: neither waits with work queued behind a long test of the other."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            longest = max(self.workqueue, key=lambda g: (GROUP_SECONDS.get(g, 0), len(self.workqueue[g])))
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            # as xdist's, with 1 for its 2: a worker holds back the last test it has until it knows the next one
            # (its teardown depends on it), so 1 pending test is a worker about to go idle
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

    return ModuleScheduling(config, log)


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """A private ledger directory, so tests never see (or clean) other runs on the machine. Whatever a test
    leaves there (a failed assertion before its own clean-up, a killed run) is cleaned at teardown: pytest
    later deletes old tmp directories, and with them the ledger that `vnetbench clean` would need."""
    d = tmp_path / "state"
    monkeypatch.setenv("VNETBENCH_STATE_DIR", str(d))
    yield d
    from vnetbench.system import ledger
    deadline = time.monotonic() + 10
    while True:
        _, running = ledger.clean()
        if not running or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # a run the test started may still be stopping
    assert not running, f"runs still alive at teardown: {running}"


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def guest_pids(prefix: str) -> list[int]:
    """The host processes of the run's guests: User-Mode Linux kernels, qemu and its file servers."""
    out = subprocess.run(["pgrep", "-f", f"umid={prefix}-|qemu-system-x86_64 -name {prefix}-|virtiofsd "
                                        f"--socket-path=[^ ]*/{prefix}/"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def clean_after_kill(prefix: str, state_dir: Path) -> None:
    """`clean` after a kill -9 of a run with guests: it removes the run, and nothing of it is left (no guest process,
    namespace, ledger directory, file in /dev/shm or /tmp, link in the machine's own namespace, or cgroup)."""
    from vnetbench.system import ledger
    removed, running = ledger.clean()
    assert prefix not in running and any(prefix in r for r in removed)
    time.sleep(0.5)
    assert not guest_pids(prefix)
    assert not [n for n in netns_names() if n.startswith(prefix)]
    assert not (state_dir / prefix).exists()
    assert not [p for p in os.listdir("/dev/shm") + os.listdir("/tmp") if prefix in p]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert prefix not in links
    from vnetbench.system import cgroup
    assert not cgroup.path_for(prefix).exists()  # the run's cgroup (the killed run was this process's child)


def vnetbench(*args, env=None, check=True, timeout=600):
    proc = subprocess.run([sys.executable, "-m", "vnetbench", *map(str, args)], capture_output=True, text=True,
                          env=env or os.environ.copy(), timeout=timeout, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"vnetbench {args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Three "remote machines" (network + mount namespaces with their own sshd) joined by a lab switch;
    see tests/testlab.py. Everything it created is removed at teardown."""
    from testlab import Lab
    made = Lab(tmp_path_factory.mktemp("lab"), 3)
    try:
        yield made.create()
    finally:
        made.destroy()


@pytest.fixture(scope="session")
def s1_smoke_db(tmp_path_factory):
    """One real `suite:s1 --profile smoke` campaign (it runs in a guest kernel: about 1-2 minutes), shared by the
    tests that read it, with its own private ledger directory, cleaned right after the run like `state_dir`'s."""
    from vnetbench.system import ledger
    base = tmp_path_factory.mktemp("s1smoke")
    env = os.environ.copy() | {"VNETBENCH_STATE_DIR": str(base / "state")}
    db = base / "s1.db"
    proc = vnetbench("run", "suite:s1", "--profile", "smoke", "--db", db, "--no-progress", env=env, check=False,
                     timeout=600)
    old = os.environ.get("VNETBENCH_STATE_DIR")
    os.environ["VNETBENCH_STATE_DIR"] = env["VNETBENCH_STATE_DIR"]
    try:
        _, running = ledger.clean()
    finally:
        if old is None:
            os.environ.pop("VNETBENCH_STATE_DIR", None)
        else:
            os.environ["VNETBENCH_STATE_DIR"] = old
    assert not running, f"runs still alive after the S1 smoke: {running}"
    return db, proc


def start_run(spec, db) -> subprocess.Popen:
    """`vnetbench run SPEC --db DB` in the background, to be interrupted by the test."""
    return subprocess.Popen([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(db), "--no-progress"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def trial_rows(db) -> list[tuple]:
    """(id, scenario, repetition, workload, started) of every stored trial; [] before the file has its tables."""
    import sqlite3
    try:
        with sqlite3.connect(db) as c:
            return c.execute("SELECT id, scenario, repetition, workload, started FROM trials").fetchall()
    except sqlite3.OperationalError:
        return []
