"""The report opens with the answer: each scenario's main metric against its baseline (the first level of the first
factor that varies), one Holm family, the interval printed beside its verdict; what went wrong follows, folded."""
from vnetbench.core.sample import Sample
from vnetbench.report import answer, document
from vnetbench.report.analyses.base import FigureData, TableData
from vnetbench.results.store import Store


def _campaign(path, skipped: bool = True) -> tuple[Store, int]:
    store = Store(path)
    cid = store.new_campaign("q", "q.yaml", "name: q\nworkloads: [{type: iperf3}]\n", "sha", {})
    for idx, (overlay, proto, gbit) in enumerate([("none", "tcp", 9.0), ("vxlan", "tcp", 7.5), ("none", "udp", 0.5),
                                                 ("vxlan", "udp", 0.5)], 1):
        labels = {"overlay": overlay, "protocol": proto}
        store.put_scenario(cid, idx, str(labels), labels, labels, "done", None, {"overlay": overlay}, [])
        for rep in range(1, 7):
            value = gbit * 1e9 * (1 + 0.01 * ((rep * 7 + idx) % 5 - 2))
            store.save_trial(cid, idx, rep, 0, "iperf3", {}, "ok", None, 0.0, 1.0,
                             [Sample("throughput_bps", value, "bit/s"), Sample("interrupts_per_s", 3e4, "1/s")])
    if skipped:
        labels = {"overlay": "gre", "protocol": "tcp"}
        store.put_scenario(cid, 5, str(labels), labels, labels, "skipped", "no gre here", {}, [])
    return store, cid


def test_the_answer_is_each_scenarios_main_metric_against_its_baseline(tmp_path):
    store, cid = _campaign(tmp_path / "r.db")
    d = document.load(store, cid)
    assert answer.main_metric(d.rows, d.trials) == "throughput_bps"
    t = answer.table(d.rows, d.scenarios, d.cols, "throughput_bps")
    by = {(r[0], r[1]): r for r in t.rows}
    assert t.columns[:2] == ["overlay", "protocol"] and "vs overlay none" in t.columns
    assert by[("none", "tcp")][-2] == "baseline" and by[("none", "udp")][-2] == "baseline"
    tcp, udp = by[("vxlan", "tcp")], by[("vxlan", "udp")]
    assert tcp[-2].startswith("0.83x [") and tcp[-1].startswith("worse"), tcp  # 7.5 / 9.0, 6 trials each side
    assert udp[-2].startswith("1.00x") and udp[-1].startswith("not significant"), udp
    assert "Holm" in t.note


def test_the_report_opens_with_the_answer_and_folds_what_went_wrong(tmp_path):
    store, cid = _campaign(tmp_path / "r.db")
    doc = document.build(store, cid)
    ids = [s.id for s in doc.sections]
    assert ids[:2] == ["campaign", "answer"], ids
    blocks = doc.sections[1].blocks
    assert any(isinstance(b, FigureData) for b in blocks) and any(isinstance(b, TableData) for b in blocks)
    problems = next(s for s in doc.sections if s.id == "problems")
    assert len(problems.blocks) == 1 and isinstance(problems.blocks[0], document.Fold)  # skipped: one line to open
