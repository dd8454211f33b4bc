"""S1 and S2: smoke profiles end to end, and the analyses on known inputs."""
import pytest

from conftest import vnetbench
from vnetbench.analyses import load_all
from vnetbench.sample import Sample
from vnetbench.store import Store


def _campaign(tmp_path, analysis):
    store = Store(tmp_path / "known.db")
    cid = store.new_campaign("known", "test", f"name: known\nanalysis: {analysis}\n", "0" * 64, {})
    return store, cid


def _trial(store, cid, idx, rep, w, kind, params, samples):
    store.save_trial(cid, idx, rep, w, kind, params, "ok", None, 0.0, 1.0, samples)


def jitter(center, n=21, step=1e-3):
    """n values spread evenly +-1% around center: a narrow, known distribution."""
    return [center * (1 + step * (i - n // 2) / (n // 2) * 10) for i in range(n)]


def test_s1_decomposition_on_known_medians(tmp_path):
    store, cid = _campaign(tmp_path, "s1")
    scenarios = {"CS": ("host", "none", 0.10e-3), "Reference": ("switch", "none", 0.30e-3),
                 "IPsec": ("switch", "ipsec", 0.70e-3), "SR-IOV": ("direct", "none", 0.20e-3),
                 "IPsec+SR-IOV": ("direct", "ipsec", 0.50e-3)}
    for idx, (name, (attach, enc, tr)) in enumerate(scenarios.items(), 1):
        labels = {"attach": attach, "encryption": enc, "switch": "ovs"}
        store.put_scenario(cid, idx, name, labels, labels, "done", None, {}, [])
        _trial(store, cid, idx, 1, 0, "ping", {"type": "ping", "ping_size": 56},
               [Sample.of("rtt_s", v, pair=1) for v in jitter(tr)])
        _trial(store, cid, idx, 1, 1, "ping", {"type": "ping", "ping_size": 65507},
               [Sample.of("rtt_s", v, pair=1) for v in jitter(10 * tr)])
    result = load_all()["s1"]().run(store, cid)
    table5 = next(t for t in result.tables if t.title.startswith("Table V"))
    cells = {row[0]: row[1:] for row in table5.rows}
    # OvS: (0.30 - 0.10) / 2 = 0.1 ms -> 10 packets/ms; saturated: (3.0 - 1.0) / 2 = 1 ms -> 1 packet/ms
    assert cells["OvS (virtual switch)"] == ["10.0", "1.00"]
    assert cells["SR-IOV (direct NIC path)"] == ["20.0", "2.00"]      # (0.20 - 0.10) / 2 = 0.05 ms
    assert cells["IPsec"] == ["5.00", "0.5"]                          # (0.70 - 0.30) / 2 = 0.2 ms
    assert cells["IPsec on SR-IOV"] == ["6.67", "0.667"]              # (0.50 - 0.20) / 2 = 0.15 ms


def _s2_scenario(store, cid, idx, env, interference="none"):
    switch, overlay = env
    labels = {"switch": switch, "overlay": overlay, "placement": "cross-host", "protocol": "tcp",
              "direction": "uni", "interference": interference}
    store.put_scenario(cid, idx, f"s{idx}", labels | {"pairs": 1, "udp_rate": 100000000},
                       labels | {"pairs": "1", "udp_rate": "100M"}, "done", None, {}, [])


def test_s2_best_and_tie(tmp_path):
    store, cid = _campaign(tmp_path, "s2")
    envs = {("linuxbridge", "vxlan"): (10e9, 40e-6), ("ovs", "vxlan"): (1e9, 40.2e-6), ("ovs", "gre"): (0.8e9, 90e-6)}
    for idx, (env, (tput, rtt)) in enumerate(envs.items(), 1):
        _s2_scenario(store, cid, idx, env)
        for rep, (t, r) in enumerate(zip(jitter(tput, 6, 1e-2), jitter(rtt, 6, 2e-2)), 1):
            _trial(store, cid, idx, rep, 0, "iperf3", {"type": "iperf3"},
                   [Sample.of("aggregate_throughput_bps", t, pair="all"), Sample.of("rtt_loaded_s", r, pair=1)])
    best = load_all()["s2"]().run(store, cid).tables[0]
    assert best.columns[:4] == ["placement", "VMs", "lowest latency", "lowest jitter"]
    (row,) = best.rows
    assert row[0:2] == ["cross-host", "2"]
    assert row[2] == "tie: LB+VXLAN / OVS+VXLAN"        # 40.0 vs 40.2 µs: within noise
    assert row[5] == "LB+VXLAN"                         # 10 vs 1 Gbit/s: a clear winner
    assert row[3] == "n/a"                              # no jitter samples were stored


@pytest.mark.net
# S2: 18 on this machine's kernel, and Linux bridge + GRE's 6 in a guest kernel where one boots
@pytest.mark.parametrize("suite, scenarios", [("s1", 5), ("s2", 24)])
def test_smoke_profile_end_to_end(tmp_path, state_dir, suite, scenarios):
    db = tmp_path / "r.db"
    out = vnetbench("run", f"suite:{suite}", "--profile", "smoke", "--db", db, "--no-progress").stdout
    assert f"{scenarios} scenarios run" in out or "skipped" in out
    assert "0 failed" in out
    result = load_all()[suite]().run(Store(db), 1)
    assert result.tables and all(t.rows for t in result.tables)
    if suite == "s1":
        assert [t.title.split(" —")[0] for t in result.tables] == ["Table I", "Table II", "Table III", "Table IV", "Table V"]
    else:
        assert any(t.title.startswith("Tenant interference") for t in result.tables)
