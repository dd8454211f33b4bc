"""qemu guests (guests/qemu.py, guests/qemu_image.py): the initramfs archive, module order, accelerator probe, labels,
the command line and the skip reasons, with nothing booted; then ONE qemu guest, booted once for the module as the
server VM of one pair (`vm_kernel: {type: guest, kind: qemu, pairs: [1], side: server}`), serves every test that
needs one: plan = run, a ping through its tap (the VM's port on its host's switch, not a veth), its own kernel and
modules, the agent over virtio-serial; and nothing of it is left afterwards."""
import io
import json
import os
import shlex
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import clean_after_kill, guest_pids, netns_names, start_run, vnetbench
from test_hosts import SPEC, plan_and_build
from vnetbench import hosts
from vnetbench.build.topology import PLAN_PREFIX, Topology
from vnetbench.capabilities import detect
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import loads
from vnetbench.guests import kind_class, qemu, qemu_image, vms
from vnetbench.guests.base import Fleet
from vnetbench.run import trial
from vnetbench.system.ledger import Ledger

LEVEL = "vm_kernel: {type: guest, kind: qemu, pairs: [1], side: server}"
SUPPORT = qemu.Qemu.support()
QEMU = pytest.mark.skipif(not SUPPORT.ok, reason=SUPPORT.reason or "qemu guests unavailable")


def _read_cpio(data: bytes) -> dict[str, tuple[int, bytes, tuple[int, int]]]:
    out, pos = {}, 0
    while True:
        assert data[pos:pos + 6] == b"070701"
        f = [int(data[pos + 6 + 8 * i: pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, rdev, namesize = f[1], f[6], (f[9], f[10]), f[11]
        name = data[pos + 110: pos + 110 + namesize - 1].decode()
        pos += 110 + namesize
        pos += -pos % 4
        body = data[pos: pos + size]
        pos += size + (-size % 4)
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, body, rdev)


def test_cpio_is_newc_with_devices_links_and_files():
    buf = io.BytesIO()
    qemu_image.write_cpio([("bin", stat.S_IFDIR | 0o755, b"", (0, 0)),
                           ("bin/x", stat.S_IFREG | 0o755, b"abcde", (0, 0)),
                           ("bin/sh", stat.S_IFLNK | 0o777, b"x", (0, 0)),
                           ("dev/console", stat.S_IFCHR | 0o600, b"", (5, 1))], buf)
    got = _read_cpio(buf.getvalue())
    assert got["bin/x"][1] == b"abcde" and stat.S_ISREG(got["bin/x"][0])
    assert got["bin/sh"][1] == b"x" and stat.S_ISLNK(got["bin/sh"][0])
    assert got["dev/console"][2] == (5, 1) and stat.S_ISCHR(got["dev/console"][0])
    if Path("/usr/bin/cpio").exists():  # the reference reader agrees
        names = subprocess.run(["cpio", "-t", "--quiet"], input=buf.getvalue(), capture_output=True).stdout.split()
        assert names == [b"bin", b"bin/x", b"bin/sh", b"dev/console"]


def test_modules_come_dependencies_first_and_builtins_are_skipped(tmp_path):
    mods = tmp_path / "lib/modules/6.1.0-test"
    mods.mkdir(parents=True)
    (mods / "modules.dep").write_text("kernel/a/virtio_net.ko: kernel/b/net_failover.ko kernel/c/failover.ko\n"
                                      "kernel/b/net_failover.ko: kernel/c/failover.ko\nkernel/c/failover.ko:\n")
    (mods / "modules.builtin").write_text("kernel/d/virtio.ko\n")
    tree = qemu_image.KernelTree("t", "6.1.0-test", tmp_path / "vmlinuz", tmp_path)
    assert qemu_image.module_closure(tree, ["virtio", "virtio-net"]) == [
        "kernel/c/failover.ko", "kernel/b/net_failover.ko", "kernel/a/virtio_net.ko"]
    with pytest.raises(qemu_image.ImageError, match="no module wireguard"):
        qemu_image.module_closure(tree, ["wireguard"])


def test_accelerator_probe_is_quick_and_says_why():
    t = time.perf_counter()
    acc = qemu.probe_accel()
    assert time.perf_counter() - t < 0.1
    assert acc.name in ("kvm", "tcg") and acc.reason
    if Path("/sys/module/kvm_pvm").exists() and not Path("/sys/module/kvm_intel").exists() \
            and not Path("/sys/module/kvm_amd").exists():
        assert acc.name == "tcg" and "kvm_pvm" in acc.reason


def test_labels_name_what_ran():
    assert qemu.label("tcg", False) == "qemu-tcg + virtio-net (userspace)"
    assert qemu.label("tcg", False, 2) == "qemu-tcg + virtio-net (userspace, 2 queues)"
    assert qemu.label("kvm", True, 4) == "qemu-kvm + virtio-net + vhost-net (4 queues)"
    assert qemu.label("tcg", False, 1, "6.1.0-56-cloud-amd64") == "qemu-tcg-6.1.0-56-cloud-amd64 + virtio-net (userspace)"
    tcg = qemu.notes(qemu.Accel("tcg", "no /dev/kvm"), False)
    assert "emulated CPU's timing" in tcg[0] and "no /dev/kvm" in tcg[0] and "userspace" in tcg[1]
    assert qemu.notes(qemu.Accel("kvm", "kvm_intel"), True) == ()


def test_command_line_has_taps_queues_and_no_vhost_without_the_device():
    fleet = Fleet(Ledger("vbplan"), "qemu")
    fleet.kind.vcpus = 2
    g = fleet.add("h1", nics=[("eth1", "lan")], mem_mb=256)
    argv = fleet.kind.argv(fleet, g)  # nothing started: what `plan` would show
    text = " ".join(argv)
    assert argv[0] == "qemu-system-x86_64" and "-smp 2" in text and "-m 256M" in text
    assert f"ifname={fleet.tap(g, None)}," in text and f"ifname={g.nics[0].tap}," in text
    assert "queues=2" in text and "mq=on,vectors=6" in text
    assert ("vhost=on" in text) == os.path.exists("/dev/vhost-net")
    assert f"vb.nic={g.nics[0].mac},eth1" in text
    assert f"vb.nic={qemu.mac(1, None)},{qemu.MGMT_NIC},10.251.0.1/24" in text
    if qemu.probe_accel().name == "tcg":
        assert "-accel tcg," in text


def _scenario(caps=None):
    return expand(loads(SPEC.format(extra=LEVEL)).experiment, caps or detect())[0]


def test_the_level_names_the_kind_and_support_says_why_not(tmp_path, monkeypatch):
    """`vm_kernel: qemu` is the kind's name; where qemu guests cannot run the scenario is skipped with the reason
    (no trial fails): the guest kernel not in the cache, qemu not installed."""
    for level in ("qemu", "{type: guest, kind: qemu}"):
        [sc] = expand(loads(SPEC.format(extra=f"vm_kernel: {level}")).experiment, None)
        assert vms.kind(sc) == "qemu" and vms.wanted(sc) == ["h1v1", "h2v2"]
    assert kind_class("qemu") is qemu.Qemu and qemu.Qemu.saves_vector_registers
    monkeypatch.setenv("VNETBENCH_CACHE_DIR", str(tmp_path / "empty"))
    sc = _scenario()
    assert sc.skip.startswith("vm_kernel guest: qemu guests: no guest kernel") and "install.sh" in sc.skip, sc.skip
    monkeypatch.setattr(qemu, "QEMU", "qemu-system-none")
    assert "need qemu-system-none (Debian package qemu-system-x86)" in _scenario().skip
    assert not qemu.Qemu.support().ok


@QEMU
def test_a_level_labels_what_ran():
    sc = _scenario()
    assert sc.skip is None, sc.skip
    label = sc.implementation["vm_kernel"]
    assert label.startswith(f"qemu-{qemu.probe_accel().name}-") and "+ virtio-net" in label and label.endswith("(h2v2)")
    if qemu.probe_accel().name == "tcg":
        assert any("emulated CPU's timing" in n for n in sc.notes) and "(userspace)" in label


# ---- one qemu guest, booted once for the module -------------------------------------------------------------------
@pytest.fixture(scope="module")
def booted(tmp_path_factory):
    """A run's host backends with one qemu guest VM (h2v2) booted: every test below builds its topology on it (the
    guest is reused, as a run reuses it from one topology to the next). Its own ledger directory, cleaned after."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VNETBENCH_STATE_DIR", str(tmp_path_factory.mktemp("qemu") / "state"))
        sc = _scenario()
        assert sc.skip is None, sc.skip
        ledger = Ledger.create()
        run = hosts.Hosts(ledger)
        fleet = None
        try:
            run.open(sc)  # boots the guest
            fleet = run.backend(sc).vms.fleet
            yield sc, ledger, run, fleet
        finally:
            run.close()
            ledger.remove_all()
            run.disconnect()
            from vnetbench.system.ledger import clean
            _, running = clean()
            assert not running, running
            assert not [n for n in netns_names() if n.startswith(ledger.prefix)]
            if fleet is not None:
                gone = [p for g in fleet.guests.values() for p in [g.pid, *(h.pid for h in fleet.kind.helpers.get(
                    g.label, []))] if p and Path(f"/proc/{p}").exists()]
                assert not gone, f"qemu or virtiofsd processes left: {gone}"
            left = subprocess.run(["pgrep", "-af", f"{ledger.prefix}-"], capture_output=True, text=True).stdout
            assert "qemu" not in left and "virtiofsd" not in left, left


def _build(sc, ledger, run) -> Topology:
    return Topology(sc, ledger, placement=run.open(sc)).build()


@pytest.mark.net
@QEMU
def test_plan_shows_what_run_executes_with_a_qemu_vm(booted, tmp_path):
    """plan's steps are run's: the qemu guest's boot, its data tap moved into its host's namespace as the VM's port
    (from the guest network's namespace, ahead of the host's batch that enslaves it), the VM's namespace inside it."""
    sc, ledger, run, fleet = booted
    planned, executed, script = plan_and_build(sc, ledger, run)
    assert planned == executed
    assert executed[0][1] == "call" and "qemu guest VMs" in executed[0][4]
    move = [(k, ln) for k, s in enumerate(executed) if s[0] == "gn" for ln in s[2]]
    assert [ln for _, ln in move] == [f"link set {PLAN_PREFIX}-1d0 netns {PLAN_PREFIX}-h2 name {PLAN_PREFIX}-t2"]
    enslaved = next(k for k, s in enumerate(executed) if s[0] == "h2" and any(
        f"{PLAN_PREFIX}-t2 " in ln and "master" in ln for ln in s[2]))
    assert move[0][0] < enslaved and move[0][1] in script
    (tmp_path / "spec.yaml").write_text(SPEC.format(extra=LEVEL))
    printed = vnetbench("plan", tmp_path / "spec.yaml").stdout
    assert f"-n {PLAN_PREFIX}-gn -batch" in printed and move[0][1] in printed and SUPPORT.kernel in printed
    # the exact command lines the boot ran (its file servers, then qemu), as plan prints them
    ran = [shlex.join(argv).replace(ledger.prefix, PLAN_PREFIX) + " &"
           for argv in fleet.kind.commands(fleet, fleet.guests["h2v2"])]
    assert ran[-1].startswith(f"ip netns exec {PLAN_PREFIX}-gn qemu-system-x86_64 ") and "-kernel " in ran[-1]
    lines = printed.splitlines()
    assert all(line in lines for line in ran), [line for line in ran if line not in lines]


@pytest.mark.net
@QEMU
def test_a_ping_crosses_the_qemu_tap_that_is_the_vms_port(booted):
    """One short real scenario: the pair's namespace VM pings the qemu VM over VXLAN and the Linux bridge, whose port
    for the VM is the tap qemu holds (`ip -d link`: tun type tap); the VM's own kernel is probed as its own scope.
    Built a second time on the same guest: its tap came back from the first topology and serves again."""
    sc, ledger, run, fleet = booted
    g = fleet.guests["h2v2"]
    for _ in range(2):
        topo = _build(sc, ledger, run)
        try:
            host, port = topo.nodes["h2"].netns, topo.ifname("t2")
            detail = subprocess.run(["ip", "-n", host, "-d", "link", "show", port], capture_output=True, text=True,
                                    check=True).stdout
            assert "tun type tap" in detail and "vnet_hdr on" in detail and "master" in detail, detail
            assert "veth" not in detail

            def packets() -> int:
                out = subprocess.run(["ip", "-n", host, "-j", "-s", "link", "show", port], capture_output=True,
                                     text=True, check=True).stdout
                s = json.loads(out)[0]["stats64"]
                return s["rx"]["packets"] + s["tx"]["packets"]
            before = packets()
            samples, _ = trial.measure(sc, topo, sc.workloads[0])
            rtts = [s.value for s in samples if s.metric == "rtt_s"]
            assert len(rtts) == 3 and all(r > 0 for r in rtts)
            assert [s.value for s in samples if s.metric == "ping_loss_ratio"] == [0.0]
            assert packets() - before >= 6  # 3 echoes in, 3 replies out, through the tap
            own = [s for s in samples if s.metadata.get("scope") == "vm" and s.metadata.get("vm") == "h2v2"]
            assert any(s.metric == "interrupts_per_s" for s in own)  # the qemu VM's own kernel, its own scope
            # ... and what running it cost this machine, the hypervisor's side, a scope of its own per VM and part
            hyp = {s.metadata["part"]: s.value for s in samples if s.metric == "hypervisor_cpu_ratio"
                   and s.metadata["scope"] == "hypervisor" and s.metadata["vm"] == "h2v2"}
            assert {"all", "vcpu", "io"} <= set(hyp) and 0 < hyp["vcpu"] <= hyp["all"] <= os.cpu_count() * 1.1, hyp
            assert sum(v for k, v in hyp.items() if k != "all") == pytest.approx(hyp["all"], rel=0.05, abs=0.01)
        finally:
            topo.teardown()
        gn = subprocess.run(["ip", "-n", fleet.netns, "-d", "link", "show", g.nics[0].tap], capture_output=True,
                            text=True).stdout
        assert "tun type tap" in gn, "the tap did not come back to the guest network"
        assert g.proc.poll() is None


@pytest.mark.net
@QEMU
def test_the_qemu_guest_has_its_own_kernel_modules_and_agent(booted):
    sc, ledger, run, fleet = booted
    g = fleet.guests["h2v2"]
    ex = g.executor
    kernel = ex.run(["uname", "-r"]).stdout.strip()
    assert kernel != os.uname().release and kernel in SUPPORT.kernel
    assert ex.run(["cat", f"/sys/class/net/{vms.NIC}/address"]).stdout.strip() == g.nics[0].mac
    # the cloud kernel's modules, autoloaded (WireGuard, xfrm's netlink), and the TUN device loaded at boot
    ex.run(["sh", "-c", "ip link add vbwg type wireguard && ip link del vbwg && ip xfrm state list && test -c /dev/net/tun"])
    ch = qemu.agent_channel(g)
    try:
        assert ch.run(["hostname"])["out"].strip() == "h2v2"
    finally:
        ch.close()
    assert 50 < fleet.memory_mb(g) < 600
    # `ip netns exec` became qemu itself, with exactly the command line argv() gives (what plan can show)
    assert Path(f"/proc/{g.pid}/cmdline").read_bytes().split(b"\0")[:-1] == [a.encode() for a in fleet.kind.argv(fleet, g)]


@pytest.mark.net
@QEMU
def test_kill_9_of_a_run_while_its_qemu_guest_boots_then_clean_leaves_nothing(tmp_path, state_dir):
    """`vnetbench run` killed while its qemu VM boots (qemu started, the guest not up yet), then `clean`: no qemu or
    virtiofsd process, tap, namespace, file or cgroup of the run is left."""
    path = tmp_path / "boot.yaml"
    path.write_text(SPEC.format(extra=LEVEL))
    db = tmp_path / "boot.db"
    run = start_run(path, db)
    prefix = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            prefix = prefix or _run_prefix(state_dir)
            if prefix and subprocess.run(["pgrep", "-f", f"qemu-system-x86_64 -name {prefix}-"],
                                         capture_output=True).returncode == 0:
                break
            assert run.poll() is None, run.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("the run's qemu guest did not start within 60 s")
        up = [c for c in (state_dir / prefix).rglob("console.log") if qemu.UP_MARK.encode() in c.read_bytes()]
    finally:
        run.send_signal(signal.SIGKILL)
        run.communicate()
    assert not up, "the guest came up before the kill: not a kill during boot"
    assert guest_pids(prefix)  # qemu (and virtiofsd) outlived their run: clean is what removes them
    clean_after_kill(prefix, state_dir)
    assert not guest_pids(prefix)


def _run_prefix(state_dir: Path) -> str | None:
    """The prefix of the run whose ledger holds a guest (the capability probe's scratch ledgers have none)."""
    for d in state_dir.glob("vb*"):
        if (d / "objects.jsonl").exists() and '"guest:' in (d / "objects.jsonl").read_text(errors="replace"):
            return d.name
    return None


def test_doctor_shows_the_qemu_kind_without_booting_one(tmp_path, monkeypatch):
    """doctor lists qemu beside UML: its kernel label or why not, and the features of its last kept probe, or when it
    will be probed; it never boots a qemu guest for that (a probe takes 30-55 s)."""
    from vnetbench.guests import probe as guest_probe
    monkeypatch.setattr(guest_probe, "PROBE_CACHE", tmp_path / "none.json")
    info = hosts.choose({"kernel": "qemu"}).info()
    assert info["backend"] == "qemu" and info["available"] == SUPPORT.ok
    if SUPPORT.ok:
        assert info["kernel"] == SUPPORT.kernel and info["probed"].startswith("not yet")
        key = guest_probe._probe_key("qemu")
        (tmp_path / "none.json").write_text(json.dumps({"probes": {key: {
            "time": time.time(), "tools": {}, "kernel": {"wireguard": [True, "kernel"], "tun": [False, "no"]},
            "boot": {"boot_s": 6.5, "memory_mb": 260}}}}))
        info = hosts.choose({"kernel": "qemu"}).info()
        assert info["kernel_features"] == {"wireguard": True, "tun": False} and info["boot_s"] == 6.5
    monkeypatch.setenv("VNETBENCH_CACHE_DIR", str(tmp_path / "empty"))
    gone = hosts.choose({"kernel": "qemu"}).info()
    assert not gone["available"] and "no guest kernel" in gone["reason"]


def test_vcpus_and_memory_are_options_of_the_level_and_plan_shows_them(tmp_path):
    """`vm_kernel: {type: guest, kind: qemu, vcpus: 2, memory: 512}`: the qemu command lines plan shows have 2 vCPUs,
    512 MB and a 2-queue NIC; the rows say the size; a UML guest asked for 2 vCPUs is a skip with the reason; a size
    without guest VMs, or a size out of range, is one line and exit 2."""
    (tmp_path / "s.yaml").write_text(
        "name: sized\nfactors:\n  overlay: vxlan\n  vm_kernel: [{type: guest, kind: qemu, vcpus: 2, memory: 512}, "
        "{type: guest, kind: uml, vcpus: 2}]\nworkloads: [{type: ping, count: 2}]\n")
    [sized, uml] = expand(loads((tmp_path / "s.yaml").read_text()).experiment, detect())
    assert sized.labels["vm_kernel"] == "guest(qemu,vcpus=2,memory=512)" and vms.sizing(sized) == (2, 512)
    assert uml.skip and "at most 1 vCPU" in uml.skip and "kind qemu" in uml.skip
    if SUPPORT.ok:
        assert sized.skip is None and "(2 vCPUs, 512 MB: h1v1, h2v2)" in sized.implementation["vm_kernel"]
        printed = vnetbench("plan", tmp_path / "s.yaml").stdout
        vm = [ln for ln in printed.splitlines() if " qemu-system-x86_64 " in ln]
        assert len(vm) == 2 and all("-smp 2 " in ln and "-m 512M " in ln and "queues=2" in ln for ln in vm), vm
        assert "2 vCPUs and 512 MB each" in printed
    (tmp_path / "bad.yaml").write_text("name: bad\nfactors:\n  vm_kernel: [{type: shared, memory: 512}, "
                                       "{type: guest, kind: qemu, vcpus: 0}]\nworkloads: [{type: ping}]\n")
    bad = vnetbench("plan", tmp_path / "bad.yaml", check=False)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 2, bad.stderr
    assert "need type: guest" in bad.stderr and "'vcpus'" in bad.stderr
