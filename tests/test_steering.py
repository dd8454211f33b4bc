"""The tuning factors `steering` (RPS/XPS masks on the run's own devices) and `irq_affinity` (a lab NIC's IRQs, issue 31):
their levels and one-line mistakes, the sysfs writes plan prints, a real campaign whose trials store the masks in force,
a CPU the machine lacks skipped with the reason, irq_affinity skipped where no NIC has IRQs, and the ledger that puts
a pinned IRQ back (against a copy of /proc/irq: the real one is never written here)."""
import json
import os
import sqlite3
import subprocess
import textwrap

import pytest

from conftest import vnetbench
from test_testbed import env_with, nothing_left
from vnetbench.build import steering
from vnetbench.build.topology import Topology
from vnetbench.capabilities import Capabilities, Feature
from vnetbench.core.cpus import cpu_list, cpu_mask, cpus_text, mask_cpus
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import SpecError, loads
from vnetbench.hosts.lab import clean as lab_clean
from vnetbench.hosts.lab import irq
from vnetbench.system import executor as executor_mod

SPEC = """\
name: steering
repetitions: 1
factors:
  placement: cross-host
  steering: [default, {rps: "0-1", xps: 0-1}, {rps: "%d"}]
workloads:
  - type: iperf3
    duration: 1
"""
CPUS = len(cpu_list(open("/sys/devices/system/cpu/online").read().strip()))


def scenarios(text: str, caps=None):
    return expand(loads(textwrap.dedent(text), "x.yaml").experiment, caps)


# ---- levels ----------------------------------------------------------------------------------------------------
def test_cpu_lists_and_sysfs_masks():
    assert cpu_list("0-2,5,1") == [0, 1, 2, 5] and cpu_list(3) == [3] and cpus_text([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert cpu_mask([0, 1]) == "3" and cpu_mask([0, 40]) == "00000100,00000001"  # 32-bit groups, as sysfs writes
    assert mask_cpus("00000100,00000001") == [0, 40] and mask_cpus("0") == []
    with pytest.raises(ValueError):
        cpu_list("2-1")


def test_levels_have_one_spelling_and_short_labels():
    default, both, one = scenarios(SPEC % 0)
    assert (default.labels["steering"], default.labels["irq_affinity"]) == ("default", "default")
    assert both.levels["steering"] == {"rps": "0-1", "xps": "0-1"} and both.labels["steering"] == "rps 0-1 + xps 0-1"
    assert one.labels["steering"] == "rps 0"  # YAML's 0 and "0" are one level
    pinned = scenarios("name: i\nfactors: {irq_affinity: [default, 1, '0-1']}\nworkloads: [{type: ping}]\n")
    assert [s.labels["irq_affinity"] for s in pinned] == ["default", "1", "0-1"]


@pytest.mark.parametrize("factor, level, words", [
    ("steering", "{rps: 0-a}", "factors.steering: rps: '0-a' in '0-a' is not a CPU or a range low-high; write CPUs "
                               "as taskset -c takes them"),
    ("steering", "{rps_flow_cnt: 4096}", "factors.steering: 'rps_flow_cnt' is not set by steering; allowed: rps, xps "
                                         "(rps_flow_cnt needs the machine-wide rps_sock_flow_entries too"),
    ("steering", "[default, on]", "factors.steering[1]: 'on' is not allowed; write default or a mapping such as "
                                  "{rps: \"0-1\", xps: \"0-1\"}"),
    ("irq_affinity", "[default, '3-1']", "factors.irq_affinity[1]: '3-1' in '3-1' is not a CPU or a range"),
    ("irq_affinity", "99999", "factors.irq_affinity: CPU 99999 is beyond any kernel's (at most 4095)"),
])
def test_a_bad_level_is_one_line_naming_file_field_and_fix(factor, level, words):
    with pytest.raises(SpecError) as exc:
        loads(f"name: d\nfactors:\n  {factor}: {level}\nworkloads: [{{type: ping}}]\n", "x.yaml")
    (line,) = exc.value.lines
    assert line.startswith("x.yaml:3: ") and words in line, line


def test_a_bad_level_exits_2_from_the_command_line(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: d\nfactors:\n  steering: [default, {rps: 0-}]\nworkloads: [{type: ping}]\n")
    proc = vnetbench("plan", spec, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert f"{spec}:3: factors.steering[1]: rps: '0-' in '0-' is not a CPU or a range low-high" in proc.stderr


def test_irq_affinity_on_this_machine_is_a_skip_with_the_reason():
    caps = Capabilities({t: Feature(True, "x") for t in ("iperf3", "ping")},
                        {k: Feature(True, "") for k in ("veth", "bridge")})
    default, pinned = scenarios("name: i\nfactors: {irq_affinity: [default, 1]}\nworkloads: [{type: ping}]\n", caps)
    assert default.skip is None
    assert pinned.skip == ("irq_affinity 1: irq_affinity needs a lab's real NIC (--testbed); the namespaces "
                           "backend's hosts are namespaces or guests of this machine, whose NICs take no interrupts")


# ---- the build steps ------------------------------------------------------------------------------------------
def test_plan_writes_the_masks_on_every_device_the_run_creates_and_nothing_for_default():
    default, both, _ = scenarios(SPEC % 0)
    assert "rps_cpus" not in Topology(default, None).script()
    script = Topology(both, None).script()
    lines = [ln for ln in script.splitlines() if "rps_cpus" in ln and not ln.startswith("#")]
    devices = {ln.split()[3]: ln.split("' sh 3 3 ")[1].split() for ln in lines}
    assert devices == {"vb0000-h1": ["vb0000-u", "vb0000-br0", "vb0000-t1"],
                       "vb0000-h2": ["vb0000-u", "vb0000-br0", "vb0000-t2"],
                       "vb0000-h1v1": ["vb0000-e0"], "vb0000-h2v2": ["vb0000-e0"]}
    assert all(ln.startswith("ip netns exec ") for ln in lines)  # its own sysfs: ip netns exec remounts /sys
    assert "# steering rps 0-1 + xps 0-1 on h1v1: the masks written to the queues of the 1 device" in script
    assert script.index("rps_cpus") > script.rindex("link add")  # once every device exists


def test_read_back_summary_and_differences():
    text = ("@@cpus 0-1\n@@ a\nrx-0/rps_cpus 3\ntx-0/xps_cpus 3\n@@ br\nrx-0/rps_cpus 3\ntx-0/xps_cpus -\n"
            "@@ c\nrx-0/rps_cpus 1\nrx-1/rps_cpus 3\n")
    online, found = steering.parse(text)
    assert online == [0, 1]
    assert [steering.summary(found[d]) for d in ("a", "br", "c")] == [
        {"rps": "0-1", "xps": "0-1"}, {"rps": "0-1", "xps": "n/a"}, {"rps": "rx-0 0, rx-1 0-1", "xps": "n/a"}]
    assert steering.differences({"rps": [0, 1], "xps": [0, 1]}, {"h1": found}) == ["rps rx-0 0, rx-1 0-1 on h1 c"]
    assert steering.differences({"rps": [0]}, {"h1": {"d": {}}}) == ["rps not offered (no rps_cpus) on h1 d"]


# ---- for real ----------------------------------------------------------------------------------------------------
@pytest.mark.net
def test_a_campaign_stores_the_masks_in_force_and_skips_a_cpu_the_machine_lacks(tmp_path, state_dir):
    spec, db = tmp_path / "steering.yaml", tmp_path / "r.db"
    spec.write_text(SPEC % CPUS)  # one CPU past the last
    run = vnetbench("run", spec, "--db", db, "--no-progress")
    assert "campaign 1: done, 2 trials ok, 0 failed" in run.stdout, run.stdout
    with sqlite3.connect(db) as c:
        (reason,) = c.execute("SELECT reason FROM scenarios WHERE idx = 3 AND status = 'skipped'").fetchone()
        metas = dict((idx, json.loads(m)) for idx, m in c.execute("SELECT scenario, metadata FROM trials"))
    assert reason == f"steering rps {CPUS}: CPU {CPUS} is not on h1's machine (its CPUs: {cpus_text(range(CPUS))})"
    want = {1: {"rps": "off", "xps": "off"}, 2: {"rps": "0-1", "xps": "0-1"}}
    for idx, m in metas.items():
        devices = {d: g["steering"] for g in m["steering"]["groups"] for d in g["devices"]}
        assert len(devices) == 8 and not [f for f in m.get("flags", []) if "not as asked" in f], m
        for d, has in devices.items():  # the bridges have no transmit queue to steer: xps n/a
            assert has == (want[idx] | {"xps": "n/a"} if "-br0" in d else want[idx]), (idx, d, has)
    assert metas[2]["steering"]["asked"] == "rps 0-1 + xps 0-1" and metas[1]["steering"]["asked"] == "default"
    show = " ".join(vnetbench("show", "1", "--db", db).stdout.split())
    assert ("steering in force, scenario 2 (steering=rps 0-1 + xps 0-1): rps 0-1, xps 0-1 on 6 interfaces; rps 0-1, "
            "xps n/a on 2 interfaces") in show, show


@pytest.mark.net
def test_irq_affinity_on_the_emulated_lab_skips_with_the_no_irq_reason_and_changes_nothing(lab, tmp_path, state_dir):
    spec = tmp_path / "irq.yaml"
    spec.write_text("name: irq\nrepetitions: 1\nfactors: {irq_affinity: 0}\nworkloads: [{type: ping, count: 2}]\n")
    irqs = ("sh", "-c", "cat /proc/irq/*/smp_affinity_list")  # read only: what a run must leave as it was
    before = [lab.on(h, *irqs) for h in lab.hosts]
    run = vnetbench("run", spec, "--testbed", lab.dir / "testbed.yaml", "--db", tmp_path / "r.db", "--no-progress",
                    env=env_with(state_dir), check=False)
    with sqlite3.connect(tmp_path / "r.db") as c:
        rows = c.execute("SELECT status, reason FROM scenarios").fetchall()
    assert rows == [("skipped", "irq_affinity 0: node1's eth1 has no IRQs (no MSI vectors, no /proc/interrupts line, "
                                "no legacy IRQ): a virtual device such as a veth takes no interrupts")], (rows, run.stdout)
    assert nothing_left(lab) and [lab.on(h, *irqs) for h in lab.hosts] == before


class FakeHost:
    """A lab host whose NIC has IRQs 40 and 41 in a copy of /proc/irq (tmp): scripts run here with sh; the survey is
    answered from the copy (the real NIC's IRQs are not this test's to find)."""

    def __init__(self, root, online="0-1", writable=True):
        self.root, self.online, self.writable, self.scripts = root, online, writable, []

    def run_script(self, script, timeout=30, check=True):
        self.scripts.append(script)
        if "@@cpus" in script:
            text = f"@@cpus {self.online}\n" + "".join(
                f"@@irq {d.name} {(d / 'smp_affinity_list').read_text().strip()} {'w' if self.writable else 'r'}\n"
                for d in sorted(self.root.iterdir()))
            return subprocess.CompletedProcess([], 0, text, "")
        return subprocess.run(["sh", "-c", script], capture_output=True, text=True)


class FakeSite:
    def __init__(self, host):
        self.host, self.irqs = host, {}

    def executor(self, label):
        return self.host

    def name(self, label):
        return "node1"

    def nic(self, label):
        return "eth9"

    def touch(self, labels):
        pass


@pytest.fixture
def fake_irq(tmp_path, monkeypatch):
    root = tmp_path / "irq"
    for n in (40, 41):
        (root / str(n)).mkdir(parents=True)
        (root / str(n) / "smp_affinity_list").write_text("0-1\n")
    monkeypatch.setattr(lab_clean, "IRQ_ROOT", str(root))
    monkeypatch.setattr(executor_mod, "REMOTE_STATE_DIR", str(tmp_path / "run"))
    (tmp_path / "run" / "vbtest").mkdir(parents=True)
    return root, tmp_path / "run" / "vbtest" / "objects.jsonl"


def _topo(level):
    sc = scenarios(f"name: i\nfactors: {{irq_affinity: {level}}}\nworkloads: [{{type: ping}}]\n")[0]
    return type("T", (), {"sc": sc, "prefix": "vbtest", "hosts": [type("N", (), {"label": "h1"})()]})()


def test_irq_affinity_records_the_old_lists_first_then_teardown_and_clean_put_them_back(fake_irq):
    root, ledger = fake_irq
    site = FakeSite(FakeHost(root))
    changed = irq.apply(site, _topo("1"))
    assert changed == {"h1": {40: "0-1", 41: "0-1"}}
    assert [(root / n / "smp_affinity_list").read_text().strip() for n in ("40", "41")] == ["1", "1"]
    write = next(s for s in site.host.scripts if "objects.jsonl" in s)
    assert write.index("objects.jsonl") < write.index("smp_affinity_list")  # recorded before it is changed
    # a run killed here (kill -9): clean reads the host's ledger and writes the old lists back
    objs = lab_clean.parse_objects(ledger.read_text())
    assert [(o.kind, o.name, o.extra) for o in objs] == [("irq", "40", {"cpus": "0-1"}), ("irq", "41", {"cpus": "0-1"})]
    subprocess.run(["sh", "-c", lab_clean.clean_script("vbtest", objs, remove_dir=False)], check=True)
    assert [(root / n / "smp_affinity_list").read_text().strip() for n in ("40", "41")] == ["0-1", "0-1"]
    # a trial's read-back flags an IRQ moved after the build (irqbalance)
    (root / "41" / "smp_affinity_list").write_text("0\n")
    got = irq.in_force(site, _topo("0"), changed)
    assert got["hosts"] == {"node1": {"40": "0-1", "41": "0"}} and got["flag"] == \
        "irq_affinity not as asked: IRQ 40 on 0-1 on node1"
    # teardown's restore marks them undone in the ledger: a later clean has nothing to put back
    irq.restore(site, "vbtest", changed)
    assert lab_clean.parse_objects(ledger.read_text()) == []
    assert [(root / n / "smp_affinity_list").read_text().strip() for n in ("40", "41")] == ["0-1", "0-1"]


def test_irq_affinity_refused_changes_nothing(fake_irq):
    root, ledger = fake_irq
    with pytest.raises(irq.Refused, match=r"irq_affinity 5: CPU 5 is not on node1 \(its CPUs: 0-1\)"):
        irq.apply(FakeSite(FakeHost(root)), _topo("5"))
    with pytest.raises(irq.Refused, match=r"/40/smp_affinity_list is not writable on node1 \(a read-only /proc"):
        irq.apply(FakeSite(FakeHost(root, writable=False)), _topo("1"))
    assert not ledger.exists() or lab_clean.parse_objects(ledger.read_text()) == []
    assert [(root / n / "smp_affinity_list").read_text().strip() for n in ("40", "41")] == ["0-1", "0-1"]


def test_doctor_says_whether_steering_and_irq_affinity_can_be_set():
    data = json.loads(vnetbench("doctor", "--json").stdout)
    rows = {r["factor"]: r for r in data["tuning"]}
    writable = os.access(steering.PROBE_FILE, os.W_OK)
    assert rows["steering"]["ok"] == writable and steering.PROBE_FILE in rows["steering"]["detail"]
    assert rows["irq_affinity"] == {"host": "this machine", "factor": "irq_affinity", "ok": False,
                                    "detail": "irq_affinity needs a lab's real NIC: see doctor --testbed"}


@pytest.mark.net
def test_doctor_testbed_says_per_host_that_the_labs_nics_have_no_irqs(lab, state_dir):
    data = json.loads(vnetbench("doctor", "--json", "--testbed", lab.dir / "testbed.yaml", env=env_with(state_dir))
                      .stdout)
    rows = {(r["host"], r["factor"]): r for r in data["tuning"]}
    assert sorted(rows) == sorted((h.name, f) for h in lab.hosts for f in ("steering", "irq_affinity"))
    for h in lab.hosts:
        assert rows[(h.name, "irq_affinity")]["ok"] is False
        assert rows[(h.name, "irq_affinity")]["detail"].startswith(f"{h.name}'s eth1 has no IRQs"), rows
        assert rows[(h.name, "steering")]["detail"].endswith("(/sys/class/net/lo/queues/rx-0/rps_cpus)"), rows
