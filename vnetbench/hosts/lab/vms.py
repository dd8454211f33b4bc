"""`vm_kernel: qemu` on a testbed: each guest VM is a qemu guest on the lab host that holds it, booted there as
guests/qemu.py boots one on this machine, its switch port the qemu process's tap in that host's switch.

What runs where. On each lab host that holds guest VMs, in the run's guest namespace there (`<prefix>-gn`, in that
host's ledger before it is made): the management bridge and the guests' taps, one virtiofsd (the host's root,
read-only) and one qemu per guest, each started through the host's agent and recorded in the host's ledger with its
pid and start time before it execs. The guests' files (keys, sshd config, setup, init, console), their sockets and
the initramfs (made there by guests/qemu_image.py, copied there and run by the host's python3, from the guest
kernel's modules) are under the run's directory there. So `clean` removes all of it after a kill -9, as it removes
the host's namespaces. The kernel is the host's own (its cache's cloud kernel, or the image its testbed entry names:
`qemu_kernel`), and so are the accelerator (KVM where its /dev/kvm comes from kvm_intel or kvm_amd, else TCG with the
reason) and vhost-net: guests/qemu.py's HOST_SCRIPT asks in the host's preflight.

The controller reaches a guest's sshd through its host only: the guest's SSH connection has a ProxyCommand that runs,
over the host's shared connection, the relay (guests/relay.py, copied there) inside the run's guest namespace there.

In a topology the VM's data tap moves from that namespace into the host's namespace as its switch port (a step of the
host's `gn<i>` node, in the host's build script); the VM's own steps (its namespace in the guest, its NIC, its
addresses) run in the guest through its executor, beside the hosts' scripts (site.py: in_guest).
"""
from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from ...guests import qemu, qemu_image, ssh
from ...guests import vms
from ...guests.base import Fleet, Guest, GuestError, console_tail, keygen
from ...system.executor import REMOTE_STATE_DIR, CommandError, SshExecutor, SshTarget, remote_ledger_append
from ...system.ledger import Ledger, Obj
from ..base import at_once
from ..steps import PLAN_PREFIX, comment
from . import clean as lab_clean
from .site import TestbedSite

# Writes the guests' files on the host from a JSON mapping on stdin (path -> [text, mode]): a host key never in an
# argv, one round trip for all of them.
WRITE = ("import json, os, sys\n"
         "for path, (text, mode) in json.load(sys.stdin).items():\n"
         "    os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)\n"
         "    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)\n"
         "    os.write(fd, text.encode()); os.fchmod(fd, mode); os.close(fd)\n")
# Each thread's time on a CPU (ns, schedstat) of the guest's processes on the host: "pid ns comm" per line.
CPU = ("for p in {pids}; do for t in /proc/$p/task/*; do read -r c < $t/comm && read -r s _ < $t/schedstat && "
       "echo \"$p $s $c\"; done; done 2>/dev/null; true")
# Waits on the host for the guest's init to say it is up (or failed), or for qemu to end: one round trip per guest.
WAIT = ("i=0; while ! grep -qs -e {up} -e {fail} {console}; do\n"
        "  [ {pid} = 0 ] || kill -0 {pid} 2>/dev/null || {{ echo 'qemu exited'; exit 4; }}\n"
        "  [ $i -ge {tries} ] && {{ echo 'its init said nothing within the deadline'; exit 3; }}\n"
        "  sleep 0.1; i=$((i+1)); done\n"
        "! grep -qs {fail} {console} || {{ echo 'its init failed'; exit 5; }}")


class LabFleet(Fleet):
    """The run's qemu guests on one lab host (label h<i>), started there over its SSH connection."""

    def __init__(self, ledger: Ledger | None, site: TestbedSite, host: str, offer: qemu.HostOffer, first: int):
        super().__init__(ledger or Ledger(PLAN_PREFIX), "qemu", boot_timeout=vms.BOOT_TIMEOUT_S)
        self.site, self.host, self.offer, self.name = site, host, offer, site.name(host)
        self.first_index = first  # guests on every host have MACs of their own: they share the lab's segments
        self.ex: SshExecutor = site.executor(host)
        self.gn_ex = self.ex.in_netns(self.netns, f"{self.name}:gn")
        self.remote = f"{REMOTE_STATE_DIR}/{self.prefix}"
        self.dir = self.ledger.work / f"guests-{self.name}"  # here: the keys, known_hosts, the SSH clients' logs
        self.kind.accel, self.kind.vhost, self.kind.qboot = offer.accel, offer.vhost, offer.qboot
        self.initrd = f"{self.remote}/guests/{qemu_image.INITRD}"
        self.kind.image = offer.image(self.initrd) if offer.ok else None
        self._initrd_made = False
        self.helpers: dict[str, list] = {}  # guest label -> its virtiofsd processes on the host

    # ---- names -------------------------------------------------------------------------------------------
    def add(self, label: str, nics=(), mem_mb: int = 256, share_run: bool = False) -> Guest:
        g = super().add(label, nics, mem_mb)
        g.dir = Path(f"{self.remote}/guests/{label}")  # on the host, as qemu and the guest's init read them
        g.sock_dir = Path(f"{self.remote}/gs")
        g.shares = []  # the guest's executor writes its files into the guest itself (own_files)
        return g

    def keys_of(self, g: Guest) -> Path:
        return self.dir / g.label

    # ---- the host's side -----------------------------------------------------------------------------------
    def _ip_batch(self, lines: list[str], netns: bool = True) -> None:
        try:
            (self.gn_ex if netns else self.ex).batch("ip", lines)
        except CommandError as exc:
            raise GuestError(f"[{self.name}] guest network: {exc}") from None

    def _network(self) -> None:
        """The run's guest namespace on the host, in its ledger first, and its bridges and taps."""
        self.site.touch([self.host])
        record = json.dumps({"op": "add", "kind": "netns", "name": self.netns})
        self._net_up = True
        q = shlex.quote
        try:
            self.ex.run_script(f"{remote_ledger_append(self.prefix, [record])} && ip netns add {q(self.netns)} && "
                               f"mkdir -p -m 700 {q(self.remote + '/guests')} {q(self.remote + '/gs')}", timeout=30)
        except CommandError as exc:
            raise GuestError(f"[{self.name}] guest network: {exc}") from None
        self._ip_batch(self.network_lines())

    def _keys(self) -> None:
        """Made here; each guest's go to the host with its other files (start)."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        keygen(self.identity, f"vnetbench-{self.prefix}")
        known = []
        for g in self.guests.values():
            self.keys_of(g).mkdir(mode=0o700, exist_ok=True)
            keygen(self.keys_of(g) / "ssh_host_ed25519_key", f"{self.prefix}-{g.label}")
            pub = (self.keys_of(g) / "ssh_host_ed25519_key.pub").read_text().split()[:2]
            known.append(f"{g.address} {' '.join(pub)}\n")
        self.known_hosts.write_text("".join(known))

    def launch(self, g: Guest) -> list[list[str]]:
        """The command lines that start a guest on the host, in order (each file server, then qemu), as they run
        there (`plan` shows them): their output goes to the guest's logs there."""
        out = []
        for argv in self.kind.commands(self, g):
            log = f"{g.dir}/{'console.log' if argv[4] == qemu.QEMU else 'virtiofsd.log'}"
            out.append(["sh", "-c", 'exec "$@" >>"$0" 2>&1', log, *argv])
        return out

    def initramfs(self) -> list[str]:
        """The command that makes the guests' initramfs on the host, from its guest kernel's modules."""
        return [*self.helper("guests.qemu_image"), "--initramfs", self.initrd, "--modules", self.offer.modules]

    def helper(self, module: str) -> list[str]:
        """A standalone module of vnetbench run by the host's python3 (a run's copies it once into its directory
        there), named with the fleet's prefix (`plan`'s executors have none of their own)."""
        self.ex.python(module)
        return ["python3", f"{self.remote}/lib/{module.rsplit('.', 1)[-1]}.py"]

    def shown_boot(self) -> list[str]:
        lines = [comment(f"on {self.name} ({self.ex.target.destination}), over its SSH connection, in the run's "
                         f"namespace {self.netns} there; each process in its ledger before it starts:"),
                 shlex.join(self.initramfs())]
        return lines + [shlex.join(argv) + " &" for g in self.guests.values() for argv in self.launch(g)]

    def start(self, g: Guest) -> None:
        if not self._initrd_made:
            self._run(self.initramfs(), "initramfs", timeout=120)
            self._initrd_made = True
        keys = self.keys_of(g)
        files = {f"{g.dir}/{name}": [text, mode] for name, text, mode in self.kind.guest_files(g)}
        files[f"{g.dir}/ssh_host_ed25519_key"] = [(keys / "ssh_host_ed25519_key").read_text(), 0o600]
        files[f"{g.dir}/authorized_keys"] = [self.identity.with_suffix(".pub").read_text(), 0o644]
        self._run(["python3", "-c", WRITE], "its files", input=json.dumps(files))
        if qemu.queues_for(self.kind.vcpus_of(g)) > 1:
            self.kind.multiqueue_taps(self, g)
        *servers, vm = self.launch(g)
        self.helpers[g.label] = [self.ex.spawn(argv, label=f"guest:{g.label}:virtiofsd{k}", stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL) for k, argv in enumerate(servers)]
        for sock in (s for _, s, _ in self.kind.file_servers(g)):
            if not self.ex.appears(str(sock), 10):
                raise GuestError(f"guest {g.label} on {self.name}: virtiofsd did not start: "
                                 f"{self.ex.tail(f'{g.dir}/virtiofsd.log')}")
        g.proc = self.ex.spawn(vm, label=f"guest:{g.label}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _run(self, argv: list[str], what: str, timeout: float = 30, input: str | None = None) -> None:
        try:
            self.ex.run(argv, input=input, timeout=timeout)
        except CommandError as exc:
            raise GuestError(f"[{self.name}] qemu guests' {what}: {exc}") from None

    # ---- the guests, reached through the host --------------------------------------------------------------
    def target(self, g: Guest) -> SshTarget:
        """SSH to the guest through its host: a ProxyCommand over the host's shared connection runs the relay in the
        run's guest namespace there (`%` doubled: ssh expands its own tokens in a ProxyCommand)."""
        relay = shlex.join(["ip", "netns", "exec", self.netns, *self.helper("guests.relay")])
        host = shlex.join(self.ex.target.argv(self.ex.control)).replace("%", "%%")
        proxy = f"{host} {shlex.quote(relay.replace('%', '%%') + ' %h %p')}"
        return SshTarget(f"root@{g.address}", identity=str(self.identity), known_hosts=str(self.known_hosts),
                         config="/dev/null", options=(f"ProxyCommand={proxy}",), connect_timeout=5, persist=3600)

    def executor_of(self, g: Guest, connect: bool = True) -> SshExecutor:
        return SshExecutor(self.target(g), self.ledger if connect else None, name=g.label,
                           control=str(self.control_dir), prefix=self.prefix, agent=connect, own_files=True,
                           connect=connect)

    def _wait(self, g: Guest, t0: float, deadline: float) -> str | None:
        q = shlex.quote
        left = max(1.0, deadline - time.monotonic())
        script = WAIT.format(up=q(qemu.UP_MARK), fail=q(qemu_image.FAIL_MARK), console=q(str(g.console)),
                             pid=int(getattr(g.proc, "pid", None) or 0), tries=int(left * 10))
        try:
            r = self.ex.run_script(script, timeout=left + 15, check=False)
        except CommandError as exc:
            return f"guest {g.label} on {self.name}: {exc}"
        if r.returncode:
            return (f"guest {g.label} (qemu) on {self.name} did not come up: {r.stdout.strip() or r.stderr.strip()}; "
                    f"console:\n{self.console_tail(g)}")
        ex = self.executor_of(g)
        while time.monotonic() < deadline:
            wait = max(1.0, min(5.0, deadline - time.monotonic()))
            if ssh.connect(ex, self.dir / f"ssh-{g.label}.log", timeout=wait):
                g.boot_s, g.executor = time.monotonic() - t0, ex
                ex.channel()
                self.kind.set_clock(ex)
                return None
            time.sleep(0.1)
        return (f"guest {g.label} (qemu) on {self.name} did not answer over SSH within {self.boot_timeout:.0f} s; "
                f"console:\n{self.console_tail(g)}")

    def host_cpu(self, g: Guest) -> dict[str, float]:
        """What running the guest has cost its host so far, by part (probes/hypervisor.py), read there in one command:
        each thread of its qemu (named with debug-threads=on: "CPU n/TCG|KVM" runs a vCPU, "vhost-<pid>" is vhost's
        worker, the rest the emulator's loop and I/O) and of its virtiofsd. OSError when qemu is gone."""
        pids = [p.pid for p in (g.proc, *self.helpers.get(g.label, [])) if p is not None and p.pid]
        if not pids or g.proc.poll() is not None:
            raise OSError(f"guest {g.label} is not running on {self.name}")
        try:
            out = self.ex.run_script(CPU.format(pids=" ".join(map(str, pids))), timeout=10, check=False).stdout
        except CommandError as exc:  # the host stopped answering: no reading (the trial fails through its workload)
            raise OSError(str(exc)) from None
        parts = {"vcpu": 0.0, "io": 0.0, **({"vhost": 0.0} if self.kind.vhost else {}), "fs": 0.0}
        for line in out.splitlines():
            pid, ns, name = (line.split(" ", 2) + ["", ""])[:3]
            if not ns.isdigit():
                continue
            part = ("fs" if int(pid) != g.proc.pid else "vcpu" if name.startswith("CPU ") else
                    "vhost" if name.startswith("vhost-") and self.kind.vhost else "io")
            parts[part] += int(ns) / 1e9
        return {"all": sum(parts.values()), **parts}

    def console_tail(self, g: Guest, lines: int = 15) -> str:
        """The last lines of its console on the host that say why it failed."""
        try:
            text = self.ex.run(["tail", "-n", "200", str(g.console)], timeout=30, check=False).stdout
        except CommandError:
            return "(its host does not answer)"
        return console_tail(text, lines)

    def teardown(self) -> None:
        """The guests' executors closed, then in one round trip on the host: every process in the run's guest
        namespace killed, the namespace deleted (its taps and bridges with it), the guests' files removed."""
        for g in self.guests.values():
            if g.executor is not None:
                g.executor.close()
        if self._net_up:
            q = shlex.quote
            gone = json.dumps({"op": "del", "kind": "netns", "name": self.netns})
            script = (lab_clean.clean_script(self.prefix, [Obj("netns", self.netns)], remove_dir=False) + "; " +
                      remote_ledger_append(self.prefix, [gone]) +
                      f"; rm -rf {q(self.remote + '/guests')} {q(self.remote + '/gs')}")
            try:
                self.ex.run_script(script, timeout=60, check=False)
            except CommandError:
                pass  # the host is gone: `vnetbench clean` finishes the job
            self._net_up = False
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- the run's guest VMs on the lab ------------------------------------------------------------------------------
def hosts_of(labels) -> dict[str, list[str]]:
    """The guest VMs by their host: h2 -> [h2v2]."""
    out: dict[str, list[str]] = {}
    for label in labels:
        out.setdefault(label.split("v")[0], []).append(label)
    return out


def offer_of(site: TestbedSite, host: str) -> qemu.HostOffer:
    h = site.host(host)
    return qemu.host_offer(h.facts, h.qemu_kernel)


def fleets_for(sc, site: TestbedSite, ledger: Ledger | None) -> dict[str, LabFleet]:
    """The scenario's guest VMs as one fleet per lab host, not yet booted: run and plan make them here alike."""
    vcpus, mem = vms.sizing(sc)
    fleets, first = {}, 1
    for host, labels in hosts_of(vms.wanted(sc)).items():
        fleet = fleets[host] = LabFleet(ledger, site, host, offer_of(site, host), first)
        fleet.kind.vcpus = vcpus
        for label in labels:
            fleet.add(label, nics=[(vms.NIC, vms.segment(label))], mem_mb=mem)
        first += len(labels)
    return fleets


def guest_vms(fleets: dict[str, LabFleet], plan: bool = False) -> dict[str, vms.GuestVm]:
    return {label: vms.GuestVm(f, label, f.executor_of(g, connect=False) if plan else None, gn=f"gn{host[1:]}")
            for host, f in fleets.items() for label, g in f.guests.items()}


class LabVms:
    """The run's guest VMs on the lab's hosts: booted (every host's at once) when a scenario first wants them, kept
    while the next scenarios want the same VMs, torn down when they want others and at the end of the run."""

    def __init__(self, site: TestbedSite, ledger: Ledger):
        self.site, self.ledger = site, ledger
        self.fleets: dict[str, LabFleet] = {}
        self.key: tuple = ()

    def for_scenario(self, sc) -> dict[str, vms.GuestVm]:
        labels = tuple(vms.wanted(sc))
        if not labels:
            return {}
        if (*vms.sizing(sc), *labels) != self.key:
            self.close()
            self.fleets, self.key = fleets_for(sc, self.site, self.ledger), (*vms.sizing(sc), *labels)
            errors = [e for e in at_once(_boot, list(self.fleets.values())) if e]
            if errors:
                self.close()
                raise GuestError("; ".join(errors))
        return guest_vms(self.fleets)

    def close(self) -> None:
        at_once(LabFleet.teardown, list(self.fleets.values()))
        self.fleets, self.key = {}, ()


def _boot(fleet: LabFleet) -> str | None:
    try:
        fleet.boot()
    except (GuestError, CommandError) as exc:  # (a host lost while booting: CommandError)
        return str(exc)
    return None


# ---- what a scenario may run, and what its rows say ---------------------------------------------------------------
def check(sc, site: TestbedSite) -> str | None:
    """Why the lab cannot run the scenario's guest VMs (None: it can, or it has none); notes the implementation each
    host's guests have (accelerator, kernel, the NIC's data path)."""
    kind = vms.kind(sc)
    if kind is None:
        return None
    if why := vms.structural(sc):
        return why
    if kind != "qemu":
        return (f"vm_kernel {kind}: on a testbed each guest VM is a qemu guest on the host that holds it "
                f"(vm_kernel: qemu); {kind} guests run on this machine only")
    labels = vms.wanted(sc)
    if set(labels) & set(vms.encrypting_vms(sc)):
        return ("vm-to-vm encryption in the guest VMs' own kernels is not built on a testbed yet (it runs with guest "
                "VMs on this machine)")
    vcpus, mem = vms.sizing(sc)
    shown: dict[str, list[str]] = {}
    for host, mine in hosts_of(labels).items():
        offer = offer_of(site, host)
        if not offer.ok:
            return f"vm_kernel qemu: on {site.name(host)}: {offer.reason}"
        shown.setdefault(offer.label(qemu.queues_for(vcpus)), []).extend(f"{v} on {site.name(host)}" for v in mine)
    vk = vms.parse(sc.levels["vm_kernel"])
    sized = f"{vcpus} vCPU{'s' if vcpus > 1 else ''}, {mem} MB: " if vk.vcpus or vk.memory else ""
    sc.implementation["vm_kernel"] = "; ".join(f"{what} ({sized}{', '.join(where)})" for what, where in shown.items())
    return None


def notes(sc, site: TestbedSite) -> list[str]:
    """Each host's notes on its guests (a TCG guest's emulated CPU, with that host's reason), once per text."""
    hosts: dict[str, list[str]] = {}
    for host in hosts_of(vms.wanted(sc)):
        for note in offer_of(site, host).notes():
            hosts.setdefault(note, []).append(site.name(host))
    return [f"on {', '.join(names)}: {note}" for note, names in hosts.items()]


def plan_guests(sc, site: TestbedSite) -> dict[str, vms.GuestVm]:
    """The scenario's guest VMs on the lab as `plan` shows them: nothing booted, connected or created."""
    if not vms.wanted(sc):
        return {}
    return guest_vms(fleets_for(sc, site, None), plan=True)
