"""VM kernels (`vm_kernel: guest`): the factor's levels and their one-line errors, which VMs a level makes guests and
why a scenario cannot have them, and kill -9 of a run while its guest VM carries traffic, then `clean`. S5 with its
guest VMs end to end (per-VM counters, the report's per-VM table) is tests/test_suite_s5.py's smoke test."""
import json
import signal
import subprocess
import textwrap
import time

import pytest

from conftest import clean_after_kill, guest_pids, netns_names, start_run, trial_rows
from vnetbench.guests import kind_class, vms
from vnetbench.hosts.namespaces import NamespacesPlacement
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import SpecError, loads

SPEC = """\
name: vmk
repetitions: 1
order: sequential
factors:
  pairs: 2
  placement: cross-host
  vm_kernel: {level}
workloads:
  - {{type: iperf3, duration: {duration}}}
"""


def spec(level: str, duration: int = 1):
    return loads(SPEC.format(level=level, duration=duration), "vmk.yaml")


@pytest.mark.parametrize("level, message", [
    ("vm", "factors.vm_kernel: 'vm' is not allowed; use shared, guest or a guest kind (qemu, uml)"),
    ("{type: guest, kind: vm}", "factors.vm_kernel: vm_kernel kind 'vm' is no guest kind; known: qemu, uml"),
    ("{type: guest, side: left}", "factors.vm_kernel: vm_kernel option 'side': Input should be 'client', 'server' or 'both'"),
    ("{type: guest, pair: [1]}", "factors.vm_kernel: vm_kernel has no option 'pair'; its options: type, kind, pairs, side, vcpus, memory"),
    ("{type: shared, pairs: [1]}", "factors.vm_kernel: vm_kernel: kind, pairs, side, vcpus and memory choose guest VMs; they need type: guest"),
    ("{type: guest, pairs: [0]}", "factors.vm_kernel: vm_kernel option 'pairs': pair numbers start at 1"),
])
def test_bad_levels_are_one_line_each(level, message):
    with pytest.raises(SpecError) as exc:
        spec(level)
    assert len(exc.value.lines) == 1 and exc.value.lines[0].endswith(message), exc.value.lines


def test_which_vms_are_guests_and_why_a_scenario_cannot_have_them():
    def scenarios(level):
        return expand(spec(level).experiment, None)
    [sc] = scenarios("guest")
    assert vms.wanted(sc) == ["h1v1", "h2v2", "h1v3", "h2v4"]  # pair k: client h1v(2k-1), server h2v(2k)
    [sc] = scenarios("{type: guest, pairs: [2], side: server}")
    assert vms.wanted(sc) == ["h2v4"] and vms.decide(sc) is None and "h2v4" in sc.implementation["vm_kernel"]
    [sc] = scenarios("shared")
    assert vms.wanted(sc) == [] and vms.decide(sc) is None and vms.kind(sc) is None
    # the kind: one choice, by its name or by `guest` (the default kind)
    assert [vms.kind(s) for level in ("guest", "uml", "{type: guest, kind: uml}") for s in scenarios(level)] == \
        ["uml"] * 3 and vms.wanted(scenarios("uml")[0]) == ["h1v1", "h2v2", "h1v3", "h2v4"]
    sc = scenarios("guest")[0]
    sc.levels["attach"] = "direct"
    assert "attach direct has no switch port" in vms.decide(sc) and vms.wanted(sc) == []
    sc = scenarios("guest")[0]
    sc.labels["encryption"] = "ipsec"  # its ends are the guests' kernels (vms.check_encryption: the e2e test below)
    assert vms.decide(sc) is None and vms.encrypting_vms(sc) == ["h1v1", "h2v2", "h1v3", "h2v4"]
    sc = scenarios("{type: guest, pairs: [3]}")[0]
    assert vms.decide(sc) == "vm_kernel guest: pair 3 is a guest but the scenario has 2 pairs"


def test_a_background_load_that_ends_before_the_window_is_named():
    from vnetbench.run.trial import Background, _uncovered
    from vnetbench.core.sample import Sample
    b = Background.__new__(Background)
    b.workload, b.samples, b.ended = workloads_kind("cpuload"), [], 100.0
    assert _uncovered(b, (90.0, 99.9)) is None and _uncovered(b, None) is None
    assert _uncovered(b, (90.0, 102.0)).startswith("background cpuload ended 2.0 s before the measurement window did")
    b.samples = [Sample.of("throughput_bps", 1.0, window=[80.0, 95.0])]  # a tool's own window beats the thread's end
    assert "ended 4.0 s before" in _uncovered(b, (90.0, 99.0))


def workloads_kind(kind: str):
    return type("W", (), {"kind": kind})()


def _prefix(db) -> str | None:
    import sqlite3
    try:
        with sqlite3.connect(db) as c:
            row = c.execute("SELECT prefix FROM campaigns WHERE id = 1").fetchone()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None



@pytest.mark.net
@pytest.mark.skipif(not kind_class("uml").support().ok, reason="User-Mode Linux not installed")
def test_kill_9_while_a_guest_vm_carries_traffic_then_clean_leaves_nothing(tmp_path, state_dir):
    path = tmp_path / "vmk.yaml"
    path.write_text(textwrap.dedent(SPEC.format(level="{type: guest, pairs: [1], side: server}", duration=30)))
    db = tmp_path / "vmk.db"
    run = start_run(path, db)
    try:
        deadline, prefix = time.monotonic() + 90, None
        while time.monotonic() < deadline:  # the guest is up and iperf3 runs into it: its server listens there
            prefix = prefix or _prefix(db)  # the run's (the capability probe's scratch ledger comes first)
            if prefix and guest_pids(prefix) and f"{prefix}-h2" in netns_names():
                guest_iperf = subprocess.run(["pgrep", "-f", "iperf3 -c 10.101.0.2"], capture_output=True).returncode
                if guest_iperf == 0:
                    break
            assert run.poll() is None, run.communicate()
            time.sleep(0.2)
        else:
            pytest.fail("the guest VM's trial did not start within 90 s")
        time.sleep(1)
    finally:
        run.send_signal(signal.SIGKILL)
        run.communicate()
    assert not trial_rows(db)  # killed mid-trial: nothing finished
    clean_after_kill(prefix, state_dir)


S1_ESP = {"type": "ipsec", "cipher": "aes-256-cbc", "integrity": "hmac-sha512"}  # S1's transform, IKEv2


def _throughput(sc, topo) -> float:
    """The scenario's own workload (a 1-s iperf3 TCP stream) between the pair's VMs, as the runner runs it."""
    samples = sc.workloads[0].run(topo.pairs)
    return next(s.value for s in samples if s.metric == "throughput_bps")


@pytest.mark.net
@pytest.mark.skipif(not kind_class("uml").support().ok, reason="User-Mode Linux not installed")
def test_vm_to_vm_ipsec_runs_in_the_guest_vms_kernels_esp_on_the_wire_never_clear_text(state_dir, tmp_path):
    """Both VMs of a cross-host pair are guests: the IPsec between them is their own kernels' ESP (this machine's
    kernel has none), keyed by a charon inside each guest. On the underlay between the hosts (this machine's veth)
    the marker crosses in clear without encryption and never with it; ESP costs throughput; nothing is left."""
    from test_encryption import MARKER, read_pcap
    from test_guest_kernel import protocols
    from vnetbench.capabilities import detect
    from vnetbench.system.ledger import Ledger
    from vnetbench.build.topology import Topology
    caps = detect()
    text = SPEC.format(level="guest", duration=1).replace("pairs: 2", "pairs: 1")
    text = text.replace("factors:\n", "factors:\n  encryption: [none, " + json.dumps(S1_ESP) + ", "
                        + json.dumps(S1_ESP | {"keying": "manual"}) + "]\n  encryption_scope: vm-to-vm\n")
    runs = expand(loads(text, "vmk.yaml").experiment, caps)
    for sc in runs:
        assert sc.skip is None, sc.skip
    kernel = kind_class("uml").support().kernel  # e.g. uml-6.1.176: the results name the kernel the ESP ran in
    assert [sc.implementation["encryption"] for sc in runs[1:]] == [
        f"{kernel} + kernel-xfrm + strongswan-{caps.tools['charon'].detail} IKEv2", f"{kernel} + kernel-xfrm manual keys"]
    # a namespace VM at one end: that end's xfrm would be this machine's kernel's
    half = expand(loads(text.replace("vm_kernel: guest", "vm_kernel: {type: guest, side: server}"), "vmk.yaml")
                  .experiment, caps)[1]
    if not caps.has("xfrm-esp"):
        assert half.skip.startswith("encryption ipsec(aes-256-cbc,hmac-sha512): h1v1 is not a guest VM"), half.skip
    ledger = Ledger.create()
    guests = vms.VmGuests(ledger)
    bps, t0 = {}, time.monotonic()
    try:
        for sc in runs:
            topo = Topology(sc, ledger, placement=NamespacesPlacement(ledger, guests.for_scenario(sc)))
            pcap = tmp_path / f"wire-{sc.index}.pcap"
            try:
                topo.build()
                dump = topo.nodes["h1"].exec.spawn(["tcpdump", "-i", topo.ifname("u"), "-n", "-U", "--immediate-mode",
                                                    "-s", "0", "-w", str(pcap)], label="test tcpdump")
                line = ""
                while "listening on" not in line and dump.poll() is None:
                    line = dump.stderr.readline()
                pair = topo.pairs[0]
                ping = pair.client.node.run(["ping", "-c", "3", "-i", "0.1", "-W", "2", "-s", "200", "-p",
                                             MARKER.hex(), pair.server.addr], check=False)
                assert ping.returncode == 0, (sc.labels["encryption"], ping.stdout)
                time.sleep(0.2)
                dump.send_signal(signal.SIGINT)
                dump.communicate(timeout=10)
                if sc.index < 3:  # throughput with and without S1's ESP
                    bps[sc.labels["encryption"]] = _throughput(sc, topo)
            finally:
                topo.teardown()
            frames = read_pcap(pcap)
            clear, protos = sum(MARKER in f for f in frames), protocols(frames)
            if sc.labels["encryption"] == "none":
                assert clear >= 3 and 50 not in protos, (clear, protos)  # the control sees the marker
            else:
                assert clear == 0 and protos.count(50) >= 6 and 1 not in protos, (sc.labels["encryption"], clear, protos)
        print(f"guest VMs, 1-s TCP: {bps} ({time.monotonic() - t0:.1f} s)")
        assert 0 < bps["ipsec(aes-256-cbc,hmac-sha512)"] < bps["none"], bps
    finally:
        guests.close()
        ledger.remove_all()
    assert not guest_pids(ledger.prefix) and not [n for n in netns_names() if n.startswith(ledger.prefix)]
