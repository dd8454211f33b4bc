"""`vnetbench report A B [C]`: campaigns of one experiment side by side — each campaign's numbers as its own report
prints them, one series per campaign in each figure, the scenario not in every campaign listed, what changed beside
a scenario said, and bad input one line, exit 2."""
from __future__ import annotations

import html
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from vnetbench.cli import app
from vnetbench.core.sample import Sample
from vnetbench.report import document, overlay, render
from vnetbench.report import tables as report
from vnetbench.report.analyses.base import TableData
from vnetbench.results.store import Store

IMPL = {"switch": "linux-bridge", "overlay": "flat", "encryption": "none", "attach": "veth"}
SPEC = "name: ovl\nrepetitions: 4\nfactors:\n  switch: [linuxbridge, ovs]\n  overlay: [none, vxlan]\n"


def campaign(store: Store, kernel: str, levels: dict[tuple[str, str], float], seed: int,
             ovs_impl: str = "ovs-kernel") -> int:
    """One campaign: per scenario (switch, overlay) 4 iperf3 trials around its level and 4 ping trials of 12 echoes."""
    rng = np.random.default_rng(seed)
    cid = store.new_campaign("ovl", "ovl.yaml", SPEC, "ab" * 32,
                             {"hostname": "h", "kernel": kernel, "tools": {"iperf3": "3.12"}, "cpu_count": 2})
    for idx, ((switch, over), level) in enumerate(levels.items(), 1):
        lv = {"switch": switch, "overlay": over}
        store.put_scenario(cid, idx, f"switch={switch}, overlay={over}", lv, lv, "done", None,
                           IMPL | {"switch": ovs_impl if switch == "ovs" else "linux-bridge"}, [])
        for rep in range(1, 5):
            tput = float(rng.normal(level, 0.03 * level))
            store.save_trial(cid, idx, rep, 0, "iperf3", {"type": "iperf3"}, "ok", None, 10.0 * rep, 10.0 * rep + 3,
                             [Sample.of("throughput_bps", tput, pair=1, direction="forward"),
                              Sample.of("cpu_busy_ratio", float(rng.uniform(0.3, 0.6)), scope="machine")])
            base = 40e-6 * 2e9 / level
            store.save_trial(cid, idx, rep, 1, "ping", {"type": "ping"}, "ok", None, 10.0 * rep + 4, 10.0 * rep + 5,
                             [Sample.of("rtt_s", float(base * rng.uniform(0.9, 1.3)), t=0.05 * k, pair=1, icmp_seq=k)
                              for k in range(12)])
    store.set_campaign(cid, status="done", finished=store.campaign(cid).created + 60)
    return cid


BASE = {("linuxbridge", "none"): 9e9, ("linuxbridge", "vxlan"): 6e9, ("ovs", "none"): 8e9, ("ovs", "vxlan"): 5e9}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Campaign 1 and 2 run the four scenarios (2 on a newer kernel, OVS's datapath in userspace); campaign 3 only
    three of them (ovs/vxlan failed to build); campaign 4 is another experiment altogether."""
    db = tmp_path_factory.mktemp("overlay") / "o.db"
    store = Store(db)
    campaign(store, "6.1.0", BASE, 1)
    campaign(store, "6.12.0", {k: v * 1.1 for k, v in BASE.items()}, 2, ovs_impl="ovs-dpdk")
    three = {k: v for k, v in BASE.items() if k != ("ovs", "vxlan")}
    cid = campaign(store, "6.12.0", three, 3, ovs_impl="ovs-dpdk")
    store.put_scenario(cid, 4, "switch=ovs, overlay=vxlan", {"switch": "ovs", "overlay": "vxlan"},
                       {"switch": "ovs", "overlay": "vxlan"}, "failed", "vxlan port refused (test)", IMPL, [])
    campaign(store, "6.12.0", {("macvlan", "gre"): 3e9}, 4)
    store.close()
    return db


def invoke(*args):
    return CliRunner().invoke(app, ["report", *map(str, args)])


def table_rows(t: TableData) -> dict[str, list[str]]:
    return {r[0]: r for r in t.rows}


def test_the_overlay_numbers_are_each_campaigns_own_report_numbers(lab):
    store = Store(lab, readonly=True)
    doc = overlay.build(store, [1, 2, 3])
    assert [s.id for s in doc.sections][:3] == ["campaigns", "answer", "only-some"]
    answer = next(s for s in doc.sections if s.id == "answer")
    fig, tab = answer.blocks[1], answer.blocks[2]
    assert fig.name == "overlay-throughput_bps" and "throughput_bps" in tab.title
    got = table_rows(tab)
    assert set(got) == {"linuxbridge · none", "linuxbridge · vxlan", "ovs · none †", "ovs · vxlan †"}, got
    for cid, j in ((1, 0), (2, 1), (3, 2)):
        own = document.load(store, cid)
        for r in own.rows:
            if r.metric != "throughput_bps" or r.tag:
                continue
            lv = own.scenarios[r.scenario]["labels"]
            cells = report.stat_cells(r.summary, r.unit)
            mine = got[f"{lv['switch']} · {lv['overlay']}" + (" †" if lv["switch"] == "ovs" else "")]
            assert mine[1 + 3 * j: 4 + 3 * j] == [cells[0], cells[3], cells[8]], (cid, mine, cells)
            # and the same text as the campaign's own report's metric table prints
            own_table = document.metric_table("throughput_bps", [x for x in own.rows if x.name == "throughput_bps"])
            (row,) = [x for x in own_table.rows if x[0] == r.label]
            assert row[2:3] == [cells[0]] and row[2 + 3] == cells[3] and row[2 + 8] == cells[8]
    absent = got["ovs · vxlan †"]
    assert absent[7:10] == ["-", "not run", "-"]           # campaign 3 did not run it: said, not a zero
    assert "campaign 2: implementation switch: ovs-kernel -> ovs-dpdk" in absent[-1]
    assert got["linuxbridge · none"][-1] == "-"           # its implementation did not change
    head = next(s for s in doc.sections if s.id == "campaigns")
    assert any("campaign 2: kernel: 6.1.0 -> 6.12.0" in b.text for b in head.blocks if isinstance(b, document.Para))


def test_each_figure_has_one_series_per_campaign(lab):
    doc = overlay.build(Store(lab, readonly=True), [1, 2, 3])
    means = [f for f in doc.figures() if f.name.startswith("overlay-") and "cdf" not in f.name]
    assert {f.name for f in means} >= {"overlay-throughput_bps", "overlay-cpu_busy_ratio", "overlay-rtt_s"}
    for f in means:
        ax = f.figure.axes[0]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["campaign 1", "campaign 2", "campaign 3"]
        bars = [c for c in ax.containers if type(c).__name__ == "BarContainer"]
        assert [len(c.patches) for c in bars] == [4, 4, 3]  # one bar series per campaign; 3 lacks ovs/vxlan
    twice = [f for f in doc.figures() if f.name == "overlay-throughput_bps"]
    assert len(twice) == 1  # the answer's metric is not shown again under "every metric"
    store = Store(lab, readonly=True)
    tput = next(f for f in means if f.name == "overlay-throughput_bps").figure.axes[0]
    for j, cid in enumerate((1, 2, 3)):  # each bar is its campaign's own mean, in Gbit/s
        own = sorted((r.scenario, r.summary.mean) for r in document.load(store, cid).rows
                     if r.metric == "throughput_bps" and not r.tag)
        got = [p.get_width() for p in [c for c in tput.containers if type(c).__name__ == "BarContainer"][j].patches]
        assert got == pytest.approx([m / 1e9 for _, m in own], rel=1e-9)
    cdf = next(f for f in doc.figures() if f.name == "overlay-cdf-rtt_s")
    labels = [t.get_text() for t in cdf.figure.axes[0].get_legend().get_texts()]
    assert len(labels) == 4 + 4 + 3 and labels[0] == "campaign 1 · linuxbridge · none"
    colours = {lab_: ln.get_color() for lab_, ln in zip(labels, cdf.figure.axes[0].get_lines())}
    assert len({c for lab_, c in colours.items() if lab_.startswith("campaign 2")}) == 1  # a campaign: one colour
    assert len(set(colours.values())) == 3


def test_the_scenario_not_in_every_campaign_is_listed(lab):
    doc = overlay.build(Store(lab, readonly=True), [1, 2, 3])
    only = next(s for s in doc.sections if s.id == "only-some")
    (items,) = [b.items for b in only.blocks]
    assert items == ["switch=ovs, overlay=vxlan: ran in campaign 1, campaign 2 only; campaign 3: failed "
                     "(vxlan port refused (test))"], items


def test_html_and_markdown_with_figure_files(lab, tmp_path):
    out = tmp_path / "o.html"
    got = invoke(1, 2, 3, "--db", lab, "-o", out)
    assert got.exit_code == 0, got.output
    text = out.read_text()
    assert "campaigns 1, 2, 3 side by side" in html.unescape(text)
    assert len(re.findall(r'<img src="data:image/png;base64,', text)) >= 4  # each figure once
    md = tmp_path / "o.md"
    got = invoke(1, 2, "--db", lab, "-o", md, "--figures", tmp_path / "figs")
    assert got.exit_code == 0, got.output
    body = md.read_text()
    assert "| linuxbridge · none |" in body and "![throughput_bps" in body
    assert (tmp_path / "figs" / "overlay-throughput_bps.png").stat().st_size > 5000
    assert (tmp_path / "figs" / "overlay-cdf-rtt_s.png").exists()


@pytest.mark.parametrize("args, line", [
    ((1, 9), "no campaign '9'"),
    ((1, 2, 1), "campaign 1 is named twice (1 and 1)"),
    ((4, "last"), "campaign 4 is named twice (4 and last)"),
    ((1, 4), "campaigns 1, 4 have no scenario in common"),
])
def test_bad_input_is_one_line_exit_2(lab, tmp_path, args, line):
    got = invoke(*args, "--db", lab, "-o", tmp_path / "x.html")
    assert got.exit_code == 2, got.output
    assert line in got.output and "Traceback" not in got.output
    assert not (tmp_path / "x.html").exists()


def test_one_id_is_the_single_report_unchanged(lab, tmp_path):
    got = invoke(2, "--db", lab, "-o", tmp_path / "one.md")
    assert got.exit_code == 0, got.output
    expected = render.to_markdown(document.build(Store(lab, readonly=True), 2))
    assert (tmp_path / "one.md").read_text() == expected
    assert "side by side" not in expected
