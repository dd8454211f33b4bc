"""Probe parsers on text captured from a real machine, and live windows on this one."""
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vnetbench.system.executor import LocalExecutor, NetnsExecutor
from vnetbench.probes import load_all
from vnetbench.probes.interfaces import InterfaceProbe, parse_ip_link_json
from vnetbench.probes.process import ProcessProbe, parse_pid_stat
from vnetbench.probes.procstat import (
    CPU_FIELDS, Snapshot, SystemProbe, cpu_shares, parse_proc_stat, interpolate, parse_softirqs, read_snapshot,
    series_samples, steal_ratio_now, window_samples)

FIX = Path(__file__).parent / "fixtures" / "proc"
SPIN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass"


def fixture(name):
    return (FIX / name).read_text()


def by(samples, metric, **meta):
    return [s for s in samples if s.metric == metric and all(s.metadata.get(k) == v for k, v in meta.items())]


def one(samples, metric, **meta):
    found = [s for s in by(samples, metric, **meta) if s.t is None and ("cpu" in meta or "cpu" not in s.metadata)]
    assert len(found) == 1, (metric, meta, found)
    return found[0].value


def spinner(seconds):
    return subprocess.Popen([sys.executable, "-c", SPIN.format(s=seconds)])


# --- parsers on captured text -------------------------------------------------------------------------

def test_parse_proc_stat():
    st = parse_proc_stat(fixture("stat_a.txt"))
    assert st.cpus["cpu"] == (9141, 0, 6707, 85893, 861, 0, 769, 17)
    assert st.cpus["cpu1"] == (6173, 0, 3677, 40577, 833, 0, 409, 8)
    assert set(st.cpus) == {"cpu", "cpu0", "cpu1"}
    assert (st.intr, st.ctxt) == (981564, 1609439)


def test_parse_proc_stat_old_kernel_has_fewer_columns():
    st = parse_proc_stat("cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 5 0 1\nctxt 6\n")
    assert st.cpus["cpu"] == (1, 2, 3, 4, 0, 0, 0, 0) and (st.intr, st.ctxt) == (5, 6)


def test_parse_softirqs():
    totals = parse_softirqs(fixture("softirqs_a.txt"))
    assert totals["NET_RX"] == 1345634 + 1262342
    assert totals["NET_TX"] == 8
    assert "HI" in totals and "RCU" in totals


def test_window_samples_from_captured_pair():
    a = Snapshot(10.0, parse_proc_stat(fixture("stat_a.txt")), parse_softirqs(fixture("softirqs_a.txt")))
    b = Snapshot(12.0, parse_proc_stat(fixture("stat_b.txt")), parse_softirqs(fixture("softirqs_b.txt")))
    s = window_samples(a, b)
    # Deltas all CPUs: user 101, system 2, idle 99, others 0 -> 202 ticks.
    assert one(s, "cpu_busy_ratio") == pytest.approx(103 / 202)
    assert one(s, "cpu_user_ratio") == pytest.approx(101 / 202)
    assert one(s, "cpu_system_ratio") == pytest.approx(2 / 202)
    assert one(s, "cpu_steal_ratio") == 0.0
    assert one(s, "cpu_busy_ratio", cpu=0) == pytest.approx(3 / 101)
    assert one(s, "cpu_busy_ratio", cpu=1) == pytest.approx(1.0)
    assert one(s, "interrupts_per_s") == pytest.approx((981980 - 981564) / 2)
    assert one(s, "context_switches_per_s") == pytest.approx((1609602 - 1609439) / 2)
    assert one(s, "net_rx_softirqs_per_s") == 0.0
    assert all(x.metadata["scope"] == "machine" and x.unit for x in s)


def test_cpu_shares_clamps_backward_counters_and_empty_window():
    shares = cpu_shares((0, 0, 0, 10, 5, 0, 0, 0), (1, 0, 1, 12, 4, 0, 0, 0))
    assert shares["iowait"] == 0 and sum(shares.values()) == pytest.approx(1)
    assert cpu_shares((1,) * 8, (1,) * 8) is None


def test_series_drops_short_intervals():
    st = [parse_proc_stat(fixture(f)) for f in ("stat_a.txt", "stat_b.txt", "stat_b.txt")]
    snaps = [Snapshot(0.0, st[0], {}), Snapshot(1.0, st[1], {}), Snapshot(1.05, st[2], {})]
    s = series_samples(snaps, 0.5)
    assert {x.t for x in s} == {1.0}
    assert all(x.metadata["series"] for x in s)
    assert {x.metric for x in s} == {"cpu_busy_ratio", "interrupts_per_s", "context_switches_per_s"}


def test_parse_pid_stat_with_parentheses_in_name():
    st = parse_pid_stat(fixture("pid_stat.txt"))  # comm is "we ird) (x", spinning for 0.7 s
    assert (st.state, st.cpu_ticks, st.start) == ("R", 70, 52416)


def test_parse_ip_link_json():
    a, b = parse_ip_link_json(fixture("ip_link_a.json")), parse_ip_link_json(fixture("ip_link_b.json"))
    assert set(a) == {"lo", "veth0"}
    assert b["veth0"].ifindex == 2
    assert (b["veth0"].rx_packets - a["veth0"].rx_packets, b["veth0"].tx_packets - a["veth0"].tx_packets) == (4, 6)
    assert b["veth0"].rx_dropped == b["veth0"].tx_dropped == 0


def test_registry():
    assert {"system", "process", "interfaces"} <= set(load_all())


# --- live -------------------------------------------------------------------------------------------

def system_window(seconds, interval=0.1, window=None):
    probe = SystemProbe(LocalExecutor(), interval=interval, series=0.25)
    probe.start()
    began = time.time()
    time.sleep(seconds)
    return probe.stop(window and (began + window[0], began + window[1])), probe.elapsed


@pytest.mark.net
def test_system_probe_live_busy_vs_idle():
    idle, _ = system_window(1.0)
    spinners = [spinner(1.6) for _ in range(os.cpu_count())]
    try:
        time.sleep(0.2)
        busy, elapsed = system_window(1.0)
    finally:
        for p in spinners:
            p.wait()
    assert 0 < one(busy, "cpu_busy_ratio") <= 1
    # every CPU spun: busier than before, unless other work beside the suite had the machine (nearly) full already
    assert one(busy, "cpu_busy_ratio") >= min(one(idle, "cpu_busy_ratio") + 0.1, 0.97), (idle, busy)
    assert one(busy, "cpu_busy_ratio") > 0.5
    assert one(busy, "interrupts_per_s") > 0 and one(busy, "context_switches_per_s") > 0
    parts = sum(one(busy, f"cpu_{f}_ratio") for f in ("user", "system", "irq", "softirq"))
    assert parts + (1 - one(busy, "cpu_busy_ratio")) == pytest.approx(1, abs=0.02)  # + idle + iowait + steal
    online = {int(k[3:]) for k in parse_proc_stat(Path("/proc/stat").read_text()).cpus if k != "cpu"}
    assert {s.metadata["cpu"] for s in by(busy, "cpu_busy_ratio") if "cpu" in s.metadata} == online
    ts = sorted({s.t for s in busy if s.t is not None})
    window = by(busy, "cpu_busy_ratio")[0].metadata["window"]
    assert window[1] - window[0] == pytest.approx(elapsed)
    assert len(ts) >= 3 and window[0] < ts[0] and ts[-1] == pytest.approx(window[1])  # absolute times
    assert all(0 <= s.value <= 1 for s in by(busy, "cpu_busy_ratio") if s.t is not None)


@pytest.mark.net
def test_system_probe_window_is_exactly_the_busy_part():
    """Idle, then every CPU busy for 1 s, then idle: over the busy second's window the machine is busy, over the
    whole span much less, and the window's edges are the ones asked for."""
    spinners = []
    probe = SystemProbe(LocalExecutor(), interval=0.1, series=0.5)
    probe.start()
    time.sleep(0.8)
    began = time.time()
    spinners = [spinner(1.2) for _ in range(os.cpu_count())]
    time.sleep(1.2)
    for p in spinners:
        p.wait()
    time.sleep(0.8)
    window = (began + 0.15, began + 1.05)  # python needs a moment to start spinning
    inside = probe.stop(window)
    assert by(inside, "cpu_busy_ratio")[0].metadata["window"] == pytest.approx(list(window))
    assert one(inside, "cpu_busy_ratio") > 0.7
    series = [s for s in by(inside, "cpu_busy_ratio") if s.t is not None]
    assert [s.t for s in series] == pytest.approx([window[0] + 0.5, window[1]])


def test_interpolate_at_window_edges():
    st = [parse_proc_stat(fixture(f)) for f in ("stat_a.txt", "stat_b.txt")]
    snaps = [Snapshot(100.0, st[0], {"NET_RX": 0}), Snapshot(102.0, st[1], {"NET_RX": 10})]
    mid = interpolate(snaps, 101.0)
    assert mid.stat.intr == pytest.approx((st[0].intr + st[1].intr) / 2) and mid.softirqs["NET_RX"] == 5
    s = window_samples(interpolate(snaps, 100.5), interpolate(snaps, 101.5))
    assert one(s, "interrupts_per_s") == pytest.approx((st[1].intr - st[0].intr) / 2)  # linear: same rate
    assert one(s, "net_rx_softirqs_per_s") == pytest.approx(5)
    assert interpolate(snaps, 50).t == 100.0 and interpolate(snaps, 500).t == 102.0  # clamped to the span


@pytest.mark.net
def test_live_shares_sum_to_one_and_steal():
    a = read_snapshot(LocalExecutor())
    time.sleep(0.3)
    b = read_snapshot(LocalExecutor())
    shares = cpu_shares(a.stat.cpus["cpu"], b.stat.cpus["cpu"])
    assert set(shares) == set(CPU_FIELDS) and sum(shares.values()) == pytest.approx(1, abs=0.02)
    assert 0 <= steal_ratio_now(LocalExecutor(), 0.2) <= 1


@pytest.mark.net
def test_process_probe_live():
    spin, reaped, zombie = spinner(1.8), subprocess.Popen(["sleep", "0.3"]), subprocess.Popen(["sleep", "0.3"])
    try:
        time.sleep(0.3)
        probe = ProcessProbe(LocalExecutor(), {"spin": spin.pid, "reaped": reaped.pid, "zombie": zombie.pid,
                                               "ghost": 2 ** 22 + 1})  # above the largest possible pid
        ticks = lambda: parse_pid_stat(Path(f"/proc/{spin.pid}/stat").read_text()).cpu_ticks / os.sysconf("SC_CLK_TCK")
        before, t0 = ticks(), time.time()
        probe.start()
        time.sleep(0.5)
        reaped.wait()
        time.sleep(0.5)
        samples = probe.stop()
        by_hand = (ticks() - before) / (time.time() - t0)  # the same counter read around the probe's window
    finally:
        for p in (spin, reaped, zombie):
            p.wait()
    assert [s.metadata["process"] for s in samples] == ["spin"]
    # On a shared machine the spinner gets what it gets: the probe must agree with its own counter read by hand.
    assert 0.02 < samples[0].value <= 1.1 and samples[0].value == pytest.approx(by_hand, abs=0.15)
    assert samples[0].unit == "ratio" and samples[0].metadata["pid"] == spin.pid


@pytest.fixture
def veth_netns():
    """Namespace NS with veth `va` (10.77.0.1) whose peer `vb` (10.77.0.2) sits in NS-peer."""
    ns = f"vbtest-probe-{secrets.token_hex(3)}"
    peer = f"{ns}-peer"
    created = []
    try:
        for name in (ns, peer):
            subprocess.run(["ip", "netns", "add", name], check=True)
            created.append(name)
        for cmd in (["-n", ns, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb", "netns", peer],
                    ["-n", ns, "addr", "add", "10.77.0.1/24", "dev", "va"],
                    ["-n", peer, "addr", "add", "10.77.0.2/24", "dev", "vb"],
                    ["-n", ns, "link", "set", "dev", "lo", "up"], ["-n", ns, "link", "set", "dev", "va", "up"],
                    ["-n", peer, "link", "set", "dev", "vb", "up"]):
            subprocess.run(["ip", *cmd], check=True)
        yield ns
    finally:
        for name in reversed(created):
            subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.mark.net
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
def test_interface_probe_live(veth_netns):
    node = NetnsExecutor(veth_netns)
    probe = InterfaceProbe(node)
    probe.start()
    node.run(["ping", "-c", "5", "-i", "0.1", "-W", "1", "10.77.0.2"])
    node.run(["ping", "-c", "3", "-i", "0.1", "-W", "1", "127.0.0.1"])
    samples = probe.stop()
    assert {s.metadata["interface"] for s in samples} == {"va"}  # lo is skipped
    assert all(s.metadata["node"] == veth_netns for s in samples)
    assert round(one(samples, "if_tx_packets_per_s") * probe.elapsed) >= 5
    assert round(one(samples, "if_rx_packets_per_s") * probe.elapsed) >= 5
    assert one(samples, "if_drops") >= 0


@pytest.mark.net
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
def test_interface_probe_namespace_gone(veth_netns):
    probe = InterfaceProbe(NetnsExecutor(veth_netns))
    probe.start()
    subprocess.run(["ip", "netns", "del", veth_netns], check=True)
    assert probe.stop() == []


def test_a_fully_idle_cpu_is_zero_busy_not_a_rounding_below_zero():
    from vnetbench.probes.procstat import busy
    # these shares sum to 1 only to rounding: 1 - 0.08 - 0.92 is -4.2e-17 in floating point
    assert busy({"idle": 0.08, "iowait": 0.92, "steal": 0.0}) == 0.0
    assert busy({"idle": 0.5, "iowait": 0.0, "steal": 0.0}) == 0.5


VCPU = """import threading, time
def spin():
    open(f"/proc/self/task/{threading.get_native_id()}/comm", "w").write("CPU 0/TCG")
    end = time.monotonic() + {s}
    while time.monotonic() < end: pass
t = threading.Thread(target=spin); t.start(); t.join()
"""


def test_the_hypervisor_probe_splits_a_guests_cpu_by_thread_and_keeps_its_own_scope():
    """A stand-in for a qemu process: one thread named as qemu names a vCPU thread spins, the main thread waits.
    The qemu kind's reading puts the spin in `vcpu`, its parts add up to `all`, and the probe's ratio is the same
    counter read by hand around its window; its samples are the hypervisor's scope, per VM and part."""
    from vnetbench.core.sample import dimensions
    from vnetbench.guests.base import Guest, cpu_seconds
    from vnetbench.guests.qemu import Qemu
    from vnetbench.probes.hypervisor import HypervisorProbe
    proc = subprocess.Popen([sys.executable, "-c", VCPU.replace("{s}", "1.6")])
    kind = Qemu.__new__(Qemu)  # nothing of qemu is needed to read a process's threads
    kind.vhost, kind.helpers = False, {}
    g = Guest("h2v2", 1, pid=proc.pid)
    try:
        time.sleep(0.3)
        probe = HypervisorProbe({"h2v2": lambda: kind.host_cpu(None, g), "gone": lambda: cpu_seconds(2 ** 22 + 1)})
        before, t0 = cpu_seconds(proc.pid), time.time()
        probe.start()
        time.sleep(0.8)
        samples = probe.stop()
        by_hand = (cpu_seconds(proc.pid) - before) / (time.time() - t0)
        parts = kind.host_cpu(None, g)
    finally:
        proc.wait()
    assert parts["all"] == pytest.approx(parts["vcpu"] + parts["io"]) and parts["vcpu"] > 0.8 * parts["all"] > 0
    got = {s.metadata["part"]: s.value for s in samples}
    assert list(got) == ["all", "vcpu", "io"] and {s.metadata["vm"] for s in samples} == {"h2v2"}
    assert 0.02 < got["all"] <= 1.1 and got["all"] == pytest.approx(by_hand, abs=0.15)
    assert got["vcpu"] <= got["all"] + 1e-9 and got["io"] < 0.2
    dims = dimensions(samples[1].metadata)
    assert (dims.scope, dims.which, dims.label()) == ("hypervisor", "h2v2 vcpu", "hypervisor h2v2 vcpu")
