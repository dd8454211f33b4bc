"""dataset.py: one value per trial, pooled samples apart, background and series kept out."""
import pytest

from vnetbench.results.dataset import load, reduce_values
from vnetbench.core.sample import Sample
from vnetbench.results.store import Store


@pytest.fixture
def data(tmp_path):
    store = Store(tmp_path / "d.db")
    cid = store.new_campaign("d", "test", "name: d\n", "0" * 64, {})
    for idx in (1, 2):
        store.put_scenario(cid, idx, f"s{idx}", {"overlay": f"o{idx}"}, {"overlay": f"o{idx}"}, "done", None, {}, [])
    for rep in (1, 2, 3):
        rtts = [idx * 1e-3 * (rep + k) for idx in (1,) for k in range(5)]          # median rep+2 ms
        store.save_trial(cid, 1, rep, 0, "ping", {}, "ok", None, 0, 1, [Sample.of("rtt_s", v, pair=1) for v in rtts])
        store.save_trial(cid, 1, rep, 1, "iperf3", {}, "ok", None, 0, 1, [
            Sample.of("throughput_bps", 1e9 * rep, pair=1), Sample.of("throughput_bps", 3e9 * rep, pair=2),
            Sample.of("throughput_bps", 5e9, pair=1, role="background", background_workload=3),
            Sample.of("throughput_interval_bps", 7e9, t=0.5, pair=1, series=True),
            Sample.of("cpu_busy_ratio", 0.5, scope="machine"), Sample.of("cpu_busy_ratio", 0.9, scope="machine", cpu=0)])
    store.save_trial(cid, 2, 1, 0, "ping", {}, "failed", "boom", 0, 1, [Sample.of("rtt_s", 9.0, pair=1)])
    return load(store, cid)


def test_one_value_per_trial(data):
    assert data.trial_values("rtt_s") == {1: pytest.approx([3e-3, 4e-3, 5e-3])}          # each trial's median
    assert data.trial_values("rtt_s", reduce="max") == {1: pytest.approx([5e-3, 6e-3, 7e-3])}
    assert data.trial_values("throughput_bps") == {1: pytest.approx([2e9, 4e9, 6e9])}     # per-pair mean
    assert data.trial_values("throughput_bps", reduce="sum") == {1: pytest.approx([4e9, 8e9, 12e9])}
    assert data.trial_values("throughput_bps", background=True) == {1: [5e9] * 3}
    assert data.trial_values("cpu_busy_ratio") == {1: [0.5] * 3}                          # not the per-CPU share
    assert data.trial_values("throughput_bps", pair=2) == {1: pytest.approx([3e9, 6e9, 9e9])}
    by_rep = data.trial_values("throughput_bps", key=lambda t, s: t.repetition)
    assert sorted(by_rep) == [1, 2, 3] and all(len(v) == 1 for v in by_rep.values())
    assert data.values(1, 0, "rtt_s") == pytest.approx([3e-3, 4e-3, 5e-3])


def test_pooled_and_failed(data):
    assert len(data.pooled("rtt_s")[1]) == 15                                             # every echo
    assert 2 not in data.trial_values("rtt_s")                                            # the failed trial
    assert data.missing_text(data.scenarios[2], 0) == "n/a (trials failed: boom)"
    assert data.entries("iperf3") == {1: {"_kind": "iperf3"}}
    assert data.repetitions(1) == 3


def test_reductions():
    assert reduce_values([1, 2, 3, 10], "median") == 2.5
    assert reduce_values([1, 2, 3, 10], "p100") == 10
    assert reduce_values(list(range(101)), "p99") == pytest.approx(99)
    with pytest.raises(ValueError):
        reduce_values([1.0], "mode")


def test_show_counts_trials(tmp_path, data):
    from io import StringIO

    from rich.console import Console

    from vnetbench.report import tables as report
    store = Store(tmp_path / "d.db")
    rows = {(r.name, r.tag): r.summary for r in report.rows(store, 1)}
    assert rows[("rtt_s", "")].n == 3 and rows[("rtt_s", "")].median == pytest.approx(4e-3)   # not 15 echoes
    assert rows[("rtt_s p99", "")].n == 3 and rows[("rtt_s p99", "")].median > 4e-3          # each trial's tail
    assert rows[("throughput_bps", "pair 1")].n == 3 and rows[("throughput_bps", "pair 2")].n == 3  # pairs apart
    assert rows[("throughput_bps", "background 3, pair 1")].n == 3
    buf = StringIO()
    report.show(store, 1, Console(file=buf, width=250))
    assert "n = trials" in buf.getvalue()
    buf = StringIO()
    report.show(store, 1, Console(file=buf, width=250), wide=True)
    assert "n counts trials" in buf.getvalue()
