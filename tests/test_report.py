"""`vnetbench report`: a campaign with known samples in, one self-contained HTML (and Markdown) report out."""
import html
import re
import shutil
import subprocess
import time
from html.parser import HTMLParser

import pytest
from matplotlib.figure import Figure
from typer.testing import CliRunner

from vnetbench.report.analyses import REGISTRY
from vnetbench.report.analyses.base import Analysis, AnalysisResult, FigureData, TableData
from vnetbench.cli import app
from vnetbench.core.sample import Sample
from vnetbench.results.store import Store

SPEC = """\
name: reptest
description: synthetic campaign for the report test
repetitions: 3
analysis: testonly-study
factors:
  overlay: [none, vxlan]
  streams: [1, 4]
workloads: [{type: iperf3, duration: 3}, {type: ping, count: 10}]
"""
SKIP_REASON = "geneve is not in this kernel (test skip reason)"
FAILED_SCENARIO = "bridge setup failed: RTNETLINK answers: Operation not supported"
TRIAL_ERROR = "iperf3: unable to connect to server (test trial error)"
EXPECTED_FIGURES = {"metric-throughput_bps", "metric-rtt_s", "metric-rtt_loaded_s", "metric-cpu_busy_ratio",
                    "cdf-rtt_s", "cdf-rtt_loaded_s", "series-throughput", "cpu-breakdown", "streams-scaling",
                    "analysis-testonly-study-cost"}


class TestOnlyStudy(Analysis):
    name = "testonly-study"
    title = "Test-only study of overlay cost"

    def run(self, store, campaign):
        fig = Figure(figsize=(4, 3))
        fig.subplots().bar(["none", "vxlan"], [0, 12.5])
        return AnalysisResult(tables=[TableData("Overlay cost table", ["overlay", "cost vs none"],
                                                [["none", "0 %"], ["vxlan", "+12.5 %"]], "from the test")],
                              figures=[FigureData("cost", "Overlay cost figure", fig, "cost per overlay")],
                              findings=["VXLAN costs 12.5 % of throughput (test finding)"])


def labels(overlay, streams):
    return {"switch": "linuxbridge", "overlay": overlay, "placement": "cross-host", "pairs": "1",
            "streams": str(streams)}


def iperf3_samples(tput, steal):
    out = [Sample.of("throughput_bps", tput, pair=1, direction="forward"),
           Sample.of("aggregate_throughput_bps", tput, pair="all", direction="forward"),
           Sample.of("cpu_busy_ratio", 0.6, scope="machine")]
    out += [Sample.of("throughput_interval_bps", tput * f, t=t, pair=1, direction="forward")
            for t, f in ((1.0, 0.9), (2.0, 1.0), (3.01, 1.1))]
    out += [Sample.of("rtt_loaded_s", 50e-6 + k * 5e-6, t=0.1 * k, pair=1, icmp_seq=k) for k in range(8)]
    out += [Sample.of(m, v, scope="machine") for m, v in (("cpu_user_ratio", 0.1), ("cpu_system_ratio", 0.3),
                                                           ("cpu_irq_ratio", 0.01), ("cpu_softirq_ratio", 0.15),
                                                           ("cpu_steal_ratio", steal))]
    out += [Sample.of("cpu_busy_ratio", 0.7, t=1.0, scope="machine", series=True),
            Sample.of("cpu_busy_ratio", 0.5, scope="machine", cpu=0)]
    return out


def ping_samples(base):
    return [Sample.of("rtt_s", base + k * 2e-6, t=0.05 * k, pair=1, icmp_seq=k) for k in range(10)] + \
           [Sample.of("cpu_busy_ratio", 0.05, scope="machine")]


def build_campaign(path):
    """4 measured scenarios (overlay x streams), one skipped, one failed; one failed trial; one noisy metric."""
    store = Store(path)
    env = {"hostname": "testhost", "kernel": "Linux 6.1.0-test", "cpu_model": "Test CPU", "cpu_count": 2,
           "memory_bytes": 8 * 2**30, "cpu_steal_ratio_at_start": 0.02, "load_average": [0.1, 0.2, 0.3],
           "tools": {"iperf3": "3.12", "ping": "20221126"}, "kernel_features": {"vxlan": True, "geneve": False}}
    cid = store.new_campaign("reptest", "tests/reptest.yaml", SPEC, "ab" * 32, env)
    impl = {"switch": "linux-bridge", "overlay": "flat", "encryption": "none", "attach": "veth"}
    idx = 0
    for overlay in ("none", "vxlan"):
        for streams in (1, 4):
            idx += 1
            store.put_scenario(cid, idx, f"overlay={overlay}, streams={streams}", labels(overlay, streams),
                               labels(overlay, streams), "done", None,
                               impl | {"overlay": "flat" if overlay == "none" else "kernel-vxlan"}, [])
            noisy = (overlay, streams) == ("vxlan", 4)
            for rep in (1, 2, 3):
                tput = (9e9 if overlay == "none" else 7e9) * (1 + 0.4 * streams / 4) * \
                       ((0.5, 1.0, 1.5)[rep - 1] if noisy else (0.99, 1.0, 1.01)[rep - 1])
                steal = 0.03 if idx == 2 else 0.0
                failed = (idx, rep) == (3, 3)
                store.save_trial(cid, idx, rep, 0, "iperf3", {"streams": streams}, "failed" if failed else "ok",
                                 TRIAL_ERROR if failed else None, 1000.0 + rep, 1003.0 + rep,
                                 [] if failed else iperf3_samples(tput, steal))
                store.save_trial(cid, idx, rep, 1, "ping", {}, "ok", None, 1004.0 + rep, 1005.0 + rep,
                                 ping_samples(40e-6 if overlay == "none" else 60e-6))
    store.put_scenario(cid, 5, "overlay=geneve", labels("geneve", 1), labels("geneve", 1), "skipped", SKIP_REASON, {}, [])
    store.put_scenario(cid, 6, "overlay=gre", labels("gre", 1), labels("gre", 1), "failed", FAILED_SCENARIO, impl, [])
    store.set_campaign(cid, status="done", finished=store.campaign(cid).created + 100)
    store.close()
    return cid


@pytest.fixture(scope="module")
def campaign_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("report") / "r.db"
    build_campaign(db)
    REGISTRY[TestOnlyStudy.name] = TestOnlyStudy
    yield db
    REGISTRY.pop(TestOnlyStudy.name, None)


def run_report(*args):
    result = CliRunner().invoke(app, ["report", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def html_report(campaign_db):
    out = campaign_db.parent / "report.html"
    started = time.monotonic()
    run_report("1", "--db", campaign_db, "-o", out, "--figures", campaign_db.parent / "png")
    print(f"report generation: {time.monotonic() - started:.1f} s")
    return out


class Refs(HTMLParser):
    """Every tag and every attribute that could make a browser fetch something."""

    def __init__(self):
        super().__init__()
        self.tags, self.srcs, self.hrefs = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "srcset", "poster", "data", "action", "background"):
                self.srcs.append(value)
            elif name in ("href", "xlink:href"):
                self.hrefs.append(value)


def test_html_has_every_section_and_fact(html_report):
    text = html_report.read_text()
    for section in ("Campaign", "Campaign record and environment", "Scenarios", "Skipped and failed", "Warnings", "Statistics per metric",
                    "Distributions, time series and CPU",
                    "Test-only study of overlay cost"):
        assert f"<h2>{section}</h2>" in text, section
    for fact in ("reptest", "ab" * 32, "tests/reptest.yaml", "Linux 6.1.0-test", "Test CPU", "8.0 GiB", "3.12",
                 "linux-bridge", "kernel-vxlan", SKIP_REASON, FAILED_SCENARIO, TRIAL_ERROR, "95% CI median",
                 "throughput_bps (bit/s)", "rtt_s (s)"):
        assert fact in text, fact
    warnings = text[text.index('<section id="warnings">'):text.index('<section id="scenarios">')]
    assert "CPU steal was 2.00 %" in warnings                       # at start
    assert "overlay=none, streams=4" in warnings and "up to 3.00 %" in warnings  # during trials
    noisy = re.findall(r"<tr><td[^>]*>(\w+)</td><td[^>]*>([^<]+)</td>", warnings)
    assert ("throughput_bps", "overlay=vxlan, streams=4") in noisy
    assert all(label == "overlay=vxlan, streams=4" for _, label in noisy), noisy  # the steady ones are not listed


def test_study_leads_and_generic_statistics_fold(html_report):
    text = html_report.read_text()
    order = re.findall(r'<section id="([^"]+)">', text)
    assert order == ["campaign", "analysis", "problems", "warnings", "latency", "scenarios", "statistics", "figures",
                     "environment"]
    for folded in ("statistics", "figures", "environment"):
        body = text[text.index(f'<section id="{folded}">'):]
        assert re.match(r'<section id="\w+"><h2>[^<]+</h2><details><summary>', body), folded
    head = text[text.index('<section id="campaign">'):text.index('<section id="analysis">')]
    # one line on top, then the configuration folded behind one line; the campaign's record at the end
    assert head.count("<details>") == 1 and "<summary>Configuration (RFC 8204 §3): " in head
    outside = re.sub(r"<details>.*</details>", "", head, flags=re.S)
    assert "<table" not in outside and outside.count("<p>") == 1


def test_html_analysis_section(html_report):
    text = html_report.read_text()
    study = text[text.index('<section id="analysis">'):]
    assert "<caption>Overlay cost table</caption>" in study
    assert "<th>overlay</th><th>cost vs none</th>" in study
    assert '<td class="s">vxlan</td>' in study and '<td class="n">+12.5 %</td>' in study
    assert "VXLAN costs 12.5 % of throughput (test finding)" in study
    assert 'id="fig-analysis-testonly-study-cost"' in study


def test_html_is_self_contained(html_report):
    text = html_report.read_text()
    for forbidden in ("http://", "https://", "<script", "<link", "url(", "@import", "<iframe", "<object"):
        assert forbidden not in text.lower(), forbidden
    refs = Refs()
    refs.feed(text)
    assert refs.srcs and all(s.startswith("data:image/png;base64,") for s in refs.srcs)
    assert all(h.startswith("#") for h in refs.hrefs)
    figure_ids = set(re.findall(r'<figure id="fig-([^"]+)">', text))
    assert figure_ids == EXPECTED_FIGURES
    assert refs.tags.count("img") == len(EXPECTED_FIGURES)


def test_figure_files(html_report):
    files = {p.stem: p for p in (html_report.parent / "png").iterdir()}
    assert set(files) == EXPECTED_FIGURES
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in files.values())


def test_markdown_same_tables_and_svg_figures(campaign_db, html_report):
    out = campaign_db.parent / "report.md"
    run_report("1", "--db", campaign_db, "-o", out, "--figures", campaign_db.parent / "svg", "--figure-format", "svg")
    md = out.read_text()
    html_text = html_report.read_text()
    # every table with a header row in the HTML is a Markdown table: one separator row each
    assert len(re.findall(r"^\|(?:-{3}:?\|)+$", md, re.M)) == html_text.count("<thead>")
    for caption in re.findall(r"<caption>([^<]+)</caption>", html_text):
        assert html.unescape(caption).replace("*", "\\*") in md, caption
    assert "| overlay | cost vs none |" in md and "| vxlan | +12.5 % |" in md
    for fact in (SKIP_REASON, FAILED_SCENARIO, TRIAL_ERROR, "- VXLAN costs 12.5 % of throughput (test finding)"):
        assert fact in md, fact
    svgs = {p.stem for p in (campaign_db.parent / "svg").iterdir() if p.read_text().lstrip().startswith(("<?xml", "<svg"))}
    assert svgs == EXPECTED_FIGURES
    for name in EXPECTED_FIGURES:
        assert f"](svg/{name}.svg)" in md, name


def test_format_from_suffix_and_errors(campaign_db, tmp_path):
    out = tmp_path / "r.md"
    run_report("last", "--db", campaign_db, "-o", out)
    assert out.read_text().startswith("# vnetbench report") and "left out" in out.read_text()
    for args, message in ((["9", "--db", campaign_db], "no campaign '9'"),
                          (["1", "--db", tmp_path / "none.db"], "no results file"),
                          (["1", "--db", campaign_db, "--format", "pdf"], "--format pdf"),
                          (["1", "--db", campaign_db, "--figure-format", "gif"], "--figure-format gif")):
        result = CliRunner().invoke(app, ["report", *map(str, args)])
        assert result.exit_code == 2 and message in result.output, result.output


def screenshot(page, shot, width, height):
    """The page as headless Chromium draws it in a width x height window; no network of any kind."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (./install.sh test installs it)")
    started = time.monotonic()
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
         f"--user-data-dir={shot.parent / (shot.stem + '-profile')}", "--hide-scrollbars",
         f"--screenshot={shot}", f"--window-size={width},{height}", page.as_uri()],
        capture_output=True, text=True, timeout=60)
    print(f"chromium: {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return shot.read_bytes()


def test_renders_in_headless_chromium(html_report, tmp_path):
    png = screenshot(html_report, tmp_path / "report.png", 1400, 4000)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000  # a blank page compresses to a few kB
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (1400, 4000)  # IHDR size


def test_empty_and_unfinished_campaign(tmp_path):
    db = tmp_path / "e.db"
    store = Store(db)
    store.new_campaign("empty", "x.yaml", "name: empty\nanalysis: no-such-study\n", "cd" * 32, {})
    store.close()
    out = tmp_path / "e.html"
    run_report("1", "--db", db, "-o", out)
    text = out.read_text()
    assert "The campaign is running, not done" in text and "No samples were stored." in text
    assert "analysis 'no-such-study', which this vnetbench does not have" in html.unescape(text)
    assert "<img" not in text


MAGENTA_CSS = "#analysis table,#analysis table *{background:#ff00ff!important;color:#ff00ff!important}</style>"


def magenta_rows(png_path):
    """Pixel rows of a screenshot that show the marked (magenta) study tables."""
    from matplotlib.image import imread
    img = imread(png_path)[:, :, :3]
    hit = (img[:, :, 0] > 0.95) & (img[:, :, 1] < 0.05) & (img[:, :, 2] > 0.95)
    return [y for y in range(img.shape[0]) if hit[y].sum() > 100]


@pytest.mark.net
def test_s1_smoke_report_shows_the_study_first(tmp_path, s1_smoke_db):
    """The real S1 smoke campaign: the study's section comes first, says what the profile leaves out, and its first
    table is on the first screen of a 1400 x 900 window (the campaign record and the environment are folded)."""
    from conftest import vnetbench
    db, proc = s1_smoke_db
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    page = tmp_path / "s1.html"
    vnetbench("report", "1", "--db", db, "-o", page, "--figures", tmp_path / "png")
    text = page.read_text()
    order = re.findall(r'<section id="([^"]+)">', text)
    assert order[:2] == ["campaign", "analysis"] and order[-1] == "environment", order
    assert order.index("analysis") < order.index("statistics") < order.index("environment")
    study = text[text.index('<section id="analysis">'):text.index("</section>", text.index('<section id="analysis">'))]
    first = re.search(r"<table>|<p class=\"scope\">|<figure", study)
    assert first.group(0) == "<table>" and "leaves out of the study" in study  # the scorecard, then the omissions
    assert study.index("<caption>Reproduction scorecard") < study.index('<p class="scope">') < \
        study.index("<caption>Table I")
    assert study.index("<caption>Table I") < study.index("<caption>Table II") < study.index("<figure")
    assert "<details>" not in study
    from vnetbench.report import document
    for f in document.build(Store(db), 1).figures():
        assert not readable_axes(f.figure), (f.name, readable_axes(f.figure))
    screenshot(page, tmp_path / "first-screen.png", 1400, 900)  # kept for a person to look at
    marked = tmp_path / "marked.html"
    marked.write_text(text.replace("</style>", MAGENTA_CSS, 1))
    screenshot(marked, tmp_path / "marked.png", 1400, 900)
    rows = magenta_rows(tmp_path / "marked.png")
    assert rows, "no study table on the first screen"
    assert rows[0] < 900 - 150 and len(rows) >= 100, (rows[0], len(rows))  # the table's top and several rows visible
    # the check can fail: with the environment unfolded above the study, the first table leaves the first screen
    unfolded = re.sub(r"<details><summary>[^<]*</summary>", "<div>", text.replace("</details>", "</div>"))
    env = unfolded[unfolded.index('<section id="environment">'):unfolded.index("</section>", unfolded.index(
        '<section id="environment">')) + len("</section>")]
    moved = unfolded.replace(env, "").replace('<section id="analysis">', env + '<section id="analysis">', 1)
    (tmp_path / "moved.html").write_text(moved.replace("</style>", MAGENTA_CSS, 1))
    screenshot(tmp_path / "moved.html", tmp_path / "moved.png", 1400, 900)
    assert not magenta_rows(tmp_path / "moved.png") or magenta_rows(tmp_path / "moved.png")[0] > rows[0] + 300


def test_series_never_pools_workloads_protocols_or_background(tmp_path):
    """Two iperf3 entries (UDP and TCP) and a background flood in one scenario: three lines, none averaged."""
    from vnetbench.report import document
    store = Store(tmp_path / "s.db")
    cid = store.new_campaign("series", "x.yaml", "name: series\n", "ef" * 32, {})
    store.put_scenario(cid, 1, "a", labels("none", 1), labels("none", 1), "done", None, {}, [])
    for w, proto, value, role in ((0, "udp", 1e8, {}), (1, "tcp", 9e9, {}), (2, "udp", 5e8, {"role": "background"})):
        store.save_trial(cid, 1, 1, w, "iperf3", {"protocol": proto}, "ok", None, 1e9, 1e9 + 3,
                         [Sample.of("throughput_interval_bps", value, t=1e9 + t, pair=1, direction="forward",
                                    window=[1e9, 1e9 + 3], **role) for t in (1.0, 2.0, 3.0)])
    d = document.load(store, cid)
    assert set(d.series) == {(1, "iperf3 udp #1", "forward", ""), (1, "iperf3 tcp", "forward", ""),
                             (1, "iperf3 udp #3", "forward", "background")}
    for key, pts in d.series.items():
        assert sorted(pts) == [1.0, 2.0, 3.0]  # from the start of the measurement window, not the epoch
        assert len({v for vs in pts.values() for v in vs}) == 1  # one workload's values only
    fig = document.series_figure(d)
    assert len(fig.figure.axes[0].get_lines()) == 3


def test_error_bars_stay_in_the_physical_range():
    from vnetbench.report.figures import bounds, error_bars
    assert bounds("rtt_s", "s") == (0.0, float("inf")) and bounds("udp_loss_ratio", "ratio") == (0.0, 1.0)
    assert bounds("process_cpu_ratio", "ratio")[1] == float("inf")  # 1.0 = one core: a process may use several
    below, above = error_bars([0.2, 0.9, 5.0], [-0.3, 0.7, float("nan")], [0.5, 1.4, 6.0], 0.0, 1.0)
    assert below == [0.2, pytest.approx(0.2), 0.0] and above == [pytest.approx(0.3), pytest.approx(0.1), 0.0]


def readable_axes(fig) -> list[str]:
    """What a person would find unreadable on a figure: an exponent or offset on an axis."""
    from vnetbench.report.figures import encode
    encode(fig, "png")  # draws it, as the report does
    bad = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_offset_text().get_text():
                bad.append(f"offset {axis.get_offset_text().get_text()!r} on {ax.get_title()!r}")
            bad += [f"tick {t.get_text()!r}" for t in axis.get_ticklabels() if re.search(r"\de[+-]?\d", t.get_text())]
    return bad


def test_every_report_figure_reads_in_units(campaign_db):
    from vnetbench.report import document
    doc = document.build(Store(campaign_db), 1)
    assert doc.figures()
    for f in doc.figures():
        assert not readable_axes(f.figure), (f.name, readable_axes(f.figure))


def test_s2_figures_in_gbit_and_clipped(tmp_path):
    """S2's per-metric figures: throughput in Gbit/s (not a 1e10 axis), UDP loss whiskers never below 0 %."""
    from vnetbench.report.analyses import load_all
    store = Store(tmp_path / "s2.db")
    cid = store.new_campaign("s2", "s2.yaml", "name: s2\nanalysis: s2\n", "12" * 32, {})
    idx = 0
    for proto in ("tcp", "udp"):
        for switch, overlay in (("ovs", "vxlan"), ("linuxbridge", "vxlan")):
            idx += 1
            lab = {"switch": switch, "overlay": overlay, "placement": "cross-host", "protocol": proto,
                   "direction": "uni", "interference": "none", "pairs": "1", "udp_rate": "100M"}
            store.put_scenario(cid, idx, f"s{idx}", lab | {"pairs": 1}, lab, "done", None, {}, [])
            for rep, (tput, loss) in enumerate(((9.1e9, 0.0), (9.5e9, 0.0), (8.9e9, 0.02)), 1):
                got = [Sample.of("aggregate_throughput_bps", tput, pair="all", direction="forward"),
                       Sample.of("rtt_loaded_s", 1e-4, pair=1)]
                got += [Sample.of("udp_loss_ratio", loss, pair=1)] if proto == "udp" else []
                store.save_trial(cid, idx, rep, 0, "iperf3", {"protocol": proto}, "ok", None, 0.0, 1.0, got)
    figs = {f.name: f.figure for f in load_all()["s2"]().run(store, cid).figures}
    tput = figs["s2-aggregate_throughput_bps-tcp"]
    assert tput.axes[0].get_ylabel() == "aggregate_throughput_bps (Gbit/s)" and not readable_axes(tput)
    assert all(9 < b.get_height() < 9.5 for b in tput.axes[0].patches)
    loss = figs["s2-udp_loss_ratio-udp"].axes[0]
    assert loss.get_ylabel() == "udp_loss_ratio (%)"
    lows = [seg[:, 1].min() for c in loss.collections for seg in c.get_segments()]  # the whiskers
    assert lows and min(lows) == 0.0  # the 95 % CI reaches below 0 %; the whisker stops at 0


@pytest.mark.parametrize("suite", ["s1", "s2", "s3", "s4", "s5"])
def test_every_profile_says_what_it_leaves_out(suite):
    """smoke and quick cut the study down; each says how (the report shows it), and the longer list of a shorter
    profile still names what even `full` leaves out."""
    from vnetbench.experiment.spec import load, suite_path
    omits = {p: load(suite_path(suite), p).experiment.omits for p in ("smoke", "quick", "full")}
    assert all(omits.values()), omits
    assert set(omits["full"]) <= set(omits["smoke"]) and set(omits["full"]) <= set(omits["quick"])
    assert len(omits["smoke"]) > len(omits["full"]) and len(omits["quick"]) > len(omits["full"])


def test_without_a_study_the_answer_leads_and_the_statistics_fold(tmp_path):
    from vnetbench.report import document
    db = tmp_path / "plain.db"
    store = Store(db)
    cid = store.new_campaign("plain", "p.yaml", "name: plain\n", "ab" * 32, {"hostname": "h", "kernel": "Linux 6.1"})
    store.put_scenario(cid, 1, "a", labels("none", 1), labels("none", 1), "done", None, {}, [])
    store.save_trial(cid, 1, 1, 0, "ping", {}, "ok", None, 0.0, 1.0, ping_samples(40e-6))
    store.set_campaign(cid, status="done", finished=store.campaign(cid).created + 5)
    doc = document.build(store, cid)
    assert [s.id for s in doc.sections] == ["campaign", "answer", "scenarios", "statistics", "figures", "environment"]
    stats = next(s for s in doc.sections if s.id == "statistics")
    assert isinstance(stats.blocks[0], document.Fold)  # every metric's table, one click away under the answer


def test_a_report_reads_the_campaign_and_parses_its_spec_once(campaign_db, monkeypatch):
    """The demo's report took 18.5 s: the store was read 8 times per report (each section, each study's analysis
    loading the campaign again) and the spec parsed 3 times. Now once each, the study's analysis included."""
    import yaml
    from vnetbench.results import dataset
    from vnetbench.report import document

    class LoadingStudy(TestOnlyStudy):  # as the real studies do: their own dataset.load and the spec
        def run(self, store, campaign):
            data = dataset.load(store, campaign)
            assert data.campaign.spec["analysis"] == "testonly-study" and data.ok
            return super().run(store, campaign)

    calls = {"samples": 0, "trials": 0, "yaml": 0}

    def counted(name, real):
        def wrapper(*a, **kw):
            calls[name] += 1
            return real(*a, **kw)
        return wrapper
    monkeypatch.setattr(Store, "samples", counted("samples", Store.samples))
    monkeypatch.setattr(Store, "trials", counted("trials", Store.trials))
    monkeypatch.setattr(yaml, "safe_load", counted("yaml", yaml.safe_load))
    monkeypatch.setattr(yaml, "load", counted("yaml", yaml.load))  # the store's spec: libyaml's loader
    monkeypatch.setitem(REGISTRY, TestOnlyStudy.name, LoadingStudy)
    doc = document.build(Store(campaign_db, readonly=True), 1)
    assert "Test-only study" in str(doc)
    assert calls == {"samples": 1, "trials": 1, "yaml": 1}, calls
