"""VM kernels (`vm_kernel: guest`): the factor's levels and their one-line errors, which VMs a level makes guests and
why a scenario cannot have them, and kill -9 of a run while its guest VM carries traffic, then `clean`. S5 with its
guest VMs end to end (per-VM counters, the report's per-VM table) is tests/test_suite_s5.py's smoke test."""
import signal
import subprocess
import textwrap
import time

import pytest

from conftest import clean_after_kill, uml_pids, netns_names, start_run, trial_rows
from vnetbench.guests import backend, vms
from vnetbench.matrix import expand
from vnetbench.spec import SpecError, loads

SPEC = """\
name: vmk
repetitions: 1
order: sequential
factors:
  pairs: 2
  placement: cross-host
  vm_kernel: {level}
workloads:
  - {{type: iperf3, duration: {duration}}}
"""


def spec(level: str, duration: int = 1):
    return loads(SPEC.format(level=level, duration=duration), "vmk.yaml")


@pytest.mark.parametrize("level, message", [
    ("vm", "factors.vm_kernel: 'vm' is not allowed; use shared or guest"),
    ("{type: guest, side: left}", "factors.vm_kernel: vm_kernel option 'side': Input should be 'client', 'server' or 'both'"),
    ("{type: guest, pair: [1]}", "factors.vm_kernel: vm_kernel has no option 'pair'; its options: type, pairs, side"),
    ("{type: shared, pairs: [1]}", "factors.vm_kernel: vm_kernel: pairs and side choose guest VMs; they need type: guest"),
    ("{type: guest, pairs: [0]}", "factors.vm_kernel: vm_kernel option 'pairs': pair numbers start at 1"),
])
def test_bad_levels_are_one_line_each(level, message):
    with pytest.raises(SpecError) as exc:
        spec(level)
    assert len(exc.value.lines) == 1 and exc.value.lines[0].endswith(message), exc.value.lines


def test_which_vms_are_guests_and_why_a_scenario_cannot_have_them():
    def scenarios(level):
        return expand(spec(level).experiment, None)
    [sc] = scenarios("guest")
    assert vms.wanted(sc) == ["h1v1", "h2v2", "h1v3", "h2v4"]  # pair k: client h1v(2k-1), server h2v(2k)
    [sc] = scenarios("{type: guest, pairs: [2], side: server}")
    assert vms.wanted(sc) == ["h2v4"] and vms.decide(sc) is None and "h2v4" in sc.implementation["vm_kernel"]
    [sc] = scenarios("shared")
    assert vms.wanted(sc) == [] and vms.decide(sc) is None
    sc = scenarios("guest")[0]
    sc.levels["attach"] = "direct"
    assert "attach direct has no switch port" in vms.decide(sc) and vms.wanted(sc) == []
    sc = scenarios("guest")[0]
    sc.labels["encryption"] = "ipsec"
    assert vms.decide(sc).startswith("vm_kernel guest: vm-to-vm encryption in guest VMs is not built yet")
    sc = scenarios("{type: guest, pairs: [3]}")[0]
    assert vms.decide(sc) == "vm_kernel guest: pair 3 is a guest but the scenario has 2 pairs"


def test_a_background_load_that_ends_before_the_window_is_named():
    from vnetbench.runner import Background, _uncovered
    from vnetbench.sample import Sample
    b = Background.__new__(Background)
    b.workload, b.samples, b.ended = workloads_kind("cpuload"), [], 100.0
    assert _uncovered(b, (90.0, 99.9)) is None and _uncovered(b, None) is None
    assert _uncovered(b, (90.0, 102.0)).startswith("background cpuload ended 2.0 s before the measurement window did")
    b.samples = [Sample.of("throughput_bps", 1.0, window=[80.0, 95.0])]  # a tool's own window beats the thread's end
    assert "ended 4.0 s before" in _uncovered(b, (90.0, 99.0))


def workloads_kind(kind: str):
    return type("W", (), {"kind": kind})()


def _prefix(db) -> str | None:
    import sqlite3
    try:
        with sqlite3.connect(db) as c:
            row = c.execute("SELECT prefix FROM campaigns WHERE id = 1").fetchone()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None



@pytest.mark.net
@pytest.mark.skipif(not backend("uml").support().ok, reason="User-Mode Linux not installed")
def test_kill_9_while_a_guest_vm_carries_traffic_then_clean_leaves_nothing(tmp_path, state_dir):
    path = tmp_path / "vmk.yaml"
    path.write_text(textwrap.dedent(SPEC.format(level="{type: guest, pairs: [1], side: server}", duration=30)))
    db = tmp_path / "vmk.db"
    run = start_run(path, db)
    try:
        deadline, prefix = time.monotonic() + 90, None
        while time.monotonic() < deadline:  # the guest is up and iperf3 runs into it: its server listens there
            prefix = prefix or _prefix(db)  # the run's (the capability probe's scratch ledger comes first)
            if prefix and uml_pids(prefix) and f"{prefix}-h2" in netns_names():
                guest_iperf = subprocess.run(["pgrep", "-f", "iperf3 -c 10.101.0.2"], capture_output=True).returncode
                if guest_iperf == 0:
                    break
            assert run.poll() is None, run.communicate()
            time.sleep(0.2)
        else:
            pytest.fail("the guest VM's trial did not start within 90 s")
        time.sleep(1)
    finally:
        run.send_signal(signal.SIGKILL)
        run.communicate()
    assert not trial_rows(db)  # killed mid-trial: nothing finished
    clean_after_kill(prefix, state_dir)
