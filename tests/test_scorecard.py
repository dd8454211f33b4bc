"""The reproduction scorecard on a store built by hand: S3's own suite file (its `scorecard`) against exact cells."""
import json
import math

import numpy as np
import pytest
from pathlib import Path

from conftest import vnetbench
from test_suites_s3_s4 import AH, ESP, Book, stream
from test_suites_s3_s4 import s3_labels as _labels


def s3_labels(enc, **kw):
    """S3's card reads the two-router experiment (its scorecard_where: hops 2), where the slides' netperf came from."""
    return _labels(enc, **{"hops": "2", **kw})
from vnetbench.results import scorecard, stats
from vnetbench.results.dataset import load
from vnetbench.core.sample import Sample

S3 = (Path(__file__).parent.parent / "vnetbench" / "experiment" / "suites" / "s3.yaml").read_text()
BLOWFISH = {**ESP, "cipher": "blowfish-cbc"}
OFFERED = {"flags": ["offered 12 Mbit/s of 1 Gbit/s (1 %)"]}


UDP = [1.00e7, 1.01e7, 1.02e7, 1.01e7, 1.00e7, 1.01e7, 1.02e7, 1.01e7]
AH_TCP = [2.0e8, 2.1e8, 2.2e8, 2.3e8, 2.4e8, 2.2e8, 2.2e8, 2.2e8]       # 8 runs: a ratio row decides on the
ESP_TCP = [1.0e8, 1.05e8, 1.1e8, 1.15e8, 1.2e8, 1.1e8, 1.1e8, 1.1e8]    # medians' exact interval (97.5 %: 8 a cell)


def book(tmp_path, udp_ah: list[float] | None = None) -> Book:
    """S3's card on exact cells: AH and ESP at 16384 B (8 runs each), one Blowfish run, UDP at 500 B (8 runs) whose
    sender offered 1 % of its rate (AH as ESP unless given), TCP_RR at 500 B (4 runs each)."""
    b = Book(tmp_path / "s3.db", spec_text=S3)
    tcp = {"type": "netperf", "test": "TCP_STREAM", "message_size": 16384}
    rr = {"type": "netperf", "test": "TCP_RR", "message_size": 500}
    udp = {"type": "iperf3", "protocol": "udp", "message_size": 500, "udp_rate": 1e9}
    ah = b.scenario(s3_labels(AH, size="16384"), {"encryption": AH})
    b.trials(ah, "netperf", tcp, stream(AH_TCP))
    esp = b.scenario(s3_labels(ESP, size="16384"), {"encryption": ESP})
    b.trials(esp, "netperf", tcp, stream(ESP_TCP))
    bf = b.scenario(s3_labels(BLOWFISH, size="16384"), {"encryption": BLOWFISH})
    b.trials(bf, "netperf", tcp, stream([1.3e8]))                       # one run: too few to tell
    for enc, vals in ((AH, udp_ah or UDP), (ESP, UDP)):
        sc = b.scenario(s3_labels(enc, traffic="udp", size="500"), {"encryption": enc})
        b.trials(sc, "iperf3", udp, stream(vals), metadata=OFFERED)
    ah_rr = b.scenario(s3_labels(AH, size="500"), {"encryption": AH})
    b.trials(ah_rr, "netperf", rr, stream([900, 1000, 1100, 1000], "transactions_per_s"))
    esp_rr = b.scenario(s3_labels(ESP, size="500"), {"encryption": ESP})
    b.trials(esp_rr, "netperf", rr, stream([2000, 2100, 2200, 2100], "transactions_per_s"))
    return b


def rows(tmp_path, udp_ah: list[float] | None = None) -> dict[str, scorecard.Row]:
    b = book(tmp_path, udp_ah)
    data = load(b.store, b.cid)
    return {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}


def _fieller(t: float) -> tuple[float, float]:
    """AH 2.0 .. 2.4, ESP 1.0 .. 1.2 (x 1e8, 8 runs each, three at the mean): means 2.2 and 1.1, ratio 2.0;
    variances of the means 0.1/7/8 and 0.025/7/8; at the estimate r^2 * 0.025 == 0.1, so Welch's df = 14."""
    qa, qb, qc = 1.1 ** 2 - t * t * 0.025 / 56, -2 * 1.1 * 2.2, 2.2 ** 2 - t * t * 0.1 / 56
    root = math.sqrt(qb * qb - 4 * qa * qc)
    return (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)


def test_ratio_row_is_the_hand_computed_fieller_interval_and_decides_on_the_widened_one(tmp_path):
    r = rows(tmp_path)["ah-esp-tcp-16k"]
    lo, hi = _fieller(2.144786687917804)          # t(0.975, 14): the printed 95 % CI of the means' ratio
    assert math.isclose(r.estimate, 2.0, rel_tol=1e-12)
    assert math.isclose(r.ci[0], lo, rel_tol=1e-9) and math.isclose(r.ci[1], hi, rel_tol=1e-9)
    assert r.ours == f"2.00x ({lo:.2f}x .. {hi:.2f}x)" and r.study == "2.00x" and r.n == (8, 8)
    # two interval rows of the card are measured (TCP and UDP): it decides at 97.5 % on the medians' ratio, each
    # cell's exact interval at sqrt(0.975) = 98.7 %, at 8 trials min .. max (99.2 %; the next, 93.0 %): 2.0 / 1.2 ..
    # 2.4 / 1.0, wholly inside the study's 1.6 .. 2.5
    assert math.isclose(r.decided_level, 0.975)
    assert r.decided_ci == pytest.approx((2.0 / 1.2, 2.4 / 1.0), rel=1e-12)
    assert r.decided == "97.5 % CI of the medians' ratio (exact) 1.67x .. 2.40x (Bonferroni over 2 rows)"
    assert r.verdict == r.reads == scorecard.AGREES and r.why == "" and r.to_decide == ""


def test_a_ratio_row_needs_trials_enough_for_the_medians_exact_interval(tmp_path):
    """5 + 5 trials: each cell's exact median interval reaches 96.9 % at most, short of the 98.7 % that two cells
    at 97.5 % together need: no verdict, whatever Fieller's interval of the means says."""
    b = Book(tmp_path / "s3.db", spec_text=S3)
    tcp = {"type": "netperf", "test": "TCP_STREAM", "message_size": 16384}
    for enc, vals in ((AH, AH_TCP[:5]), (ESP, ESP_TCP[:5])):
        b.trials(b.scenario(s3_labels(enc, size="16384"), {"encryption": enc}), "netperf", tcp, stream(vals))
    data = load(b.store, b.cid)
    r = {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}["ah-esp-tcp-16k"]
    assert r.verdict == scorecard.CANNOT and r.decided == ""
    assert r.why == "too few trials for the medians' exact 95 % interval (n=5, needs 7 a cell)"


def test_differs_with_its_measured_reason_and_cannot_tell_with_why(tmp_path):
    got = rows(tmp_path)
    udp = got["ah-esp-udp-500"]   # AH == ESP here, tightly: the CI (about 1) lies wholly outside 1.6 .. 2.5
    assert udp.verdict == scorecard.DIFFERS
    assert udp.why == "offered load not reached in 16 of 16 trials (e.g. offered 12 Mbit/s of 1 Gbit/s (1 %))"
    blowfish = got["blowfish-3des"]
    assert blowfish.verdict == scorecard.CANNOT and blowfish.why == "too few trials (n=1/8, needs 3 a cell)"
    assert blowfish.to_decide == "at least 4 trials a cell (one trial shows no CV)"
    assert got["ipv4-ipv6"].verdict == scorecard.CANNOT and got["ipv4-ipv6"].why.startswith("not measured")
    assert got["ipv4-ipv6"].to_decide == "a profile that runs its cells"
    rr = got["esp-ah-small-rr"]   # ESP 2100/s vs AH 1000/s at 500 B, 4 runs each: the exact test's p = 2/70
    assert rr.verdict == scorecard.AGREES and math.isclose(rr.estimate, 2.1) and rr.why == "Holm p = 0.029"
    assert rr.decided == "the test, Holm over 1 test"


def test_a_sender_that_offered_1_percent_never_agrees_without_saying_so(tmp_path):
    """AH twice ESP on UDP, as the study says, but every sender offered 12 Mbit/s of the 1 Gbit/s asked: the row
    may agree, but only with the count of those trials and the flag beside it."""
    udp = rows(tmp_path, udp_ah=[2 * v for v in UDP])["ah-esp-udp-500"]
    assert udp.verdict == scorecard.AGREES and math.isclose(udp.estimate, 2.0)
    assert udp.why == "offered load not reached in 16 of 16 trials (e.g. offered 12 Mbit/s of 1 Gbit/s (1 %))"
    assert udp.why in scorecard.table_rows([udp])[0][-1]


def test_three_trials_a_cell_are_too_few_for_an_interval_verdict(tmp_path):
    """3 + 3 trials: the exact test cannot reach 0.05 (smallest p 0.1), and on a busy machine's bimodal trials an
    interval widened for 8 rows misses 11 % of the time: no verdict, and how many trials would give one."""
    b = Book(tmp_path / "s3.db", spec_text=S3)
    tcp = {"type": "netperf", "test": "TCP_STREAM", "message_size": 16384}
    for enc, vals in ((AH, [2.0e8, 2.2e8, 2.4e8]), (ESP, [1.0e8, 1.1e8, 1.2e8])):
        b.trials(b.scenario(s3_labels(enc, size="16384"), {"encryption": enc}), "netperf", tcp, stream(vals))
    data = load(b.store, b.cid)
    r = {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}["ah-esp-tcp-16k"]
    assert r.verdict == scorecard.CANNOT and r.decided == "" and math.isclose(r.estimate, 2.0)
    assert r.why == "too few trials for a test (n=3/3; an interval verdict needs 4 a cell)"
    # The medians' exact interval (sqrt(0.95) a cell at one interval row) at n trials spans order statistics k + 1
    # and n - k; its ends lie about Blom's normal score of n - k out, times each cell's CV (9.1 %), the two cells'
    # added on a log scale (0.182); the estimate 2.0 is ln(2 / 1.6) = 0.223 from the band's edge. At n = 9 (k = 0,
    # min .. max) the ends sit 1.49 x 0.182 = 0.272 out; at 10 (k = 1) 1.00 x 0.182 = 0.182: 10 trials a cell. Each
    # stored trial took 1 s: 10 x 2 is under a minute, shown 1
    assert r.to_decide == "about 10 trials a cell at this CV (9.1 % / 9.1 %, ≈ 1 minute)"


def test_report_show_and_export_carry_the_card(tmp_path):
    b = book(tmp_path)
    from vnetbench.report import document
    doc = document.build(b.store, b.cid)
    blocks = [blk for s in doc.sections if s.id == "analysis" for blk in s.blocks]
    assert any(getattr(blk, "title", "") == "Reproduction scorecard" for blk in blocks)
    out = vnetbench("export", str(b.cid), "--db", str(tmp_path / "s3.db"), "--scorecard").stdout
    card = {r["id"]: r for r in json.loads(out)}
    tcp = card["ah-esp-tcp-16k"]
    assert tcp["verdict"] == tcp["reads"] == "agrees" and tcp["estimate"] == 2.0 and tcp["stand_in"] == ""
    assert tcp["decided_level"] == 0.975 and tcp["decided"].startswith("97.5 % CI of the medians' ratio (exact) "
                                                                        "1.67x .. 2.40x")
    assert tcp["decided_ci"][0] < tcp["ci"][0] < tcp["ci"][1] < tcp["decided_ci"][1]
    assert card["blowfish-3des"]["to_decide"] == "at least 4 trials a cell (one trial shows no CV)"
    shown = vnetbench("show", str(b.cid), "--db", str(tmp_path / "s3.db")).stdout
    assert "Reproduction scorecard" in shown and "ah-esp-tcp-16k" in shown


def test_s1_row_uses_each_trials_median_echo_and_names_its_stand_ins(tmp_path):
    """S1's 'Reference TR / CS TR' row: one value per trial, the median of its echoes (not their sum or mean); its
    Reference ran OVS's userspace datapath between namespace VMs, where the study had OVS's kernel datapath between
    OpenStack VMs (the card's `paper` entry)."""
    s1 = (Path(__file__).parent.parent / "vnetbench" / "experiment" / "suites" / "s1.yaml").read_text()
    b = Book(tmp_path / "s1.db", spec_text=s1)
    ping = {"type": "ping", "ping_size": 56}
    impl = {"host": None, "switch": {"switch": "ovs-netdev", "overlay": "none", "encryption": "none", "attach": "veth"}}
    for attach, medians in (("host", [0.20e-3, 0.25e-3, 0.30e-3]), ("switch", [0.80e-3, 0.90e-3, 1.00e-3])):
        sc = b.scenario({"attach": attach, "encryption": "none", "switch": "ovs"},
                        {"attach": attach, "encryption": "none"}, impl=impl[attach])
        # each trial: three echoes whose median is the given value, one far outlier that a mean would follow
        b.trials(sc, "ping", ping, [[Sample.of("rtt_s", v, pair=1) for v in (m * 0.9, m, m * 1.1, 1.0)]
                                    for m in medians])
    data = load(b.store, b.cid)
    row = {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}["ovs-tr"]
    assert math.isclose(row.estimate, 0.90 / 0.25) and row.n == (3, 3)      # 3.6, the study 3.487 +- 25 %
    assert row.study == "3.49x" and row.ours == "3.60x (2.46x .. 5.81x)"
    assert row.verdict == scorecard.CANNOT and row.why.startswith(stats.NO_TEST)
    # CVs 11.1 % (a, Reference) and 20 % (b, CS), added on a log scale: 0.311; the estimate 3.6 is ln(4.359 / 3.6)
    # = 0.191 from the band's nearer edge: the medians' exact interval's ends (Blom's score of order statistic
    # n - k, sqrt(0.95) a cell) fit from n = 27 (z 0.61)
    assert row.to_decide == "about 27 trials a cell at this CV (11.1 % / 20.0 %, ≈ 1 minute)"
    assert row.stand_in == ("OVS's userspace datapath (netdev) (the study: OVS's kernel datapath); namespace VMs "
                            "(the study: OpenStack VMs)")
    assert row.reads == f"cannot tell — stand-in: {row.stand_in}" and row.as_dict()["stand_in"] == row.stand_in


def test_a_profiles_scorecard_reduce_decides_a_row_on_each_trials_fastest_echo_and_says_so(tmp_path):
    """`scorecard_reduce: {ovs-tr: min}` (S1's card does so for its saturated rows): the row's cells are read on each
    trial's fastest echo, not its median, and its claim says so. Reference's fastest echoes are half their median
    here, CS's nine tenths: the medians' ratio is 3.6, the minima's 2.0."""
    s1 = (Path(__file__).parent.parent / "vnetbench" / "experiment" / "suites" / "s1.yaml").read_text()
    b = Book(tmp_path / "s1.db", spec_text=s1 + "scorecard_reduce: {ovs-tr: min}\n")
    ping = {"type": "ping", "ping_size": 56}
    for attach, medians, fast in (("host", [0.20e-3, 0.25e-3, 0.30e-3], 0.9), ("switch", [0.8e-3, 0.9e-3, 1e-3], 0.5)):
        sc = b.scenario({"attach": attach, "encryption": "none", "switch": "ovs"},
                        {"attach": attach, "encryption": "none"})
        b.trials(sc, "ping", ping, [[Sample.of("rtt_s", v, pair=1) for v in (m * fast, m, m * 1.1, 1.0)]
                                    for m in medians])
    data = load(b.store, b.cid)
    row = {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}["ovs-tr"]
    assert math.isclose(row.estimate, (0.9e-3 * 0.5) / (0.25e-3 * 0.9)), row.estimate
    assert row.claim.endswith("[here each trial's min of its samples, not its median]"), row.claim


S4 = (Path(__file__).parent.parent / "vnetbench" / "experiment" / "suites" / "s4.yaml").read_text()


WIREGUARD_GO = {"switch": "none", "overlay": "none", "encryption": "wireguard-go-0.0.20230223", "attach": "host"}
OVS_NETDEV = {"switch": "ovs-netdev", "overlay": "ovs-vxlan", "encryption": "none", "attach": "veth"}


def s4_rows(tmp_path) -> dict[str, scorecard.Row]:
    """S4's own card on hand-made cells: WireGuard (wireguard-go) at MTU 1500 and 9000, 8 runs each (a ratio row
    decides on the medians' exact interval: at 97.5 % it needs 8), 4 runs each of VXLAN and
    OVS+VXLAN (OVS's userspace datapath) at 8 streams; VXLAN with 4 generators, 7 runs (a value row decides on the
    median's exact interval: at 97.5 % it needs 7). The other rows stay unmeasured."""
    from test_suites_s3_s4 import s4_labels, tcp_runs
    b = Book(tmp_path / "s4.db", spec_text=S4)
    one = {"type": "iperf3", "streams": 1, "interval": 1}
    for mtu, vals in (("1500", [2.0e8, 2.2e8, 2.4e8, 2.2e8] * 2), ("9000", [8.0e8, 8.8e8, 9.6e8, 8.8e8] * 2)):
        sc = b.scenario({**s4_labels(enc="wireguard", mtu=mtu), "kernel": "shared"}, impl=WIREGUARD_GO)
        b.trials(sc, "iperf3", one, tcp_runs(vals, 0.5))
    eight, gen4 = {"type": "iperf3", "streams": 8}, {"type": "iperf3", "streams": 4, "processes": 4}
    for switch, tput in (("ovs", [1.0e9, 1.2e9, 0.8e9, 1.0e9]), ("linuxbridge", [3.0e9, 2.0e9, 4.0e9, 3.0e9])):
        sc = b.scenario({**s4_labels("switch", switch=switch, overlay="vxlan", measure="streams8"), "kernel": "shared"},
                        impl=OVS_NETDEV if switch == "ovs" else None)
        b.trials(sc, "iperf3", eight, tcp_runs(tput, 0.9 if switch == "ovs" else 0.6))
    sc = b.scenario({**s4_labels("switch", overlay="vxlan", measure="gen4"), "kernel": "shared"})
    b.trials(sc, "iperf3", gen4, tcp_runs([9.5e9, 9.6e9, 9.7e9, 9.6e9, 9.5e9, 9.6e9, 9.7e9], 0.5))
    data = load(b.store, b.cid)
    return {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}


def test_s4_jumbo_row_is_the_hand_computed_fieller_interval_on_a_stand_in(tmp_path):
    r = s4_rows(tmp_path)["wireguard-jumbo"]
    # 9000: 8.0/8.8/9.6/8.8, 1500: 2.0/2.2/2.4/2.2 (x 1e8), twice each: means 8.8 and 2.2, ratio 4.0 (the study's
    # 4x); variances of the means 2.56/7/8 and 0.16/7/8; at r = 4, va = r^2 vb, so Welch's df = 14
    t2 = 2.144786687917804 ** 2
    qa, qb, qc = 2.2 ** 2 - t2 * 0.16 / 56, -2 * 2.2 * 8.8, 8.8 ** 2 - t2 * 2.56 / 56
    root = math.sqrt(qb * qb - 4 * qa * qc)
    lo, hi = (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    assert math.isclose(r.estimate, 4.0, rel_tol=1e-12) and r.n == (8, 8) and r.study == "4.00x"
    assert math.isclose(r.ci[0], lo, rel_tol=1e-9) and math.isclose(r.ci[1], hi, rel_tol=1e-9)
    assert r.ours == f"4.00x ({lo:.2f}x .. {hi:.2f}x)"
    # decided on 97.5 % (2 interval rows: this and 4 generators), the medians' ratio 8.0 / 2.4 .. 9.6 / 2.0, inside
    # 3.2 .. 5: it agrees, but on wireguard-go
    assert r.decided_ci == pytest.approx((8.0 / 2.4, 9.6 / 2.0), rel=1e-12)
    assert r.verdict == scorecard.AGREES and r.decided.startswith("97.5 % CI of the medians' ratio (exact) ")
    assert r.reads == "agrees — stand-in: wireguard-go (the study: kernel WireGuard)"
    assert scorecard.table_rows([r])[0][3:5] == [r.decided, r.reads]


def test_s4_cpu_per_bit_row_divides_each_trials_machine_cpu_by_its_throughput(tmp_path):
    got = s4_rows(tmp_path)
    r = got["ovs-cpu-per-bit"]
    # OVS+VXLAN: 0.9 / (1.0, 1.2, 0.8, 1.0 Gbit/s) = 0.9, 0.75, 1.125, 0.9 (x 1e-9), mean 0.91875e-9; VXLAN: 0.6 / (3,
    # 2, 4, 3 Gbit/s) = 0.2, 0.3, 0.15, 0.2 (x 1e-9), mean 0.2125e-9: OVS spends 4.32x the CPU per bit (higher), every
    # OVS trial above every VXLAN one: the exact test's p = 2/70, the card's one test
    assert math.isclose(r.estimate, 0.91875 / 0.2125, rel_tol=1e-9)
    assert r.verdict == scorecard.AGREES and r.why == "Holm p = 0.029"
    assert r.stand_in == "OVS's userspace datapath (netdev) (the study: OVS's kernel datapath)"   # from switch: ovs
    gen4 = got["vxlan-gen4-line-rate"]   # 9.6 Gbit/s against the study's 40 % of line rate: it differs, measurably
    assert gen4.verdict == scorecard.DIFFERS and gen4.why == "a at the line rate (9.5 Gbit/s of 10 Gbit/s)"
    assert gen4.reads == scorecard.DIFFERS and gen4.stand_in == ""      # kernel VXLAN on a Linux bridge: the study's
    assert got["geneve-tput"].verdict == scorecard.CANNOT and got["geneve-tput"].why.startswith("not measured")


S5 = (Path(__file__).parent.parent / "vnetbench" / "experiment" / "suites" / "s5.yaml").read_text()


def test_s5_conversion_row_is_the_ratio_of_the_hosts_counters_per_round(tmp_path):
    """S5's Table 1 rows on the host's counters (the study's Dom0 view): a round's conversion rate is its context
    switches over its interrupts, one value per round, never a VM's own counters; VM1 and VM2 are UML guests where
    the study had Xen VMs. Its magnitudes need a hardware NIC's interrupts: this machine cannot check them."""
    b = Book(tmp_path / "s5.db", spec_text=S5)
    web = {"type": "http", "pairs": [1], "clients": 6}
    rounds = {"off": [(1000, 500), (1000, 530), (1000, 560), (1000, 530), (1000, 520), (1000, 540)],
              "on": [(5000, 3400), (6000, 4200), (7000, 4900), (6000, 4200), (5000, 3500), (7000, 4900)]}
    uml = {"switch": "linux-bridge", "overlay": "none", "encryption": "none", "attach": "veth",
           "vm_kernel": "uml-6.1.176 (h2v1, h2v2)"}
    for level, counts in rounds.items():
        sc = b.scenario({"attack": level}, {"attack": level}, impl=uml)
        b.trials(sc, "http", web, [[Sample.of("interrupts_per_s", i, scope="machine"),
                                    Sample.of("context_switches_per_s", c, scope="machine"),
                                    Sample.of("interrupts_per_s", 9 * i, scope="vm", vm="h2v2")]   # VM1's own: not Dom0's
                                   for i, c in counts])
    data = load(b.store, b.cid)
    got = {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}
    r = got["interrupts-higher"]
    # the host's interrupts (never VM1's own 9x): off 1000 each round, on 5000..7000 (mean 6000): every round under
    # attack above every control round, the exact test's p = 2/924, Holm over the card's 2 tests: 0.0043
    assert math.isclose(r.estimate, 6.0, rel_tol=1e-12) and r.n == (6, 6)
    assert r.verdict == scorecard.AGREES and r.why == "Holm p = 0.0043", r.why
    assert r.reads == "agrees — stand-in: UML guest VMs (the study: Xen VMs)"
    # a round's conversion rate: its context switches over its interrupts, one value per round
    on = [t for t in data.ok if t.labels["attack"] == "on"]
    assert [scorecard._value(t, "context_switches_per_s/interrupts_per_s") for t in on] == [
        3400 / 5000, 4200 / 6000, 4900 / 7000, 4200 / 6000, 3500 / 5000, 4900 / 7000]
    for uncheckable in ("conversion-control", "conversion-attack", "conversion-growth", "conversion-higher",
                        "interrupts-growth"):
        assert got[uncheckable].verdict == scorecard.CANNOT and not got[uncheckable].checkable
        assert got[uncheckable].to_decide.startswith("this machine cannot: a hardware NIC's interrupts")
    assert scorecard.tally(list(got.values()))["checkable"] == 2


def test_s1_processing_rate_row_is_the_hand_computed_contrast(tmp_path):
    """S1's 'OvS's unsaturated processing rate is 20.6 % of IPsec's': TP = 1 / t with t = diff / 2, so the ratio of the
    rates is (TR IPsec - TR Reference) / (TR Reference - TR CS); Reference is one sample in both differences."""
    s1 = (Path(__file__).parent.parent / "vnetbench" / "experiment" / "suites" / "s1.yaml").read_text()
    b = Book(tmp_path / "s1.db", spec_text=s1)
    ping = {"type": "ping", "ping_size": 56}
    ipsec = {"type": "ipsec", "cipher": "aes-256-cbc", "integrity": "hmac-sha512"}
    spread = (-0.01e-3, -0.005e-3, 0.0, 0.005e-3, 0.01e-3)     # 5 trials a cell: a contrast needs 5
    for attach, enc, mid in (("host", "none", 0.26e-3), ("switch", "none", 0.91e-3), ("switch", ipsec, 1.04e-3)):
        medians = [mid + e for e in spread]
        label = "none" if enc == "none" else "ipsec(aes-256-cbc,hmac-sha512)"
        sc = b.scenario({"attach": attach, "encryption": label, "switch": "ovs"}, {"attach": attach, "encryption": enc})
        b.trials(sc, "ping", ping, [[Sample.of("rtt_s", v, pair=1) for v in (m * 0.9, m, m * 1.1)] for m in medians])
    data = load(b.store, b.cid)
    r = {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}["ovs-ipsec-tp-tr"]
    # N = 1.04 - 0.91 = 0.13 ms, D = 0.91 - 0.26 = 0.65 ms: 0.2 (the paper 3.080 / 14.964 = 20.6 %). Each cell's
    # mean has v = 2.5e-4 / 4 / 5 (ms^2); N - r D weighs IPsec 1, Reference -(1 + r), CS r: Welch df
    # = (1 + 1.44 + 0.04)^2 / ((1 + 1.44^2 + 0.04^2) / 4) = 8, t(0.975, 8) = 2.3060041
    n, d, v, t2 = 0.13, 0.65, 2.5e-4 / 20, 2.306004135204166 ** 2
    qa, qb, qc = d * d - t2 * 2 * v, -2 * (n * d + t2 * v), n * n - t2 * 2 * v
    root = math.sqrt(qb * qb - 4 * qa * qc)
    lo, hi = (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    assert math.isclose(r.estimate, 0.2, rel_tol=1e-9) and r.n == (5, 5, 5)      # Reference counted once
    assert math.isclose(r.ci[0], lo, rel_tol=1e-6) and math.isclose(r.ci[1], hi, rel_tol=1e-6)
    # the card measures 3 interval rows (ovs-tr, ipsec-tr and this); the two ratio rows' 5 trials are too few for
    # the medians' exact interval at 98.3 % (8 a cell), so this one alone is decided: 95 % Fieller, inside 0.165 .. 0.257
    assert r.decided.startswith("95 % CI 0.1") and "Bonferroni" not in r.decided
    assert r.study == "0.21x" and r.verdict == scorecard.AGREES


S2 = (Path(__file__).parent.parent / "vnetbench" / "experiment" / "suites" / "s2.yaml").read_text()
S2_ENVS = {"OVS+GRE": ("ovs", "gre"), "OVS+VXLAN": ("ovs", "vxlan"), "LB+VXLAN": ("linuxbridge", "vxlan")}


def _s2(b: Book, env: str, protocol: str) -> int:
    switch, overlay = S2_ENVS[env]
    labels = {"switch": switch, "overlay": overlay, "placement": "cross-host", "pairs": "2", "protocol": protocol,
              "direction": "uni", "udp_rate": "200M", "study_rate": "200M", "interference": "none",
              "kernel": "guest-per-host"}
    return b.scenario(labels, {**labels, "pairs": 2})


def test_s2_best_rows_on_hand_computed_cells(tmp_path):
    """Table 3.1, different nodes, 4 VMs: 'lowest latency OVS+GRE' and 'lowest loss LB+VXLAN' against exact cells,
    5 runs each (4 comparisons under Holm: at 4 + 4 the exact test's 2/70 cannot reach 0.05 / 4). The card's tie
    margin is left out here: its tie tests would join the family (8 tests), which 5 + 5 runs cannot pass
    (test_a_tie_margin_decides_equal_technologies has it)."""
    b = Book(tmp_path / "s2.db", spec_text=S2.replace(", tie: 0.10}", "}"))
    tcp, udp = {"type": "iperf3", "protocol": "tcp"}, {"type": "iperf3", "protocol": "udp", "udp_rate": 1e8}
    steps = (-4e-6, -2e-6, 0.0, 2e-6, 4e-6)
    lat = {env: [m + e for e in steps] for env, m in (("OVS+GRE", 92e-6), ("OVS+VXLAN", 152e-6), ("LB+VXLAN", 162e-6))}
    for env, medians in lat.items():   # each trial: echoes whose median is the value, an outlier a mean would follow
        b.trials(_s2(b, env, "tcp"), "iperf3", tcp,
                 [[Sample.of("rtt_loaded_s", v, pair=p) for p in (1, 2) for v in (m * 0.9, m, m * 1.1)]
                  + [Sample.of("rtt_loaded_s", 1.0, pair=1)] for m in medians])
    # loss (the study's: ping loss during the UDP test): LB+VXLAN loses MORE than the others, pair 1 and pair 2
    # differ: the trial's value is their mean
    loss = {"LB+VXLAN": (0.10, 0.30), "OVS+GRE": (0.01, 0.03), "OVS+VXLAN": (0.02, 0.04)}
    for env, (p1, p2) in loss.items():
        b.trials(_s2(b, env, "udp"), "iperf3", udp,
                 [[Sample.of("ping_loss_ratio", p1 * k, pair=1), Sample.of("ping_loss_ratio", p2 * k, pair=2)]
                  for k in (0.9, 0.95, 1.0, 1.05, 1.1)], metadata=OFFERED if env == "LB+VXLAN" else None)
    data = load(b.store, b.cid)
    got = {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}
    r = got["cross-4vm-latency"]
    # OVS+GRE's trials 88 .. 96 us (the median of 7 echoes each, not the 1-s outlier): mean 92 us, s = sqrt(10) us,
    # 95 % CI 92 +- t(0.975, 4) * sqrt(10) / sqrt(5) = 92 +- 2.776 * 1.414 us
    half = 2.7764451051977987 * math.sqrt(10) * 1e-6 / math.sqrt(5)
    assert math.isclose(r.estimate, 92e-6, rel_tol=1e-9) and r.n == (5, 5, 5) and r.study == "OVS+GRE"
    assert math.isclose(r.ci[0], 92e-6 - half, rel_tol=1e-9) and math.isclose(r.ci[1], 92e-6 + half, rel_tol=1e-9)
    # every comparison separates completely: p = 2/252, Holm over the card's 4 = 0.032
    assert r.verdict == scorecard.AGREES and r.why == "OVS+VXLAN: Holm p = 0.032; LB+VXLAN: Holm p = 0.032"
    assert r.decided == "the test, Holm over 4 tests"
    lo = got["cross-4vm-loss"]    # the study's lowest is here the highest: differs, with the offered-load reason
    assert math.isclose(lo.estimate, 0.20, rel_tol=1e-9)      # mean of pairs (0.10 + 0.30) / 2, not their sum
    assert lo.verdict == scorecard.DIFFERS and "the opposite" in lo.why
    assert "offered load not reached in 5 of 15 trials (e.g. offered 12 Mbit/s of 1 Gbit/s (1 %))" in lo.why
    assert "best mean: OVS+GRE" in lo.ours
    jitter = got["cross-4vm-jitter"]
    assert jitter.verdict == scorecard.CANNOT and jitter.why.startswith("not measured")
    udp = got["same-2vm-udp"]     # a claim the design cannot test says so
    assert udp.verdict == scorecard.CANNOT and udp.why == "not checkable here" and udp.study == "LB+VXLAN"
    assert udp.to_decide.startswith("this machine cannot: the study sent UDP unbounded (uperf)")
    assert scorecard.table_rows([udp])[0][-1] == f"not checkable here; {udp.to_decide}"


def test_s3_rr_rows_ipsec_lowers_rr_is_the_hand_computed_ratio(tmp_path):
    """S3's 'IPsec lowers request/response performance' row (TCP_RR, 16384 B): ESP 3DES 900/1000/1100 per s against
    none 1800/2000/2200 per s, means 1000 and 2000: 0.50x, lower as the study says, but 3 + 3 trials are too few for
    the test (smallest p 0.1), and the row says how many would do; the UDP_RR row is not measured."""
    b = Book(tmp_path / "s3.db", spec_text=S3)
    rr = {"type": "netperf", "test": "TCP_RR", "message_size": 16384}
    for enc, vals in ((ESP, [900, 1000, 1100]), ("none", [1800, 2000, 2200])):
        sc = b.scenario(s3_labels(enc, size="16384"), {"encryption": enc})
        b.trials(sc, "netperf", rr, stream(vals, "transactions_per_s"))
    data = load(b.store, b.cid)
    got = {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}
    row = got["ipsec-lowers-rr"]
    assert math.isclose(row.estimate, 0.5) and row.n == (3, 3) and row.verdict == scorecard.CANNOT
    assert row.why == stats.NO_TEST and row.decided == ""
    # a Holm family of 1: the exact test needs 4 + 4 to reach 0.05; at CV 10 % a side a halving is found with
    # ((1.96 + 0.84) * 0.141 / ln 2)^2 = 0.3 trials, so the 4-trial floor
    assert row.to_decide == "about 4 trials a cell at this CV (10.0 % / 10.0 %, ≈ 1 minute)"
    assert got["esp-ah-small-rr-udp"].verdict == scorecard.CANNOT and got["esp-ah-small-rr-udp"].why.startswith("not measured")


def test_s3_rr_floor_row_compares_each_trials_fastest_round_trip(tmp_path):
    """S3's 'ESP better than AH at small messages' on the fastest round trip (TCP_RR, 500 B): each trial's
    MIN_LATENCY; ESP 111/112/113/112 us against AH 64/65/66/65 us: 112 / 65 = 1.72x, higher where the study expects lower,
    so the row differs (the rates, 3000/s against 1000/s, would have agreed)."""
    b = Book(tmp_path / "s3.db", spec_text=S3)
    rr = {"type": "netperf", "test": "TCP_RR", "message_size": 500}
    for enc, floors, rate in ((ESP, [111e-6, 112e-6, 113e-6, 112e-6], 3000), (AH, [64e-6, 65e-6, 66e-6, 65e-6], 1000)):
        sc = b.scenario(s3_labels(enc, size="500"), {"encryption": enc})
        b.trials(sc, "netperf", rr, [[Sample.of("latency_min_s", f, pair=1), Sample.of("transactions_per_s", rate, pair=1)]
                                     for f in floors])
    data = load(b.store, b.cid)
    got = {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}
    row = got["esp-ah-small-rr-floor"]
    assert math.isclose(row.estimate, 112 / 65) and row.n == (4, 4) and row.verdict == scorecard.DIFFERS


def _cells_card(kind: str, cells: dict[str, list[tuple[list[float], dict, dict]]], **row) -> scorecard.Row:
    """A one-row card over in-memory cells: cell name -> one (sample values, sample metadata, trial metadata) a
    trial; a row of `kind` on a against b."""
    from vnetbench.results.dataset import Dataset, Trial
    ok = []
    for cell, trials in cells.items():
        for values, meta, tmeta in trials:
            ok.append(Trial(len(ok) + 1, int(cell == "b"), 1, "x", {}, {"cell": cell}, {}, tmeta, 0,
                            [{"metric": row.get("metric", "x"), "value": v, "metadata": {"pair": 1, **meta}}
                             for v in values]))
    card = {"scorecard": [{"id": "r", "kind": kind, "metric": "x", "a": {"cell": "a"}, "b": {"cell": "b"}, **row}]}
    return scorecard.evaluate(card, Dataset(None, {}, {}, ok, []))[0]


FLOOD_SHORT = {"flags": ["background offered 0.0025 of 0.25 Mbit/s (pair 3): the sender did not reach its rate"]}


def test_an_attack_round_whose_flood_fell_short_is_left_out_of_its_cell():
    """S5's card: six attack rounds at ~6000 interrupts/s against six control rounds at ~1000, but the floods of two
    attack rounds ran at 1 % of their rate (their ~1000 is no attack): the card leaves them out, as S5's tables do."""
    attack = [([v], {}, {}) for v in (5000, 6000, 7000, 6000)] + [([v], {}, FLOOD_SHORT) for v in (1001, 1003)]
    control = [([v], {}, {}) for v in (1000, 1010, 990, 1005, 995, 1002)]
    r = _cells_card("direction", {"a": attack, "b": control}, expect="higher")
    assert r.n == (4, 6)
    assert "2 of 12 trials left out: their background load offered less than 95 % of its rate" in r.why
    whole = _cells_card("direction", {"a": [(v, m, {}) for v, m, _ in attack], "b": control}, expect="higher")
    assert whole.n == (6, 6) and "left out" not in whole.why


def test_a_cards_percentile_needs_samples_enough_in_each_trial():
    """`reduce: p99` over 10 samples a trial is the trial's 10th-largest sample, not its p99: those trials are left
    out (here all, so the row is not measured, and says why); at 100 samples a trial they count."""
    few = {c: [([float(k + i) for k in range(10)], {}, {}) for i in range(4)] for c in "ab"}
    r = _cells_card("ratio", few, reduce="p99", study=1.0)
    assert r.n == (0, 0) and r.verdict == scorecard.CANNOT
    assert "8 of 8 trials left out: too few samples for their p99 (p99 needs >= 100 samples (had 10))" in r.why
    many = {c: [([float(k + i) for k in range(100)], {}, {}) for i in range(4)] for c in "ab"}
    assert _cells_card("ratio", many, reduce="p99", study=1.0).n == (4, 4)
    own = {c: [([1e-4 * (1 + i / 50)], {"observations": 30}, {}) for i in range(4)] for c in "ab"}
    r = _cells_card("ratio", own, metric="latency_p99_s", study=1.0)
    assert r.n == (0, 0) and "p99 needs >= 100 round trips (had 30)" in r.why


SPREAD_8 = (-1.53, -0.89, -0.49, -0.16, 0.16, 0.49, 0.89, 1.53)   # 8 normal scores: a CV of 6 % is 0.06 of each


def test_a_tie_margin_decides_equal_technologies(tmp_path):
    """S2's card as it is (tie margin 10 %): three technologies at the same level, 8 trials each (CV 1 %), tie; the
    named one ties with both others and is no best: differs, 'a tie'. One 30 % ahead of the other two agrees. Both in
    one Holm family of 8 tests (4 comparisons, 4 tie tests). A technology 5 % ahead with a CV of 6 % is open, and says
    how many trials would decide it (no longer 'more than 1000': a tie is decidable)."""
    b = Book(tmp_path / "s2.db", spec_text=S2)
    rng = np.random.default_rng(5)
    tcp, udp = {"type": "iperf3", "protocol": "tcp"}, {"type": "iperf3", "protocol": "udp", "udp_rate": 1e8}
    for env in ("OVS+GRE", "OVS+VXLAN", "LB+VXLAN"):
        b.trials(_s2(b, env, "tcp"), "iperf3", tcp,
                 [[Sample.of("rtt_loaded_s", 100e-6 * (1 + 0.01 * rng.standard_normal()), pair=1)] for _ in range(8)])
        level = 1e-3 / 1.3 if env == "LB+VXLAN" else 1e-3    # LB+VXLAN's latency under UDP 30 % below the others'
        b.trials(_s2(b, env, "udp"), "iperf3", udp,
                 [[Sample.of("rtt_loaded_s", level * (1 + 0.01 * rng.standard_normal()), pair=1)] for _ in range(8)])
    data = load(b.store, b.cid)
    got = {r.id: r for r in scorecard.evaluate(data.campaign.spec, data)}
    tie = got["cross-4vm-latency"]
    assert tie.verdict == scorecard.DIFFERS and tie.why.count("a tie (within 10 %") == 2, tie.why
    assert tie.decided == "the test, Holm over 8 tests"
    best = got["cross-4vm-udp-latency"]
    assert best.verdict == scorecard.AGREES and "tie" not in best.why, best.why
    b2 = Book(tmp_path / "open.db", spec_text=S2)
    for env in ("OVS+GRE", "OVS+VXLAN", "LB+VXLAN"):
        level = 95e-6 if env == "OVS+GRE" else 100e-6     # the named one 5 % ahead: inside the margin
        b2.trials(_s2(b2, env, "tcp"), "iperf3", tcp,
                  [[Sample.of("rtt_loaded_s", level * (1 + 0.06 * z), pair=1)] for z in SPREAD_8])
    data = load(b2.store, b2.cid)
    row = next(r for r in scorecard.evaluate(data.campaign.spec, data) if r.id == "cross-4vm-latency")
    assert row.verdict == scorecard.CANNOT and row.to_decide.startswith("about "), (row.why, row.to_decide)


def test_a_selector_written_with_yamls_on_and_off_matches_the_level_the_run_kept():
    """YAML reads `off` as false: a row's `offloads: {tso: off}` (S4's offloads row) and `offloads: on` select the
    levels the run stored as 'off' and 'on', and nothing else."""
    import yaml
    off, on = yaml.safe_load("{offloads: {tso: off, gso: off}}"), yaml.safe_load("{offloads: on}")
    level_off = {"offloads": {"tso": "off", "gso": "off", "gro": "off"}}
    labels_off, labels_on = {"offloads": "tso/gso/gro off"}, {"offloads": "on"}
    assert scorecard.matches(off, labels_off, level_off, None)
    assert not scorecard.matches(off, labels_on, {"offloads": "on"}, None)
    assert scorecard.matches(on, labels_on, {"offloads": "on"}, None)
    assert not scorecard.matches(on, labels_off, level_off, None)
    assert not scorecard.matches(yaml.safe_load("{offloads: {tso: on}}"), labels_off, level_off, None)


def test_s4_keeps_vxlan_without_offloads_a_row_of_its_own():
    from vnetbench.report.analyses.s4 import interface
    labels = {"attach": "switch", "switch": "linuxbridge", "overlay": "vxlan", "encryption": "none", "kernel": "shared"}
    assert interface({**labels, "offloads": "on"}) == "VXLAN"
    assert interface({**labels, "offloads": "tso/gso/gro off"}) == "VXLAN (tso/gso/gro off)"
    assert interface(labels) == "VXLAN"   # a campaign from before the factor
