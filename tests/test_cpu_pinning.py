"""The `cpu_pinning` factor (issue 31): its levels and their one-line mistakes, the taskset prefix plan prints, a CPU
the machine lacks skipping the scenario, the read-back flagging a process found elsewhere, and a real campaign whose
stored affinities say where h1's and h2's processes ran."""
import json
import os
import sqlite3
import textwrap
import time

import pytest

from conftest import vnetbench
from vnetbench.build import pinning
from vnetbench.build.topology import Topology
from vnetbench.capabilities import Capabilities, Feature
from vnetbench.core import pinning as levels
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import SpecError, loads
from vnetbench.guests import kind_class
from vnetbench.system.executor import LocalExecutor

SPEC = """\
name: pinned
repetitions: 1
factors:
  attach: host
  cpu_pinning: [none, {h1: 0, h2: "1"}]
workloads:
  - type: iperf3
    duration: 1
"""
TWO_CPUS = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1")


def scenarios(text: str, caps=None):
    return expand(loads(textwrap.dedent(text), "x.yaml").experiment, caps)


def caps(*tools: str) -> Capabilities:
    return Capabilities({t: Feature(True, "x") for t in ("iperf3", "ping", *tools)},
                        {k: Feature(True, "") for k in ("veth", "bridge")})


# ---- levels ----------------------------------------------------------------------------------------------------
def test_levels_have_one_spelling_and_readable_labels():
    none, pinned = scenarios(SPEC)
    assert (none.levels["cpu_pinning"], none.labels["cpu_pinning"]) == ("none", "none")
    assert (pinned.levels["cpu_pinning"], pinned.labels["cpu_pinning"]) == ({"h1": "0", "h2": "1"}, "pin(h1=0,h2=1)")
    spelled = scenarios(SPEC.replace('{h1: 0, h2: "1"}', "{h1: [1, 0, 3, 2], h2: '5,0-1'}, spread"))
    assert [sc.labels["cpu_pinning"] for sc in spelled] == ["none", "pin(h1=0-3,h2=0-1,5)", "spread"]
    assert scenarios("name: d\nworkloads: [{type: ping}]\n")[0].levels["cpu_pinning"] == "none"  # the default
    assert levels.as_text([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


@pytest.mark.parametrize("level, words", [
    ("{h1: 0, x1: 1}", ["x.yaml:3: factors.cpu_pinning.x1: 'x1' is not a node name; name a host (h1, h2...)"]),
    ("{h1: 2-1, h2: a}", ["x.yaml:3: factors.cpu_pinning.h1: '2-1' is not a CPU list",
                          "x.yaml:3: factors.cpu_pinning.h2: 'a' is not a CPU list"]),
    ("[none, {h1: [0, x]}]", ["factors.cpu_pinning[1].h1: [0, 'x'] is not a CPU list"]),
    ("all", ["factors.cpu_pinning: 'all' is not allowed; write none, spread, or a mapping"]),
    ("{h3: 0}", ["factors.cpu_pinning.h3: no scenario with this level has a node h3; its scenarios' nodes: h1, h2, "
                 "h1v1, h2v2"]),
])
def test_a_bad_level_is_one_line_each(level, words):
    with pytest.raises(SpecError) as exc:
        loads(f"name: d\nfactors:\n  cpu_pinning: {level}\nworkloads: [{{type: ping}}]\n", "x.yaml")
    assert len(exc.value.lines) == len(words), exc.value.lines
    for line, want in zip(exc.value.lines, words):
        assert want in line, line


def test_a_bad_level_exits_2_from_the_command_line(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: d\nfactors:\n  cpu_pinning: {h1: '0-', h9: 1}\nworkloads: [{type: ping}]\n")
    proc = vnetbench("plan", spec, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "cpu_pinning.h1: '0-' is not a CPU list" in lines[0], \
        proc.stderr


def test_what_the_machine_lacks_skips_with_the_reason():
    beyond = max(os.sched_getaffinity(0)) + 1
    spec = SPEC.replace('{h1: 0, h2: "1"}', f"{{h1: 0, h2: {beyond}}}")
    none, pinned = scenarios(spec, caps("taskset"))
    assert none.skip is None
    assert pinned.skip.startswith(f"cpu_pinning pin(h1=0,h2={beyond}): CPU {beyond} of h2 is not one this machine "
                                  f"lets the run use"), pinned.skip
    assert "taskset" in scenarios(SPEC, caps())[1].skip  # no taskset: skipped too
    rules = ("include: [{kernel: guest, attach: switch, cpu_pinning: {h1: 0}},"
             " {kernel: guest-per-host, attach: switch, cpu_pinning: {h1v1: 0}}]\n")
    one, per_host = scenarios(SPEC + rules, caps("taskset"))[-2:]
    assert one.skip.startswith("cpu_pinning pin(h1=0): with kernel: guest every host runs in one guest"), one.skip
    assert per_host.skip.startswith("cpu_pinning pin(h1v1=0): h1v1 runs inside its host's guest (kernel: "
                                    "guest-per-host), which is pinned whole: name the host"), per_host.skip


# ---- plan ---------------------------------------------------------------------------------------------------
def test_plan_prefixes_each_pinned_node_and_a_vm_takes_its_hosts_cpus():
    none, pinned = scenarios(SPEC)
    assert "taskset" not in Topology(none, None).script()
    vms = scenarios(SPEC.replace("  attach: host\n", "").replace('{h1: 0, h2: "1"}', "{h1: 0, h2v2: 1}"))[1]
    topo = Topology(vms, None)
    script = topo.script()
    assert "# cpu_pinning pin(h1=0,h2v2=1) on h1v1: every process the run starts there runs under taskset -c 0" \
        in script
    assert "on h2:" not in script  # h2 itself is not named: its own processes are not pinned
    assert {p.client.label: p.client.node.pinned(["iperf3"]) for p in topo.pairs} == \
        {"h1v1": ["taskset", "-c", "0", "iperf3"]}
    assert [p.server.node.pinned(["iperf3"]) for p in topo.pairs] == [["taskset", "-c", "1", "iperf3"]]


def test_spread_deals_the_hosts_over_the_cpus_and_vms_follow():
    spread = scenarios(SPEC.replace("  attach: host\n", "  placement: spread\n  pairs: 2\n")
                       .replace("repetitions: 1\n", "repetitions: 1\nhosts: 3\n")
                       .replace('[none, {h1: 0, h2: "1"}]', "spread"))[0]
    cpus = sorted(os.sched_getaffinity(0))
    topo = Topology(spread, None)
    want = {h: str(cpus[k % len(cpus)]) for k, h in enumerate(("h1", "h2", "h3"))}
    assert {n: c for n, c in pinning.assigned(spread, topo.nodes).items() if "v" not in n} == want
    assert all(pinning.assigned(spread, topo.nodes)[vm.label] == want[vm.host] for vm in topo.vms)
    assert "tor" not in pinning.assigned(spread, topo.nodes)


def test_plan_shows_the_workload_under_taskset(tmp_path):
    spec = tmp_path / "p.yaml"
    spec.write_text(SPEC)
    out = vnetbench("plan", spec).stdout
    first, second = out.split("# ---- scenario 2")
    assert "taskset" not in first
    assert "ip netns exec vb0000-h2 taskset -c 1 iperf3 -s" in second
    assert "ip netns exec vb0000-h1 taskset -c 0 iperf3 -c 10.250.0.2" in second
    data = json.loads(vnetbench("plan", spec, "--json").stdout)
    commands = [c for sc in data["scenarios"] for w in sc["workloads"] for c in w["commands"]]
    assert [c[4:7] for c in commands] == [["iperf3", "-s", "-J"], ["iperf3", "-c", "10.250.0.2"],
                                          ["taskset", "-c", "1"], ["taskset", "-c", "0"]], commands


# ---- read-back --------------------------------------------------------------------------------------------------
class _Topo:
    def __init__(self, label):
        self.pin_watch, self.pin_asked = pinning.Watch(), {}
        self.placement = type("Here", (), {"guests": lambda self, topo: {}})()
        self.sc = type("Sc", (), {"labels": {"cpu_pinning": label}})()


@TWO_CPUS
def test_a_process_found_on_other_cpus_flags_the_trial():
    """A tool that moves itself (here an inner taskset) is read after its wrappers, on the CPUs it ended on."""
    topo = _Topo("pin(h1=0)")
    ex = LocalExecutor()
    ex.cpus, ex.watch = "0", (topo.pin_watch, "h1")
    reader = pinning.Reader(topo)
    reader.begin()
    procs = [ex.spawn(["sleep", "0.4"], label="stays"), ex.spawn(["taskset", "-c", "1", "sleep", "0.4"], label="moves")]
    for p in procs:
        p.wait(5)
    record = reader.end()
    got = {w: g["cpus"] for g in record["groups"] for w in g["what"]}
    assert got == {"stays": "0", "moves": "1"}, record
    assert record["flag"] == "cpu pinning not as asked: moves on h1 ran on CPUs 1, not 0"
    ex.cpus = None  # unpinned: the machine's CPUs, and no flag
    reader = pinning.Reader(topo)
    reader.begin()
    ex.spawn(["sleep", "0.3"], label="free").wait(5)
    record = reader.end()
    assert [g["cpus"] for g in record["groups"]] == [levels.as_text(sorted(os.sched_getaffinity(0)))]
    assert "flag" not in record


def test_doctor_can_pin_here():
    ok, detail = pinning.can_pin(LocalExecutor())
    n = len(os.sched_getaffinity(0))
    assert ok and detail.startswith(f"{n} CPU{'s' * (n != 1)} (") and detail.endswith("true pinned"), detail


# ---- for real ----------------------------------------------------------------------------------------------------
@pytest.mark.net
@TWO_CPUS
def test_a_pinned_campaign_stores_where_each_nodes_processes_ran(tmp_path, state_dir):
    spec, db = tmp_path / "pinned.yaml", tmp_path / "r.db"
    spec.write_text(SPEC.replace('"1"}]', '"1"}, {h1: 4095}]'))
    began = time.monotonic()
    run = vnetbench("run", spec, "--db", db, "--no-progress")
    assert "campaign 1: done, 2 trials ok, 0 failed" in run.stdout, run.stdout
    with sqlite3.connect(db) as c:
        metas = dict((idx, json.loads(m)) for idx, m in c.execute("SELECT scenario, metadata FROM trials"))
        (skipped,) = c.execute("SELECT reason FROM scenarios WHERE idx = 3 AND status = 'skipped'").fetchone()
    assert skipped.startswith("cpu_pinning pin(h1=4095): CPU 4095 of h1 is not one this machine lets the run use")
    every = levels.as_text(sorted(os.sched_getaffinity(0)))
    for idx, want in ((1, {"h1": every, "h2": every}), (2, {"h1": "0", "h2": "1"})):
        record = metas[idx]["cpu_pinning"]
        got = {(g["node"], w): g["cpus"] for g in record["groups"] for w in g["what"]}
        assert got == {("h1", "iperf3 client pair 1"): want["h1"], ("h2", "iperf3 server pair 1"): want["h2"]}, record
        assert not [f for f in metas[idx].get("flags", []) if f.startswith(pinning.NOT_AS_ASKED)]
    assert time.monotonic() - began < 120
    show = " ".join(vnetbench("show", "1", "--db", db, "--wide").stdout.split())
    line = show[show.index("cpu pinning in force, scenario 2 (cpu_pinning=pin(h1=0,h2=1)): "):].split(" skipped")[0]
    assert "h1 on 0 (1 process)" in line and "h2 on 1 (1 process)" in line, show


@pytest.mark.net
@TWO_CPUS
@pytest.mark.skipif(not kind_class("uml").support().ok, reason="User-Mode Linux not installed")
def test_a_guest_vm_is_pinned_whole_and_gets_every_cpu_back(tmp_path, state_dir):
    """vm_kernel guest: each VM's UML guest takes its host's CPUs here (its kernel and every address space), read
    with all its threads per trial; the next scenario (none) on the same guests finds them on every CPU again."""
    spec, db = tmp_path / "guests.yaml", tmp_path / "r.db"
    spec.write_text(SPEC.replace("  attach: host\n", "  vm_kernel: guest\n").replace("repetitions: 1\n",
                                                                                  "repetitions: 1\norder: sequential\n")
                    .replace('[none, {h1: 0, h2: "1"}]', '[{h1: 0, h2: "1"}, none]'))
    run = vnetbench("run", spec, "--db", db, "--no-progress")
    assert "campaign 1: done, 2 trials ok, 0 failed" in run.stdout, run.stdout
    with sqlite3.connect(db) as c:
        metas = dict((idx, json.loads(m)) for idx, m in c.execute("SELECT scenario, metadata FROM trials"))
    every = levels.as_text(sorted(os.sched_getaffinity(0)))
    for idx, want in ((1, {"h1v1": "0", "h2v2": "1"}), (2, {"h1v1": every, "h2v2": every})):
        record = metas[idx]["cpu_pinning"]
        got = {g["node"]: g["cpus"] for g in record["groups"] if any(w.startswith("guest ") for w in g["what"])}
        assert got == want, record
        assert not [f for f in metas[idx].get("flags", []) if f.startswith(pinning.NOT_AS_ASKED)], metas[idx]


@TWO_CPUS
def test_a_testbed_hosts_processes_run_under_taskset_there(lab, tmp_path, state_dir):
    """Over SSH the same prefix runs on the host; a CPU the host lacks skips the scenario with what taskset said
    there; the processes there are counted unread (their pids are the host's), never flagged; doctor says per host
    whether it can pin."""
    spec, db, log = tmp_path / "lab.yaml", tmp_path / "r.db", tmp_path / "commands.jsonl"
    spec.write_text(SPEC.replace("[none, {h1: 0, h2: \"1\"}]", "[{h1: 0, h2: 1}, {h1: 4095}]"))
    env = os.environ | {"VNETBENCH_STATE_DIR": str(state_dir), "VNETBENCH_COMMAND_LOG": str(log)}
    run = vnetbench("run", spec, "--db", db, "--no-progress", "--testbed", lab.dir / "testbed.yaml", env=env)
    assert "campaign 1: done, 1 trials ok, 0 failed" in run.stdout, run.stdout
    with sqlite3.connect(db) as c:
        ((meta,),) = c.execute("SELECT metadata FROM trials").fetchall()
        (skipped,) = c.execute("SELECT reason FROM scenarios WHERE idx = 2").fetchone()
    assert skipped.startswith("cpu_pinning pin(h1=4095): CPUs 4095 cannot be had on h1"), skipped
    record = json.loads(meta)["cpu_pinning"]
    assert record["unread"] == 2 and not record["groups"] and "flag" not in record, record
    remote = [a[-1] for a in map(json.loads, log.read_text().splitlines()) if a[0] == "ssh" and "iperf3" in a[-1]]
    assert any("taskset -c 0 iperf3 -c" in r for r in remote) and any("taskset -c 1 iperf3 -s" in r for r in remote)
    doctor = json.loads(vnetbench("doctor", "--json", "--testbed", lab.dir / "testbed.yaml", env=env).stdout)
    hosts = doctor["cpu_pinning"]["hosts"]
    assert set(hosts) == {h.name for h in lab.hosts} and all(h["ok"] and h["cpus"] for h in hosts.values()), hosts
