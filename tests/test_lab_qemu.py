"""`vm_kernel: qemu` on a testbed (hosts/lab/vms.py), against the emulated lab: each guest VM is a qemu guest booted
on the lab host that holds it, reached only through that host's SSH connection. The testbed file's `qemu_kernel`,
`doctor --testbed` (KVM, vhost-net and the kernel image per host, nothing booted), `plan --testbed` (the qemu command
lines per host), a missing kernel image (skipped with that host's reason), one run booting one VM on each of two
hosts (a VXLAN pair over a Linux bridge, iperf3 and ping), and a kill -9 while they boot, then `clean --testbed`."""
import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import ROOT, guest_pids, vnetbench
from vnetbench.guests import qemu
from vnetbench.hosts.lab import testbed as tb

SUPPORT = qemu.Qemu.support()
QEMU = pytest.mark.skipif(not SUPPORT.ok, reason=SUPPORT.reason or "qemu guests unavailable")
SPEC = """name: lab-qemu
repetitions: 1
factors:
  switch: linuxbridge
  overlay: vxlan
  placement: cross-host
  vm_kernel: qemu
workloads:
  - type: iperf3
    duration: 3
    latency: ping
    ping_interval: 0.05
"""


def env_with(state_dir, log=None):
    env = os.environ.copy() | {"VNETBENCH_STATE_DIR": str(state_dir)}
    return env | ({"VNETBENCH_COMMAND_LOG": str(log)} if log else {})


def lab_file(lab, path, kernels=None):
    """The lab's testbed file, with `qemu_kernel` for the hosts named in `kernels`."""
    lab.testbed_file(path)
    text = path.read_text()
    for name, kernel in (kernels or {}).items():
        text = text.replace(f"  {name}:\n", f"  {name}:\n    qemu_kernel: {kernel}\n")
    path.write_text(text)
    return path


def ours(lab, prefix):
    """What a run left on every lab machine: namespaces, links, run directories; and its qemu or virtiofsd anywhere
    (other tests' guests may run beside it)."""
    objs = {h.name: lab.objects(h, prefix) for h in lab.hosts}
    procs = subprocess.run(["pgrep", "-af", f"qemu-system-x86_64 -name {prefix}-|virtiofsd --socket-path="
                                            f"/run/vnetbench/{prefix}/"], capture_output=True, text=True).stdout
    return {name: o for name, o in objs.items() if any(o.values())}, procs.strip()


def test_qemu_kernel_in_the_testbed_file_is_checked_one_line_each(tmp_path):
    path = tmp_path / "tb.yaml"
    path.write_text("hosts:\n  node1: {nic: eth1, address: 10.0.0.1, qemu_kernel: vmlinuz}\n"
                    "  node2: {nic: eth1, address: 10.0.0.2, qemu_kernel: '/boot/../x/vmlinuz-6.1'}\n"
                    "  node3: {nic: eth1, address: 10.0.0.3, qemu_kernel: '/k/boot/vmlinuz-6.1; touch x'}\n"
                    "  node4: {nic: eth1, address: 10.0.0.4, qemu_kernel: /srv/k/boot/vmlinuz-6.1.0-56-cloud-amd64}\n")
    with pytest.raises(tb.TestbedError) as err:
        tb.load(path)
    lines = err.value.lines
    assert [ln.split(": ")[1] for ln in lines] == [f"hosts.node{i}.qemu_kernel" for i in (1, 2, 3)], lines
    assert all(ln.startswith(f"{path}:{i}: ") and "vmlinuz-VERSION" in ln for i, ln in enumerate(lines, 2)), lines
    path.write_text("hosts:\n  node4: {nic: eth1, address: 10.0.0.4, qemu_kernel: /srv/k/boot/vmlinuz-6.1}\n")
    assert tb.load(path).hosts[0].qemu_kernel == "/srv/k/boot/vmlinuz-6.1"


def test_a_hosts_offer_from_its_facts():
    """KVM only from kvm_intel/kvm_amd; the cloud kernel in the host's cache, its PVH vmlinux beside it; a named kernel
    needs its modules."""
    base = {"qemu_kvm": "1", "qemu_kvm_rw": "1", "qemu_kvm_modules": "kvm_intel ", "qemu_vhost_net": "1",
            "qemu_tun": "1", **{f"qemu_has_{p}": f"/usr/bin/{p}" for p in qemu.HOST_PROGRAMS},
            "qemu_kernels": "/c/linux-image-6.1.0-9-cloud-amd64/boot/vmlinuz-6.1.0-9-cloud-amd64 "
                            "/c/linux-image-6.1.0-10-cloud-amd64/boot/vmlinux-6.1.0-10-cloud-amd64 "
                            "/c/linux-image-6.1.0-10-cloud-amd64/boot/vmlinuz-6.1.0-10-cloud-amd64"}
    offer = qemu.host_offer(base)
    assert offer.ok and offer.accel.name == "kvm" and offer.vhost
    assert offer.label() == "qemu-kvm-6.1.0-10-cloud-amd64 + virtio-net + vhost-net"
    assert offer.pvh.endswith("vmlinux-6.1.0-10-cloud-amd64")
    assert offer.modules.endswith("lib/modules/6.1.0-10-cloud-amd64")
    pvm = qemu.host_offer(base | {"qemu_kvm_modules": "kvm_pvm", "qemu_vhost_net": "0"})
    assert pvm.label().startswith("qemu-tcg-") and "kvm_pvm" in pvm.accel.reason and "(userspace)" in pvm.label()
    assert "no guest kernel" in qemu.host_offer(base | {"qemu_kernels": ""}).reason
    assert "qemu-system-x86" in qemu.host_offer(base | {"qemu_has_qemu-system-x86_64": ""}).reason
    named = qemu.host_offer(base | {"qemu_named": "/k/boot/vmlinuz-6.2:"}, "/k/boot/vmlinuz-6.2")
    assert not named.ok and "/k/lib/modules/6.2" in named.reason and "/lib/modules/6.2" in named.reason


@QEMU
def test_doctor_reports_kvm_vhost_net_and_the_kernel_image_per_host(lab, tmp_path, state_dir):
    """A fast probe, nothing booted: each host's KVM (here kvm_pvm: TCG, with the reason), vhost-net and kernel image;
    a kernel image the testbed file names that is not there is that host's reason."""
    cached = qemu.qemu_image.cached_kernel()
    tbf = lab_file(lab, tmp_path / "tb.yaml", {"node2": "/nonexistent/boot/vmlinuz-9.9", "node3": str(cached.vmlinuz)})
    t0 = time.monotonic()
    data = json.loads(vnetbench("doctor", "--json", "--testbed", tbf, env=env_with(state_dir)).stdout)
    took = time.monotonic() - t0
    local = qemu.probe_accel()
    node1, node2 = data["hosts"]["node1"]["qemu"], data["hosts"]["node2"]["qemu"]
    assert node1["available"] and node1["kernel"] == str(cached.vmlinuz.resolve())
    assert node1["accelerator"] == local.name and node1["kvm_reason"] == local.reason
    assert node1["vhost_net"] == qemu.vhost_net() and node1["label"].startswith(f"qemu-{local.name}-")
    assert not node2["available"] and "/nonexistent/boot/vmlinuz-9.9" in node2["reason"]
    assert node2["accelerator"] == local.name  # KVM and vhost-net are reported all the same
    node3 = data["hosts"]["node3"]["qemu"]  # a kernel image named for the host, with its modules beside it
    assert node3["available"] and node3["kernel"] == str(cached.vmlinuz.resolve()) and node3["pvh"] is None
    text = vnetbench("doctor", "--testbed", tbf, env=env_with(state_dir)).stdout
    assert "qemu guest VMs on each host" in text and "vhost-net" in text
    print(f"doctor --testbed --json: {took:.2f} s")


@QEMU
def test_plan_shows_the_qemu_command_lines_each_host_runs(lab, tmp_path, state_dir):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = vnetbench("plan", spec, "--testbed", lab_file(lab, tmp_path / "tb.yaml"), env=env_with(state_dir)).stdout
    assert "SKIPPED" not in out, out[:3000]
    for h, vm in (("node1", "h1v1"), ("node2", "h2v2")):
        assert f"# on {h} (root@{h}.lab)" in out, out[:3000]
        assert re.search(rf"^sh -c .*ip netns exec vb0000-gn qemu-system-x86_64 -name vb0000-{vm},debug-threads=on ",
                         out, re.M), out[:3000]
    assert out.count("--initramfs /run/vnetbench/vb0000/guests/vnetbench-initrd.cpio") == 2
    assert "implementation: " in out and " (h1v1 on node1, h2v2 on node2)" in out


@QEMU
def test_a_missing_kernel_image_skips_the_scenario_with_the_hosts_reason(lab, tmp_path, state_dir):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    tbf = lab_file(lab, tmp_path / "tb.yaml", {"node2": "/nonexistent/boot/vmlinuz-9.9"})
    proc = vnetbench("run", spec, "--testbed", tbf, "--db", tmp_path / "s.db", "--no-progress", env=env_with(state_dir),
                     check=False)
    assert proc.returncode == 1 and "nothing ran: every scenario was skipped" in proc.stderr, proc.stderr
    con = sqlite3.connect(tmp_path / "s.db")
    (status, reason), = con.execute("SELECT status, reason FROM scenarios").fetchall()
    assert status == "skipped" and reason.startswith("testbed: vm_kernel qemu: on node2: the kernel image "
                                                     "/nonexistent/boot/vmlinuz-9.9"), reason
    assert not con.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    assert "1 skipped, 0 failed" in proc.stdout


@QEMU
def test_one_qemu_vm_on_each_of_two_lab_hosts_runs_and_leaves_nothing(lab, tmp_path, state_dir):
    """The VXLAN pair between a qemu VM on node1 and one on node2, then the same VMs on a flat network (the hosts'
    uplinks let in the other host's VM by the MAC the topology gave it): both boot once on their hosts (TCG here),
    serve both topologies, carry iperf3 and ping, their rows say qemu-tcg per host, every command went through ssh,
    and nothing is left anywhere."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("overlay: vxlan", "overlay: [vxlan, none]"))
    log = tmp_path / "commands.jsonl"
    db = tmp_path / "r.db"
    t0 = time.monotonic()
    vnetbench("run", spec, "--testbed", lab_file(lab, tmp_path / "tb.yaml"), "--db", db, "--no-progress",
              env=env_with(state_dir, log))
    took = time.monotonic() - t0
    con = sqlite3.connect(db)
    rows = con.execute("SELECT status, implementation FROM scenarios").fetchall()
    assert [st for st, _ in rows] == ["done", "done"], rows
    version = qemu.qemu_image.cached_kernel().version  # the lab's machines are this one: the same kernel and KVM
    label = qemu.label(qemu.probe_accel().name, qemu.vhost_net(), 1, version)
    assert {json.loads(impl)["vm_kernel"] for _, impl in rows} == {f"{label} (h1v1 on node1, h2v2 on node2)"}, rows
    assert {json.loads(impl)["overlay"] for _, impl in rows} == {"kernel-vxlan", "flat"}, rows
    assert not con.execute("SELECT kind, error FROM trials WHERE status != 'ok'").fetchall()
    metrics = dict(con.execute("SELECT metric, MAX(value) FROM samples GROUP BY metric").fetchall())
    # only echoes sent inside iperf3's measuring window count (a TCG guest on a busy machine can take most of a 1-s
    # test to connect: 5 echoes at the default 0.2 s then all fell before it; at load 12, none of 40 over a 2-s
    # test did): 60 over a 3-s test
    assert metrics["throughput_bps"] > 0 and metrics["rtt_idle_s"] > 0 and metrics["rtt_loaded_s"] > 0, metrics
    each = con.execute("SELECT t.scenario, MIN(m.value) FROM samples m JOIN trials t ON m.trial = t.id "
                       "WHERE m.metric = 'throughput_bps' GROUP BY t.scenario").fetchall()
    # both topologies carried TCP (idle: 0.7-1.1 Gbit/s each; under a CI run's load one carried 12 Mbit/s and the
    # other 168 kbit/s: a starved guest's rate is no bound to test, the traffic crossing is)
    assert len(each) == 2 and all(v > 0 for _, v in each), each
    counted = {}  # and no more arrived than was sent: the receiver's bytes against the sender's, each trial
    for trial, metric, meta in con.execute("SELECT trial, metric, metadata FROM samples WHERE metric IN "
                                           "('throughput_bps', 'sender_throughput_bps')"):
        counted.setdefault(trial, {})[metric] = json.loads(meta)["bytes"]
    assert counted and all(0 < c["throughput_bps"] <= c["sender_throughput_bps"] for c in counted.values()), counted
    metas = [json.loads(m) for (m,) in con.execute("SELECT metadata FROM samples WHERE metric = 'cpu_busy_ratio'")]
    vm_cpu = {m["vm"] for m in metas if m.get("scope") == "vm"}
    assert vm_cpu == {"h1v1", "h2v2"}  # each VM's own kernel, read inside it
    hyp = [json.loads(m) for (m,) in con.execute("SELECT metadata FROM samples WHERE metric = 'hypervisor_cpu_ratio'")]
    assert {(m["vm"], m["part"]) for m in hyp if m["scope"] == "hypervisor"} >= {
        (vm, part) for vm in ("h1v1", "h2v2") for part in ("all", "vcpu", "io", "fs")}  # read on each VM's host
    argvs = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert argvs and all(a[0] == "ssh" for a in argvs), [a for a in argvs if a[0] != "ssh"][:3]
    # the guests were reached through their hosts: a ProxyCommand over the host's connection
    assert any("ProxyCommand=ssh " in " ".join(a) and "relay.py %h %p" in " ".join(a) for a in argvs)
    prefix, = set(re.findall(r"/run/vnetbench/(vb[0-9a-f]{4})/guests/", log.read_text()))  # the run's, not preflight's
    left, procs = ours(lab, prefix)
    assert not left and not procs, (left, procs)
    print(f"run with one qemu VM on each of two lab hosts: {took:.1f} s; TCP by scenario: "
          f"{', '.join(f'{v / 1e6:.0f} Mbit/s' for _, v in each)}")


@QEMU
def test_kill9_while_the_vms_boot_then_clean_testbed_leaves_nothing_on_any_host(lab, tmp_path, state_dir):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    tbf = lab_file(lab, tmp_path / "tb.yaml")
    plan = vnetbench("plan", spec, "--testbed", tbf, env=env_with(state_dir)).stdout
    shown = {m[1]: m[0] for m in re.findall(r"(qemu-system-x86_64 -name vb0000-(h\dv\d),.*) &$", plan, re.M)}
    proc = subprocess.Popen([sys.executable, "-m", "vnetbench", "run", str(spec), "--testbed", str(tbf), "--db",
                             str(tmp_path / "k.db"), "--no-progress"], env=env_with(state_dir), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline, pids, prefix = time.monotonic() + 90, [], None
        while len(pids) < 2:  # the run's two qemu processes, one on each host (its preflight's ledger is another)
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.1)
            for prefix in (d for d in os.listdir(state_dir) if d.startswith("vb")):
                pids = subprocess.run(["pgrep", "-f", f"qemu-system-x86_64 -name {prefix}-"], capture_output=True,
                                      text=True).stdout.split()
                if len(pids) == 2:
                    break
        assert all(lab.objects(h, prefix)["netns"] for h in lab.hosts[:2])
        # each host runs the very qemu command line `plan` showed (the run's prefix for vb0000)
        assert len(pids) == 2 and set(shown) == {"h1v1", "h2v2"}, (pids, shown)
        for pid in pids:
            argv = open(f"/proc/{pid}/cmdline").read().rstrip("\0").split("\0")
            vm = argv[2].split(",")[0].removeprefix(f"{prefix}-")
            assert argv == shlex.split(shown[vm].replace("vb0000", prefix)), (argv, shown[vm])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out = vnetbench("clean", "--testbed", tbf, env=env_with(state_dir)).stdout
    assert "node1: netns" in out and "node2: netns" in out, out
    time.sleep(0.5)
    left, procs = ours(lab, prefix)
    assert not left and not procs and not guest_pids(prefix), (left, procs)
    assert not list(state_dir.iterdir())
