"""doctor, plan and schema. (What README.md and docs/ claim is checked in test_docs.py.)"""
import json
import re

import pytest

from conftest import ROOT, vnetbench

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


def test_version_prints_the_version_and_commit_and_h_is_help_everywhere():
    import subprocess
    text = vnetbench("--version").stdout
    assert re.fullmatch(r"vnetbench \d+\.\d+\.\d+\S*( \(commit [0-9a-f]{7,}(-dirty)?\))?\n", text), text
    if (ROOT / ".git").exists() and subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"],
                                                    capture_output=True).returncode == 0:
        assert "(commit " in text  # run from a checkout
    assert "[OPTIONS] COMMAND" in vnetbench("-h").stdout
    from typer.testing import CliRunner  # the same parser in this process: ten interpreters' start-up saved
    from vnetbench.cli import app

    def help_of(*argv: str) -> str:
        got = CliRunner().invoke(app, list(argv), prog_name="vnetbench", env={"COLUMNS": "200"})
        assert got.exit_code == 0, (argv, got.output)
        return got.output
    for command in ("doctor", "plan", "run", "list", "show", "compare", "export", "report", "clean", "suites"):
        assert f"vnetbench {command} [OPTIONS]" in help_of(command, "-h"), command
    assert "VNETBENCH_STATE_DIR" in help_of("run", "-h") + help_of("clean", "-h")
    assert "VNETBENCH_DB_TIMEOUT" in help_of("list", "-h")


def test_list_json_and_a_host_to_host_campaign_labelled_without_a_switch(tmp_path, state_dir):
    """`list --json`; and a one-scenario host-to-host campaign is stored with switch and overlay n/a (they do not
    apply) and labelled by its attachment, not `switch linuxbridge`."""
    spec = tmp_path / "l.yaml"
    spec.write_text("name: l\nrepetitions: 2\nfactors: {attach: host}\nworkloads: [{type: ping, count: 2, interval: 0.1}]\n")
    db = tmp_path / "l.db"
    vnetbench("run", spec, "--db", db, "--no-progress")
    rows = json.loads(vnetbench("list", "--db", db, "--json").stdout)
    assert [(r["id"], r["name"], r["status"], r["scenarios"], r["trials"]) for r in rows] == [(1, "l", "done", 1, 2)]
    assert rows[0]["spec"].endswith("l.yaml") and rows[0]["created"].endswith("+00:00")
    import sqlite3
    with sqlite3.connect(db) as c:
        labels = json.loads(c.execute("SELECT labels FROM scenarios").fetchone()[0])
    assert labels["switch"] == labels["overlay"] == "n/a" and labels["attach"] == "host"
    shown = vnetbench("show", "--db", db).stdout
    assert "linuxbridge" not in shown and re.search(r"^attach +median", shown, re.M), shown


def test_plan_starts_the_loads_before_the_measurement_they_load(tmp_path):
    """As a run does: background loads first, then the trial; the echoes under load start with the transfer and
    the script waits on the transfer (the plan used to ping after the load had ended)."""
    spec = tmp_path / "p.yaml"
    spec.write_text("name: p\nfactors: {attach: host, load: [none, udp]}\nworkloads:\n"
                    "  - {type: iperf3, duration: 2, latency: ping}\n"
                    "  - {type: iperf3, protocol: udp, udp_rate: 10M, duration: 4, port: 5301, background: true, "
                    "when: {load: udp}}\n")
    out = vnetbench("plan", spec).stdout
    second = out.split("# ---- scenario 2:")[1]
    assert second.index("background, alongside every trial") < second.index("# workload iperf3\n")
    fore = second.split("# workload iperf3\n")[1].split("# teardown")[0].splitlines()
    assert re.search(r"iperf3 -c \S+ -p 5201 .*[^&]$", fore[-1]), fore  # the transfer, waited on
    pings = [line for line in fore if " ping " in line]
    assert len(pings) == 2 and not pings[0].endswith("&") and pings[1].endswith("&")  # idle, then under load


def test_doctor_fits_100_columns_piped():
    """Piped (no terminal, no COLUMNS) output is drawn 100 wide: doctor's strongSwan line was one line of 167."""
    import os
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    lines = vnetbench("doctor", env=env).stdout.splitlines()
    assert any(line.startswith("strongSwan: ") for line in lines)
    assert max(map(len, lines)) <= 100, [line for line in lines if len(line) > 100]


@pytest.mark.parametrize("typo, near", [("thruput", "throughput_bps"), ("rtt_loaded", "rtt_loaded_s"),
                                        ("cpu_s_per_gibt", "cpu_s_per_gbit")])
def test_a_metric_typo_names_the_nearest_metrics_on_one_short_line(tmp_path, typo, near):
    """`show -m` with a typo listed all 47 metrics on one line of 1,200 characters."""
    proc = vnetbench("show", "--db", tmp_path / "none.db", "-m", typo, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and len(lines[0]) < 200, proc.stderr
    assert f"'{typo}' is not a metric; did you mean " in lines[0] and near in lines[0] \
        and "vnetbench metrics" in lines[0], lines[0]


def test_a_resume_says_what_it_ran_not_zero_trials_under_a_full_table(tmp_path, state_dir):
    """Resuming a finished campaign printed its table of every trial, then "campaign 1: done, 0 trials ok"."""
    spec = tmp_path / "r.yaml"
    spec.write_text("name: r\nrepetitions: 2\nfactors: {attach: host}\n"
                    "workloads: [{type: ping, count: 2, interval: 0.1}]\n")
    db = tmp_path / "r.db"
    first = vnetbench("run", spec, "--db", db, "--no-progress").stdout
    assert "campaign 1: done, 2 trials ok, 0 failed" in first and "this run" not in first, first
    again = " ".join(vnetbench("run", "--resume", "1", "--db", db, "--no-progress").stdout.split())
    assert f"campaign 1: done; nothing was left to run (results in {db})" in again and "0 trials ok" not in again


def test_plan_counts_what_a_long_card_coverage_list_would_repeat():
    from vnetbench.cli import PLAN_LIST_MAX, _first
    assert _first(["a", "b"]) == ["  a", "  b"]
    many = _first(f"unmeasured {i}" for i in range(30))
    assert len(many) == PLAN_LIST_MAX and many[-1] == f"  ... and {30 - PLAN_LIST_MAX + 1} more"
    assert many[:2] == ["  unmeasured 0", "  unmeasured 1"]
