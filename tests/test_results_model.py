"""The results model: what the reader sees is what was measured. Results files built by hand through the store API
(known samples), read back through show, compare, report and export."""
import csv
import io
import json
import os
import re

import pytest

from conftest import vnetbench
from vnetbench.results import dataset
from vnetbench.report import document, tables as report
from vnetbench.core.sample import Sample
from vnetbench.results.store import Store

W = [1e9, 1e9 + 10]  # a measurement window (absolute UNIX times)


def new(path, name="m", spec="name: m\nworkloads: [{type: iperf3}]\n", scenarios=1):
    store = Store(path)
    cid = store.new_campaign(name, "m.yaml", spec, "ab" * 32, {})
    for idx in range(1, scenarios + 1):
        labels = {"switch": "linuxbridge", "overlay": f"o{idx}"}
        store.put_scenario(cid, idx, f"s{idx}", labels, labels, "done", None, {"switch": "linux-bridge"}, [])
    return store, cid


def s5_campaign(path):
    """A host's CPU 0.80 beside two guest VMs' 0.10 and 0.20 (and interrupts 9000, 100, 300), four trials."""
    store, cid = new(path, "s5", "name: s5\nworkloads: [{type: http}]\n")
    for rep in range(1, 5):
        e = 0.01 * rep
        store.save_trial(cid, 1, rep, 0, "http", {"clients": 6, "rate": 10}, "ok", None, 0, 1, [
            Sample.of("cpu_busy_ratio", 0.80 + e, scope="machine"),
            Sample.of("cpu_busy_ratio", 0.10 + e, scope="vm", vm="h2v1"),
            Sample.of("cpu_busy_ratio", 0.20 + e, scope="vm", vm="h2v2"),
            Sample.of("interrupts_per_s", 9000 + rep, scope="machine"),
            Sample.of("interrupts_per_s", 100 + rep, scope="vm", vm="h2v1"),
            Sample.of("interrupts_per_s", 300 + rep, scope="vm", vm="h2v2")])
    store.close()


def bidir_campaign(path, noisy_reps=()):
    """One pair, iperf3 --bidir: 5.95 Gbit/s forward and 6.04 reverse; retransmits 285 and 1086; a loaded ping."""
    store, cid = new(path, "bidir")
    for rep in range(1, 5):
        d = 1e7 * rep
        rtts = [1e-3 * (k + 1) for k in range(100)]  # 1 .. 100 ms: median 50.5 ms, p99 99.01 ms, max 100 ms
        meta = {"noisy": ["CPU steal 9.0% of the window (> 5%)"]} if rep in noisy_reps else {}
        store.save_trial(cid, 1, rep, 0, "iperf3", {"protocol": "tcp", "streams": 10, "direction": "bidir"}, "ok",
                         None, 0, 1, [
                             Sample.of("throughput_bps", 5.95e9 + d, pair=1, direction="forward", window=W),
                             Sample.of("throughput_bps", 6.04e9 + d, pair=1, direction="reverse", window=W),
                             Sample.of("aggregate_throughput_bps", 5.95e9 + d, pair="all", direction="forward"),
                             Sample.of("aggregate_throughput_bps", 6.04e9 + d, pair="all", direction="reverse"),
                             Sample.of("tcp_retransmits", 285 + rep, pair=1, direction="forward"),
                             Sample.of("tcp_retransmits", 1086 + rep, pair=1, direction="reverse"),
                             *[Sample.of("rtt_loaded_s", v + 1e-4 * rep, t=1e9 + k * 0.1, pair=1, window=W)
                               for k, v in enumerate(rtts)]], meta)
    store.save_trial(cid, 1, 5, 0, "iperf3", {"protocol": "tcp", "streams": 10, "direction": "bidir"}, "invalid",
                     "receiver got more than the link carries", 0, 1,
                     [Sample.of("throughput_bps", 11.9e9, pair=1, direction="forward")], {})
    store.close()


def rows_of(out: str, title: str) -> list[str]:
    """The lines of the compact table titled `title` (one scenario: each line starts with its switch)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title + " ("))
    got = []
    for line in lines[start + 2:]:
        if not line.startswith("linuxbridge"):
            break
        got.append(line)
    return got


def test_s5_show_lists_the_host_and_each_vm_apart(tmp_path):
    db = tmp_path / "s5.db"
    s5_campaign(db)
    out = vnetbench("show", "--db", db, "--all").stdout
    cpu = rows_of(out, "cpu_busy_ratio")
    assert len(cpu) == 3, out
    assert any("[machine]" in line and "82.5" in line for line in cpu), cpu    # 0.81..0.84: median 82.5 %
    assert any("[VM h2v1]" in line and "12.5" in line for line in cpu), cpu
    assert any("[VM h2v2]" in line and "22.5" in line for line in cpu), cpu
    assert "39" not in " ".join(cpu)                                           # never (0.8 + 0.1 + 0.2) / 3
    irq = rows_of(out, "interrupts_per_s")
    assert len(irq) == 3 and not any("3.1" in line for line in irq), irq       # never 3133/s


def test_bidirectional_shows_each_direction_and_their_sum(tmp_path):
    db = tmp_path / "b.db"
    bidir_campaign(db)
    data = dataset.load(Store(db, readonly=True), 1)
    got = {(k.metric, k.dims.direction): sorted(v.values()) for k, v in report.model(data).items() if not k.stat}
    assert got[("throughput_bps", "forward")][0] == pytest.approx(5.96e9)
    assert got[("throughput_bps", "reverse")][0] == pytest.approx(6.05e9)
    assert got[("throughput_bps", "both")][0] == pytest.approx(12.01e9)       # their sum, not their mean
    assert got[("tcp_retransmits", "forward")] == [286, 287, 288, 289]           # per direction, never 685.5
    assert got[("tcp_retransmits", "reverse")] == [1087, 1088, 1089, 1090]
    assert ("aggregate_throughput_bps", "forward") not in got                   # one pair: the same numbers
    out = vnetbench("show", "--db", db).stdout
    tput = rows_of(out, "throughput_bps")
    assert [re.search(r"\[([\w ]+)\]", line).group(1) for line in tput] == ["forward", "reverse", "both directions"]
    assert "5.9" in tput[0] and "6.0" in tput[1] and "12" in tput[2], tput
    assert "aggregate_throughput_bps" not in out
    assert len(rows_of(out, "tcp_retransmits")) == 3
    assert "workload" not in out.split("throughput_bps")[1].split("\n")[1] or "iperf3 tcp x10 bidir" in out


def test_workloads_are_named_for_what_they_are(tmp_path):
    store, cid = new(tmp_path / "n.db")
    for w, params, meta in ((0, {"protocol": "tcp", "streams": 10}, {}), (1, {"protocol": "udp", "udp_rate": 250_000_000}, {}),
                            (2, {"protocol": "tcp"}, {"workload_name": "bulk"}), (3, {"ping_size": 64}, {}),
                            (4, {"ping_size": 64}, {})):
        kind = "ping" if "ping_size" in params else "iperf3"
        store.save_trial(cid, 1, 1, w, kind, params, "ok", None, 0, 1, [Sample.of("rtt_s", 1e-3, pair=1)], meta)
    names = dataset.load(store, cid).names
    assert names == {(1, 0): "iperf3 tcp x10", (1, 1): "iperf3 udp 250M", (1, 2): "bulk", (1, 3): "ping 64 B #4",
                     (1, 4): "ping 64 B #5"}


def test_the_spec_name_reaches_the_workload():
    from vnetbench.experiment.matrix import expand
    from vnetbench.experiment.spec import loads
    exp = loads("name: n\nworkloads:\n  - {type: iperf3, streams: 10}\n  - {type: ping, name: idle rtt}\n").experiment
    sc = expand(exp, None)[0]
    assert [wl.name for wl in sc.workloads] == ["iperf3 tcp x10", "idle rtt"]


def test_a_workload_name_that_is_not_text_is_one_line(tmp_path):
    spec = tmp_path / "n.yaml"
    spec.write_text("name: n\nworkloads:\n  - {type: ping, name: [a]}\n")
    proc = vnetbench("plan", spec, check=False)
    assert proc.returncode == 2 and "workloads[0].name" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, \
        proc.stderr


def test_an_old_file_without_dimensions_still_loads(tmp_path):
    """Samples stored before Dims and workload names: defaults, one row per pair, named from the parameters."""
    store, cid = new(tmp_path / "o.db")
    for rep in (1, 2, 3):
        store.save_trial(cid, 1, rep, 0, "iperf3", {}, "ok", None, 0, 1,
                         [Sample("throughput_bps", 1e9 * rep, "bit/s", {"pair": 1}),
                          Sample("cpu_busy_ratio", 0.5, "ratio", {"scope": "machine"})])
    rows = {(r.name, r.tag, r.workload): r.summary.n for r in report.rows(store, cid)}
    assert rows == {("throughput_bps", "", "iperf3 tcp"): 3, ("cpu_busy_ratio", "", "iperf3 tcp"): 3}


def test_noisy_trials_reach_show_compare_and_report(tmp_path):
    db = tmp_path / "b.db"
    bidir_campaign(db, noisy_reps=(2, 4))
    out = vnetbench("show", "--db", db).stdout
    assert "2 of 4 trials were flagged noisy" in out
    line = rows_of(out, "throughput_bps")[0]
    assert re.search(r"\s4\s+2\s*$", line), line                               # n = 4, 2 of them noisy
    quiet = vnetbench("show", "--db", db, "--exclude-noisy").stdout
    assert re.search(r"\s2\s*$", rows_of(quiet, "throughput_bps")[0])           # n = 2
    js = json.loads(vnetbench("compare", "1", "1", "--db", db, "--format", "json", "--exclude-noisy").stdout)
    assert js["rows"] and all(r["a"]["n"] == 2 for r in js["rows"])
    assert js["noisy_trials"] == {"a": 2, "b": 2} and js["exclude_noisy"] is True
    assert "A 2, B 2" in vnetbench("compare", "1", "1", "--db", db).stdout
    html = tmp_path / "r.html"
    vnetbench("report", "1", "--db", db, "-o", html)
    text = html.read_text()
    assert "2 of 4 trials were flagged noisy" in text and "CPU steal 9.0% of the window" in text
    assert "noisy trials" in text
    vnetbench("report", "1", "--db", db, "-o", html, "--exclude-noisy")
    assert "left out of every table and figure" in html.read_text()


def test_export_csv_is_flat_typed_and_carries_status_and_flags(tmp_path):
    db = tmp_path / "b.db"
    bidir_campaign(db, noisy_reps=(2,))
    text = vnetbench("export", "1", "--db", db, "--format", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        for k, v in row.items():
            assert not v.startswith(("{", "[")), (k, v)                          # no JSON in a cell
    assert {"trial_status", "trial_error", "noisy", "noisy_reasons", "scope", "direction", "pair", "all_pairs",
            "workload", "factor_overlay"} <= set(rows[0])
    invalid = [r for r in rows if r["trial_status"] == "invalid"]
    assert len(invalid) == 1 and invalid[0]["value"] == "11900000000.0" and "more than" in invalid[0]["trial_error"]
    assert {r["noisy"] for r in rows if r["repetition"] == "2"} == {"True"}
    assert {r["pair"] for r in rows if r["metric"] == "aggregate_throughput_bps"} == {""}
    assert {r["all_pairs"] for r in rows if r["metric"] == "aggregate_throughput_bps"} == {"True"}
    assert {r["pair"] for r in rows if r["metric"] == "throughput_bps"} == {"1"}
    assert {r["workload"] for r in rows} == {"iperf3 tcp x10 bidir"}


def test_export_parquet_loads_in_pandas_with_numeric_dtypes(tmp_path):
    pd = pytest.importorskip("pandas")
    db = tmp_path / "b.db"
    bidir_campaign(db, noisy_reps=(2,))
    store = Store(db)
    labels = {"switch": "linuxbridge", "overlay": "o2", "pairs": "4"}
    store.put_scenario(1, 2, "s2", labels, labels, "done", None, {}, [])     # a numeric factor level
    store.save_trial(1, 2, 1, 0, "iperf3", {}, "ok", None, 0, 1, [Sample.of("throughput_bps", 1e9, pair=2)])
    store.close()
    out = tmp_path / "s.parquet"
    vnetbench("export", "1", "--db", db, "--format", "parquet", "-o", out)
    import pyarrow.parquet as pq
    schema = pq.read_schema(out)
    for col, typ in (("value", "double"), ("t", "double"), ("trial", "int64"), ("pair", "int64"),
                     ("factor_pairs", "int64"), ("factor_overlay", "string"), ("noisy", "bool"), ("trial_status", "string")):
        assert str(schema.field(col).type) == typ, (col, schema.field(col).type)   # one type per field
    df = pd.read_parquet(out)
    for col in ("value", "t", "window_start", "trial", "repetition", "scenario", "pair", "factor_pairs"):
        assert pd.api.types.is_numeric_dtype(df[col]), (col, df[col].dtype)
    assert df["noisy"].dtype == bool and df["all_pairs"].dtype == bool
    assert set(df["trial_status"]) == {"ok", "invalid"}
    assert df.loc[df["trial_status"] == "invalid", "value"].tolist() == [11.9e9]
    assert df.loc[df["noisy"], "noisy_reasons"].str.contains("CPU steal").all()
    assert df["noisy"].sum() == len(df[df["repetition"] == 2])
    # for notebooks: no column a DataFrame attribute hides (df.flags), a real timestamp, what the file holds
    assert "flags" not in df.columns and "trial_flags" in df.columns
    assert str(schema.field("timestamp").type) == "timestamp[us, tz=UTC]"
    assert pd.api.types.is_datetime64_any_dtype(df["timestamp"])
    about = {k.decode(): v.decode() for k, v in schema.metadata.items()}
    assert json.loads(about["vnetbench.campaign"])["id"] == 1 and about["vnetbench.spec_sha256"]
    assert "vnetbench.spec" in about and about["vnetbench.version"]
    # factor levels typed alike in `show --json` and the file: a numeric factor is a number in both
    js = json.loads(vnetbench("show", "--db", db, "--json").stdout)
    assert {s["levels"].get("pairs") for s in js["scenarios"]} - {None} == {4}  # "4" in the store
    assert all(isinstance(s["levels"]["overlay"], str) for s in js["scenarios"])


def test_loaded_latency_tail_in_show_and_report(tmp_path):
    db = tmp_path / "b.db"
    bidir_campaign(db)
    out = vnetbench("show", "--db", db).stdout
    p99 = rows_of(out, "rtt_loaded_s p99")
    assert len(p99) == 1 and "99." in p99[0], out                               # each trial's p99: 99.1..99.4 ms
    assert "50." in rows_of(out, "rtt_loaded_s")[0]                              # each trial's median
    every = vnetbench("show", "--db", db, "-m", "rtt_loaded_s").stdout
    assert "rtt_loaded_s p90" in every and "rtt_loaded_s max" in every
    d = document.load(Store(db, readonly=True), 1)
    latency = document.latency_under_load(d).blocks[0]
    assert latency.columns[-5:] == ["p50 [95% CI]", "p90 [95% CI]", "p99 [95% CI]", "max [95% CI]", "noisy trials"]
    assert "99.2" in latency.rows[0][-2 - 1] or "99." in latency.rows[0][-3]


def test_latency_cdf_plots_every_echo_even_of_one_trial(tmp_path):
    db = tmp_path / "b.db"
    bidir_campaign(db)
    d = document.load(Store(db, readonly=True), 1)
    fig = document.rtt_cdf(d, "rtt_loaded_s")
    (line,) = fig.figure.axes[0].get_lines()
    assert len(line.get_xdata()) == 4 * 100                                     # every echo of every trial
    store, cid = new(tmp_path / "one.db")
    store.save_trial(cid, 1, 1, 0, "ping", {}, "ok", None, 0, 1,
                     [Sample.of("rtt_s", 1e-3 * k, t=1e9 + k, pair=1) for k in range(1, 21)])
    fig = document.rtt_cdf(document.load(store, cid), "rtt_s")
    (line,) = fig.figure.axes[0].get_lines()
    assert len(line.get_xdata()) == 20                                          # one trial: a curve, not empty


def test_show_metric_typo_is_one_line_exit_2(tmp_path):
    db = tmp_path / "b.db"
    bidir_campaign(db)
    proc = vnetbench("show", "--db", db, "-m", "throughput", check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'throughput' is not a metric" in lines[0] and "throughput_bps" in lines[0]


def test_show_fits_the_terminal_or_100_columns(tmp_path):
    db = tmp_path / "b.db"
    bidir_campaign(db)
    store = Store(db)
    long = "a skipped scenario's long reason " * 6
    labels = {"switch": "ovs", "overlay": "o9"}
    store.put_scenario(1, 9, "s9", labels, labels, "skipped", long, {}, [])
    store.close()
    env = os.environ.copy()
    env.pop("COLUMNS", None)
    for extra_env, width, args in (({}, 100, ()), ({"COLUMNS": "100"}, 100, ("--all",)),
                                   ({"COLUMNS": "100"}, 100, ("--wide",)), ({"COLUMNS": "80"}, 80, ("--wide",))):
        out = vnetbench("show", "--db", db, *args, env=env | extra_env).stdout
        assert max(map(len, out.splitlines())) <= width, (args, extra_env, max(out.splitlines(), key=len))
        assert "long reason" in out
        if "--wide" in args:  # split into tables that fit, never cut or folded
            assert "95% CI median" in out and "IQR" in out and "…" not in out and "Gbit/s" in out


def test_show_json(tmp_path):
    db = tmp_path / "s5.db"
    s5_campaign(db)
    js = json.loads(vnetbench("show", "--db", db, "--json").stdout)
    cpu = {r["which"] or r["scope"]: r for r in js["rows"] if r["metric"] == "cpu_busy_ratio"}
    assert set(cpu) == {"machine", "h2v1", "h2v2"}
    assert cpu["h2v1"]["scope"] == "vm" and cpu["h2v1"]["n"] == 4 and cpu["h2v1"]["median"] == pytest.approx(0.125)
    assert [t["value"] for t in cpu["machine"]["trials"]] == pytest.approx([0.81, 0.82, 0.83, 0.84])
    assert js["n_counts"] == "trials" and js["scenarios"][0]["status"] == "done"


def test_a_log_axis_reads_without_exponents():
    """A throughput series from a stalled interval (kbit/s) to Gbit/s: a log axis in Gbit/s, ticks as plain numbers."""
    from vnetbench.report import figures
    fig = figures.time_series("s", "t", "bit/s", {"a": {1.0: [2e3], 2.0: [9e9], 3.0: [5e9]}}, "", "").figure
    figures.encode(fig, "png")
    ticks = [t.get_text() for t in fig.axes[0].yaxis.get_ticklabels()]
    assert ticks and not [t for t in ticks if re.search(r"\de[+-]?\d", t)], ticks


def test_interfaces_are_named_without_the_run_prefix():
    """Two campaigns' rows about the same interface match: the run's prefix (vb + 4 hex digits) is not a dimension."""
    from vnetbench.core.sample import dimensions
    a = dimensions({"interface": "vb12ab-u", "node": "vb12ab-h2"})
    b = dimensions({"interface": "vb9f00-u", "node": "vb9f00-h2"})
    assert a == b and a.scope == "interface" and a.which == "h2 u"


def test_a_load_not_offered_reaches_show_export_and_report(tmp_path):
    """A rate-bounded sender that fell short is flagged on its trial (guards.check_offered); the flag is counted on
    every row of that trial's numbers in `show`, named once with its reason, in each exported row, and listed in the
    report's warnings. The note that no ceiling was checked is said once, not counted as a flag."""
    from vnetbench.results.guards import NO_CEILING
    db = tmp_path / "f.db"
    store, cid = new(db, "flags")
    for rep in range(1, 5):
        flags = [NO_CEILING] + (["offered 14.6 of 100 Mbit/s (pair 1): the sender did not reach its rate"]
                                if rep in (1, 3) else [])
        store.save_trial(cid, 1, rep, 0, "iperf3", {"protocol": "udp"}, "ok", None, 0, 1,
                         [Sample.of("throughput_bps", 14e6 + rep, pair=1, direction="forward", window=W)],
                         {"flags": flags})
    store.close()
    out = vnetbench("show", "--db", db, "-m", "throughput_bps").stdout
    assert "2 of 4 trials flagged: offered 14.6 of 100 Mbit/s" in out, out
    assert f"4 of 4 trials: {NO_CEILING}" in out
    header = next(line for line in out.splitlines() if "median [95% CI]" in line and "flagged" in line)
    assert re.search(r"\s4\s+2\s*$", rows_of(out, "throughput_bps")[0]), (header, out)  # n = 4, 2 flagged
    js = json.loads(vnetbench("show", "--db", db, "-m", "throughput_bps", "--json").stdout)
    assert js["rows"][0]["flagged"] == 2
    rows = list(csv.DictReader(io.StringIO(vnetbench("export", "1", "--db", db, "--format", "csv").stdout)))
    assert {r["repetition"]: "offered 14.6" in r["trial_flags"] for r in rows} == {"1": True, "2": False, "3": True,
                                                                              "4": False}
    html = tmp_path / "r.html"
    vnetbench("report", "1", "--db", db, "-o", html)
    assert "2 of 4 trials carry a flag" in html.read_text()


def test_shortfalls_of_different_sizes_are_one_line_counting_every_flagged_trial(tmp_path):
    """Each trial's shortfall made a flag line of its own and the first three were shown: the demo printed
    "1 of 63 trials flagged: offered 385 of 500 Mbit/s (pair 1, direction forward)" three times for five flagged
    trials. Pairs and directions fold, the amounts become a range, and the count is every flagged trial."""
    db = tmp_path / "s.db"
    store, cid = new(db, "short")
    for rep, got in enumerate((385, 418, 381, 389, 427, None), 1):
        flags = [f"offered {got} of 500 Mbit/s (pair 1, direction forward): the sender did not reach its rate"] \
            if got else []
        store.save_trial(cid, 1, rep, 0, "iperf3", {"protocol": "udp"}, "ok", None, 0, 1,
                         [Sample.of("throughput_bps", 4e8 + rep, pair=1, direction="forward", window=W)],
                         {"flags": flags})
    store.close()
    out = " ".join(vnetbench("show", "--db", db, "-m", "throughput_bps").stdout.split())  # at any terminal width
    assert out.count("trials flagged:") == 1, out
    assert "5 of 6 trials flagged: offered 381 to 427 of 500 Mbit/s (the 'flagged' column counts them)" in out, out


def test_skipped_scenarios_with_one_reason_are_one_line(tmp_path):
    """The demo's summary ended with ten 'skipped scenario' lines of three rows each, four of them saying the same;
    scenarios skipped for one reason are now one line naming them and the levels they share."""
    db = tmp_path / "k.db"
    bidir_campaign(db)
    store = Store(db)
    why = "a direct attachment carries no overlay; it is measured under overlay=none"
    for idx in (9, 10, 11):
        labels = {"switch": "ovs", "overlay": f"o{idx}"}
        store.put_scenario(1, idx, f"s{idx}", labels, labels, "skipped", why, {}, [])
    labels = {"switch": "ovs", "overlay": "o12"}
    store.put_scenario(1, 12, "s12", labels, labels, "skipped", "host-to-host needs two hosts", {}, [])
    store.close()
    out = " ".join(vnetbench("show", "--db", db).stdout.split())
    assert out.count("skipped scenario") == 2, out
    assert f"skipped scenarios 9, 10, 11 (switch=ovs): {why}" in out, out
    assert "skipped scenario 12 (" in out and "): host-to-host needs two hosts" in out, out


def test_a_campaign_where_nothing_ran_shows_no_empty_parentheses_or_legend(tmp_path):
    """A one-scenario spec the machine cannot run showed 'skipped scenario 1 (): ...' under the legend of tables
    that were not there."""
    store, cid = new(tmp_path / "n.db", "none")
    labels = {"attach": "host", "placement": "same-host"}
    store.put_scenario(cid, 1, "s1", labels, labels, "skipped", "host-to-host needs two hosts", {}, [])
    store.close()
    out = vnetbench("show", "--db", tmp_path / "n.db").stdout
    assert "skipped scenario 1: host-to-host needs two hosts" in out and "()" not in out, out
    assert "median [95% CI]" not in out, out
