"""The `offloads` factor (issue 31): its levels and their one-line mistakes, the `ethtool -K` steps plan prints on every
device the run creates, and a real VXLAN campaign where segmentation and receive offloads off make TCP slower and
dearer per bit, with the offloads in force read back and stored with every trial."""
import json
import sqlite3
import statistics
import textwrap

import pytest

from conftest import vnetbench
from vnetbench.build import offloads
from vnetbench.build.topology import Topology
from vnetbench.core.offloads import summary
from vnetbench.capabilities import Capabilities, Feature
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import SpecError, loads

SPEC = """\
name: offloads
repetitions: 3
factors:
  overlay: vxlan
  placement: cross-host
  offloads: [on, {tso: off, gso: off, gro: off}, {lro: on}]
workloads:
  - type: iperf3
    duration: 2
"""
OFF = {"tso": "off", "gso": "off", "gro": "off"}


def scenarios(text: str, caps=None):
    return expand(loads(textwrap.dedent(text), "x.yaml").experiment, caps)


# ---- levels ----------------------------------------------------------------------------------------------------
def test_levels_have_one_spelling_and_short_labels():
    on, off, lro = scenarios(SPEC)
    assert (on.levels["offloads"], on.labels["offloads"]) == ("on", "on")
    assert (off.levels["offloads"], off.labels["offloads"]) == (OFF, "tso/gso/gro off")
    assert lro.labels["offloads"] == "lro on"
    quoted = scenarios(SPEC.replace("[on, {tso: off, gso: off, gro: off}, {lro: on}]", "[\"on\", {tso: 'off', "
                                                                                       "gso: 'off', gro: 'off'}]"))
    assert [sc.levels["offloads"] for sc in quoted] == ["on", OFF]
    mixed = scenarios(SPEC.replace("{lro: on}", "{tso: off, gro: on, tx-udp_tnl-segmentation: off}"))[2]
    assert mixed.labels["offloads"] == "tso/tx-udp_tnl-segmentation off + gro on"
    assert scenarios("name: d\nworkloads: [{type: ping}]\n")[0].levels["offloads"] == "on"  # the default


def test_rules_name_levels_as_written_in_yaml():
    """An unquoted on in a rule is YAML's true: it still names the level `on`, and a mapping its level."""
    kept = scenarios(SPEC + "exclude: [{offloads: on}, {offloads: {lro: on}}]\n")
    assert [sc.levels["offloads"] for sc in kept] == [OFF]
    spec = SPEC.replace("    duration: 2\n", "    duration: 2\n    when: {offloads: {tso: off, gso: off, gro: off}}\n")
    assert [sc.levels["offloads"] for sc in scenarios(spec) if sc.workloads] == [OFF]


@pytest.mark.parametrize("level, words", [
    ("{tsoo: off}", "factors.offloads: 'tsoo' is not an offload vnetbench sets; allowed: tso, gso, gro, lro, tx, rx, "
                    "sg, tx-udp_tnl-segmentation, tx-udp_tnl-csum-segmentation"),
    ("[on, {tso: maybe}]", "factors.offloads[1]: tso: 'maybe' is not allowed; write on or off"),
    ("[on, {gro: 1}]", "factors.offloads[1]: gro: 1 is not allowed; write on or off"),
    ("off", "factors.offloads: off alone does not say which offloads: write on (the kernel's defaults) or a mapping "
            "such as {tso: off, gso: off, gro: off}"),
    ("{}", "factors.offloads: an empty mapping changes nothing"),
    ("[on, fast]", "factors.offloads[1]: 'fast' is not allowed; write on (the kernel's defaults) or a mapping"),
])
def test_a_bad_level_is_one_line_naming_file_field_and_fix(level, words):
    with pytest.raises(SpecError) as exc:
        loads(f"name: d\nfactors:\n  offloads: {level}\nworkloads: [{{type: ping}}]\n", "x.yaml")
    (line,) = exc.value.lines
    assert line.startswith("x.yaml:3: ") and words in line, line


def test_a_bad_level_exits_2_from_the_command_line(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: d\nfactors:\n  offloads: [on, {tso: of}]\nworkloads: [{type: ping}]\n")
    proc = vnetbench("plan", spec, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert f"{spec}:3: factors.offloads[1]: tso: 'of' is not allowed; write on or off" in proc.stderr


def test_no_ethtool_skips_with_the_reason():
    tools = {t: Feature(True, "x") for t in ("iperf3", "ping")}
    caps = Capabilities(tools, {k: Feature(True, "") for k in ("veth", "bridge", "vxlan")})
    on, off, _ = scenarios(SPEC, caps)
    assert on.skip is None and "ethtool" in off.skip and off.skip.startswith("offloads tso/gso/gro off: ")
    caps.tools["ethtool"] = Feature(True, "6.1")
    assert scenarios(SPEC, caps)[1].skip is None


# ---- the build steps ------------------------------------------------------------------------------------------
def test_devices_a_line_creates():
    spaces = {"vb0000-h1": "h1", "vb0000-h2": "h2", "vb0000-h1v1": "h1v1"}
    assert offloads.created("", "link add vb0000-u netns vb0000-h1 type veth peer name vb0000-u netns vb0000-h2",
                            spaces) == [("h1", "vb0000-u"), ("h2", "vb0000-u")]
    assert offloads.created("h1", "link add vb0000-vx1 type vxlan id 101 local 10.250.0.1 dstport 4789", spaces) == \
        [("h1", "vb0000-vx1")]
    assert offloads.created("h1", "link add a type veth peer name b", spaces) == [("h1", "a"), ("h1", "b")]
    # a testbed's run underlay: a macvlan of the lab's NIC, made straight into the run's namespace; the NIC is not ours
    assert offloads.created("m1", "link add vb0000-u link eth1 netns vb0000-h1 address 02:75:00:00:00:01 type macvlan "
                                  "mode bridge", spaces) == [("h1", "vb0000-u")]
    assert offloads.created("m1", "link add x netns elsewhere type veth peer name y netns vb0000-h1", spaces) == \
        [("", "x"), ("h1", "y")]  # a namespace not of the topology: never touched ("" is the root's)
    assert offloads.created("h1", "link set vb0000-e0 up", spaces) == []
    assert offloads.created("gn", "tuntap add mode tap name tap1", spaces) == [("gn", "tap1")]


def test_plan_sets_every_device_the_run_creates_and_nothing_for_on():
    on, off, _ = scenarios(SPEC)
    assert "ethtool" not in Topology(on, None).script()
    script = Topology(off, None).script()
    want = [("h1", "u"), ("h1", "br1"), ("h1", "t1"), ("h1", "vx1"), ("h2", "u"), ("h2", "br1"), ("h2", "t2"),
            ("h2", "vx1"), ("h1v1", "e0"), ("h2v2", "e0")]
    lines = [ln for ln in script.splitlines() if "ethtool" in ln and not ln.startswith("#")]
    assert sorted(lines) == sorted(f"ip netns exec vb0000-{n} ethtool -K vb0000-{d} tso off gso off gro off"
                                   for n, d in want)
    assert "# offloads tso/gso/gro off on h1v1: ethtool -K on the 1 device the run made there" in script
    assert script.index("ethtool -K") > script.rindex("link add")  # once every device exists
    host = scenarios(SPEC + "include: [{attach: host, offloads: {tso: off, gso: off, gro: off}}]\n")[-1]
    assert [ln for ln in Topology(host, None).script().splitlines() if ln.startswith("ip netns exec")
            and "ethtool" in ln] == [f"ip netns exec vb0000-h{h} ethtool -K vb0000-u tso off gso off gro off"
                                     for h in (1, 2)]


def test_summary_groups_devices_that_agree():
    record = {"asked": OFF, "groups": [
        {"features": {"tso": "off", "gso": "off", "gro": "off", "sg": "on"}, "devices": ["h1 a", "h1 b"]},
        {"features": {"tso": "off", "gso": "off", "gro": "off", "sg": "off"}, "devices": ["h2 c"]}]}
    assert summary(record, ["tso", "gso", "gro"]) == "tso off, gso off, gro off on 3 interfaces"
    assert summary(record, ["sg"]) == "sg on on 2 interfaces; sg off on 1 interface"
    assert offloads.differences({"lro": "on"}, {"h1": {"a": {"lro": "off fixed"}}}) == ["lro off [fixed] on h1 a"]


# ---- for real ----------------------------------------------------------------------------------------------------
@pytest.mark.net
def test_offloads_off_over_vxlan_is_slower_and_dearer_per_bit(tmp_path, state_dir):
    spec, db = tmp_path / "offloads.yaml", tmp_path / "r.db"
    spec.write_text(SPEC)
    run = vnetbench("run", spec, "--db", db, "--no-progress")
    assert "campaign 1: done, 6 trials ok, 0 failed" in run.stdout, run.stdout
    with sqlite3.connect(db) as c:
        skipped = c.execute("SELECT reason FROM scenarios WHERE idx = 3 AND status = 'skipped'").fetchone()
        metas = [(idx, json.loads(m)) for idx, m in c.execute("SELECT scenario, metadata FROM trials")]
        (built,) = c.execute("SELECT environment FROM scenarios WHERE idx = 1").fetchone()
    # a device that refuses the level (veth: large-receive-offload off [fixed]) skips the scenario, saying so
    assert skipped and skipped[0].startswith("offloads lro on: not in force: lro off [fixed] on "), skipped
    assert {idx for idx, _ in metas} == {1, 2} and all("offloads" in m for _, m in metas)
    defaults = {f"{node} {dev}": i["offloads"] for node, ifs in json.loads(built).items() if node != "sysctls"
                for dev, i in ifs.items() if dev != "lo"}  # as the build left them (run/environment.py)
    for idx, m in metas:  # each trial's own read-back, of the 10 devices the run made
        devices = {d: g["features"] for g in m["offloads"]["groups"] for d in g["devices"]}
        assert len(devices) == 10 and not [f for f in m.get("flags", []) if f.startswith(offloads.NOT_AS_ASKED)], m
        for d, f in devices.items():
            want = OFF if idx == 2 else {"tso": "on", "gso": "on", "gro": defaults[d]["generic-receive-offload"]}
            assert {k: f[k] for k in OFF} == want, (idx, d, f)
    untouched = [{d: {k: v for k, v in g["features"].items() if k not in OFF} for g in m["offloads"]["groups"]
                  for d in g["devices"]} for _, m in metas]
    assert all(u == untouched[0] for u in untouched)  # what was not asked stays as the kernel made it
    show = vnetbench("show", "1", "--db", db).stdout
    assert "offloads in force, scenario 2 (offloads=tso/gso/gro off): tso off, gso off, gro off on 10 interfaces" \
        in " ".join(show.split()), show
    rows = json.loads(vnetbench("show", "1", "--db", db, "--json", "-m", "throughput_bps", "-m", "cpu_s_per_gbit")
                      .stdout)["rows"]

    def per_trial(metric, idx):
        (row,) = [r for r in rows if r["metric"] == metric and r["scenario"] == idx and not r["role"]
                  and r["stat"] is None]  # the machine's CPU per bit; the one pair's throughput
        return [t["value"] for t in row["trials"]]
    tput = {idx: per_trial("throughput_bps", idx) for idx in (1, 2)}
    cost = {idx: per_trial("cpu_s_per_gbit", idx) for idx in (1, 2)}
    assert statistics.median(tput[2]) < 0.9 * statistics.median(tput[1]), tput
    assert statistics.median(cost[2]) > statistics.median(cost[1]), cost
