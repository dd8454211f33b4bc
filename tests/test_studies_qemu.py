"""The studies on qemu guests (issue 30, item 6): S4's `qemu` profile runs WireGuard and OVS's kernel datapath in qemu
host guests (`kernel: qemu`), and S1's, S2's and S5's `vm` profiles run their VM-to-VM paths between qemu guest VMs
(`vm_kernel: qemu`). Each measures its own card's cells and nothing else, in rounds within 15 minutes; `plan` shows
the qemu command lines; a card decided on qemu-tcg rows names the emulated CPU. Matrix expansion, `plan` and
synthetic campaigns only: no guest boots here."""
from __future__ import annotations

import json

import pytest

from conftest import vnetbench
from vnetbench.capabilities import detect
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import Rounds, load
from vnetbench.results import scorecard
from vnetbench.results.dataset import Dataset, Trial

PROFILES = [("s4", "qemu"), ("s1", "vm"), ("s2", "vm"), ("s5", "vm")]
TCG = "qemu-tcg-6.1.0-56-cloud-amd64 + virtio-net (userspace)"


@pytest.fixture(scope="module")
def caps():
    return detect()


def _qemu(level) -> bool:
    return level == "qemu" or (isinstance(level, dict) and level.get("kind") == "qemu")


@pytest.mark.parametrize("study,profile", PROFILES)
def test_each_profile_runs_its_card_s_cells_in_qemu_guests_within_15_minutes(study, profile, caps):
    exp = load(f"suite:{study}", profile).experiment
    assert isinstance(exp.repetitions, Rounds) and exp.repetitions.budget <= 15 * 60
    assert any("emulated CPU" in x for x in exp.omits), exp.omits     # what TCG leaves out of the study, said
    scenarios = expand(exp, caps)
    key = "kernel" if study == "s4" else "vm_kernel"
    for sc in scenarios:
        assert _qemu(sc.levels[key]), sc.key
        if sc.skip:  # a machine without qemu or Debian's cloud kernel: skipped with the qemu kind's reason
            assert "qemu" in sc.skip, sc.skip
        else:        # the row names what ran: qemu-tcg-... here, qemu-kvm-... where KVM runs a stock kernel
            assert str(sc.implementation[key]).startswith("qemu-"), sc.implementation
    cov = scorecard.coverage(exp.model_dump(), scenarios)
    assert cov.claims >= 2
    assert not cov.unneeded, cov.unneeded
    assert all(x.endswith(")") and "(" in x for x in cov.unmeasured), cov.unmeasured


def test_s4_qemu_runs_kernel_wireguard_and_ovs_s_kernel_datapath_in_the_host_guests(caps):
    exp = load("suite:s4", "qemu").experiment
    scenarios = expand(exp, caps)
    cells = {(sc.labels["attach"], sc.labels["switch"], sc.labels["overlay"], sc.labels["encryption"], sc.labels["mtu"],
              sc.labels["measure"]) for sc in scenarios}
    assert len(cells) == len(scenarios) == 14
    assert {sc.labels["duration"] for sc in scenarios} == {"2"}
    assert {(a, e, mtu, m) for a, _, _, e, mtu, m in cells if a == "host"} == {
        ("host", "none", "1500", "tcp1"), ("host", "none", "1500", "rr"), ("host", "none", "9000", "tcp1"),
        ("host", "wireguard", "1500", "tcp1"), ("host", "wireguard", "1500", "rr"), ("host", "wireguard", "1500", "gen4"),
        ("host", "wireguard", "9000", "tcp1")}
    assert {(s, o) for a, s, o, *_ in cells if a == "switch"} == {("linuxbridge", "vxlan"), ("ovs", "vxlan"),
                                                                  ("ovs", "geneve")}
    runnable = [sc for sc in scenarios if not sc.skip]
    if not runnable:
        pytest.skip(f"no qemu host guests here: {scenarios[0].skip}")
    for sc in runnable:
        impl = sc.implementation
        assert impl["kernel"].startswith("qemu-") and impl["kernel"].endswith(" per host"), impl
        if sc.labels["encryption"] == "wireguard":
            assert impl["encryption"] == "kernel-wireguard", impl            # not wireguard-go
        if sc.labels["switch"] == "ovs" and sc.labels["attach"] == "switch":
            assert impl["switch"].startswith("ovs-system"), impl             # OVS's kernel datapath, not netdev


def test_vm_profiles_put_the_vms_in_qemu_guests_on_the_machine_s_kernel(caps):
    s1 = expand(load("suite:s1", "vm").experiment, caps)
    assert {(sc.labels["attach"], sc.labels["kernel"]) for sc in s1} == {("switch", "shared")}
    assert {sc.labels["encryption"] == "none" for sc in s1} == {True, False}         # Reference and IPsec
    s2 = expand(load("suite:s2", "vm").experiment, caps)
    assert {(sc.labels["switch"], sc.labels["overlay"], sc.labels["placement"]) for sc in s2} == {
        (s, o, p) for s, o in (("ovs", "vxlan"), ("ovs", "gre"), ("linuxbridge", "vxlan"))
        for p in ("same-host", "cross-host")}
    assert {(sc.labels["pairs"], sc.labels["protocol"]) for sc in s2} == {("1", "tcp")}
    s5 = expand(load("suite:s5", "vm").experiment, caps)
    assert {sc.labels["attack"] for sc in s5} == {"off", "on"}
    assert all(sc.levels["vm_kernel"]["pairs"] == [1, 2] and sc.levels["vm_kernel"]["side"] == "server" for sc in s5)
    for sc in (sc for sc in s1 if not sc.skip and sc.labels["encryption"] != "none"):
        # ESP in each VM's own kernel
        assert sc.implementation["encryption"].startswith("qemu-") and "kernel-xfrm" in sc.implementation["encryption"]


def test_plan_shows_the_qemu_command_lines_and_suites_lists_the_profiles():
    out = vnetbench("plan", "suite:s4", "--profile", "qemu").stdout
    assert "14 scenarios" in out and "scorecard: 12 checkable claims; 0 cells" in out, out[:2000]
    if "14 runnable" in out:
        assert "qemu-system-x86_64 -name" in out and "-accel " in out
    suites = {s["suite"]: s["profiles"] for s in json.loads(vnetbench("suites", "--json").stdout)}
    assert "qemu" in suites["suite:s4"]
    assert all("vm" in suites[f"suite:{s}"] for s in ("s1", "s2", "s5"))


# ---- the card: a verdict decided on qemu-tcg rows names the emulated CPU -------------------------------------------
def _campaign(impls: dict[str, dict], values: dict[str, list[float]]) -> Dataset:
    """One scenario a cell (its implementation as a run records it), the cell's trials with one value each."""
    scenarios, ok = {}, []
    for i, (cell, impl) in enumerate(impls.items(), 1):
        labels = {"cell": cell, "encryption": "wireguard" if cell == "wg" else "none"}
        scenarios[i] = {"labels": labels, "levels": labels, "status": "done", "reason": "", "implementation": impl}
        for v in values[cell]:
            ok.append(Trial(len(ok) + 1, i, 1, "x", {}, labels, labels, {},
                            samples=[{"metric": "x", "value": v, "metadata": {"pair": 1}}]))
    return Dataset(None, scenarios, {}, ok, [])


def _row(spec_rows: list[dict], impls, values) -> scorecard.Row:
    return scorecard.evaluate({"scorecard": spec_rows}, _campaign(impls, values))[-1]


RATIO = {"id": "wireguard-tput", "claim": "WireGuard / native", "kind": "ratio", "study": 0.5, "tolerance": 0.25,
         "metric": "x", "reduce": "mean", "a": {"cell": "wg", "encryption": "wireguard"}, "b": {"cell": "native"}}
# 8 trials a cell: a ratio row's exact order-statistic interval of each cell's median needs that many
VALUES = {"wg": [50.0, 51.0, 49.0, 50.5, 49.5, 50.0, 50.2, 49.8],
          "native": [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 100.2, 99.8]}


def test_a_claim_decided_on_qemu_tcg_host_guests_names_the_emulated_cpu():
    host = f"{TCG} per host"
    impls = {"wg": {"kernel": host, "encryption": "kernel-wireguard", "attach": "host"},
             "native": {"kernel": host, "encryption": "none", "attach": "host"}}
    r = _row([RATIO], impls, VALUES)
    assert r.verdict == scorecard.AGREES                       # 0.5 inside the band, 8 + 8 trials at CV ~1 %
    assert r.stand_in == "qemu-tcg, an emulated CPU (the study: hardware CPUs)"   # kernel WireGuard: no wireguard-go
    assert r.reads == "agrees — stand-in: qemu-tcg, an emulated CPU (the study: hardware CPUs)"
    assert r.as_dict()["reads"] == r.reads
    # the same cells on wireguard-go: both stand-ins named; on qemu-kvm: like for like, a plain 'agrees'
    go = {**impls, "wg": {**impls["wg"], "encryption": "wireguard-go-0.0.2023"}}
    assert _row([RATIO], go, VALUES).stand_in == ("wireguard-go (the study: kernel WireGuard); qemu-tcg, an "
                                                  "emulated CPU (the study: hardware CPUs)")
    kvm = {c: {**i, "kernel": i["kernel"].replace("qemu-tcg", "qemu-kvm")} for c, i in impls.items()}
    assert _row([RATIO], kvm, VALUES).reads == scorecard.AGREES


def test_a_claim_on_qemu_tcg_vms_names_the_vms_and_the_emulated_cpu():
    vms = {"vm_kernel": f"{TCG} (h1v1, h2v2)", "switch": "linux-bridge", "overlay": "kernel-vxlan",
           "attach": "veth"}
    row = {**RATIO, "id": "vm-tput", "a": {"cell": "wg"}}
    r = _row([{"paper": {"vm": "Xen VMs"}}, row], {"wg": vms, "native": vms}, VALUES)
    assert r.stand_in == (f"qemu guest VMs ({TCG}) (the study: Xen VMs); "
                          "qemu-tcg, an emulated CPU (the study: hardware CPUs)")
    assert r.reads.startswith("agrees — stand-in: ") and "emulated CPU" in r.reads


def test_s4_analysis_keeps_the_qemu_guests_rows_apart_and_says_qemu_tcg(tmp_path):
    """A campaign of the qemu profile: its rows are named '(qemu guests)', each held against the guests' own native
    row; the findings say qemu-tcg and name OVS's kernel datapath, with the host guests' CPUs summed per Gbit/s."""
    from test_suites_s3_s4 import Book, s4_labels
    from vnetbench.core.sample import Sample
    from vnetbench.report.analyses import load_all as analyses
    b = Book(tmp_path / "s4.db", "name: t\nunderlay:\n  rate: 10gbit\n", {"cpu_count": 2})
    one = {"type": "iperf3", "streams": 1}
    host = f"{TCG} per host"

    def runs(values, busy):   # each host guest's own CPU (one vCPU each), as a qemu host guest's probe records it
        return [[Sample.of("throughput_bps", v, pair=1, direction="forward"),
                 *(Sample.of("cpu_busy_ratio", busy, scope="machine", host=h) for h in ("guest-h1", "guest-h2")),
                 *(Sample.of("cpu_busy_ratio", busy, scope="machine", host=h, cpu=0) for h in ("guest-h1", "guest-h2"))]
                for v in values]
    for labels, impl, values, busy in (
            (s4_labels(), {"switch": "none", "encryption": "none", "attach": "host"}, [400e6, 410e6, 390e6], 0.8),
            (s4_labels("switch", overlay="vxlan"), {"switch": "linux-bridge", "overlay": "kernel-vxlan"},
             [200e6, 210e6, 190e6], 0.8),
            (s4_labels("switch", switch="ovs", overlay="vxlan"), {"switch": "ovs-system", "overlay": "ovs-vxlan"},
             [100e6, 105e6, 95e6], 0.8),
            (s4_labels(enc="wireguard"), {"encryption": "kernel-wireguard", "attach": "host"}, [10e6, 11e6, 9e6],
             0.9)):
        b.trials(b.scenario(labels | {"kernel": "qemu"}, impl={"kernel": host, **impl}), "iperf3", one,
                 runs(values, busy))
    r = analyses()["s4"]().run(b.store, b.cid)
    rows = {row[0]: row for row in r.tables[0].rows}
    assert list(rows) == ["native (qemu guests)", "VXLAN (qemu guests)", "OVS+VXLAN (qemu guests)",
                          "WireGuard (qemu guests)"]
    assert rows["WireGuard (qemu guests)"][1] == f"{host} + kernel-wireguard + host"
    assert "ran with each host a qemu guest" in r.tables[0].note
    f = r.findings
    assert not any(x.startswith("'Tunnels lose") for x in f)            # no row of the machine's kernel was measured
    assert all(x.startswith("In the qemu host guests (compared with their own native row; qemu-tcg: an emulated "
                            "CPU's timing") for x in f[:3]), f
    assert "VXLAN 2.00x" in f[0] and "OVS+VXLAN 4.00x" in f[0]          # 400 / 200, 400 / 100: the guests' own native
    assert "native / WireGuard = 40.0x" in f[1] and "kernel-wireguard" in f[1]
    # CPU per Gbit/s: both host guests' 80 % summed (1.6 cores) over 0.1 and 0.2 Gbit/s
    assert "OVS+VXLAN (qemu guests) 16.00 vs VXLAN (qemu guests) 8.00 CPU cores per Gbit/s" in f[2]
    assert "the kernel datapath (ovs-system), as the study's" in f[2]
