"""Each tool's parser on real outputs captured on loopback (tests/fixtures/<tool>/)."""
import json
import math
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from vnetbench.catalog import METRICS
from vnetbench.workloads import load_all
from vnetbench.workloads import sockperf as sockperf_mod
from vnetbench.workloads.base import WorkloadError
from vnetbench.workloads.iperf3 import aggregate, parse_iperf3
from vnetbench.workloads.netperf import parse_netperf
from vnetbench.workloads.ping import check_ping, parse_ping, parse_rtts, ping_counts
from vnetbench.workloads.sockperf import parse_sockperf

FIX = Path(__file__).parent / "fixtures"
IPERF_OK = sorted(p.name for p in (FIX / "iperf3").glob("*.json") if p.name != "refused.json")


def text(tool: str, name: str) -> str:
    return (FIX / tool / name).read_text()


def by(samples, metric, **meta):
    return [s for s in samples if s.metric == metric and all(s.metadata.get(k) == v for k, v in meta.items())]


def one(samples, metric, **meta):
    found = by(samples, metric, **meta)
    assert len(found) == 1, (metric, meta, found)
    return found[0].value


def assert_units(samples):
    assert samples
    for s in samples:
        assert s.unit == METRICS[s.metric].unit and math.isfinite(s.value), s


# ---------------------------------------------------------------- iperf3

def receiver_sums(doc):
    """direction -> the end sum counted by the receiver, straight from the JSON."""
    end, reverse = doc["end"], bool(doc["start"]["test_start"]["reverse"])
    out = {"reverse" if reverse else "forward": end["sum_received"]}
    if "sum_received_bidir_reverse" in end:
        out["reverse"] = end["sum_received_bidir_reverse"]
    return out


@pytest.mark.parametrize("name", IPERF_OK)
def test_iperf3_throughput_is_the_receivers(name):
    raw = text("iperf3", name)
    doc, samples = json.loads(raw), parse_iperf3(raw, pair=3)
    assert_units(samples)
    assert all(s.metadata["pair"] == 3 for s in samples)
    for direction, recv in receiver_sums(doc).items():
        bps = one(samples, "throughput_bps", direction=direction)
        assert bps == pytest.approx(recv["bytes"] * 8 / recv["seconds"], rel=0.01)
        assert bps == recv["bits_per_second"]
    assert {s.metadata["direction"] for s in by(samples, "throughput_bps")} == set(receiver_sums(doc))


@pytest.mark.parametrize("name", IPERF_OK)
def test_iperf3_interval_series_adds_up_to_the_total(name):
    raw = text("iperf3", name)
    doc, samples = json.loads(raw), parse_iperf3(raw, pair=1)
    start = doc["start"]["timestamp"]["timesecs"] + doc["start"]["test_start"]["omit"]
    for direction, recv in receiver_sums(doc).items():
        series = sorted(by(samples, "throughput_interval_bps", direction=direction), key=lambda s: s.t)
        assert len(series) >= 2
        ts = [start] + [s.t for s in series]  # absolute times, one interval after the other
        assert all(b > a for a, b in zip(ts, ts[1:]))
        assert all(s.t - s.metadata["seconds"] == pytest.approx(a) for s, a in zip(series, ts))
        carried = sum(s.value * s.metadata["seconds"] / 8 for s in series)
        assert carried == pytest.approx(recv["bytes"], rel=0.01)
        (total,) = by(samples, "throughput_bps", direction=direction)
        assert total.metadata["window"] == pytest.approx([start, start + recv["seconds"]], abs=0.01)


def test_iperf3_omit_shifts_the_series_and_is_left_out():
    doc = json.loads(text("iperf3", "tcp_omit.json"))
    assert doc["start"]["test_start"]["omit"] == 1
    series = by(parse_iperf3(text("iperf3", "tcp_omit.json"), began=doc["start"]["timestamp"]["timesecs"] + 0.3),
                "throughput_interval_bps")
    t0 = doc["start"]["timestamp"]["timesecs"] + 0.3  # spawned after the whole second iperf3 stamps: ours counts
    assert len(series) == 2 and min(s.t for s in series) - t0 > 1.5
    assert series[0].metadata["window"][0] == pytest.approx(t0 + 1)


def test_iperf3_udp_loss_counted_at_the_receiver():
    raw = text("iperf3", "udp_loss.json")
    end, samples = json.loads(raw)["end"], parse_iperf3(raw)
    recv, blksize = end["sum_received"], json.loads(raw)["start"]["test_start"]["blksize"]
    assert recv["lost_packets"] > 0
    # the trap: end.sum carries the sender's bytes next to the receiver's loss
    assert end["sum"]["bytes"] == end["sum_sent"]["bytes"] > recv["bytes"]
    assert recv["bytes"] == (recv["packets"] - recv["lost_packets"]) * blksize
    arrived = recv["packets"] - recv["lost_packets"]
    assert one(samples, "udp_loss_ratio") == pytest.approx(1 - arrived / end["sum_sent"]["packets"])
    assert one(samples, "udp_loss_ratio") >= recv["lost_percent"] / 100 - 1e-9
    assert one(samples, "throughput_bps") < 0.95 * one(samples, "sender_throughput_bps")
    assert one(samples, "jitter_s") == pytest.approx(recv["jitter_ms"] / 1000)
    assert 0 < one(samples, "jitter_s") < 0.01


@pytest.mark.parametrize("name,directions", [("udp_reverse_loss.json", {"reverse"}),
                                             ("udp_bidir_loss.json", {"forward", "reverse"})])
def test_iperf3_udp_reverse_and_bidir_loss_per_direction(name, directions):
    samples = parse_iperf3(text("iperf3", name))
    losses = {s.metadata["direction"]: s.value for s in by(samples, "udp_loss_ratio")}
    assert set(losses) == directions and all(0 < v < 0.5 for v in losses.values())
    for d in directions:
        assert one(samples, "throughput_bps", direction=d) < one(samples, "sender_throughput_bps", direction=d)


@pytest.mark.parametrize("name,tcp", [("tcp.json", True), ("tcp_multi.json", True), ("udp.json", False)])
def test_iperf3_protocol_specific_metrics(name, tcp):
    samples = parse_iperf3(text("iperf3", name))
    assert bool(by(samples, "tcp_retransmits")) is tcp
    assert bool(by(samples, "udp_loss_ratio")) is not tcp and bool(by(samples, "jitter_s")) is not tcp
    if not tcp:
        assert one(samples, "throughput_bps") == pytest.approx(50e6, rel=0.02)


def test_iperf3_aggregate_sums_pairs_per_direction():
    samples = parse_iperf3(text("iperf3", "tcp.json"), pair=1) + parse_iperf3(text("iperf3", "tcp_bidir.json"), pair=2)
    agg = {s.metadata["direction"]: s.value for s in aggregate(samples)}
    assert all(s.metadata["pair"] == "all" for s in aggregate(samples))
    assert agg["forward"] == pytest.approx(sum(s.value for s in by(samples, "throughput_bps", direction="forward")))
    assert agg["reverse"] == one(samples, "throughput_bps", pair=2, direction="reverse")


def test_iperf3_error_and_garbage_raise():
    with pytest.raises(WorkloadError, match="Connection refused"):
        parse_iperf3(text("iperf3", "refused.json"))
    with pytest.raises(WorkloadError, match="no JSON"):
        parse_iperf3("iperf3: error - unable to connect to server")


def test_iperf3_params_bounds():
    cls = load_all()["iperf3"].Params
    assert cls.model_validate({"type": "iperf3", "udp_rate": "500M"}).udp_rate == 500_000_000
    for bad in ({"duration": 0.5}, {"udp_rate": 0}, {"udp_rate": "1T"}, {"streams": 129}, {"colour": 1},
                {"protocol": "udp", "message_size": 65508}):
        with pytest.raises(ValidationError):
            cls.model_validate({"type": "iperf3", **bad})


# ---------------------------------------------------------------- ping

@pytest.mark.parametrize("name", ["v4.txt", "v6.txt", "loss.txt", "big.txt"])
def test_ping_one_rtt_per_reply(name):
    raw = text("ping", name)
    samples = parse_ping(raw, pair=2)
    assert_units(samples)
    tx, rx, _ = ping_counts(raw)
    rtts = by(samples, "rtt_s")
    assert len(rtts) == rx == len(re.findall(r"bytes from", raw))
    assert [s.value for s in rtts] == [float(ms) / 1000 for ms in re.findall(r"time=([\d.]+) ms", raw)]
    assert len({s.metadata["icmp_seq"] for s in rtts}) == rx
    first = float(re.search(r"^\[([\d.]+)\]", raw, re.M)[1]) - rtts[0].value  # -D stamps the reply (UNIX time)
    assert rtts[0].t == pytest.approx(first) and all(b.t >= a.t for a, b in zip(rtts, rtts[1:]))
    assert rtts[0].metadata["window"][0] == rtts[0].t
    assert one(samples, "ping_loss_ratio") == pytest.approx(1 - rx / tx)
    diffs = [abs(b.value - a.value) for a, b in zip(rtts, rtts[1:])]
    assert one(samples, "ping_jitter_s") == pytest.approx(sum(diffs) / len(diffs))


def test_ping_loss_fixture_has_loss_and_big_packets_are_65515_bytes():
    assert 0.05 < one(parse_ping(text("ping", "loss.txt")), "ping_loss_ratio") < 0.5
    assert "65507(65535) bytes of data" in text("ping", "big.txt")
    assert text("ping", "big.txt").count("65515 bytes from") == 5


def test_ping_parser_serves_latency_under_load():
    raw = text("ping", "v4.txt")
    loaded = parse_rtts(raw, "rtt_loaded_s", pair=1)
    assert [s.value for s in loaded] == [s.value for s in by(parse_ping(raw), "rtt_s")]
    assert {s.metric for s in loaded} == {"rtt_loaded_s"} and loaded[0].unit == "s"


def test_ping_failure_versus_loss():
    with pytest.raises(WorkloadError, match="message too long"):
        check_ping(1, text("ping", "too_big.txt"), text("ping", "too_big.err"))
    assert check_ping(1, text("ping", "loss.txt"), "") == text("ping", "loss.txt")  # rc 1 with loss is data
    with pytest.raises(WorkloadError, match="exited 2"):
        check_ping(2, "", "ping: unknown host")
    with pytest.raises(WorkloadError, match="no statistics"):
        ping_counts("PING 127.0.0.1 (127.0.0.1) 56(84) bytes of data.\n")


def test_ping_size_bounds():
    cls = load_all()["ping"].Params
    assert cls.model_validate({"type": "ping", "ping_size": 65507}).ping_size == 65507
    for bad in ({"ping_size": 65508}, {"ping_size": 8}, {"interval": 0.001}, {"count": 0}):
        with pytest.raises(ValidationError):
            cls.model_validate({"type": "ping", **bad})


# ---------------------------------------------------------------- sockperf

def test_sockperf_every_round_trip_and_ordered_percentiles():
    raw = text("sockperf", "udp_log.txt")
    samples = parse_sockperf(raw, pair=1)
    assert_units(samples)
    valid = re.search(r"RunTime=([\d.]+) sec; SentMessages=\d+; ReceivedMessages=(\d+)", raw.split("Valid")[1])
    obs = by(samples, "latency_s")
    assert len(obs) == int(valid[2]) == len(re.findall(r"^\d+, ", raw, re.M))
    assert all(s.metadata["thinned_every"] == 1 for s in obs)
    lo, p50, p90, p99, hi = (one(samples, f"latency_{k}_s") for k in ("min", "p50", "p90", "p99", "max"))
    assert 0 < lo <= p50 <= p90 <= p99 <= hi < 0.1
    assert all(lo - 2e-9 <= s.value <= hi + 2e-9 for s in obs)  # the log rounds to 1 ns differently
    assert sum(s.value for s in obs) / len(obs) == pytest.approx(one(samples, "latency_mean_s"), rel=0.01)
    assert one(samples, "transactions_per_s") == pytest.approx(int(valid[2]) / float(valid[1]))
    assert obs[0].t == 0 and obs[-1].t < 1.5


def test_sockperf_thins_long_logs(monkeypatch):
    monkeypatch.setattr(sockperf_mod, "MAX_OBSERVATIONS", 100)
    obs = by(parse_sockperf(text("sockperf", "udp_log.txt")), "latency_s")
    assert len(obs) <= 100 and obs[0].metadata["thinned_every"] == math.ceil(1096 / 100)


def test_sockperf_summary_without_log():
    samples = parse_sockperf(text("sockperf", "tcp.txt"))
    assert not by(samples, "latency_s")
    assert one(samples, "latency_p50_s") == pytest.approx(20.728e-6)
    assert one(samples, "latency_p50_s") <= one(samples, "latency_p99_s")


def test_sockperf_that_logged_no_round_trip_when_asked_fails_its_pair():
    """In a guest kernel sockperf could not open /dev/stdout for its full log, printed its summary, exited 0 and
    logged nothing: asked for every round trip, the pair fails instead of silently giving none."""
    from vnetbench.workloads.base import Endpoint, Pair
    from vnetbench.workloads.sockperf import _parse_pair
    pair = Pair(2, Endpoint(None, "10.0.0.1", "a"), Endpoint(None, "10.0.0.2", "b"))
    assert by(_parse_pair(text("sockperf", "udp_log.txt"), pair, 1e9, observations=True), "latency_s")
    assert _parse_pair(text("sockperf", "tcp.txt"), pair, 1e9, observations=False)
    with pytest.raises(WorkloadError, match="pair 2: sockperf logged no round trip"):
        _parse_pair(text("sockperf", "tcp.txt"), pair, 1e9, observations=True)


@pytest.mark.parametrize("name,words", [("half_rtt.txt", "--full-rtt"), ("refused_tcp.txt", "Connection refused"),
                                        ("no_server_udp.txt", "No messages were received")])
def test_sockperf_failures_raise(name, words):
    with pytest.raises(WorkloadError, match=re.escape(words)):
        parse_sockperf(text("sockperf", name))


# ---------------------------------------------------------------- netperf

def keyvals(raw):
    return dict(line.split("=", 1) for line in raw.splitlines())


@pytest.mark.parametrize("name", ["tcp_stream.txt", "tcp_stream6.txt", "udp_stream.txt"])
def test_netperf_stream_throughput_is_the_receivers(name):
    raw = text("netperf", name)
    kv, samples = keyvals(raw), parse_netperf(raw, name.split("_stream")[0].upper() + "_STREAM", pair=1)
    assert_units(samples)
    bps = one(samples, "throughput_bps")
    assert bps == pytest.approx(float(kv["REMOTE_RECV_THROUGHPUT"]) * 1e6)
    assert bps == pytest.approx(int(kv["REMOTE_BYTES_RECVD"]) * 8 / float(kv["ELAPSED_TIME"]), rel=0.01)


def test_netperf_udp_stream_floods_so_receiver_differs_from_sender():
    samples = parse_netperf(text("netperf", "udp_stream.txt"), "UDP_STREAM")
    assert one(samples, "throughput_bps") < 0.9 * one(samples, "sender_throughput_bps")


@pytest.mark.parametrize("name,test", [("tcp_rr.txt", "TCP_RR"), ("udp_rr.txt", "UDP_RR")])
def test_netperf_rr_percentiles(name, test):
    samples = parse_netperf(text("netperf", name), test, pair=1)
    assert_units(samples)
    lo, p50, p90, p99, hi = (one(samples, f"latency_{k}_s") for k in ("min", "p50", "p90", "p99", "max"))
    assert 0 < lo <= p50 <= p90 <= p99 <= hi
    # one transaction in flight: the mean round trip is the inverse of the rate
    assert one(samples, "latency_mean_s") == pytest.approx(1 / one(samples, "transactions_per_s"), rel=0.02)


def test_netperf_refused_and_udp_stream_refused():
    with pytest.raises(WorkloadError, match="REMOTE_RECV_THROUGHPUT"):
        parse_netperf(text("netperf", "refused.txt"), "TCP_STREAM")
    with pytest.raises(ValidationError, match="rate-limited"):
        load_all()["netperf"].Params.model_validate({"type": "netperf", "test": "UDP_STREAM"})


def test_ping_under_load_keeps_only_echoes_inside_the_window():
    raw = text("ping", "v4.txt")
    every = parse_rtts(raw, "rtt_loaded_s", pair=1)
    ts = [s.t for s in every]
    window = [ts[2] - 1e-6, ts[-3] + 1e-6]
    inside = parse_rtts(raw, "rtt_loaded_s", window, pair=1)
    assert [s.t for s in inside] == ts[2:-2]
    assert all(s.metadata["window"] == window for s in inside)
    samples = parse_ping(raw, "rtt_loaded_s", window, pair=1)
    values = [s.value for s in inside]
    jitter = sum(abs(b - a) for a, b in zip(values, values[1:])) / (len(values) - 1)
    assert one(samples, "ping_jitter_s") == pytest.approx(jitter)


# An iperf3 client interrupted with the window (a background load ended early: workloads/base.EarlyEnd), made
# whole with its server's report of the same test. Captured on loopback: a kept server (-s -J -i 1) and a client
# sent SIGINT after 5.4 s (UDP 250 kbit/s of 64 B) and 3.6 s (TCP -R at 50 Mbit/s).
INTERRUPTED = [("udp", "forward", "sum_sent"), ("tcp_reverse", "reverse", "sum_received")]


@pytest.mark.parametrize("name, direction, own", INTERRUPTED)
def test_an_interrupted_iperf3_client_is_made_whole_by_its_servers_report(name, direction, own):
    from vnetbench.workloads.iperf3 import completed
    client = json.loads(text("iperf3_interrupted", f"{name}_client.json"))
    server = json.loads(text("iperf3_interrupted", f"{name}_server.json"))
    assert client["error"].startswith("interrupt") and server["start"]["cookie"] == client["start"]["cookie"]
    span = client["end"][own]["seconds"]  # the client counted its own side until SIGINT
    doc = completed(client, server)
    samples = parse_iperf3(json.dumps(doc), pair=2)
    received = [v for k, v in server["end"].items() if k.startswith("sum_") and v["bytes"]][0]
    # The server's report counts every byte but stops its seconds at its last whole interval: the rate is over the
    # client's seconds instead, which the raw report would have overstated.
    bps = one(samples, "throughput_bps", direction=direction)
    assert bps == pytest.approx(received["bytes"] * 8 / span, rel=1e-6)
    assert received["bytes"] * 8 / received["seconds"] > bps * 1.05
    # The series: no interval twice, the part after the last one from the total, adding up to it, up to the end.
    series = sorted(by(samples, "throughput_interval_bps", direction=direction), key=lambda s: s.t)
    ends = [round(s.t, 6) for s in series]
    assert len(ends) == len(set(ends))
    assert sum(s.value * s.metadata["seconds"] / 8 for s in series) == pytest.approx(received["bytes"], rel=1e-6)
    assert series[-1].metadata["window"][1] - series[0].metadata["window"][0] == pytest.approx(span, abs=1e-3)
    # Each side's sender figures as it counted them, and each side's CPU.
    assert one(samples, "sender_throughput_bps", direction=direction) > 0
    assert one(samples, "receiver_cpu_ratio", direction=direction) > 0
    assert one(samples, "sender_cpu_ratio", direction=direction) > 0


@pytest.mark.parametrize("extra_blocks, flagged", [(1, False), (10, True)])
def test_an_interrupted_sender_is_owed_at_most_one_uncounted_block(extra_blocks, flagged):
    """iperf3 leaves its send loop for SIGINT with a longjmp, which can fall between a write and the count of its
    bytes: the server then holds one block per stream more than the client counted (a 1-Mbit/s UDP load in the test
    suite: 97 datagrams received, 96 counted sent, and the trial was judged impossible). One block is that race;
    more (here 10 blocks of 64 B: 0.4 %) cannot be explained by it and stays for the consistency check."""
    from vnetbench.results.guards import check_consistency
    from vnetbench.workloads.iperf3 import completed
    client = json.loads(text("iperf3_interrupted", "udp_client.json"))
    server = json.loads(text("iperf3_interrupted", "udp_server.json"))
    block = client["start"]["test_start"]["blksize"]
    received = server["end"]["sum_received"]
    received["bytes"] += extra_blocks * block
    received["packets"] += extra_blocks
    samples = parse_iperf3(json.dumps(completed(client, server)), pair=1)
    [sent] = by(samples, "sender_throughput_bps", direction="forward")
    problems = check_consistency(samples)
    assert bool(problems) == flagged, problems
    if not flagged:
        assert sent.metadata["bytes"] == received["bytes"]
        assert one(samples, "udp_loss_ratio", direction="forward") >= 0
    else:
        assert sent.metadata["bytes"] == client["end"]["sum_sent"]["bytes"]


def _pings(replied: list[int], sent: int) -> str:
    lines = [f"[1700000000.{k:06d}] 64 bytes from 10.0.0.2: icmp_seq={k} ttl=64 time=30.0 ms" for k in replied]
    return "\n".join([*lines, "", "--- 10.0.0.2 ping statistics ---",
                      f"{sent} packets transmitted, {len(replied)} received, {100 * (1 - len(replied) / sent):.4g}% "
                      f"packet loss, time 300ms"]) + "\n"


def test_echoes_in_flight_when_ping_had_its_replies_are_not_lost():
    # -c 10 -w: ten replies in, an eleventh echo sent 20 ms before, still in flight (a busy machine's loopback)
    assert one(parse_ping(_pings(list(range(1, 11)), 11), count=10), "ping_loss_ratio") == 0.0
    # one echo in the middle unanswered, ten replies in by the twelfth, which was the last answered
    assert one(parse_ping(_pings([*range(1, 5), *range(6, 12)], 12), count=10), "ping_loss_ratio") == \
        pytest.approx(1 / 11)
    # cut by the deadline with fewer replies than asked: what was not answered is lost
    assert one(parse_ping(_pings(list(range(1, 9)), 11), count=10), "ping_loss_ratio") == pytest.approx(3 / 11)
    assert one(parse_ping(_pings(list(range(1, 11)), 11)), "ping_loss_ratio") == pytest.approx(1 / 11)  # no count
