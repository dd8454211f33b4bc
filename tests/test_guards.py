"""Guards: nothing impossible passes, nothing valid is rejected. Hand-built trials, one case per guard."""
from types import SimpleNamespace

import pytest

from vnetbench.results import guards
from vnetbench.run import trial as runner
from vnetbench.core.sample import Sample


def tput(value, pair=1, direction="forward", **meta):
    return Sample.of("throughput_bps", value, pair=pair, direction=direction, **meta)


def _scenario(rate, mtu=1500):
    return SimpleNamespace(underlay_rate=rate, vm_mtu=mtu, overhead=0, levels={})


def _iperf3(protocol="tcp", duration=1, message_size=None, udp_rate=100_000_000, streams=1):
    return SimpleNamespace(params=SimpleNamespace(protocol=protocol, duration=duration, message_size=message_size,
                                                  udp_rate=udp_rate, streams=streams))


def test_the_ceiling_includes_what_tbf_s_bucket_lets_through():
    """10 Mbit/s underlay, 1-s tests: 9.89 and 10.05 Mbit/s were rejected though tbf lets up to 10.07 through (its
    64 KiB bucket on top of the rate); 10.6 Mbit/s is still impossible."""
    ceiling = runner.ceiling(_scenario(10_000_000), _iperf3())
    assert ceiling == pytest.approx(10.07e6, rel=0.002)
    for ok in (9.89e6, 10.05e6):
        assert not guards.judge([tput(ok)], ceiling=ceiling, crossing={1}).invalid, ok
    assert guards.judge([tput(10.6e6)], ceiling=ceiling, crossing={1}).invalid
    # a 10-s test: the bucket is a tenth of that share
    assert runner.ceiling(_scenario(10_000_000), _iperf3(duration=10)) == pytest.approx(9.614e6, rel=0.002)


def test_small_udp_datagrams_cannot_carry_more_than_the_packet_rate_allows():
    """64-byte datagrams on a 100 Mbit/s link: each 106-byte frame (UDP 8, IP 20, Ethernet 14) carries 64 bytes, at
    most 60.4 Mbit/s of goodput
    (plus the bucket); 1.5x that passed when the ceiling assumed full-size packets."""
    ceiling = runner.ceiling(_scenario(100_000_000), _iperf3("udp", duration=10, message_size=64))
    assert ceiling == pytest.approx(100e6 * 64 / 106 * (1 + 65536 * 8 / 10 / 100e6), rel=0.001)
    assert guards.judge([tput(90e6)], ceiling=ceiling, crossing={1}).invalid
    assert not guards.judge([tput(55e6)], ceiling=ceiling, crossing={1}).invalid


def test_a_receiver_that_got_more_than_was_sent_is_invalid():
    got = guards.judge([tput(120e6), Sample.of("sender_throughput_bps", 100e6, pair=1, direction="forward")])
    assert got.invalid and "more than the sender sent" in got.invalid[0]
    fine = guards.judge([tput(99e6), Sample.of("sender_throughput_bps", 100e6, pair=1, direction="forward")])
    assert not fine.invalid


def test_percentiles_out_of_order_are_invalid():
    bad = guards.judge([Sample.of("latency_p50_s", 0.004, pair=1), Sample.of("latency_p99_s", 0.002, pair=1)])
    assert bad.invalid and "latency_p50_s" in bad.invalid[0] and "out of order" in bad.invalid[0]
    assert not guards.judge([Sample.of("latency_p50_s", 0.001, pair=1), Sample.of("latency_p99_s", 0.002, pair=1),
                             Sample.of("latency_max_s", 0.002, pair=1)]).invalid


def test_cpu_shares_cannot_sum_above_the_time_there_was():
    shares = [Sample.of(m, v, scope="machine") for m, v in
              (("cpu_user_ratio", 0.9), ("cpu_system_ratio", 0.6), ("cpu_softirq_ratio", 0.3))]
    v = guards.judge(shares)
    assert v.invalid and "sum to 1.80" in v.invalid[0]
    # per CPU, each CPU on its own: 0.6 + 0.3 on cpu 0 and 0.6 on cpu 1 is fine
    per_cpu = [Sample.of("cpu_user_ratio", 0.6, scope="machine", cpu=0), Sample.of("cpu_system_ratio", 0.3,
               scope="machine", cpu=0), Sample.of("cpu_user_ratio", 0.6, scope="machine", cpu=1)]
    assert not guards.judge(per_cpu).invalid


def test_no_underlay_rate_says_no_ceiling_was_checked():
    assert runner.ceiling(_scenario(None), _iperf3()) is None
    v = guards.judge([tput(50e9)], ceiling=None)
    assert not v.invalid and guards.NO_CEILING in v.flags


def test_a_sender_that_did_not_offer_its_rate_is_flagged():
    """A guest's '100 Mbit/s' UDP that got out 14.6 Mbit/s: flagged on the trial with the numbers."""
    offer = _workload({"type": "iperf3", "protocol": "udp", "udp_rate": "100M"}).offer()
    assert offer.rate == 100e6 and _workload({"type": "iperf3"}).offer() is None
    v = guards.judge([tput(14e6), Sample.of("sender_throughput_bps", 14.6e6, pair=1, direction="forward")],
                     ceiling=1e9, crossing={1}, offer=offer)
    assert not v.invalid and any(f.startswith("offered 14.6 of 100 Mbit/s") for f in v.flags)
    full = guards.judge([tput(99e6), Sample.of("sender_throughput_bps", 99.5e6, pair=1, direction="forward")],
                        ceiling=1e9, crossing={1}, offer=offer)
    assert not full.flags


def _workload(params: dict):
    from vnetbench.workloads import REGISTRY, load_all
    load_all()
    cls = REGISTRY[params["type"]]
    return cls(cls.Params(**params))


def test_http_clients_that_did_not_start_the_requests_asked_are_flagged():
    """S5's six clients at 10/s each, on a machine at load 16: 209 of 360 requests in 3 s. The clients' own count
    (requests started, failed ones included: a server the flood overwhelms is a result, not a shortfall)."""
    offer = _workload({"type": "http", "clients": 6, "rate": 10}).offer()
    assert offer.rate == 60
    short = guards.judge([Sample.of("http_started_per_s", 34.8, pair=1)], offer=offer).flags
    assert short == ["offered 34.8 of 60 requests/s (pair 1): the clients did not start the requests asked"]
    assert not guards.judge([Sample.of("http_started_per_s", 59.0, pair=1)], offer=offer).flags


def test_a_background_flood_that_did_not_offer_its_rate_is_flagged_too():
    """S2's tenant flood asked 4 x 250 Mbit/s in a guest and delivered 29: the background load's own rate."""
    flood = [Sample.of("sender_throughput_bps", 7.3e6, pair=1, direction="forward", role="background")]
    from vnetbench.workloads.base import Offer
    offer = Offer("sender_throughput_bps", 250e6)
    assert guards.check_offered(flood, offer, role="background")[0].startswith("offered 7.3 of 250 Mbit/s")
    assert not guards.check_offered(flood, offer)  # the foreground's check leaves background samples alone


def test_a_receiver_faster_over_its_shorter_seconds_is_not_impossible_more_bytes_are():
    """S4 smoke at load 16: the receiver's 580.66 Mbit/s against the sender's 544.39 was judged impossible, but each
    rate is over its own side's seconds (iperf3's sum_received and sum_sent): the same bytes over 6 % fewer seconds.
    More bytes received than sent is what cannot be."""
    m = {"pair": 1, "direction": "forward"}
    same = [Sample.of("throughput_bps", 580.66e6, **m, bytes=136e6), Sample.of("sender_throughput_bps", 544.39e6,
                                                                                 **m, bytes=136e6)]
    assert not guards.judge(same).invalid
    more = [Sample.of("throughput_bps", 500e6, **m, bytes=140e6), Sample.of("sender_throughput_bps", 544.39e6,
                                                                             **m, bytes=136e6)]
    assert guards.judge(more).invalid == ["throughput_bps (direction forward, pair 1): the receiver got 140000000 "
                                          "bytes, more than the sender sent (136000000)"]
    # without the bytes (another tool), the rates with their 5 % for the two windows, as before
    assert guards.judge([Sample.of("throughput_bps", 580.66e6, **m),
                         Sample.of("sender_throughput_bps", 544.39e6, **m)]).invalid


def _latency(pair=1, **values):
    return [Sample.of(f"latency_{k}_s", v, pair=pair) for k, v in values.items()]


def test_a_latency_minimum_above_its_median_or_maximum_is_invalid():
    above_median = guards.judge(_latency(min=0.005, p50=0.002, max=0.009)).invalid
    assert above_median and "latency_min_s" in above_median[0] and "latency_p50_s" in above_median[0]
    above_max = guards.judge(_latency(min=0.005, max=0.002)).invalid  # a tool that gives no percentiles
    assert above_max and "latency_min_s" in above_max[0] and "out of order" in above_max[0]
    assert not guards.judge(_latency(min=0.001, p50=0.002, p90=0.003, p99=0.004, max=0.004)).invalid


def test_an_aggregate_above_the_sum_of_its_pairs_is_invalid():
    pairs = [tput(1e9, pair=1), tput(1e9, pair=2)]
    tripled = guards.judge(pairs + [Sample.of("aggregate_throughput_bps", 6e9, pair="all", direction="forward")])
    assert tripled.invalid and "more than the sum of its pairs" in tripled.invalid[0]
    # its own window (first start to last end) may read it a little apart from the pairs' sum
    close = pairs + [Sample.of("aggregate_throughput_bps", 2e9 * (1 + guards.AGGREGATE_TOLERANCE / 2), pair="all",
                               direction="forward")]
    assert not guards.judge(close).invalid


def _cpus(n, **meta):
    return [Sample.of("cpu_busy_ratio", 0.5, scope="machine", cpu=i, **meta) for i in range(n)]


def test_one_process_cannot_use_more_cores_than_its_machine_has(monkeypatch):
    forty = Sample.of("process_cpu_ratio", 40.0, process="ovs-vswitchd", pid=7)
    bad = guards.judge(_cpus(2) + [forty]).invalid
    assert bad and "40 cores" in bad[0] and "2 CPUs" in bad[0]
    assert not guards.judge(_cpus(64) + [forty]).invalid  # where the probes counted 64 CPUs, 40 cores can be
    assert not guards.judge(_cpus(2) + [Sample.of("process_cpu_ratio", 1.9, process="ovs-vswitchd")]).invalid
    monkeypatch.setattr(guards.os, "cpu_count", lambda: 2)  # no CPU counted: this machine's
    assert guards.judge([forty]).invalid
    # another host's process, its CPUs counted there
    remote = Sample.of("process_cpu_ratio", 3.0, process="ovs-vswitchd@h1", host="h1")
    assert guards.judge(_cpus(2, host="h1") + [remote]).invalid
    assert not guards.judge(_cpus(4, host="h1") + [remote]).invalid


def test_an_interrupt_rate_no_cpu_can_take_is_invalid():
    absurd = guards.judge(_cpus(2) + [Sample.of("interrupts_per_s", 1e12, scope="machine")]).invalid
    assert absurd and "interrupts_per_s" in absurd[0] and "2 CPUs" in absurd[0]
    assert not guards.judge(_cpus(2) + [Sample.of("interrupts_per_s", 2e5, scope="machine")]).invalid
