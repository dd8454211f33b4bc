"""doctor, plan, schema and the README's claims about commands and metrics."""
import json
import re

import pytest

from conftest import ROOT, vnetbench
from vnetbench.sample import METRICS

pytestmark = pytest.mark.net


def test_doctor_json_gives_a_reason_for_everything_unavailable():
    report = json.loads(vnetbench("doctor", "--json").stdout)
    assert report["tools"]["iperf3"]["ok"] and report["kernel"]["veth"]["ok"]
    for section in ("tools", "kernel"):
        for name, feature in report[section].items():
            assert feature["ok"] or feature["detail"], f"{section}.{name} unavailable without a reason"
    levels = {d["level"]: d for d in report["datapaths"]}
    assert levels["linuxbridge+vxlan"]["ok"] == report["kernel"]["vxlan"]["ok"]
    for d in report["datapaths"]:
        assert (d["ok"] and d["implementation"]) or (not d["ok"] and d["reason"]), d
    if not report["kernel"]["gretap"]["ok"]:
        assert "gretap" in levels["linuxbridge+gre"]["reason"]


def test_plan_prints_a_script_and_builds_nothing(tmp_path, state_dir):
    spec = tmp_path / "p.yaml"
    spec.write_text("name: p\nfactors: {overlay: [none, vxlan], attach: [switch, host], placement: cross-host}\n"
                    "workloads: [{type: iperf3, duration: 1}]\n")
    out = vnetbench("plan", spec).stdout
    assert out.startswith("#!/bin/sh")
    assert "4 scenarios, 3 runnable, 1 skipped" in out
    assert "# SKIPPED: host-to-host traffic bypasses the virtual switch" in out
    assert out.count("netns add vb0000-h1\n") == 3
    assert "type vxlan id 101" in out and "iperf3 -c 10.101.0.2" in out and "iperf3 -c 10.250.0.2" in out
    assert not state_dir.exists() or not any(state_dir.iterdir())


def test_schema_is_json_schema_of_the_spec():
    schema = json.loads(vnetbench("schema").stdout)
    assert {"name", "factors", "workloads", "repetitions"} <= set(schema["properties"])


def test_readme_names_only_real_metrics_and_commands():
    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"`([a-z0-9_]+_(?:bps|s|ratio|per_s|retransmits))`", readme))
    assert named and not named - set(METRICS), named - set(METRICS)
    commands = set(re.findall(r"^│ ([a-z]+) ", vnetbench("--help").stdout, re.M))
    assert {"run", "show", "clean"} <= commands
    assert set(re.findall(r"`vnetbench ([a-z]+)", readme)) <= commands


def test_readme_example_spec_is_valid():
    from vnetbench.spec import loads
    block = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    assert loads(block, "README.md").experiment.name == "quick"
