"""`vnetbench trend`: a lab's campaigns in the order they ran, per scenario and metric, grouped by jumpavg; a step's
size with its interval, what changed beside it, and a gate on the newest campaign."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import vnetbench
from vnetbench.report import trend
from vnetbench.core.sample import Sample
from vnetbench.results.store import Store

IMPL = {"switch": "linux-bridge", "overlay": "flat", "encryption": "none", "attach": "veth"}


def lab(path, levels: dict[str, list[float]], kernels: list[str], seed: int = 1) -> Store:
    """One campaign per position of the lists: each scenario's 6 trials around its level (CV 2 %)."""
    rng = np.random.default_rng(seed)
    store = Store(path)
    for k, kernel in enumerate(kernels):
        cid = store.new_campaign(f"nightly-{k + 1}", "t", "name: t\n", "0" * 64,
                                 {"kernel": kernel, "tools": {"ovs-vswitchd": "3.1.0"}})
        for idx, (switch, series) in enumerate(levels.items(), 1):
            store.put_scenario(cid, idx, f"switch={switch}", {"switch": switch}, {"switch": switch}, "done", None,
                               IMPL, [])
            for rep, v in enumerate(rng.normal(series[k], 0.02 * series[k], 6), 1):
                store.save_trial(cid, idx, rep, 0, "iperf3", {"type": "iperf3"}, "ok", None, 0.0, 1.0,
                                 [Sample.of("throughput_bps", float(v), pair=1)], {})
        store.set_campaign(cid, status="done", finished=1.0)
    return store


def test_a_drop_in_the_newest_campaign_is_a_regression_with_its_size_and_what_changed(tmp_path):
    store = lab(tmp_path / "h.db", {"ovs": [1e9] * 5 + [0.8e9], "linuxbridge": [2e9] * 6},
                ["6.1.0"] * 5 + ["6.12.0"])
    got = {s.scenario["switch"]: s for s in trend.history([store], ["throughput_bps"])}
    ovs, lb = got["ovs"], got["linuxbridge"]
    assert ovs.groups == [(0, 5), (5, 6)] and len(ovs.changes) == 1
    c = ovs.changes[0]
    assert c.worse and c.at == 5 and math.isclose(c.ratio, 0.8, rel_tol=0.03)
    assert c.ci[0] < c.ratio < c.ci[1] < 0.9              # the interval of the step excludes no change
    assert ovs.newest_regression is c and ovs.notes[5] == ["kernel: 6.1.0 -> 6.12.0"]
    assert lb.changes == [] and lb.groups == [(0, 6)]    # the same kernel change, and no step: none is found
    text = "\n".join(trend.text(list(got.values())))
    assert "NEWEST CAMPAIGN REGRESSES: ovs iperf3" in text and "beside: kernel: 6.1.0 -> 6.12.0" in text, text
    assert "1 series without a change" in text


def test_the_cli_gates_on_the_newest_campaign_and_draws_the_changes(tmp_path):
    lab(tmp_path / "h.db", {"ovs": [1e9] * 5 + [0.8e9]}, ["6.1.0"] * 6)
    gate = vnetbench("trend", "--db", tmp_path / "h.db", "--fail-on-regression", "--plot", tmp_path / "t.png",
                     check=False)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert (tmp_path / "t.png").stat().st_size > 5000
    data = json.loads(vnetbench("trend", "--db", tmp_path / "h.db", "--format", "json", "-m", "throughput_bps").stdout)
    (s,) = data
    assert s["newest_regression"] and [c["campaign"] for c in s["changes"]] == [6] and len(s["points"]) == 6


def test_a_dip_that_recovers_passes_the_gate_and_a_lone_campaign_is_no_trend(tmp_path):
    """Down at the third campaign, back at the fifth: two changes, the newest a progression; the gate passes."""
    lab(tmp_path / "h.db", {"ovs": [1e9, 1e9, 0.7e9, 0.7e9, 1e9, 1e9]}, ["6.1.0"] * 6)
    ok = vnetbench("trend", "--db", tmp_path / "h.db", "--fail-on-regression")
    assert "regression at campaign 3" in ok.stdout and "progression at campaign 5" in ok.stdout, ok.stdout
    lab(tmp_path / "one.db", {"ovs": [1e9]}, ["6.1.0"])
    lone = vnetbench("trend", "--db", tmp_path / "one.db", check=False)
    assert lone.returncode == 2 and "at least two campaigns" in lone.stderr
    absent = vnetbench("trend", "--db", tmp_path / "nope.db", check=False)
    assert absent.returncode == 2 and "no results file" in absent.stderr


@pytest.mark.net
def test_a_capacity_change_part_way_is_one_change_point_at_its_campaign(tmp_path, state_dir):
    """The same spec run 5 times, the underlay's rate 60 Mbit/s, then 30 from the fourth run: one change, at campaign
    4, about half, a regression of the newest campaign only while it is the newest."""
    spec = tmp_path / "nightly.yaml"
    db = tmp_path / "h.db"
    for rate in ("60mbit", "60mbit", "60mbit", "30mbit"):
        spec.write_text(f"name: nightly\nrepetitions: 3\nunderlay: {{rate: {rate}}}\n"
                        "workloads: [{type: iperf3, duration: 1}]\n")
        vnetbench("run", spec, "--db", db, "--no-progress")
    gate = vnetbench("trend", "--db", db, "-m", "throughput_bps", "--format", "json", "--fail-on-regression",
                     check=False)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    (s,) = json.loads(gate.stdout)
    # one step of the path's capacity; a busy machine can add a small step of its own (a night whose trials met
    # other work), never one of the rate's size
    (change,) = [c for c in s["changes"] if not 0.8 < c["ratio"] < 1.25] or [None]
    assert change and change["campaign"] == 4 and change["kind"] == "regression" and 0.4 < change["ratio"] < 0.6, s
    vnetbench("run", spec, "--db", db, "--no-progress")   # a fifth night at the new rate: no longer the newest
    assert vnetbench("trend", "--db", db, "-m", "throughput_bps", "--fail-on-regression").returncode == 0
