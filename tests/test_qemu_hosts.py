"""kernel: qemu (hosts/qemu_per_host.py): each emulated host a qemu guest with Debian's cloud kernel, its VMs
namespaces inside it. With nothing booted: the level chooses the backend, the profiler refuses it, and where qemu
guests cannot run the scenario is skipped with the reason. Then TWO host guests, booted once for the module, serve
every test: plan = run, a VM pair across them over Linux bridge + VXLAN (iperf3 and ping), and kernel WireGuard
between the VMs under OVS's kernel datapath, both in the guests' own kernels; nothing of them is left afterwards."""
import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import netns_names, vnetbench
from test_hosts import plan_and_build
from vnetbench import hosts
from vnetbench.build.topology import Topology
from vnetbench.capabilities import detect
from vnetbench.core.scenario import CHOICES
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import loads
from vnetbench.guests import qemu
from vnetbench.probes import profile
from vnetbench.run import trial
from vnetbench.system.ledger import Ledger

SUPPORT = qemu.Qemu.support()
QEMU = pytest.mark.skipif(not SUPPORT.ok, reason=SUPPORT.reason or "qemu guests unavailable")

SPEC = """name: qemu-hosts
repetitions: 1
factors: {{kernel: qemu, placement: cross-host, {factors}}}
workloads:
  - {{type: iperf3, duration: 2}}
  - {{type: ping, count: 5, interval: 0.1}}
"""
VXLAN = "switch: linuxbridge, overlay: vxlan"
WIREGUARD = "switch: ovs, overlay: none, encryption: wireguard"


def scenario(factors: str, caps=None):
    return expand(loads(SPEC.format(factors=factors)).experiment, caps or detect())[0]


def test_the_level_chooses_qemu_host_guests_and_the_profiler_refuses_it():
    assert "qemu" in CHOICES["kernel"]
    backend = hosts.choose({"kernel": "qemu"})
    assert backend is hosts.load_all()["qemu"] and backend.kind == "qemu"
    assert hosts.choose({"kernel": "guest-per-host"}).kind == "uml"
    [sc] = expand(loads(SPEC.format(factors=VXLAN)).experiment, None)  # no capabilities: nothing probed
    probe, why = profile.for_trial(sc, None, SimpleNamespace(params=SimpleNamespace(profile=True)))
    assert probe is None and "qemu guests" in why


def test_kernel_qemu_where_qemu_cannot_run_is_a_skip_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("VNETBENCH_CACHE_DIR", str(tmp_path / "empty"))
    sc = scenario(VXLAN)
    assert sc.skip.startswith("kernel qemu: qemu guests: no guest kernel") and "install.sh" in sc.skip, sc.skip


# ---- two qemu host guests, booted once for the module -------------------------------------------------------------
@pytest.fixture(scope="module")
def booted(tmp_path_factory):
    """A run's host backends with the two host guests booted by the first open (later topologies reuse them, as a
    run does), in a ledger directory of the module's own, cleaned after."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VNETBENCH_STATE_DIR", str(tmp_path_factory.mktemp("qemu-hosts") / "state"))
        scs = {name: scenario(f) for name, f in (("vxlan", VXLAN), ("wireguard", WIREGUARD))}
        assert [sc.skip for sc in scs.values()] == [None, None], [sc.skip for sc in scs.values()]
        ledger = Ledger.create()
        run = hosts.Hosts(ledger)
        site = None
        try:
            t0 = time.monotonic()
            run.open(scs["vxlan"])
            site = run.backend(scs["vxlan"]).site
            print(f"\n2 qemu host guests up in {time.monotonic() - t0:.1f} s "
                  f"(each: {', '.join(f'{s:.1f}' for s in site.boot_s)} s)")
            yield scs, ledger, run, site
        finally:
            run.close()
            ledger.remove_all()
            run.disconnect()
            _nothing_left(ledger.prefix, site)


def _nothing_left(prefix: str, site) -> None:
    assert not [n for n in netns_names() if n.startswith(prefix)]
    if site is not None:
        gone = [g.pid for g in site.fleet.guests.values() if g.pid and Path(f"/proc/{g.pid}").exists()]
        assert not gone, f"qemu processes left: {gone}"
    left = subprocess.run(["pgrep", "-af", f"{prefix}-"], capture_output=True, text=True).stdout
    assert "qemu" not in left and "virtiofsd" not in left, left


def _build(sc, ledger, run) -> Topology:
    return Topology(sc, ledger, placement=run.open(sc)).build()


def _measure(sc, topo) -> dict[str, list[float]]:
    """Each workload once: the forward throughput, the echoes' RTTs and loss."""
    out: dict[str, list[float]] = {}
    for wl in sc.workloads:
        samples, _ = trial.measure(sc, topo, wl)
        for s in samples:
            if s.metric in ("rtt_s", "ping_loss_ratio") or (s.metric == "throughput_bps"
                                                             and s.metadata.get("direction") == "forward"):
                out.setdefault(s.metric, []).append(s.value)
            elif s.metric == "hypervisor_cpu_ratio":  # this machine's CPU for each host guest, its own scope
                out.setdefault(f"hypervisor {s.metadata['vm']} {s.metadata['part']}", []).append(s.value)
    return out


@pytest.mark.net
@QEMU
def test_plan_shows_what_run_executes_on_qemu_host_guests(booted, tmp_path):
    scs, ledger, run, _ = booted
    sc = scs["vxlan"]
    planned, executed, script = plan_and_build(sc, ledger, run)
    assert planned == executed
    assert executed[0][1] == "call" and "2 qemu host guests" in executed[0][4]
    (tmp_path / "spec.yaml").write_text(SPEC.format(factors=VXLAN))
    printed = vnetbench("plan", tmp_path / "spec.yaml").stdout
    assert "kernel: qemu: each host is a guest of the run" in printed and f"{SUPPORT.kernel} per host" in printed
    assert "# " + executed[0][4] in printed and "# " + executed[0][4] in script


@pytest.mark.net
@QEMU
def test_a_vxlan_pair_across_two_qemu_host_guests(booted):
    """iperf3 and ping between VMs on the two host guests, over the Linux bridge and VXLAN of the guests' own
    kernels (the cloud kernel, not this machine's); the rows say what ran."""
    scs, ledger, run, site = booted
    sc = scs["vxlan"]
    assert sc.implementation["kernel"] == f"{SUPPORT.kernel} per host", sc.implementation
    assert sc.implementation["overlay"].startswith("kernel-vxlan"), sc.implementation
    if qemu.probe_accel().name == "tcg":
        assert any("emulated CPU's timing" in n for n in sc.notes), sc.notes
    topo = _build(sc, ledger, run)
    try:
        kernel = topo.nodes["h1"].exec.run(["uname", "-r"]).stdout.strip()
        assert kernel != os.uname().release and kernel in SUPPORT.kernel
        got = _measure(sc, topo)
    finally:
        topo.teardown()
    print(f"\nVXLAN pair: TCP {got['throughput_bps'][0] / 1e6:.0f} Mbit/s, RTT median "
          f"{sorted(got['rtt_s'])[len(got['rtt_s']) // 2] * 1e3:.2f} ms")
    assert got["throughput_bps"][0] > 1e6 and got["ping_loss_ratio"] == [0.0] and len(got["rtt_s"]) == 5
    for h in ("h1", "h2"):  # each host guest's emulator worked while the pair's traffic crossed it
        assert all(0 < v <= os.cpu_count() * 1.1 for v in got[f"hypervisor {h} vcpu"]), got
        assert all(v <= a + 1e-6 for v, a in zip(got[f"hypervisor {h} vcpu"], got[f"hypervisor {h} all"]))


@pytest.mark.net
@QEMU
def test_kernel_wireguard_and_the_ovs_kernel_datapath_run_in_the_host_guests(booted):
    """No overlay, WireGuard between the VMs, OVS as the hosts' switch: the matrix chose the kernel's WireGuard and
    OVS's kernel datapath from the qemu guests' probe (not wireguard-go, not ovs-netdev), and inside the guests the
    tunnel carried the traffic through a wireguard device under an ovs-system datapath."""
    scs, ledger, run, _ = booted
    sc = scs["wireguard"]
    assert sc.implementation["encryption"] == "kernel-wireguard", sc.implementation
    assert sc.implementation["switch"].startswith("ovs-system"), sc.implementation
    topo = _build(sc, ledger, run)
    try:
        got = _measure(sc, topo)
        vm, host = topo.nodes["h1v1"].exec, topo.nodes["h1"].exec
        transfer = vm.run(["wg", "show", "all", "transfer"]).stdout.split()
        kinds = vm.run(["ip", "-d", "link", "show", "type", "wireguard"]).stdout
        dp = host.run(["ovs-dpctl", "show"]).stdout
        userspace = host.run(["sh", "-c", "pgrep -x wireguard-go || true"]).stdout
    finally:
        topo.teardown()
    print(f"\nWireGuard + OVS kernel datapath: TCP {got['throughput_bps'][0] / 1e6:.0f} Mbit/s")
    assert got["throughput_bps"][0] > 1e5 and got["ping_loss_ratio"] == [0.0]
    # the client VM's end: the stream went out through it, its ACKs and the echoes' replies came back
    assert "wireguard" in kinds and int(transfer[-1]) > 1e5 and int(transfer[-2]) > 1e3, (kinds, transfer)
    assert "system@ovs-system" in dp and not userspace.strip(), (dp, userspace)


PKTGEN = """name: qemu-pktgen
repetitions: 1
factors: {{kernel: {kernel}, placement: cross-host, switch: linuxbridge, overlay: none}}
workloads:
  - {{type: ndrpdr, generator: pktgen, frame_sizes: [64], search_time: 20, latency: []}}
"""


def test_kernel_pktgen_runs_only_where_the_kernel_has_it():
    """The machine's own kernel is asked, and never loaded into: without pktgen the scenario says why."""
    caps = detect()
    sc = expand(loads(PKTGEN.format(kernel="shared")).experiment, caps)[0]
    if caps.has("pktgen"):
        assert sc.skip is None
    else:
        assert sc.skip.startswith("workload 1 (ndrpdr) left out: kernel has no pktgen: "), sc.skip
    both = PKTGEN.format(kernel="shared") + "  - {type: ndrpdr, frame_sizes: [64]}\n"
    sc = expand(loads(both).experiment, caps)[0]  # trafgen still runs beside it
    assert sc.skip is None and [w.params.generator for w in sc.workloads] == (
        ["pktgen", "trafgen"] if caps.has("pktgen") else ["trafgen"])
    pktgen = expand(loads(PKTGEN.format(kernel="qemu")).experiment, caps)[0].workloads[0]
    assert "pktgen writes whole frames below IP" in pktgen.refuse({"encryption": "ipsec"})


@pytest.mark.net
@QEMU
def test_kernel_pktgen_in_a_host_guest_searches_under_its_own_ceiling(booted):
    """generator: pktgen in the host guests (their cloud kernel has the module, loaded by the guest the run booted):
    its ceiling over a bare veth in the client's host guest, flat out and paced, then the search over a flat bridge
    between the guests, every sample saying pktgen ran, every trial counted at the interfaces, no rate reported above
    what the generator offered; the guest keeps no scratch namespace after."""
    _, ledger, run, _ = booted
    sc = expand(loads(PKTGEN.format(kernel="qemu")).experiment, detect())[0]
    assert sc.skip is None, sc.skip
    topo = _build(sc, ledger, run)
    try:
        samples, _ = trial.measure(sc, topo, sc.workloads[0])
        left = topo.nodes["h1"].exec.run(["ip", "netns", "list"]).stdout
    finally:
        topo.teardown()
    [ceiling] = [s for s in samples if s.metric == "generator_ceiling_pps"]
    rates = {s.metric: s.value for s in samples if s.metric.startswith(("ndr_", "pdr_")) and s.metric.endswith("pps")}
    trials = [s for s in samples if s.metric == "ndrpdr_trial_loss_ratio"]
    print(f"\npktgen in a qemu host guest: ceiling {ceiling.value:,.0f} frames/s paced, "
          f"{ceiling.metadata['flat_out_pps']:,.0f} flat out; " + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items()))
    assert ceiling.metadata["generator"] == "pktgen" and ceiling.metadata["flat_out_pps"] > 0 < ceiling.value
    assert rates and all(0 < v <= ceiling.value * 1.05 + 1 for v in rates.values()), rates
    assert trials and all(0 <= t.value <= 1 and t.metadata["sent"] <= t.metadata["load_pps"] * 1.5 for t in trials)
    assert "-ng" not in left, left
