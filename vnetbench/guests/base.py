"""The guest backend interface, and the parts every backend shares: the run's guest network namespace (management
bridge and data segments joined by bridges), per-run SSH keys, booting in parallel with a deadline.

Layout of one run's guests (all in the run namespace `<prefix>-gn`, so deleting it removes every tap and bridge):
  bridge <prefix>-mgt  10.251.0.254/24: each guest's management NIC (guest address 10.251.0.<n>); sshd listens there
  bridge <prefix>-s<k> one per data segment (e.g. the underlay between emulated hosts): the guests' data NICs
The guest processes run in that namespace too (they open their taps there), so `clean` finds and stops every one
of them through the namespace even after a kill -9 of vnetbench.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..hosts.steps import ROOT
from ..probes.process import parse_pid_stat
from ..system.ledger import Ledger, delete_namespaces
from . import DEFAULT_KIND, kind_class, ssh

# a kernel's stack dump and boot chatter say nothing about why a guest failed
_CONSOLE_NOISE = re.compile(r"^\s*(\[<[0-9a-f]+>\]|Stack:|Call Trace:|[0-9a-f]{8}( [0-9a-f]{8})+$|"
                            r"setup_one_line failed|SELinux:|mmapper_init|Failed to initialize ubd)")
MGMT_NET = "10.251.0"
MGMT_HOST = f"{MGMT_NET}.254"
MAX_GUESTS = 200
CLK_TCK = os.sysconf("SC_CLK_TCK")
VM_NIC = "vmnic"  # a guest VM's data NIC, in the guest's root namespace while no topology uses it
TAP_MTU = 9216  # the largest underlay MTU a spec may ask for (9000) plus room for tags


class GuestError(RuntimeError):
    """A guest that did not come up (with its console's last lines), or a backend that cannot run here."""


@dataclass(frozen=True)
class Support:
    ok: bool
    kernel: str = ""     # what its rows name: "uml-6.1.176", "qemu-tcg-6.1.0-56-cloud-amd64 + virtio-net (userspace)"
    reason: str = ""
    notes: tuple[str, ...] = ()  # what a reader of its rows must know (e.g. an emulated CPU's timing)


@dataclass
class Nic:
    name: str            # the interface's name inside the guest
    segment: str         # the data segment (bridge in the run namespace) its tap joins
    tap: str = ""        # host-side tap (set by the fleet)
    mac: str = ""


@dataclass
class Guest:
    label: str                       # h1, h2, ...
    index: int                       # 1.. : management address 10.251.0.<index>
    nics: list[Nic] = field(default_factory=list)
    mem_mb: int = 256
    shares: list[Path] = field(default_factory=list)  # host directories the guest mounts at the same path
    dir: Path | None = None          # the guest's files on the host (config, keys, console log)
    sock_dir: Path | None = None     # its unix sockets' directory: a short path (a socket's has at most 107 bytes)
    pid: int | None = None           # the backend's main process
    proc: subprocess.Popen | None = None
    boot_s: float | None = None      # start of the process to sshd answering
    executor: object = None          # runs commands inside the guest (set when up)

    @property
    def address(self) -> str:
        return f"{MGMT_NET}.{self.index}"

    @property
    def console(self) -> Path:
        return self.dir / "console.log"

    def console_tail(self, lines: int = 15) -> str:
        try:
            return console_tail(self.console.read_text(errors="replace"), lines)
        except OSError:
            return "(no console output)"


def console_tail(text: str, lines: int = 15) -> str:
    """The last lines of a guest's console that say why it failed (not its kernel's stack dumps and boot chatter)."""
    keep = [ln for ln in text.splitlines() if ln.strip() and not _CONSOLE_NOISE.match(ln)]
    return "\n".join(keep[-lines:]) or "(no console output)"


class GuestKind(ABC):
    """A guest kind: boots guests for one run. One module per kind (uml here; qemu), registered by name; a spec's
    level names the kind (guests/vms.py: kind), and this class answers everything that differs between kinds: how a
    guest starts and stops, and how a VM's NIC meets its host's switch (`port`)."""

    name: ClassVar[str]
    saves_vector_registers: ClassVar[bool] = True  # a Go program (wireguard-go) is safe in its guests
    max_vcpus: ClassVar[int] = 1  # vCPUs a guest of this kind can have (vm_kernel's `vcpus`)
    vcpus = 1                     # each guest's, unless the guest says (Guest.vcpus, when a caller sets it)

    def vcpus_of(self, g: Guest) -> int:
        return int(getattr(g, "vcpus", None) or self.vcpus)
    port_summary: ClassVar[str] = "a vif (a veth from its tap's bridge)"  # what `port` makes, as plan says it

    @classmethod
    def binaries(cls) -> list[str]:
        """Files whose change changes what a guest of this kind offers (its kernel): the guest probe's key."""
        return []

    def port(self, topo, vm, a, a_if: str, b, b_if: str) -> None:
        """Wire guest VM `vm` (guests/vms.py: GuestVm; its node `a`) to its host's node `b`, whose end is `b_if`, the
        port the host's switch enslaves; `a_if` is the NIC's name in the VM. A Xen vif: a veth from the bridge of the
        guest's tap (in the run's guest namespace) into the host's namespace; the guest's NIC is moved into the VM's
        namespace. `port_end` names the veth's end on that bridge, which `unport` deletes at teardown. (A qemu
        guest's port is its tap itself: guests/qemu.py.)"""
        gn_end = self.port_end(topo, a.label)
        topo.ip(ROOT, f"link add {gn_end} netns {vm.netns} type veth peer name {b_if} netns {b.netns}")
        topo.ip(vm.gn, f"link set {gn_end} mtu {TAP_MTU} master {vm.bridge} up")
        if topo.sc.implementation.get("switch", "").startswith("ovs-netdev"):
            # OVS's userspace datapath takes no partial checksums: the vif completes them (the guest's own NIC is a
            # vector tap: the `ethtool -K` ovs.py runs inside the guest was not enough); without it no TCP crossed
            topo.run(vm.gn, ["ethtool", "-K", gn_end, "tx", "off"])
        topo.ip(a.guest, f"link set {vm.nic} netns {a.netns}")
        topo.ip(a.label, f"link set {vm.nic} name {a_if}")

    def port_end(self, topo, label: str) -> str:
        return topo.ifname(f"g{label.split('v')[1]}")

    def unport(self, topo, vm, b, b_if: str) -> list[tuple[str, str]]:
        """What takes the port apart at teardown, before the hosts' namespaces go, while the guest runs on for the
        next topology: (namespace, `ip` line)s, run in order per namespace. A vif: its end on the tap's bridge is
        deleted (its peer, the host's port, with it)."""
        return [(vm.netns, f"link del {self.port_end(topo, vm.label)}")]

    @classmethod
    @abstractmethod
    def support(cls) -> Support:
        """Whether this machine can run this backend's guests, and which kernel they get."""

    @abstractmethod
    def start(self, fleet: "Fleet", guest: Guest) -> None:
        """Start one guest's process (recorded in the ledger first); must not wait for it to be up."""

    def commands(self, fleet: "Fleet", guest: Guest) -> list[list[str]]:
        """The command lines `start` runs for one guest, in order (`plan` prints them; nothing is started)."""
        return []

    def booted(self, guest: Guest) -> bool:
        """A cheap sign that the guest's init has started its sshd (True: just try SSH)."""
        return True

    def set_clock(self, ex) -> None:
        """Bring the guest's wall clock to this machine's once it answers: a tool's timestamps taken there (ping -D,
        iperf3's start) place its window on the probes' timebase. A guest that reads this machine's clock (UML) has
        nothing to do."""

    def pids(self, fleet: "Fleet", guest: Guest) -> list[int]:
        """The guest's host processes."""
        return [guest.pid] if guest.pid else []

    def host_cpu(self, fleet: "Fleet", guest: Guest) -> dict[str, float]:
        """CPU seconds this machine has spent running the guest so far, by part (probes/hypervisor.py: PARTS); here
        all of its processes together. OSError when they are gone."""
        return {"all": sum(cpu_seconds(pid) for pid in self.pids(fleet, guest))}

    @abstractmethod
    def stop(self, fleet: "Fleet", guest: Guest) -> None:
        """Stop one guest and every host process it made."""


class Fleet:
    """The guests of one run: records, network, keys, parallel boot, executors, teardown."""

    def __init__(self, ledger: Ledger, kind: str = DEFAULT_KIND, boot_timeout: float = 30.0):
        self.ledger = ledger
        self.prefix = ledger.prefix
        self.kind: GuestKind = kind_class(kind)()
        self.boot_timeout = boot_timeout
        self.guests: dict[str, Guest] = {}
        self.segments: list[str] = []
        self.netns = f"{self.prefix}-gn"
        self.dir = ledger.work / "guests"
        self.first_index = 1  # the first guest's number: a MAC and management address in the run are one guest's
        self._net_up = False

    def shown_boot(self) -> list[str]:
        """The command lines booting the fleet starts, as `plan` prints them (each left running)."""
        return [shlex.join(argv) + " &" for g in self.guests.values() for argv in self.kind.commands(self, g)]

    # ---- names -------------------------------------------------------------------------------------------
    def bridge(self, segment: str) -> str:
        return f"{self.prefix}-s{self.segments.index(segment)}"

    def tap(self, guest: Guest, k: int | None) -> str:
        return f"{self.prefix}-{guest.index}{'m' if k is None else f'd{k}'}"

    def add(self, label: str, nics: list[tuple[str, str]] = (), mem_mb: int = 256, share_run: bool = False) -> Guest:
        """A guest to boot, with data NICs (name inside the guest, segment); share_run: the guest sees the run's
        directory on the machine at the same path, read-write."""
        if len(self.guests) >= MAX_GUESTS:
            raise GuestError(f"at most {MAX_GUESTS} guests per run")
        g = Guest(label, self.first_index + len(self.guests), mem_mb=mem_mb)
        for k, (name, segment) in enumerate(nics):
            if segment not in self.segments:
                self.segments.append(segment)
            g.nics.append(Nic(name, segment, self.tap(g, k), f"52:54:00:{g.index // 256:02x}:{g.index % 256:02x}:{k + 1:02x}"))
        g.dir = self.dir / label
        g.sock_dir = self.control_dir
        g.shares = ([self.ledger.dir] if share_run else []) + code_dirs()
        self.guests[label] = g
        return g

    # ---- network -----------------------------------------------------------------------------------------
    def _ip_batch(self, lines: list[str], netns: bool = True) -> None:
        argv = ["ip", *(["-n", self.netns] if netns else []), "-batch", "-"]
        proc = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
        if proc.returncode:
            raise GuestError(f"[{self.netns}] guest network: {proc.stderr.strip()}")

    def _network(self) -> None:
        """The run namespace, its management bridge, one bridge per segment and every guest's taps."""
        self.ledger.record("netns", self.netns)
        self._net_up = True  # from here on teardown deletes the namespace, even if the rest of this fails
        self._ip_batch([f"netns add {self.netns}"], netns=False)
        self._ip_batch(self.network_lines())
        self._net_up = True

    def network_lines(self) -> list[str]:
        """`ip -batch` lines, in the run namespace, of its management bridge, its segments' and its guests' taps."""
        mgt = f"{self.prefix}-mgt"
        lines = ["link set lo up", f"link add {mgt} type bridge forward_delay 0", f"link set {mgt} up",
                 f"addr add {MGMT_HOST}/24 dev {mgt}"]
        for seg in self.segments:
            br = self.bridge(seg)
            lines += [f"link add {br} type bridge forward_delay 0", f"link set {br} up"]
        for g in self.guests.values():
            taps = [(self.tap(g, None), mgt)] + [(n.tap, self.bridge(n.segment)) for n in g.nics]
            for tap, br in taps:
                lines += [f"tuntap add mode tap name {tap}", f"link set {tap} mtu {TAP_MTU} master {br} up"]
        return lines

    def set_segment_mtu(self, segment: str, mtu: int) -> None:
        """Taps and bridges carry anything; the guests' own NIC MTUs are what limit the underlay."""

    # ---- keys --------------------------------------------------------------------------------------------
    def _keys(self) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = self.dir / "id_ed25519"
        keygen(key, f"vnetbench-{self.prefix}")
        known = []
        for g in self.guests.values():
            g.dir.mkdir(mode=0o700, exist_ok=True)
            keygen(g.dir / "ssh_host_ed25519_key", f"{self.prefix}-{g.label}")
            (g.dir / "authorized_keys").write_text((self.dir / "id_ed25519.pub").read_text())
            host_pub = (g.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
            known.append(f"{g.address} {' '.join(host_pub)}\n")
        (self.dir / "known_hosts").write_text("".join(known))

    @property
    def control_dir(self) -> Path:
        """The shared SSH connections' sockets: a short path (a unix socket path has 108 bytes, ssh takes ~60)."""
        inside = self.ledger.dir / "cm"
        return inside if len(str(inside)) <= 40 else Path(f"/tmp/vb-ssh-{self.prefix}")

    @property
    def identity(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def boot(self) -> "Fleet":
        """Start every guest at once and wait until each answers over SSH; a guest that does not come up within
        the deadline raises GuestError with its console's last lines (the fleet is then torn down by the caller)."""
        self._keys()
        if not str(self.control_dir).startswith(str(self.ledger.dir)):
            self.ledger.record("dir", str(self.control_dir))
        self.control_dir.mkdir(mode=0o700, exist_ok=True)
        self._network()
        t0 = time.monotonic()
        for g in self.guests.values():
            self.start(g)
        deadline = t0 + self.boot_timeout
        with ThreadPoolExecutor(max_workers=min(16, len(self.guests) or 1)) as pool:
            errors = [e for e in pool.map(lambda g: self._wait(g, t0, deadline), self.guests.values()) if e]
        if errors:
            raise GuestError("; ".join(errors))
        return self

    def start(self, g: Guest) -> None:
        """Start one guest's processes as its kind does (a fleet on another machine starts them there)."""
        self.kind.start(self, g)

    def _wait(self, g: Guest, t0: float, deadline: float) -> str | None:
        ex = ssh.executor(self, g)
        while True:
            if g.proc is not None and g.proc.poll() is not None:
                return (f"guest {g.label} ({self.kind.name}) exited with {g.proc.returncode} while booting; "
                        f"console:\n{g.console_tail()}")
            if time.monotonic() > deadline:
                return (f"guest {g.label} ({self.kind.name}) did not answer over SSH within "
                        f"{self.boot_timeout:.0f} s; console:\n{g.console_tail()}")
            # the console mark is cheap (a file read) and spares the CPU that early SSH attempts would take
            if self.kind.booted(g) and ssh.connect(ex, self.dir / f"ssh-{g.label}.log",
                                                      timeout=max(1.0, min(3.0, deadline - time.monotonic()))):
                g.boot_s = time.monotonic() - t0
                g.executor = ex
                ex.channel()  # the guest's agent starts now, beside the other guests' (one SSH session, kept)
                self.kind.set_clock(ex)
                return None
            time.sleep(0.05)

    def memory_mb(self, g: Guest) -> float:
        """Proportional set size of the guest's host address spaces (its memory file's touched pages included).
        Several of a UML guest's processes share one address space: each is counted once."""
        spaces: list[int] = []
        for pid in self.kind.pids(self, g):
            if not any(_same_vm(pid, other) for other in spaces):
                spaces.append(pid)
        return sum(_pss_kb(pid) for pid in spaces) / 1024

    def teardown(self) -> None:
        for g in self.guests.values():
            if g.executor is not None:
                g.executor.close()
            self.kind.stop(self, g)
        if self._net_up:
            delete_namespaces([self.netns])
        import shutil
        if not str(self.control_dir).startswith(str(self.ledger.dir)):
            shutil.rmtree(self.control_dir, ignore_errors=True)
        self.ledger.forget_many([("process", f"guest:{g.label}") for g in self.guests.values()] +
                                [("netns", self.netns), ("dir", str(self.control_dir))])
        self._net_up = False


def cpu_seconds(pid: int, task: int | None = None) -> float:
    """utime + stime of a process (all its threads, exited ones included), in clock ticks; or one of its threads'
    time on a CPU, in nanoseconds (schedstat) where the kernel keeps it: a trial's window of a few echoes is a few
    ticks long, and a thread's ticks there read 0 (the qemu VM's vCPU over 3 echoes, on a busy machine)."""
    if task is not None:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                return int(fh.read().split()[0]) / 1e9
        except (FileNotFoundError, IndexError, ValueError):  # no schedstat (CONFIG_SCHED_INFO off): the ticks
            pass
    path = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    with open(path) as fh:
        return parse_pid_stat(fh.read()).cpu_ticks / CLK_TCK


def keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=30)


def _same_vm(a: int, b: int) -> bool:
    """kcmp(KCMP_VM): whether two processes share one address space."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(312, a, b, 1, 0, 0) == 0  # SYS_kcmp on x86_64


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


HIDDEN = (Path("/tmp"), Path("/run"))  # the guest mounts its own tmpfs there, hiding the machine's files


def code_dirs() -> list[Path]:
    """vnetbench's own code and Python environment, when they live where the guest's tmpfs hides them (a checkout
    under /tmp): daemons started in the guest through vnetbench's helpers need them at the same path."""
    package = Path(__file__).resolve().parent.parent
    out: list[Path] = []
    for d in (package.parent, Path(sys.prefix).resolve()):
        if any(h == d or h in d.parents for h in HIDDEN) and not any(o == d or o in d.parents for o in out):
            out.append(d)
    return out
