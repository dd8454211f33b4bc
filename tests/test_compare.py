"""`vnetbench compare`: B against A per scenario and metric, Holm over the table, a CI gate on regressions."""
import json

import pytest

from conftest import vnetbench
from vnetbench.core.sample import Sample
from vnetbench.results.store import Store


def _campaign(store, name, tput, rtt, reps=6):
    """Two scenarios (overlay none / vxlan); tput and rtt per overlay; trial k varies by +-1 % around them."""
    cid = store.new_campaign(name, "test", f"name: {name}\n", "0" * 64, {})
    for idx, overlay in enumerate(("none", "vxlan"), 1):
        labels = {"overlay": overlay, "attach": "switch"}
        store.put_scenario(cid, idx, overlay, labels, labels, "done", None, {"switch": "linux-bridge"}, [])
        for rep in range(1, reps + 1):
            f = 1 + 0.01 * (rep - (reps + 1) / 2)
            store.save_trial(cid, idx, rep, 0, "iperf3", {}, "ok", None, 0, 1, [
                Sample.of("throughput_bps", tput[overlay] * f, pair=1),
                *[Sample.of("rtt_loaded_s", rtt[overlay] * f * (1 + 0.1 * k), pair=1) for k in range(-2, 3)]])
    return cid


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "c.db"
    store = Store(path)
    base = {"none": 9e9, "vxlan": 3e9}
    _campaign(store, "base", base, {"none": 50e-6, "vxlan": 80e-6})
    _campaign(store, "slower", {"none": 9e9, "vxlan": 2.7e9}, {"none": 50e-6, "vxlan": 80e-6})   # vxlan -10 %
    _campaign(store, "faster", {"none": 9e9 * 1.06, "vxlan": 3e9}, {"none": 50e-6, "vxlan": 80e-6})  # none +6 %
    store.close()
    return path


def rows(proc):
    return {(r["scenario"].get("overlay"), r["metric"]): r for r in json.loads(proc.stdout)["rows"]}


def test_campaign_against_itself_is_not_significant(db):
    proc = vnetbench("compare", "1", "1", "--db", db, "--fail-on-regression", "5%", "--format", "json")
    got = rows(proc)
    assert len(got) == 4 and all(r["verdict"] == "not significant" for r in got.values())
    assert all(r["ratio"] == 1 and r["a"]["n"] == 6 for r in got.values())
    table = vnetbench("compare", "1", "1", "--db", db).stdout
    assert "Holm" in table and "n = trials" in table and "worse" not in table


def test_regression_gate(db):
    proc = vnetbench("compare", "1", "2", "--db", db, "--fail-on-regression", "5%", "--format", "json", check=False)
    assert proc.returncode == 1
    got = rows(proc)
    r = got[("vxlan", "throughput_bps")]
    assert r["verdict"] == "worse" and r["regression"] and r["ratio"] == pytest.approx(0.9)
    assert r["ratio_ci"][0] < 0.9 < r["ratio_ci"][1] and r["p_holm"] < 0.05
    assert got[("none", "throughput_bps")]["verdict"] == "not significant"
    assert got[("vxlan", "rtt_loaded_s")]["verdict"] == "not significant"
    # worse by 10 %: a 15 % threshold lets it pass, and without a threshold nothing fails
    assert vnetbench("compare", "1", "2", "--db", db, "--fail-on-regression", "15%", check=False).returncode == 0
    assert vnetbench("compare", "1", "2", "--db", db, check=False).returncode == 0


def test_improvement_is_better_not_a_regression(db):
    proc = vnetbench("compare", "1", "3", "--db", db, "--fail-on-regression", "1%", "--format", "json")
    assert rows(proc)[("none", "throughput_bps")]["verdict"] == "better"


def test_two_selections_of_one_campaign(db):
    proc = vnetbench("compare", "1", "--a-where", "overlay=none", "--b-where", "overlay=vxlan", "--db", db,
                     "-m", "throughput_bps", "--format", "json", "--fail-on-regression", "5%", check=False)
    assert proc.returncode == 1
    (r,) = json.loads(proc.stdout)["rows"]
    assert r["scenario"] == {"attach": "switch"} and r["verdict"] == "worse"
    assert r["ratio"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("args, message", [
    (["1", "--a-where", "colour=red"], "has no factor 'colour'"),
    (["1", "--a-where", "overlay"], "write FACTOR=LEVEL"),
    (["1", "--a-where", "overlay=gre", "--b-where", "overlay=none"], "no scenario of campaign 1"),
    (["1", "2", "--fail-on-regression", "lots"], "percentage like 5%"),
    (["1", "2", "-m", "speed"], "'speed' is not a metric"),
    (["1", "9"], "no campaign '9'"),
    (["1", "--a-where", "overlay=none"], "several scenarios"),
    (["1", "1", "--a-where", "overlay=none", "--b-where", "overlay=none"], "select the same scenarios"),
    (["1"], "B is A (campaign 1 of "),   # B left out, no selection: a table of 'not significant', exit 0
    (["last"], "--a-where FACTOR=LEVEL --b-where FACTOR=OTHER"),
])
def test_bad_input_is_one_line_exit_2(db, args, message):
    proc = vnetbench("compare", *args, "--db", db, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


SPEC = """name: {name}
repetitions: 4
{underlay}factors:
  overlay: none
  attach: switch
  placement: cross-host
workloads:
  - type: iperf3
    duration: 1
"""


@pytest.mark.net
def test_rate_limited_underlays_end_to_end(tmp_path, state_dir):
    """Real traffic: a 100 Mbit/s underlay cap is a regression (exit 1); 300 vs 200 Mbit/s ranked with p < 0.05 at 4
    repetitions each."""
    from vnetbench.results.dataset import load
    from vnetbench.results.stats import best_of
    db = tmp_path / "r.db"
    for name, rate in (("free", None), ("cap100", "100mbit"), ("cap300", "300mbit"), ("cap200", "200mbit")):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(SPEC.format(name=name, underlay=f"underlay: {{rate: {rate}}}\n" if rate else ""))
        vnetbench("run", spec, "--db", db, "--no-progress")
    # 4 + 4 trials: the exact test's smallest p is 0.029, so only a family of one metric can reach alpha
    gate = vnetbench("compare", "1", "2", "--db", db, "--fail-on-regression", "5%", "-m", "throughput_bps",
                     "--format", "json", check=False)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    r = rows(gate)[("none", "throughput_bps")]
    assert r["verdict"] == "worse" and r["regression"] and r["b"]["median"] < 101e6
    ranked = rows(vnetbench("compare", "3", "4", "--db", db, "-m", "throughput_bps", "--format", "json"))
    r = ranked[("none", "throughput_bps")]
    assert r["verdict"] == "worse" and r["p_holm"] < 0.05 and r["a"]["n"] == r["b"]["n"] == 4
    assert 0.55 < r["ratio"] < 0.75 and r["ratio_ci"][1] < 0.8           # 200 / 300, with TCP/IP overhead alike
    store = Store(db)
    groups = {rate: load(store, cid).trial_values("throughput_bps")[1] for rate, cid in (("300", 3), ("200", 4))}
    best = best_of(groups, "higher")
    assert best.label == "300" and not best.tie and best.p_adjusted["200"] < 0.05


def test_a_scenario_missing_on_one_side_fails_the_gate(tmp_path):
    """B's vxlan scenario failed to build: it is shown, and the regression gate fails unless --allow-missing."""
    path = tmp_path / "m.db"
    store = Store(path)
    levels = {"none": 9e9, "vxlan": 3e9}
    _campaign(store, "base", levels, {"none": 50e-6, "vxlan": 80e-6})
    cid = _campaign(store, "broken", levels, {"none": 50e-6, "vxlan": 80e-6})
    store.db.execute("DELETE FROM samples WHERE trial IN (SELECT id FROM trials WHERE campaign = ? AND scenario = 2)",
                     (cid,))
    store.db.execute("DELETE FROM trials WHERE campaign = ? AND scenario = 2", (cid,))
    store.set_scenario(cid, 2, "failed", "build failed: vxlan: Operation not supported")
    store.db.commit()
    store.close()
    gate = vnetbench("compare", "1", "2", "--db", path, "--fail-on-regression", "5%", "--format", "json", check=False)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert json.loads(gate.stdout)["missing"] == [{"scenario": {"attach": "switch", "overlay": "vxlan"},
                                                   "missing_in": "B", "why": "failed in campaign 2: build failed: "
                                                                             "vxlan: Operation not supported"}]
    assert "ran on one side only" in gate.stderr and "--allow-missing" in gate.stderr
    table = vnetbench("compare", "1", "2", "--db", path, "--fail-on-regression", "5%", check=False)
    assert table.returncode == 1 and "missing in B: overlay=vxlan (failed in campaign 2" in table.stdout  # what sets it apart
    assert vnetbench("compare", "1", "2", "--db", path, "--fail-on-regression", "5%", "--allow-missing").returncode == 0
    # the other way round: A lacks it
    assert "missing in A: " in vnetbench("compare", "2", "1", "--db", path).stdout


def test_a_side_without_scenarios_that_ran_names_no_option_it_was_not_given(tmp_path):
    path = tmp_path / "n.db"
    store = Store(path)
    _campaign(store, "base", {"none": 9e9, "vxlan": 3e9}, {"none": 50e-6, "vxlan": 80e-6})
    cid = store.new_campaign("broken", "test", "name: broken\n", "0" * 64, {})
    store.put_scenario(cid, 1, "none", {"overlay": "none"}, {"overlay": "none"}, "failed", "build failed", {}, [])
    store.close()
    for args, said in ((["1", "2"], "no scenario of campaign 2 (broken) ran"),
                       (["2", "1", "--b-where", "overlay=none"], "no scenario of campaign 2 (broken) ran")):
        proc = vnetbench("compare", *args, "--db", path, check=False)
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
        assert "-where" not in proc.stderr.replace("--b-where overlay", ""), proc.stderr


def _trials_failed(store, cid, scenario, reps=3):
    """Every trial of a built scenario failed (a datapath that builds, then passes no traffic)."""
    store.db.execute("DELETE FROM samples WHERE trial IN (SELECT id FROM trials WHERE campaign = ? AND scenario = ?)",
                     (cid, scenario))
    store.db.execute("DELETE FROM trials WHERE campaign = ? AND scenario = ?", (cid, scenario))
    store.db.commit()
    for rep in range(1, reps + 1):
        store.save_trial(cid, scenario, rep, 0, "iperf3", {}, "failed", "iperf3: no route to host", 0, 1, [])


def test_a_scenario_whose_trials_all_failed_is_missing_and_fails_the_gate(tmp_path):
    """B's vxlan scenario built and then every trial failed: it is missing in B with why, in the table, the JSON and
    the gate (its rows vanished without a word and the gate passed)."""
    path = tmp_path / "f.db"
    store = Store(path)
    levels, rtt = {"none": 9e9, "vxlan": 3e9}, {"none": 50e-6, "vxlan": 80e-6}
    _campaign(store, "base", levels, rtt, reps=3)
    _trials_failed(store, _campaign(store, "broken", levels, rtt, reps=3), 2)
    store.close()
    gate = vnetbench("compare", "1", "2", "--db", path, "--fail-on-regression", "5%", "--format", "json", check=False)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert json.loads(gate.stdout)["missing"] == [{"scenario": {"attach": "switch", "overlay": "vxlan"},
                                                   "missing_in": "B", "why": "0 of 3 trials ok in campaign 2: iperf3: "
                                                                             "no route to host"}]
    assert "ran on one side only" in gate.stderr
    table = vnetbench("compare", "1", "2", "--db", path, "--fail-on-regression", "5%", check=False)
    assert table.returncode == 1 and "missing in B: overlay=vxlan (0 of 3 trials ok in campaign 2" in table.stdout
    assert vnetbench("compare", "1", "2", "--db", path, "--fail-on-regression", "5%", "--allow-missing").returncode == 0


def test_a_side_whose_every_trial_failed_is_missing_not_an_error(tmp_path):
    """Every scenario of B built and passed no traffic: each is missing in B (the gate fails, exit 1), not a table
    of nothing, nor 'no scenario has the same levels' (exit 2); and A's failed trials make them missing in A."""
    from vnetbench.report import compare as cmp
    path = tmp_path / "g.db"
    store = Store(path)
    levels, rtt = {"none": 9e9, "vxlan": 3e9}, {"none": 50e-6, "vxlan": 80e-6}
    _campaign(store, "base", levels, rtt, reps=3)
    cid = _campaign(store, "broken", levels, rtt, reps=3)
    for scenario in (1, 2):
        _trials_failed(store, cid, scenario)
    a, b = (cmp.Side(store, store.campaign(ref)) for ref in ("1", "2"))
    assert cmp.compare(a, b, threshold=0.05) == []
    assert [(m["scenario"]["overlay"], m["missing_in"]) for m in cmp.missing(a, b)] == [("none", "B"), ("vxlan", "B")]
    assert [(m["scenario"]["overlay"], m["missing_in"]) for m in cmp.missing(b, a)] == [("none", "A"), ("vxlan", "A")]
    store.close()
    gate = vnetbench("compare", "1", "2", "--db", path, "--fail-on-regression", "5%", check=False)
    assert gate.returncode == 1 and "missing in B: overlay=vxlan (0 of 3 trials ok" in gate.stdout, gate.stderr


def _natural(path, scenarios: dict[str, tuple[dict, float]]):
    """One campaign: each scenario's labels (a level that does not apply reads n/a) and 6 trials at a level."""
    from test_suites_s3_s4 import Book
    b = Book(path)
    base = {"switch": "linuxbridge", "overlay": "none", "encryption": "none", "encryption_scope": "n/a",
            "attach": "switch", "placement": "cross-host"}
    for labels, level in scenarios.values():
        sc = b.scenario({**base, **labels})
        b.trials(sc, "iperf3", {"type": "iperf3"},
                 [[Sample.of("throughput_bps", level * (1 + k / 100), pair=1)] for k in range(-3, 3)])
    return b.store.path


def test_the_natural_questions_pair_where_a_factor_does_not_apply(tmp_path):
    """No encryption against WireGuard (whose scope is vm-to-vm, n/a without encryption) and a bridge against a direct
    NIC (switch and overlay n/a) pair on the factor asked about; a second WireGuard scope is a question to narrow,
    and two sides that differ in an unnamed factor say which."""
    db = _natural(tmp_path / "n.db", {
        "none": ({}, 1e9),
        "wg": ({"encryption": "wireguard", "encryption_scope": "vm-to-vm"}, 0.5e9),
        "direct": ({"switch": "n/a", "overlay": "n/a", "attach": "direct"}, 2e9)})
    wg = vnetbench("compare", "last", "--db", db, "--a-where", "encryption=none", "--b-where", "encryption=wireguard",
                   "--format", "json")
    (row,) = [r for r in json.loads(wg.stdout)["rows"] if r["metric"] == "throughput_bps"]
    assert row["verdict"] == "worse" and abs(row["ratio"] - 0.5) < 0.01, row
    direct = vnetbench("compare", "last", "--db", db, "--a-where", "attach=switch", "--b-where", "attach=direct",
                       "--format", "json")
    (row,) = [r for r in json.loads(direct.stdout)["rows"] if r["metric"] == "throughput_bps"]
    assert row["verdict"] == "better" and abs(row["ratio"] - 2.0) < 0.02, row
    two = _natural(tmp_path / "two.db", {
        "none": ({}, 1e9),
        "vm": ({"encryption": "wireguard", "encryption_scope": "vm-to-vm"}, 0.5e9),
        "host": ({"encryption": "wireguard", "encryption_scope": "host-to-host"}, 0.6e9)})
    ask = vnetbench("compare", "last", "--db", two, "--a-where", "encryption=none", "--b-where",
                    "encryption=wireguard", check=False)
    assert ask.returncode == 2 and "telling apart by encryption_scope" in ask.stderr, ask.stderr
    apart = _natural(tmp_path / "apart.db", {"a": ({"placement": "same-host"}, 1e9),
                                              "b": ({"placement": "cross-host", "overlay": "vxlan"}, 1e9)})
    miss = vnetbench("compare", "last", "--db", apart, "--a-where", "placement=same-host", "--b-where",
                     "placement=cross-host", check=False)
    assert miss.returncode == 2 and "they differ in overlay" in miss.stderr, miss.stderr
