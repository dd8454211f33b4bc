"""Host backends (hosts/): `plan` shows exactly the steps `run` executes, for every backend this machine has (namespaces,
one guest, one guest per host, guest VMs, the SSH testbed as the emulated lab); and a new backend is one module."""
from __future__ import annotations

import shlex


import pytest

from conftest import ROOT, netns_names, vnetbench
from vnetbench import hosts
from vnetbench.hosts.lab import testbed as tb
from vnetbench.hosts.lab import preflight
from vnetbench.hosts.lab import vms as lab_vms
from vnetbench.capabilities import detect
from vnetbench.guests import kind_class
from vnetbench.system.ledger import Ledger
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import loads
from vnetbench.build.topology import PLAN_PREFIX, Topology

UML = pytest.mark.skipif(not kind_class("uml").support().ok, reason="User-Mode Linux not installed")
PLAN_WORK = f"/run/vnetbench/{PLAN_PREFIX}/work"

SPEC = """\
name: same-steps
repetitions: 1
factors:
  overlay: vxlan
  placement: cross-host
  {extra}
workloads:
  - type: ping
    count: 3
    interval: 0.05
"""


def spec(extra: str = "") -> str:
    return SPEC.format(extra=extra)


def scenario(extra: str = "", caps=None):
    sc = expand(loads(SPEC.format(extra=extra)).experiment, caps or detect())[0]
    assert sc.skip is None, sc.skip
    return sc


def shown(steps, prefix: str = PLAN_PREFIX, work: str | None = None) -> list[tuple]:
    """Steps as plain data, with the run's prefix, work directory and MACs' prefix digits as plan shows them (a
    plan's own work directory is under the state directory a test may have set)."""
    p, q = prefix[2:6], PLAN_PREFIX[2:6]
    work = work or str(Ledger(PLAN_PREFIX).work)

    def norm(text: str) -> str:
        return text.replace(work, PLAN_WORK).replace(prefix, PLAN_PREFIX).replace(f"{p[:2]}:{p[2:]}:", f"{q[:2]}:{q[2:]}:")
    return [(st.node, st.tool, [norm(ln) for ln in st.lines], [norm(a) for a in st.argv], norm(st.name))
            for st in steps]


def plan_and_run(sc, testbed=None) -> tuple[list[tuple], list[tuple], str]:
    """(the steps plan shows, the steps run executed, plan's script), each through the one choice of backend."""
    ledger = Ledger.create()
    run = hosts.Hosts(ledger, testbed)
    try:
        return plan_and_build(sc, ledger, run, testbed)
    finally:
        run.close()
        ledger.remove_all()
        run.disconnect()


def plan_and_build(sc, ledger, run, testbed=None) -> tuple[list[tuple], list[tuple], str]:
    """plan_and_run's three, the run's topology built (and torn down) on hosts already open: guests booted once for
    a test module serve it."""
    planned = Topology(sc, None, placement=hosts.Hosts(None, testbed).plan(sc))
    script, steps = planned.script(), [st for wave in planned.placement.arrange(planned, planned.waves()) for st in wave]
    topo = Topology(sc, ledger, placement=run.open(sc))
    try:
        topo.build()
        executed = list(topo.executed)
    finally:
        topo.teardown()
    return shown(steps), shown(executed, ledger.prefix, str(ledger.work)), script


def same_steps(sc, tmp_path, extra: str = "", testbed=None, testbed_file=None) -> list[tuple]:
    """plan's steps are run's, and `vnetbench plan` prints each batch and command as it ran."""
    planned, executed, script = plan_and_run(sc, testbed)
    assert executed, "run executed no step"
    assert [s[:2] for s in planned] == [s[:2] for s in executed]
    assert planned == executed
    (tmp_path / "spec.yaml").write_text(spec(extra))
    printed = vnetbench("plan", tmp_path / "spec.yaml", *(["--testbed", testbed_file] if testbed_file else [])).stdout
    for _, tool, lines, argv, name in executed:
        if tool == "call":
            assert f"# {name}" in printed
        elif lines:
            assert "\n".join(lines) in printed
        else:
            assert shlex.join(argv) in printed
    return executed


def test_plan_shows_what_run_executes_with_namespaces(tmp_path, state_dir):
    executed = same_steps(scenario(), tmp_path)
    assert not [s for s in executed if s[1] == "call"]  # nothing booted


@UML
def test_plan_shows_what_run_executes_in_a_guest(tmp_path, state_dir):
    executed = same_steps(scenario("kernel: guest"), tmp_path, "kernel: guest")
    assert executed[0][1] == "call" and "boot" in executed[0][4]  # the guest's boot is the first step


@UML
def test_plan_shows_what_run_executes_with_one_guest_per_host(tmp_path, state_dir):
    """The bug: plan showed the shared-kernel script here, run moved the guests' NICs and ran per-host scripts."""
    executed = same_steps(scenario("kernel: guest-per-host"), tmp_path, "kernel: guest-per-host")
    assert executed[0][1] == "call" and "host guests" in executed[0][4]
    assert any("link set dev vb0000-u netns vb0000-h1" in ln for s in executed for ln in s[2])


@UML
def test_plan_shows_what_run_executes_with_guest_vms(tmp_path, state_dir):
    """The bug: plan showed a veth into the VM's namespace where run builds a vif from the guest's tap bridge."""
    executed = same_steps(scenario("vm_kernel: guest"), tmp_path, "vm_kernel: guest")
    assert executed[0][1] == "call" and "guest VMs" in executed[0][4]
    assert any(s[0] == "gn" for s in executed)  # the vif's end on the guest's tap bridge


def test_plan_shows_what_run_executes_on_an_ssh_testbed(lab, tmp_path, state_dir):
    bed = tb.load(lab.dir / "testbed.yaml")
    executed = same_steps(scenario(caps=preflight.preflight(bed)), tmp_path, testbed=bed,
                          testbed_file=lab.dir / "testbed.yaml")
    assert all(s[0] for s in executed)  # nothing in this machine's root namespace
    assert any("type vxlan" in ln for s in executed for ln in s[2])


TOY = '''\
"""A toy host backend: namespaces on this machine, named with a prefix of its own."""
from vnetbench.system.executor import NetnsExecutor
from vnetbench.hosts import register
from vnetbench.hosts.steps import Node
from vnetbench.hosts.namespaces import Namespaces, NamespacesPlacement

MADE = []  # every namespace it gave a node


class ToyPlacement(NamespacesPlacement):
    def node(self, topo, label, role, host, tenant):
        ns = f"{topo.prefix}-t{label}"
        MADE.append(ns)
        return Node(label, role, host, NetnsExecutor(ns, topo.ledger), tenant, netns=ns)


@register
class Toy(Namespaces):
    name = "toy"

    def open(self, sc):
        return ToyPlacement(self.ledger)

    def plan(self, sc):
        return ToyPlacement(None)
'''


@pytest.mark.net
def test_a_new_backend_is_one_module_and_runs_quick(tmp_path, state_dir, monkeypatch):
    """A backend written as one new module in a plugin directory of the hosts package (no other file changed) runs
    examples/quick.yaml's cross-host Linux bridge, flat and VXLAN (one repetition, 1-s loads) when chosen: every trial
    ok, every namespace built is one the toy named, and none is left."""
    import sqlite3
    import sys

    from vnetbench.run.campaign import Runner
    from vnetbench.results.store import Store
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "toy.py").write_text(TOY)
    monkeypatch.setattr(hosts, "__path__", [*hosts.__path__, str(plugins)])
    monkeypatch.setenv("VNETBENCH_HOSTS", "toy")
    try:
        text = (ROOT / "examples" / "quick.yaml").read_text().replace("repetitions: 3", "repetitions: 1") \
            .replace("duration: 3", "duration: 1").replace("[switch, direct, host]", "switch") \
            .replace("[same-host, cross-host]", "cross-host").replace("[tcp, udp]", "tcp")
        db = tmp_path / "r.db"
        outcome = Runner(Store(db), progress=False).run(loads(text, "quick.yaml"))
        toy = sys.modules["vnetbench.hosts.toy"]
        assert outcome.status == "done" and outcome.scenarios_failed == 0
        assert outcome.trials_ok == 4 and outcome.trials_failed == 0, outcome
        with sqlite3.connect(db) as c:
            prefix = c.execute("SELECT prefix FROM campaigns").fetchone()[0]
        assert toy.MADE and all(ns.startswith(f"{prefix}-t") for ns in toy.MADE), toy.MADE[:5]
        assert not [n for n in netns_names() if n.startswith(prefix)]
    finally:
        hosts.REGISTRY.pop("toy", None)
        sys.modules.pop("vnetbench.hosts.toy", None)


def test_an_unknown_host_backend_is_one_line_and_exit_2():
    import os
    proc = vnetbench("plan", ROOT / "examples" / "quick.yaml", env=os.environ | {"VNETBENCH_HOSTS": "nope"},
                     check=False)
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.strip().splitlines() == [
        "error: VNETBENCH_HOSTS: no host backend 'nope'; known: guest, guest-per-host, namespaces, qemu, testbed"]


@UML
def test_a_testbed_refuses_guests_of_this_machine_with_the_reason():
    """On a testbed, a `kernel: guest` scenario, or guest VMs of a kind other than qemu (which boots them on the lab's
    hosts: tests/test_lab_qemu.py), is a skip saying why (before, the run built the topology on the testbed with a
    guest executor beside it)."""
    refuse = hosts.load_all()["testbed"].own_kernels
    assert "own kernels" in refuse(scenario("kernel: guest-per-host"))
    assert refuse(scenario("vm_kernel: guest")) is None and refuse(scenario()) is None
    assert "run on this machine only" in lab_vms.check(scenario("vm_kernel: guest"), None)
    assert lab_vms.check(scenario(), None) is None


TOY_KIND = '''\
"""A toy guest kind: User-Mode Linux under a name of its own, which counts the VM ports it wires."""
from vnetbench.guests import register
from vnetbench.guests.uml import Uml

PORTS = []


@register
class ToyKind(Uml):
    name = "toykind"

    def port(self, topo, vm, a, a_if, b, b_if):
        PORTS.append(a.label)
        super().port(topo, vm, a, a_if, b, b_if)
'''

TOY_SWITCH = '''\
"""A toy switch: one flat bridge per host, named its own way, holding the uplink and the VMs' ports."""
from vnetbench.datapaths import register
from vnetbench.datapaths.base import Availability, Switch


@register
class ToySwitch(Switch):
    name = "toyswitch"
    summary = "a flat bridge of its own"

    def check(self, scenario, caps):
        return Availability(True, "toy-bridge") if caps.has("bridge") else Availability.no("no bridge")

    def overlay_support(self, overlay, scenario, caps):
        return Availability(True, "flat") if overlay.name == "none" else Availability.no("flat only")

    def build(self, topo):
        for host in topo.hosts:
            topo.ip(host.label, f"link add {topo.ifname('toy')} type bridge forward_delay 0",
                    f"link set {topo.ifname('toy')} up", f"link set {topo.uplink(host.label)} master {topo.ifname('toy')}")
            topo.underlay_address(host.label, topo.ifname("toy"))

    def plug(self, topo, host, ifname, tenant):
        topo.ip(host, f"link set {ifname} mtu {topo.sc.vm_mtu} master {topo.ifname('toy')} up")

    def tunnel_port(self, topo, host, tenant, dev):
        raise NotImplementedError("flat only")
'''


def _plugin(monkeypatch, tmp_path, package, name: str, text: str):
    """One new module in a plugin directory of a registry package: no file of vnetbench touched."""
    where = tmp_path / f"plugins-{package.__name__.rsplit('.', 1)[-1]}"
    where.mkdir()
    (where / f"{name}.py").write_text(text)
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(where)])
    return where


@UML
def test_a_new_guest_kind_is_one_module_and_plan_is_run(tmp_path, state_dir, monkeypatch):
    """A guest kind written as one new module, chosen by the level (`vm_kernel: {type: guest, kind: toykind}`),
    wires the VM's port itself, and `plan` shows exactly the steps `run` executes with it."""
    import sys

    from vnetbench import guests
    _plugin(monkeypatch, tmp_path, guests, "toykind", TOY_KIND)
    try:
        sc = scenario("vm_kernel: {type: guest, kind: toykind, pairs: [1], side: server}")
        planned, executed, _ = plan_and_run(sc)
        assert planned == executed and executed[0][1] == "call" and "toykind guest VMs" in executed[0][4]
        assert sys.modules["vnetbench.guests.toykind"].PORTS == ["h2v2", "h2v2"]  # plan's, then run's
        assert any(s[0] == "gn" for s in executed)  # the vif's end on the guest's tap bridge
    finally:
        guests.REGISTRY.pop("toykind", None)
        sys.modules.pop("vnetbench.guests.toykind", None)


def test_a_new_datapath_is_one_module_and_plan_is_run(tmp_path, state_dir, monkeypatch):
    """A switch written as one new module is chosen by its name, and `plan` shows exactly the steps `run` executes
    with it (the pairs ping across it)."""
    import sys

    from vnetbench import datapaths
    _plugin(monkeypatch, tmp_path, datapaths, "toyswitch", TOY_SWITCH)
    try:
        sc = expand(loads(SPEC.format(extra="switch: toyswitch").replace("overlay: vxlan", "overlay: none"))
                    .experiment, detect())[0]
        assert sc.skip is None and sc.implementation["switch"] == "toy-bridge", sc.skip
        planned, executed, _ = plan_and_run(sc)
        assert planned == executed
        assert any("type bridge" in ln and "-toy" in ln for s in executed for ln in s[2])
    finally:
        datapaths.REGISTRY.get("switch", {}).pop("toyswitch", None)
        sys.modules.pop("vnetbench.datapaths.toyswitch", None)


def test_plan_json_gives_the_steps_run_executes(tmp_path, state_dir):
    """`plan --json`: each scenario as data, its build's steps (node, tool, lines) those `run` executes, in order."""
    import json
    planned, executed, _ = plan_and_run(scenario())
    (tmp_path / "spec.yaml").write_text(spec())
    got = json.loads(vnetbench("plan", tmp_path / "spec.yaml", "--json").stdout)
    [sc] = got["scenarios"]
    assert sc["skip"] is None and sc["implementation"]["overlay"].startswith("kernel-vxlan")
    assert [(s["node"], s["tool"], s["lines"]) for s in sc["steps"]] == [(s[0], s[1], s[2]) for s in executed]
    assert sc["workloads"][0]["kind"] == "ping" and sc["workloads"][0]["commands"][0][:3] == ["ip", "netns", "exec"]
