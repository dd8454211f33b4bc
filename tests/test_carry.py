"""No number the data cannot carry: a trial's percentile only from enough of its samples, and CPU per unit of work
over trials as a ratio of sums (a trial that delivered almost nothing must not outweigh the others)."""
from io import StringIO

import pytest
from rich.console import Console

from vnetbench.report import compare, tables as report
from vnetbench.results import dataset, efficiency
from vnetbench.core.sample import Sample
from vnetbench.results.store import Store

LABELS = {"switch": "linuxbridge", "overlay": "vxlan"}


def _campaign(store, echoes=10, work=((1.0, 1.0),) * 4, name="c"):
    """One scenario, a trial per (cpu_s, gbit) in `work`, each with `echoes` loaded RTTs (rising with the trial)."""
    cid = store.new_campaign(name, "test", f"name: {name}\n", "0" * 64, {})
    store.put_scenario(cid, 1, "s", LABELS, LABELS, "done", None, {}, [])
    for rep, (cpu_s, gbit) in enumerate(work, 1):
        store.save_trial(cid, 1, rep, 0, "iperf3", {}, "ok", None, 0, 1, [
            Sample.of("throughput_bps", gbit * 1e9, pair=1),
            Sample.of("cpu_s_per_gbit", cpu_s / gbit, scope="machine", cpu_s=cpu_s, gbit=gbit),
            *[Sample.of("rtt_loaded_s", 1e-4 * rep * (1 + k / echoes), pair=1) for k in range(echoes)]])
    return cid


def _show(store, cid, **kw) -> str:
    buf = StringIO()
    report.show(store, cid, Console(file=buf, width=100), **kw)
    return buf.getvalue()


def test_a_percentile_needs_one_over_one_minus_q_samples():
    assert [dataset.needed(dataset.quantile(s)) for s in ("p50", "p90", "p99", "p99.9")] == [2, 10, 100, 1000]
    for q in (0.5, 0.9, 0.95, 0.99, 0.999):
        n = dataset.needed(q)  # the fewest samples with at least one expected above the q-th quantile
        assert n * (1 - q) >= 1 - 1e-9 and (n - 1) * (1 - q) < 1
    assert [dataset.highest_supported(n) for n in (1, 9, 10, 99, 100)] == ["p50", "p50", "p90", "p90", "p99"]
    assert dataset.unsupported("p99", 10, "echoes") == "p99 needs >= 100 echoes (had 10)"
    assert dataset.unsupported("p99", 100) == "" and dataset.unsupported("max", 3) == ""


def test_show_gives_p90_instead_of_a_p99_from_ten_echoes(tmp_path):
    store = Store(tmp_path / "r.db")
    cid = _campaign(store, echoes=10)
    out = _show(store, cid)
    assert "rtt_loaded_s p99 (" not in out  # no table of a p99 ten echoes cannot carry
    assert "p99 needs >= 100 echoes (had 10)" in out and "rtt_loaded_s p90 (s)" in out
    got = report.as_json(store, cid)["rows"]
    stats_ = {r["stat"]: r for r in got if r["metric"] == "rtt_loaded_s"}
    assert "p99" not in stats_ and stats_["p90"]["instead_of"] == {"p99": "p99 needs >= 100 echoes (had 10)"}


def test_fewer_than_ten_echoes_leave_the_median(tmp_path):
    store = Store(tmp_path / "r.db")
    cid = _campaign(store, echoes=5)
    out = _show(store, cid)
    assert "rtt_loaded_s p90 (" not in out and "rtt_loaded_s p99 (" not in out
    assert "p99 needs >= 100 echoes (had 5); the median shown instead" in out
    median = next(r for r in report.as_json(store, cid)["rows"] if r["metric"] == "rtt_loaded_s" and not r["stat"])
    assert set(median["instead_of"]) == {"p90", "p99"}


def test_enough_echoes_carry_the_p99(tmp_path):
    store = Store(tmp_path / "r.db")
    cid = _campaign(store, echoes=100)
    out = _show(store, cid)
    assert "rtt_loaded_s p99 (s)" in out and "needs >=" not in out


def test_efficiency_samples_carry_their_cpu_seconds_and_work():
    window = [1000.0, 1010.0]
    samples = [Sample.of("throughput_bps", 1e9, pair=1, direction="forward", window=window),
               Sample.of("cpu_busy_ratio", 0.5, scope="machine", window=window),
               Sample.of("cpu_busy_ratio", 0.4, scope="machine", cpu=0, window=window),
               Sample.of("cpu_busy_ratio", 0.6, scope="machine", cpu=1, window=window)]
    out = {s.metric: s for s in efficiency.derive(samples, payload=1000)}
    gbit, mpackets = 10.0, 10e9 / 8 / 1000 / 1e6
    assert out["cpu_s_per_gbit"].metadata["gbit"] == pytest.approx(gbit)
    assert out["cpu_s_per_mpacket"].metadata["mpackets"] == pytest.approx(mpackets)
    for s in out.values():
        work = s.metadata.get("gbit", s.metadata.get("mpackets"))
        assert s.value == pytest.approx(s.metadata["cpu_s"] / work)


SLOW = ((1.0, 1.0), (1.0, 1.0), (1.0, 0.001), (1.0, 1.0))  # one trial delivered 1 Mbit: 1000 s of CPU per Gbit


def test_show_summarises_cpu_per_gbit_as_a_ratio_of_sums(tmp_path):
    store = Store(tmp_path / "r.db")
    cid = _campaign(store, work=SLOW)
    row = next(r for r in report.as_json(store, cid)["rows"] if r["metric"] == "cpu_s_per_gbit")
    total = sum(c for c, _ in SLOW) / sum(g for _, g in SLOW)
    assert row["mean"] == pytest.approx(total) and row["mean_is"] == "ratio of sums"
    assert sorted(t["value"] for t in row["trials"]) == pytest.approx(sorted(c / g for c, g in SLOW))  # per trial
    lo, hi = row["ci_mean"]
    assert lo <= total <= hi
    assert f"{total:.3g} [" in _show(store, cid)


def test_compare_estimates_and_gates_cpu_per_gbit_on_ratios_of_sums(tmp_path):
    store = Store(tmp_path / "r.db")
    a = _campaign(store, work=((1.0, 1.0),) * 4, name="a")
    b = _campaign(store, work=SLOW, name="b")
    sides = [compare.Side(store, store.campaign(c)) for c in (a, b)]
    rows = compare.compare(*sides, metrics=["cpu_s_per_gbit"], threshold=0.5)
    assert len(rows) == 1
    r = rows[0]
    total_b = sum(c for c, _ in SLOW) / sum(g for _, g in SLOW)
    assert r.a.mean == pytest.approx(1.0) and r.b.mean == pytest.approx(total_b)
    assert r.comparison.ratio == pytest.approx(total_b)  # not the mean of ratios' 250
    assert not r.regression  # 33 % worse at most, below the 50 % threshold whatever the test says
    lo, hi = r.comparison.ratio_ci
    assert lo <= r.comparison.ratio <= hi


def _sockperf(store, round_trips=30, name="s", p99=5e-4):
    """One scenario of sockperf trials whose own percentiles are over `round_trips` round trips each."""
    cid = store.new_campaign(name, "test", f"name: {name}\n", "0" * 64, {})
    store.put_scenario(cid, 1, "s", LABELS, LABELS, "done", None, {}, [])
    for rep in range(1, 5):
        store.save_trial(cid, 1, rep, 0, "sockperf", {}, "ok", None, 0, 1, [
            Sample.of(m, v * (1 + rep / 50), pair=1, observations=round_trips)
            for m, v in (("latency_p50_s", 1e-4), ("latency_p90_s", 2e-4), ("latency_p99_s", p99))])
    return cid


def test_a_workloads_own_percentiles_store_their_round_trips():
    from tests.test_parsers import text
    from vnetbench.workloads.netperf import parse_netperf
    from vnetbench.workloads.sockperf import parse_sockperf
    raw = text("sockperf", "tcp.txt")
    got = {s.metric: s.metadata for s in parse_sockperf(raw)}
    assert got["latency_p99_s"]["observations"] == 72428  # the valid duration's ReceivedMessages
    rr = {s.metric: s.metadata for s in parse_netperf(text("netperf", "tcp_rr.txt"), "TCP_RR")}
    assert rr["latency_p99_s"]["observations"] == round(37335.905 * 2.00)  # its transactions


def test_show_gives_no_p99_of_thirty_round_trips(tmp_path):
    store = Store(tmp_path / "r.db")
    cid = _sockperf(store, round_trips=30)
    out = _show(store, cid)
    assert "latency_p99_s (" not in out
    assert "latency_p99_s not shown: p99 needs >= 100 round trips (had 30); latency_p90_s shown instead" in out
    assert "latency_p90_s (s)" in out  # the stand-in, though show's default metrics do not name it
    wide = _show(store, cid, wide=True)
    assert "latency_p99_s (" not in wide and "p99 needs >= 100 round trips (had 30)" in wide
    got = {r["metric"]: r for r in report.as_json(store, cid)["rows"]}
    assert "latency_p99_s" not in got
    assert got["latency_p90_s"]["instead_of"] == {"latency_p99_s": "p99 needs >= 100 round trips (had 30)"}


def test_enough_round_trips_carry_the_workloads_p99(tmp_path):
    store = Store(tmp_path / "r.db")
    cid = _sockperf(store, round_trips=100)
    out = _show(store, cid)
    assert "latency_p99_s (s)" in out and "needs >=" not in out
    assert "latency_p99_s" in {r["metric"] for r in report.as_json(store, cid)["rows"]}


def test_compare_leaves_out_a_p99_of_thirty_round_trips(tmp_path):
    store = Store(tmp_path / "r.db")
    a, b = _sockperf(store, 30, "a"), _sockperf(store, 30, "b", p99=5e-3)  # B's p99 ten times A's
    sides = [compare.Side(store, store.campaign(c)) for c in (a, b)]
    rows = compare.compare(*sides)
    assert {r.metric for r in rows} == {"latency_p50_s"}
    assert compare.uncarried(sides) == [f"latency_p99_s not compared: p99 needs >= 100 round trips (had 30) in {s}"
                                        for s in "AB"]
    many = [compare.Side(store, store.campaign(c)) for c in (_sockperf(store, 100, "c"), _sockperf(store, 100, "d"))]
    assert "latency_p99_s" in {r.metric for r in compare.compare(*many)} and not compare.uncarried(many)


def test_trend_gives_cpu_per_gbit_as_a_ratio_of_sums(tmp_path):
    from vnetbench.report import trend
    store = Store(tmp_path / "r.db")
    for name, work in (("even", ((1.0, 1.0),) * 4), ("slow", SLOW)):
        store.set_campaign(_campaign(store, work=work, name=name), status="done", finished=1.0)
    (s,) = [s for s in trend.history([store]) if s.metric == "cpu_s_per_gbit"]
    total = sum(c for c, _ in SLOW) / sum(g for _, g in SLOW)
    assert [p.mean for p in s.points] == pytest.approx([1.0, total])  # not the mean of ratios' 250.75
    point = trend.as_json([s])[0]["points"][1]
    assert point["mean"] == pytest.approx(total) and point["mean_is"] == "ratio of sums"


def test_s4_gives_cpu_per_gbit_as_a_ratio_of_sums():
    from vnetbench.report.analyses import s4
    from vnetbench.results.dataset import Trial
    s4_ = s4.S4()
    s4_.cpus, s4_.base_mtu = 2, "1500"
    s4_.by = {("VXLAN", s4.SINGLE, "1500"): [
        Trial(i, 1, i, "iperf3", {}, {}, {}, {}, samples=[
            {"metric": "cpu_s_per_gbit", "value": c / g, "metadata": {"scope": "machine", "cpu_s": c, "gbit": g}}])
        for i, (c, g) in enumerate(SLOW, 1)]}
    total = sum(c for c, _ in SLOW) / sum(g for _, g in SLOW)
    assert s4_._cpu_per_gbit("VXLAN") == pytest.approx(total)  # not the median of the runs' 1.0
    assert sorted(s4_._cpu_per_gbit_runs("VXLAN")) == pytest.approx(sorted(c / g for c, g in SLOW))


def test_packet_rates_give_cpu_per_frame_as_a_ratio_of_sums(tmp_path):
    from vnetbench.report import packet_rates
    store = Store(tmp_path / "r.db")
    cid = store.new_campaign("n", "test", "name: n\n", "0" * 64, {})
    store.put_scenario(cid, 1, "s", LABELS, LABELS, "done", None, {}, [])
    for rep, (cpu_s, mpackets) in enumerate(((1.0, 1.0), (1.0, 1.0), (1.0, 0.001)), 1):
        store.save_trial(cid, 1, rep, 0, "ndrpdr", {}, "ok", None, 0, 1, [
            Sample.of("ndr_pps", 1e6, frame="64"),
            Sample.of("ndr_cpu_s_per_mpacket", cpu_s / mpackets, frame="64", cpu_s=cpu_s, mpackets=mpackets)])
    bits = packet_rates.rates_tables(dataset.load(store, cid))[1]
    assert bits.rows[0][-1] == f"{3.0 / 2.001:.3g} µs"  # not the median's 1 µs nor the mean's 334


def _report_blocks(store, cid, section: str) -> list:
    from vnetbench.report import document
    doc = document.build(store, cid)
    return [b for s in doc.sections if s.id == section for b in document._walk(s.blocks)]


def test_the_report_says_why_a_p99_is_missing_and_what_its_mean_of_cpu_per_gbit_is(tmp_path):
    from vnetbench.results import stats
    store = Store(tmp_path / "r.db")
    cid = _campaign(store, echoes=10, work=SLOW)
    store.set_campaign(cid, status="done", finished=2.0)
    (loaded,) = [b for b in _report_blocks(store, cid, "latency") if hasattr(b, "columns")]
    assert "rtt_loaded_s p99 not shown: p99 needs >= 100 echoes (had 10)" in loaded.note
    blocks = _report_blocks(store, cid, "statistics")
    (cpu,) = [b for b in blocks if hasattr(b, "columns") and b.title.startswith("cpu_s_per_gbit ")]
    assert "ratio of sums" in cpu.columns and "mean" not in cpu.columns and "95% CI ratio of sums" in cpu.columns
    assert "ratio of sums (the column 'ratio of sums') = the trials' CPU seconds / their Gbit" in cpu.note
    note = next(b.text for b in blocks if hasattr(b, "text") and "Student's t" in b.text)
    assert stats.t_note(4) in note  # four trials a row: what their t intervals cover on a busy machine


def test_s4_gives_no_p99_of_thirty_round_trips(monkeypatch):
    """S4's interface table: sockperf's own p99 over 30 round trips a run is left out (—), and the note says why;
    over 100 it is the table's."""
    from test_offered_verdicts import dataset as in_memory
    from vnetbench.report.analyses import s4

    def table(round_trips: int) -> list:
        labels = {"attach": "host", "encryption": "none", "switch": "linuxbridge", "overlay": "none", "mtu": "1500",
                  "encryption_scope": "host-to-host", "measure": "rr"}
        trials = [(labels, {}, "sockperf", {"type": "sockperf", "protocol": "tcp"},
                   [Sample.of(m, v, pair=1, observations=round_trips)
                    for m, v in (("latency_min_s", 5e-5), ("latency_p50_s", 1e-4), ("latency_p90_s", 2e-4),
                                 ("latency_p99_s", 9e-4), ("latency_max_s", 2e-3))], []) for _ in range(3)]
        data = in_memory(trials)
        monkeypatch.setattr(s4, "load", lambda store, cid: data)
        t = s4.S4().run(None, 1).tables[0]
        return [dict(zip(t.columns, row)) for row in t.rows], t.note
    rows, note = table(30)
    assert rows[0]["p99"] == s4.DASH and rows[0]["p90"] != s4.DASH
    assert "p99 needs >= 100 round trips (had 30)" in note
    rows, note = table(100)
    assert rows[0]["p99"] != s4.DASH and "round trips (had" not in note


def test_s4_reads_netperf_tcp_rr_as_request_response_and_names_it(monkeypatch):
    """The card's request/response cells run the study's netperf TCP_RR: S4's interface table reads them as its
    latency columns (a netperf stream test is no latency), and its note names the tool that ran."""
    from test_offered_verdicts import dataset as in_memory
    from vnetbench.report.analyses import s4

    labels = {"attach": "host", "encryption": "none", "switch": "linuxbridge", "overlay": "none", "mtu": "1500",
              "encryption_scope": "host-to-host", "measure": "rr"}
    rr = [(labels, {}, "netperf", {"type": "netperf", "test": "TCP_RR", "message_size": 1},
           [Sample.of(m, v, pair=1, observations=5000)
            for m, v in (("latency_min_s", 5e-5), ("latency_p50_s", 1e-4), ("latency_p90_s", 2e-4),
                         ("latency_p99_s", 9e-4), ("latency_max_s", 2e-3))], []) for _ in range(3)]
    stream = [({**labels, "measure": "tcp1"}, {}, "netperf", {"type": "netperf", "test": "TCP_STREAM"},
               [Sample.of("latency_p50_s", 7.0, pair=1)], [])]
    data = in_memory(rr + stream)
    monkeypatch.setattr(s4, "load", lambda store, cid: data)
    t = s4.S4().run(None, 1).tables[0]
    row = dict(zip(t.columns, t.rows[0]))
    assert row["p50"] == s4.human(1e-4, "s") and row["runs"].startswith("3")
    assert "netperf TCP_RR round trips" in t.note and "sockperf" not in t.note
