"""doctor, plan and schema. (What README.md and docs/ claim is checked in test_docs.py.)"""
import json

import pytest

from conftest import vnetbench

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
