#!/usr/bin/env python3
"""What a qemu guest (guests/qemu.py) costs here (run as root from the repo):

  boot    process start to the guest's sshd answering, one guest alone and 4 guests started at once
  memory  proportional set size of a guest's qemu and virtiofsd processes after boot
  rtt     a command's round trip: SSH session, agent over SSH, agent over virtio-serial; ping VM to VM
  tcp     iperf3 VM to VM, two guests whose data NICs are taps on one Linux bridge in the run namespace, with the
          host-side CPU of each qemu process's threads (vCPUs, main loop) in the window
  path    (--path) the same VXLAN path through vnetbench itself: one pair across two hosts, Linux bridge + VXLAN, its
          VMs namespaces, UML guests (a vif as their port) or qemu guests (their tap as the port): iperf3 TCP and
          ping VM to VM, each kind's VMs booted once, the kinds alternated round by round

Everything is named with --prefix (default vq1a: namespace <prefix>-gn, taps <prefix>-<n>m/d<k>, bridges
<prefix>-mgt/-s0) and removed at the end; the run's state is under --state (not vnetbench's own state folder).

    PYTHONPATH=. python bench/qemu_guests.py [--rounds N] [--seconds S] [--vcpus 1 2] [--json out.json]
    PYTHONPATH=. python bench/qemu_guests.py --path [--rounds N] [--seconds S]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vnetbench.guests import qemu, ssh  # noqa: E402
from vnetbench.guests.base import Fleet  # noqa: E402
from vnetbench.system.executor import SshExecutor  # noqa: E402
from vnetbench.system.ledger import Ledger, identity  # noqa: E402

DATA = "10.9.0"
HZ = os.sysconf("SC_CLK_TCK")


def ledger(prefix: str, state: Path) -> Ledger:
    led = Ledger(prefix, state)
    shutil.rmtree(led.dir, ignore_errors=True)
    led.work.mkdir(parents=True, mode=0o700)
    (led.dir / "owner.json").write_text(json.dumps(identity()))
    return led


OPTIONS: dict = {}  # Qemu attributes for every fleet (--rootfs, --kernel-package)


def fleet_of(led: Ledger, n: int, mem: int, vcpus: int, nics: bool = True, kind: str = "qemu") -> Fleet:
    fleet = Fleet(led, kind, boot_timeout=150)
    fleet.kind.vcpus = vcpus
    if kind == "qemu":
        for k, v in OPTIONS.items():
            setattr(fleet.kind, k, v)
    for i in range(n):
        fleet.add(f"g{i + 1}", nics=[("eth1", "lan")] if nics else [], mem_mb=mem)
    return fleet


def up_marks(fleet: Fleet) -> list[float]:
    """The guest's own uptime when its stage 2 was done (kernel start to sshd started)."""
    out = []
    for g in fleet.guests.values():
        for line in g.console.read_text(errors="replace").splitlines():
            if line.startswith(qemu.UP_MARK):
                out.append(float(line.split()[1]))
    return out


def boot(args, n: int) -> dict:
    led = ledger(args.prefix, args.state)
    fleet = fleet_of(led, n, args.mem, 1)
    try:
        t0 = time.monotonic()
        fleet.boot()
        wall = time.monotonic() - t0
        # the host CPU the guests took to come up (qemu and virtiofsd): what a busy machine stretches less than time
        cpu = [round(process_cpu(fleet.kind.pids(fleet, g)), 2) for g in fleet.guests.values()]
        time.sleep(1)
        return {"n": n, "boot_s": [g.boot_s for g in fleet.guests.values()], "wall_s": wall, "boot_cpu_s": cpu,
                "guest_uptime_at_up_s": up_marks(fleet),
                "memory_mb": [fleet.memory_mb(g) for g in fleet.guests.values()],
                "load": os.getloadavg()[0]}
    finally:
        fleet.teardown()
        led.remove_all()


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of a process, by thread name (qemu's debug-threads names: "CPU 0/TCG", ...)."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1: stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / HZ
    return out


def process_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += (int(fields[11]) + int(fields[12])) / HZ
    return total


def qemu_pid(fleet: Fleet, g) -> int:
    """The qemu process itself (g.pid is `ip netns exec`, which execs it: the same pid); for UML, its kernel."""
    return g.pid


def iperf(g1, g2, addr: str, seconds: int, fleet: Fleet) -> dict:
    server = subprocess.Popen(g2.executor.wrap(["iperf3", "-s", "-1", "-p", "5301"]), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        pids = {g.label: qemu_pid(fleet, g) for g in (g1, g2)}
        every = {g.label: fleet.kind.pids(fleet, g) for g in (g1, g2)}  # UML: one host process per guest process
        before = {k: thread_cpu(p) for k, p in pids.items()}
        before_all = {k: process_cpu(ps) for k, ps in every.items()}
        t0 = time.monotonic()
        out = subprocess.run(g1.executor.wrap(["iperf3", "-c", addr, "-p", "5301", "-t", str(seconds), "-J"]),
                             capture_output=True, text=True, timeout=seconds + 60).stdout
        wall = time.monotonic() - t0
        after = {k: thread_cpu(p) for k, p in pids.items()}
        after_all = {k: process_cpu(ps) for k, ps in every.items()}
        res = json.loads(out)
        cpu = {k: {t: round((after[k].get(t, 0) - before[k].get(t, 0)) / wall, 3) for t in after[k]
                   if after[k].get(t, 0) - before[k].get(t, 0) > 0.01} for k in pids}
        return {"bits_per_second": res["end"]["sum_received"]["bits_per_second"],
                "retransmits": res["end"]["sum_sent"].get("retransmits"), "host_cpu_per_thread": cpu,
                "host_cpu_all_processes": {k: round((after_all[k] - before_all[k]) / wall, 3) for k in every},
                "load": round(os.getloadavg()[0], 2)}
    finally:
        server.kill()
        server.wait()


def pair(args, vcpus: int, kind: str = "qemu") -> dict:
    """Two guests on one bridge: command round trips and VM-to-VM TCP."""
    led = ledger(args.prefix, args.state)
    fleet = fleet_of(led, 2, args.mem, vcpus, kind=kind)
    g0 = next(iter(fleet.guests.values()))
    out: dict = {"vcpus": vcpus, "label": fleet.kind.nic_label(g0) if kind == "qemu" else
                 f"{fleet.kind.support().kernel} + vector tap (gro=1)"}
    try:
        fleet.boot()
        out["boot_s"] = [g.boot_s for g in fleet.guests.values()]
        g1, g2 = fleet.guests["g1"], fleet.guests["g2"]
        for i, g in enumerate((g1, g2), 1):
            g.executor.run(["ip", "addr", "add", f"{DATA}.{i}/24", "dev", "eth1"])
        out["guest_queues"] = g1.executor.run(["sh", "-c", "ls /sys/class/net/eth1/queues | grep -c rx"],
                                              check=False).stdout.strip()
        ex = g1.executor
        plain = SshExecutor(ssh.target(fleet, g1), led, name="plain", control=str(fleet.control_dir),
                            prefix=fleet.prefix, agent=False)
        ch = ex.channel()
        n = args.calls
        rtt = {"ssh session (true)": timed(lambda: plain.run(["true"]), max(5, n // 4)),
               "agent over ssh: run true": timed(lambda: ex.run(["true"]), n),
               "agent over ssh: echo": timed(lambda: ch.call("echo", 10), n)}
        if kind == "qemu":
            serial = qemu.agent_channel(g1)
            rtt |= {"agent over virtio-serial: run true": timed(lambda: serial.run(["true"]), n),
                    "agent over virtio-serial: echo": timed(lambda: serial.call("echo", 10), n)}
            serial.close()
        out["rtt_ms"] = {k: {"median": round(statistics.median(v), 2), "min": round(min(v), 2),
                             "max": round(max(v), 2), "n": len(v)} for k, v in rtt.items()}
        ping = ex.run(["ping", "-n", "-c", "20", "-i", "0.2", "-W", "2", f"{DATA}.2"], timeout=60).stdout
        out["ping"] = ping.strip().splitlines()[-1]
        out["tcp"] = [iperf(g1, g2, f"{DATA}.2", args.seconds, fleet) for _ in range(args.rounds)]
        out["load"] = os.getloadavg()[0]
        return out
    finally:
        fleet.teardown()
        led.remove_all()


FS_TESTS = {"python3 imports": "python3 -c 'import asyncio, json, email.parser, http.client, decimal'",
            "find /usr/lib/python3.11 (metadata)": "find /usr/lib/python3.11 -name '*.py' | wc -l",
            "read 53 MB (the guest's vmlinux in the cache)": "cat {vmlinux} | wc -c"}


def files(args) -> dict:
    """How the guest's root serves files: each command cold (first run), then warm (second run)."""
    led = ledger(args.prefix, args.state)
    fleet = fleet_of(led, 1, args.mem, 1, nics=False)
    try:
        fleet.boot()
        g = next(iter(fleet.guests.values()))
        cpu = round(process_cpu(fleet.kind.pids(fleet, g)), 2)
        out = {"rootfs": fleet.kind.rootfs, "kernel": fleet.kind.image.kernel.version, "boot_s": g.boot_s,
               "boot_cpu_s": cpu, "memory_mb": fleet.memory_mb(g)}
        g.executor.run(["true"])
        for name, cmd in FS_TESTS.items():
            times = []
            for _ in range(2):
                t = time.perf_counter()
                g.executor.run(["sh", "-c", cmd.format(vmlinux=fleet.kind.image.pvh or
                                                       fleet.kind.image.kernel.vmlinuz)], timeout=300)
                times.append(round(time.perf_counter() - t, 2))
            out[name] = {"cold_s": times[0], "warm_s": times[1]}
        out["load"] = os.getloadavg()[0]
        return out
    finally:
        fleet.teardown()
        led.remove_all()


PATH_SPEC = """\
name: qemu-path
repetitions: 1
factors:
  overlay: vxlan
  placement: cross-host
  vm_kernel: {kind}
workloads:
  - {{type: iperf3, duration: {seconds}}}
  - {{type: ping, count: 20, interval: 0.1}}
"""


def path(args) -> dict:
    """One pair across two hosts (Linux bridge + VXLAN) built by vnetbench, its VMs namespaces, UML guests or qemu
    guests (each kind's on a ledger of its own, so all stay up and the kinds alternate round by round): iperf3 TCP
    VM to VM and 20 pings, per round."""
    from vnetbench import hosts
    from vnetbench.build.topology import Topology
    from vnetbench.capabilities import detect
    from vnetbench.experiment.matrix import expand
    from vnetbench.experiment.spec import loads
    from vnetbench.run import trial

    from vnetbench.hosts.namespaces import NamespacesPlacement
    with_probes = NamespacesPlacement.guest_probes
    # what the VMs' own probes (a reader in each guest for the trial) cost the path: without them, or both in turn
    probing = {"on": (True,), "off": (False,), "both": (True, False)}[args.vm_probes]
    caps = detect()
    kinds = {}
    for kind in args.kinds:
        [sc] = expand(loads(PATH_SPEC.format(kind=kind, seconds=args.seconds)).experiment, caps)
        if sc.skip:
            print(f"{kind}: skipped: {sc.skip}", file=sys.stderr)
            continue
        led = Ledger.create()
        kinds[kind] = (sc, led, hosts.Hosts(led))
    out: dict = {k: {"implementation": sc.implementation.get("vm_kernel", "namespaces"), "rounds": []}
                 for k, (sc, _, _) in kinds.items()}
    try:
        for kind, (sc, led, run) in kinds.items():  # every kind's VMs up before the first round
            t0 = time.monotonic()
            run.open(sc)
            out[kind]["boot_s"] = round(time.monotonic() - t0, 2)
        for r in range(args.rounds):
            turns = [(kind, probes) for kind in kinds for probes in probing]
            for kind, probes in (turns if r % 2 == 0 else reversed(turns)):
                sc, led, run = kinds[kind]
                NamespacesPlacement.guest_probes = with_probes if probes else (lambda self, topo: [])
                topo = Topology(sc, led, placement=run.open(sc)).build()
                try:
                    row = {"load": round(os.getloadavg()[0], 2), "vm_probes": probes}
                    for wl in sc.workloads:
                        samples, _ = trial.measure(sc, topo, wl)
                        for s in samples:
                            if s.metric == "throughput_bps" and not s.metadata.get("series") \
                                    and s.metadata.get("scope") is None:
                                row["throughput_bps"] = s.value
                        rtts = [s.value for s in samples if s.metric == "rtt_s"]
                        if rtts:
                            row["rtt_median_ms"] = round(statistics.median(rtts) * 1000, 3)
                            row["rtt_min_ms"] = round(min(rtts) * 1000, 3)
                    out[kind]["rounds"].append(row)
                    print(kind, json.dumps(row), flush=True)
                finally:
                    topo.teardown()
    finally:
        for sc, led, run in kinds.values():
            run.close()
            led.remove_all()
            run.disconnect()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", default="vq1a")
    ap.add_argument("--state", type=Path, default=Path("/tmp/vq1-state"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--mem", type=int, default=512)
    ap.add_argument("--vcpus", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--skip-boot", action="store_true")
    ap.add_argument("--uml", action="store_true", help="the same pair with UML guests, for comparison")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--rootfs", choices=("virtiofs", "9p"), default="virtiofs")
    ap.add_argument("--kernel-package", help="e.g. linux-image-6.1.0-56-amd64 (has 9p), in the cache first: python -m "
                    "vnetbench.guests.qemu_image --package NAME; default: the newest cloud kernel there")
    ap.add_argument("--files", action="store_true", help="only: how the guest's root serves files")
    ap.add_argument("--path", action="store_true", help="only: the VXLAN path through vnetbench, per VM kind")
    ap.add_argument("--kinds", nargs="*", default=["shared", "uml", "qemu"], help="--path: the vm_kernel levels")
    ap.add_argument("--vm-probes", choices=("on", "off", "both"), default="on",
                    help="--path: the guest VMs' own probes in every trial, in none, or with and without in turn")
    args = ap.parse_args()
    OPTIONS.update(rootfs=args.rootfs, kernel_package=args.kernel_package)
    if args.files:
        print(json.dumps(files(args)))
        return
    if args.path:
        result = path(args)
        print(json.dumps(result))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return
    acc = qemu.probe_accel()
    result: dict = {"accel": acc.name, "accel_reason": acc.reason, "vhost_net": qemu.vhost_net(),
                    "kernel": qemu.Qemu.support().kernel, "cores": os.cpu_count()}
    print(json.dumps(result))
    if not args.skip_boot:
        result["boot1"] = [boot(args, 1) for _ in range(args.rounds)]
        print(json.dumps(result["boot1"]))
        result["boot4"] = [boot(args, 4) for _ in range(max(1, args.rounds // 2))]
        print(json.dumps(result["boot4"]))
    result["pairs"] = []
    for v in args.vcpus:
        result["pairs"].append(pair(args, v))
        print(json.dumps(result["pairs"][-1]))
    if args.uml:
        result["uml"] = pair(args, 1, "uml")
        print(json.dumps(result["uml"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
