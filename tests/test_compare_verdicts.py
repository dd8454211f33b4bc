"""compare's verdict logic on hand-built results: raw CPU is not judged, --gate, the words,
and a verdict built on trials whose load was not offered says so."""
from vnetbench.report import compare as cmp
from vnetbench.core.sample import Sample
from vnetbench.results.store import Store


def _store(tmp_path, flags_b=(), reps=5):
    store = Store(tmp_path / "c.db")
    cid = store.new_campaign("c", "test", "name: c\n", "0" * 64, {})
    # B: the faster datapath, twice the goodput for 1.6x the CPU: more CPU, less per Gbit/s
    for idx, overlay, gbit, cpu in ((1, "none", 2.0, 0.40), (2, "fast", 4.0, 0.64)):
        labels = {"overlay": overlay}
        store.put_scenario(cid, idx, overlay, labels, labels, "done", None, {}, [])
        for rep, f in enumerate((0.98, 1.0, 1.02, 0.99, 1.01)[:reps], 1):
            meta = {"flags": list(flags_b)} if idx == 2 and rep <= 2 else {}
            store.save_trial(cid, idx, rep, 0, "iperf3", {"type": "iperf3"}, "ok", None, 0.0, 1.0,
                             [Sample.of("throughput_bps", gbit * 1e9 * f, pair=1, direction="forward"),
                              Sample.of("cpu_busy_ratio", cpu * (2 - f), scope="machine")], meta)
    camp = store.campaign(cid)
    return cmp.Side(store, camp, {"overlay": "none"}), cmp.Side(store, camp, {"overlay": "fast"})


def test_more_cpu_for_more_traffic_is_not_a_regression(tmp_path):
    """Raw CPU has no better direction: it is not judged (cpu_s_per_gbit is: tests/test_profile.py)."""
    a, b = _store(tmp_path)
    rows = {r.metric: r for r in cmp.compare(a, b, ["throughput_bps", "cpu_busy_ratio"], threshold=0.05)}
    assert "cpu_busy_ratio" not in rows
    assert rows["throughput_bps"].verdict == "better" and not any(r.regression for r in rows.values())


def test_gate_chooses_what_can_fail(tmp_path):
    a, b = _store(tmp_path)
    # B against A reversed: the slower datapath is worse in throughput; only the gated metric fails the gate
    rows = cmp.compare(b, a, ["throughput_bps"], threshold=0.05, gate=["rtt_s"])
    tput = next(r for r in rows if r.metric == "throughput_bps")
    assert tput.verdict == "worse" and not tput.gated and not tput.regression
    gated = cmp.compare(b, a, ["throughput_bps"], threshold=0.05, gate=["throughput_bps"])
    assert gated[0].gated and gated[0].regression


def test_a_verdict_on_load_not_offered_says_so(tmp_path):
    a, b = _store(tmp_path, flags_b=["offered 14.6 of 100 Mbit/s (pair 1): the sender did not reach its rate"])
    rows = cmp.compare(a, b, ["throughput_bps"])
    assert rows[0].not_offered == "A 0/5, B 2/5"
    from rich.console import Console
    console = Console(width=250, record=True)
    console.print(cmp.table(a, b, rows, 0.05, None, 250))
    assert "load not offered in A 0/5, B 2/5 trials" in console.export_text()


def test_the_table_fits_100_columns_with_each_scenario_heading_its_rows(tmp_path):
    """At 100 columns a scenario column left the metric and the verdict a few letters wide, folded letter by letter:
    the scenario now heads its rows, and the words stay whole."""
    store = Store(tmp_path / "w.db")
    cid = store.new_campaign("w", "test", "name: w\n", "0" * 64, {})
    idx = 0
    for placement in ("same-host", "cross-host"):
        for overlay in ("none", "vxlan"):
            idx += 1
            labels = {"placement": placement, "protocol": "tcp", "overlay": overlay}
            store.put_scenario(cid, idx, f"{placement} {overlay}", labels, labels, "done", None, {}, [])
            for rep, f in enumerate((0.9, 1.1, 1.0, 0.95, 1.05, 1.02), 1):
                store.save_trial(cid, idx, rep, 0, "iperf3", {"type": "iperf3"}, "ok", None, 0.0, 1.0,
                                 [Sample.of("context_switches_per_s", 5e4 * f, scope="machine"),
                                  Sample.of("throughput_bps", 5e9 * f, pair=1, direction="forward")], {})
    camp = store.campaign(cid)
    a, b = cmp.Side(store, camp, {"overlay": "none"}), cmp.Side(store, camp, {"overlay": "vxlan"})
    rows = cmp.compare(a, b)
    from rich.console import Console
    console = Console(width=100, record=True)
    console.print(cmp.table(a, b, rows, 0.05, None))
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert max(map(len, lines)) <= 100
    assert "placement=same-host" in lines and "placement=cross-host" in lines  # a heading line each
    assert sum("not significant (±" in line for line in lines) == len(rows) == 4
    assert any(line.strip().startswith("context_switches_per_s") for line in lines)


def test_the_table_is_never_cropped_at_100_or_80_columns(tmp_path):
    """A metric with long means (cpu_s_per_gbit's '0.3087 s/Gbit') made the table 103 wide at 100 columns:
    rich cropped every verdict to 'not significa' and dropped words of the header ('Holm-correct', '(±x '); at 80
    the verdict column was gone."""
    store = Store(tmp_path / "l.db")
    cid = store.new_campaign("l", "test", "name: l\n", "0" * 64, {})
    for idx, overlay in ((1, "none"), (2, "vxlan")):
        labels = {"overlay": overlay}
        store.put_scenario(cid, idx, overlay, labels, labels, "done", None, {}, [])
        for rep, f in enumerate((0.5, 1.6, 0.9, 1.3, 0.7, 1.1), 1):
            store.save_trial(cid, idx, rep, 0, "iperf3", {"type": "iperf3"}, "ok", None, 0.0, 1.0,
                             [Sample.of("context_switches_per_s", 1.14e5 * f, scope="machine"),
                              Sample.of("throughput_bps", 8.99e9 / f, pair=1, direction="forward"),
                              Sample.of("cpu_s_per_gbit", 0.3087 * f, scope="machine")], {})
    camp = store.campaign(cid)
    a, b = cmp.Side(store, camp, {"overlay": "none"}), cmp.Side(store, camp, {"overlay": "vxlan"})
    rows = cmp.compare(a, b)
    assert any(r.metric == "cpu_s_per_gbit" for r in rows)
    from rich.console import Console
    for width in (100, 80):
        console = Console(width=width, record=True)
        console.print(cmp.table(a, b, rows, 0.05, None, width))
        lines = [line.rstrip() for line in console.export_text().splitlines()]
        assert max(map(len, lines)) <= width
        words = " ".join(lines).split()
        assert "Holm-corrected" in words and "(±x" in words, width
        body = lines[next(i for i, line in enumerate(lines) if line.startswith("──")) + 1:]
        verdicts = sum(line.count("not significant") + line.count("worse") + line.count("better") for line in body)
        assert verdicts == len(rows), (width, "\n".join(lines))


def test_two_results_files_are_named_in_the_header(tmp_path):
    """`compare 1 1 --db X --b-db Y` headed its table 'A: campaign 1 (c)' and 'B: campaign 1 (c)'."""
    for d in "xyz":
        (tmp_path / d).mkdir()
    a, _ = _store(tmp_path / "x")
    b, _ = _store(tmp_path / "y")
    lines = cmp.header(a, b, [], 0.05, None)
    assert lines[0] == f"A: campaign 1 (c) in {tmp_path / 'x' / 'c.db'} where overlay=none", lines[0]
    assert lines[1].startswith("B: campaign 1 (c) in ") and str(tmp_path / "y" / "c.db") in lines[1]
    one, other = _store(tmp_path / "z")
    assert cmp.header(one, other, [], 0.05, None)[:2] == ["A: campaign 1 (c) where overlay=none",
                                                          "B: campaign 1 (c) where overlay=fast"]


def test_the_header_names_the_holm_family_it_corrected_over(tmp_path):
    """Holm's family is the rows with a test: at 3 + 3 trials none, and the header names no correction over rows
    that were never tested (it said 'Holm-corrected over the 9 comparisons' and 'alpha / 0')."""
    a, b = _store(tmp_path)
    rows = cmp.compare(a, b, ["throughput_bps", "cpu_s_per_gbit", "rtt_s"])
    tested = " ".join(cmp.header(a, b, rows, 0.05, None))
    assert f"Holm-corrected over the {cmp.family_size(rows)} tested comparison" in tested and "alpha / 0" not in tested
    (tmp_path / "3").mkdir()
    few = cmp.compare(*_store(tmp_path / "3", reps=3), ["throughput_bps", "cpu_s_per_gbit", "rtt_s"])
    assert few and cmp.family_size(few) == 0
    text = " ".join(cmp.header(a, b, few, 0.05, None))
    assert "alpha / 0" not in text and "Holm-corrected" not in text and "no row has trials enough for a test" in text
