"""qemu guests (issue 30): Debian's cloud kernel (guests/qemu_image.py) on qemu, each guest with virtio-net NICs on
taps, booting this machine's own root read-only over virtiofs, as the UML guests boot it over hostfs.

The guest kind "qemu" (`vm_kernel: qemu`, or `{type: guest, kind: qemu}`): the fleet (guests/base.py) makes the run
namespace, the management bridge, one bridge per data segment and every guest's taps; this kind starts, per guest, a
virtiofsd for the root (plus one per shared run directory) and a qemu process, all inside the run namespace, which is
in the ledger before any of them starts (so `clean` finds them after a kill -9, as it finds UML's), and each in the
ledger itself once started.

NICs: every tap the fleet made is a `-netdev tap,ifname=<tap>` with a `virtio-net-pci` on it. The guest names them
(by MAC) and addresses the management NIC at stage 1 from the kernel command line (`vb.nic=`). With more than one
vCPU a data NIC is multiqueue (one queue per vCPU: the tap is made again with `multi_queue`, which the fleet's taps
lack); `vhost=on` only where /dev/vhost-net exists.

A guest VM's port on its host's switch is wired as a cloud compute node wires it (nova's tap on the Linux bridge or
OVS): the qemu process's data tap itself, moved from the run's guest namespace into the host's namespace under the
port's name (`port`); qemu keeps its file descriptor, and a tap carries frames in whichever namespace it is. At
teardown it goes back (`unport`): deleting the host's namespace with the tap in it would unregister the tap under
qemu, and the guest, kept for the next topology, would have lost its NIC.

Accelerator: KVM only where it runs a stock guest kernel: /dev/kvm from kvm_intel or kvm_amd. On a machine whose
/dev/kvm is kvm_pvm (a KVM for PVM-enabled guest kernels only; Debian's is not one), or without /dev/kvm, TCG, and the
reason is kept. `label()` says what ran, e.g. "qemu-tcg-6.1.0-56-cloud-amd64 + virtio-net (userspace)": a TCG row is
an emulated CPU's timing (its scenarios' notes say so), never to be compared with a KVM row as like for like.

Command channels: (1) sshd on the management NIC, exactly as in a UML guest, so `guests.ssh.executor` (and its agent)
drives a qemu guest unchanged; (2) the agent (system/agent.py) on a virtio-serial port, no network or sshd in the
way: `agent_channel()` gives an `agent.Channel` over it (`python -m vnetbench.guests.relay --unix SOCKET` joins it to
stdio). vsock is not an option here: vhost-vsock needs /dev/vhost-vsock.

On a testbed the same kind boots each guest VM on the lab host that holds it (hosts/lab/vms.py): what that host offers
(its accelerator, vhost-net, qboot, its guest kernel) is read from its preflight's facts (HOST_SCRIPT, host_offer).
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..system import agent as agent_mod
from . import qemu_image, register
from .base import TAP_MTU, Fleet, Guest, GuestError, GuestKind, Support, cpu_seconds

QEMU = "qemu-system-x86_64"
VIRTIOFSD = Path("/usr/lib/qemu/virtiofsd")  # Debian 12: in qemu-system-common
UP_MARK = "VNETBENCH-GUEST-UP"
AGENT_PORT = "vb.agent"
MGMT_NIC = "vbm0"
MAX_QUEUES = 8
# TCG boots faster without these: no Spectre workarounds to patch in, no TSC calibration against an emulated PIT, no
# crypto self-tests, LSMs, audit or zeroing of every allocated page (each ~0.5 s less CPU over 3 paired boots here)
FAST_BOOT = ("mitigations=off tsc=reliable no_timer_check edd=off cryptomgr.notests lsm=capability audit=0 "
             "init_on_alloc=0")
# qboot (Debian's qemu-system-data) hands over to a -kernel in ~0.2 s where SeaBIOS took 1.3-2.7 s under TCG
QBOOT = Path("/usr/share/qemu/qboot.rom")
PKG_ROOT = str(Path(__file__).resolve().parents[2])


# ---- what this machine offers ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Accel:
    name: str     # kvm | tcg
    reason: str   # why this one


KVM_MODULES = ("kvm_intel", "kvm_amd", "kvm_pvm")


def probe_accel() -> Accel:
    """KVM where it can run a stock guest kernel, else TCG and why (sysfs and one access check: well under 1 ms)."""
    kvm = Path("/dev/kvm")
    loaded = {m for m in KVM_MODULES if Path("/sys/module", m).exists()}
    return accel_of(kvm.exists(), loaded, kvm.exists() and os.access(kvm, os.R_OK | os.W_OK))


def accel_of(present: bool, loaded: set[str], usable: bool) -> Accel:
    """The accelerator a machine gives a stock guest kernel, from what it has: /dev/kvm, the KVM modules loaded, and
    whether /dev/kvm is readable and writable (here, or on a lab host as its probe found them)."""
    if not present:
        return Accel("tcg", "no /dev/kvm")
    stock = loaded & {"kvm_intel", "kvm_amd"}
    if not stock:
        if "kvm_pvm" in loaded:
            return Accel("tcg", "/dev/kvm is kvm_pvm, which runs only PVM-enabled guest kernels (not Debian's); "
                                "neither kvm_intel nor kvm_amd is loaded")
        return Accel("tcg", "/dev/kvm without kvm_intel or kvm_amd")
    if not usable:
        return Accel("tcg", "/dev/kvm is not readable and writable by this user")
    if "kvm_pvm" in loaded:
        return Accel("tcg", f"kvm_pvm is loaded beside {', '.join(sorted(stock))}: /dev/kvm may be PVM's")
    return Accel("kvm", f"/dev/kvm from {', '.join(sorted(stock))}")


# What a lab host offers qemu guests, asked by its preflight in the same round trip as its other facts
# (hosts/lab/preflight.py) and read by `host_offer`: /dev/kvm and the KVM modules, /dev/vhost-net, the programs, and
# the guest kernels: the one the testbed file names for the host ({named}, quoted), else the cloud kernels unpacked
# in its cache (install.sh puts them there). Files are only looked at: nothing is made or loaded.
HOST_CACHE = "/var/cache/vnetbench/qemu"
HOST_SCRIPT = r"""
echo "qemu_kvm=$(test -e /dev/kvm && echo 1 || echo 0)"
echo "qemu_kvm_rw=$(test -r /dev/kvm -a -w /dev/kvm && echo 1 || echo 0)"
echo "qemu_kvm_modules=$(for m in kvm_intel kvm_amd kvm_pvm; do [ -d /sys/module/$m ] && printf '%s ' $m; done)"
echo "qemu_vhost_net=$(test -r /dev/vhost-net -a -w /dev/vhost-net && echo 1 || echo 0)"
echo "qemu_tun=$(test -r /dev/net/tun -a -w /dev/net/tun && echo 1 || echo 0)"
echo "qemu_qboot=$(test -r {qboot} && echo 1 || echo 0)"
for p in qemu-system-x86_64 python3 {virtiofsd} {busybox}; do echo "qemu_has_${{p##*/}}=$(command -v $p)"; done
echo "qemu_kernels=$(for d in {cache}/linux-image-*; do [ -e "$d/.complete" ] && readlink -f "$d"/boot/vmlinu[xz]-*; \
  done 2>/dev/null | tr '\n' ' ')"
n={named}; v=${{n##*/vmlinuz-}}
[ -z "$n" ] || echo "qemu_named=$(test -r "$n" && readlink -f "$n"):$(for m in "${{n%/boot/*}}" ""; do \
  [ -d "$m/lib/modules/$v" ] && {{ readlink -f "$m/lib/modules/$v"; break; }}; done)"
"""
# the programs a host needs for qemu guests, as HOST_SCRIPT names them, and their Debian packages
HOST_PROGRAMS = {"qemu-system-x86_64": "qemu-system-x86", "python3": "python3", "virtiofsd": "qemu-system-common",
                 "busybox": "busybox-static"}


def host_script(named: str | None) -> str:
    return HOST_SCRIPT.format(virtiofsd=shlex.quote(str(VIRTIOFSD)), busybox=shlex.quote(str(qemu_image.BUSYBOX)),
                              qboot=shlex.quote(str(QBOOT)), cache=HOST_CACHE, named=shlex.quote(named or ""))


@dataclass(frozen=True)
class HostOffer:
    """What one lab host offers qemu guests: the accelerator there (and why), vhost-net, the guest kernel its guests
    boot (with its modules' tree and uncompressed PVH vmlinux, when it has one), or why it cannot run them."""
    ok: bool
    reason: str = ""
    accel: Accel = Accel("tcg", "not probed")
    vhost: bool = False
    vmlinuz: str = ""
    version: str = ""
    modules: str = ""       # <root>/lib/modules/<version>
    pvh: str | None = None
    qboot: bool = False     # its qemu has qboot (Debian's qemu-system-data): the -bios a guest boots fastest with

    def label(self, queues: int = 1) -> str:
        return label(self.accel.name, self.vhost, queues, self.version)

    def notes(self) -> tuple[str, ...]:
        return notes(self.accel, self.vhost)

    def image(self, initrd: str) -> qemu_image.Image:
        root = Path(self.modules).parents[2]
        tree = qemu_image.KernelTree("host", self.version, Path(self.vmlinuz), root)
        return qemu_image.Image(tree, Path(initrd), Path(self.pvh) if self.pvh else None)


def host_offer(facts: dict, named: str | None = None) -> HostOffer:
    """A lab host's HostOffer from its HOST_SCRIPT facts; `named`: the kernel image the testbed file gives it."""
    if "qemu_kvm" not in facts:
        return HostOffer(False, "its preflight did not look for qemu")
    missing = [f"{name} (Debian package {pkg})" for name, pkg in HOST_PROGRAMS.items()
               if not facts.get(f"qemu_has_{name}")]
    if missing:
        return HostOffer(False, f"qemu guests need {', '.join(missing)} there")
    if facts.get("qemu_tun") != "1":
        return HostOffer(False, "qemu guests need /dev/net/tun there (their NICs are taps)")
    kernel = _named_kernel(facts, named) if named else _cached_kernel(facts)
    if isinstance(kernel, str):
        return HostOffer(False, kernel)
    return HostOffer(True, accel=host_accel(facts), vhost=facts.get("qemu_vhost_net") == "1",
                     qboot=facts.get("qemu_qboot") == "1", **kernel)


def host_accel(facts: dict) -> Accel:
    return accel_of(facts.get("qemu_kvm") == "1", set(facts.get("qemu_kvm_modules", "").split()),
                    facts.get("qemu_kvm_rw") == "1")


def host_report(facts: dict, named: str | None = None) -> dict:
    """What `doctor --testbed` shows of one host for qemu guest VMs: KVM (usable, or why not), vhost-net, the guest
    kernel image found (or why qemu guests cannot run there). From the preflight's facts: nothing booted."""
    offer, accel = host_offer(facts, named), host_accel(facts)
    return {"available": offer.ok, "accelerator": accel.name, "kvm": accel.name == "kvm", "kvm_reason": accel.reason,
            "vhost_net": facts.get("qemu_vhost_net") == "1", "kernel": offer.vmlinuz or None, "pvh": offer.pvh,
            "label": offer.label() if offer.ok else None, "reason": offer.reason}


def _named_kernel(facts: dict, named: str) -> dict | str:
    path, _, modules = facts.get("qemu_named", "").partition(":")
    version = Path(named).name.removeprefix("vmlinuz-")
    if not path:
        return f"the kernel image {named} that the testbed file names is not there"
    if not modules:
        return (f"the kernel image {named} that the testbed file names has no modules: neither "
                f"{Path(named).parents[1] / 'lib/modules' / version} nor /lib/modules/{version} is there")
    return {"vmlinuz": path, "version": version, "modules": modules}


def _cached_kernel(facts: dict) -> dict | str:
    """The newest cloud kernel in the host's cache (else the newest of any), as qemu_image.cached_kernel picks it."""
    files = facts.get("qemu_kernels", "").split()
    trees = [f for f in files if Path(f).name.startswith("vmlinuz-") and f.split("/")[-3].startswith("linux-image-")]
    trees = [f for f in trees if "-cloud-" in f.split("/")[-3]] or trees
    if not trees:
        return (f"qemu guests: no guest kernel (what {qemu_image.META_PACKAGE} depends on) in {HOST_CACHE} there; "
                f"./install.sh gets it")
    vmlinuz = max(trees, key=lambda f: qemu_image._version_key(Path(f).name.removeprefix("vmlinuz-")))
    version, root = Path(vmlinuz).name.removeprefix("vmlinuz-"), Path(vmlinuz).parents[1]
    pvh = str(root / "boot" / f"vmlinux-{version}")
    return {"vmlinuz": vmlinuz, "version": version, "modules": str(root / "lib" / "modules" / version),
            "pvh": pvh if pvh in files else None}


def vhost_net() -> bool:
    return os.access("/dev/vhost-net", os.R_OK | os.W_OK)


def queues_for(vcpus: int) -> int:
    return max(1, min(vcpus, MAX_QUEUES))


def label(accel: str, vhost: bool, queues: int = 1, version: str = "") -> str:
    """What ran, for a row: `qemu-tcg + virtio-net (userspace)`, `qemu-kvm + virtio-net + vhost-net (4 queues)`; with
    the kernel's version: `qemu-tcg-6.1.0-56-cloud-amd64 + virtio-net (userspace)`."""
    mq = f"{queues} queues" if queues > 1 else ""
    head = f"qemu-{accel}" + (f"-{version}" if version else "")
    if vhost:
        return f"{head} + virtio-net + vhost-net" + (f" ({mq})" if mq else "")
    return f"{head} + virtio-net (userspace" + (f", {mq})" if mq else ")")


def notes(accel: Accel, vhost: bool) -> tuple[str, ...]:
    """What a reader of a qemu guest's rows must know."""
    out = []
    if accel.name == "tcg":
        # the kind's guests may be VMs (vm_kernel) or the hosts (kernel: qemu): the note names neither
        out.append(f"qemu-tcg: the qemu guests' CPU is emulated by TCG ({accel.reason}): their figures are an emulated "
                   f"CPU's timing, never to be compared as like for like with a KVM row or a guest of another kind")
    if not vhost:
        out.append("qemu: no /dev/vhost-net here: virtio-net's data path is qemu's own userspace loop")
    return tuple(out)


def mac(index: int, k: int | None) -> str:
    """The MAC of guest `index`'s management NIC (k None) or data NIC k, as the fleet gives its data NICs."""
    return f"52:54:00:{index // 256:02x}:{index % 256:02x}:{0 if k is None else k + 1:02x}"


@register
class Qemu(GuestKind):
    name = "qemu"
    saves_vector_registers = True  # TCG and KVM save every register of the guest's processes (XSAVE): Go is safe
    port_summary = "its qemu process's tap itself (virtio-net), moved into the host's namespace"
    max_vcpus = 64
    boot_args = FAST_BOOT
    tb_size_mb = 64      # TCG's translation cache: qemu 7.2's default took ~50 MB more per guest, for no gain seen
    cpu_model = "max"    # under TCG (KVM: host)
    rootfs = "virtiofs"  # or "9p" (qemu's own server; needs a kernel with 9p: not the cloud kernel)
    kernel_package: str | None = None  # None: the newest cloud kernel in the cache

    def __init__(self):
        self.accel = probe_accel()
        self.vhost = vhost_net()
        self.image: qemu_image.Image | None = None
        self.qboot = QBOOT.exists()  # on the machine that runs qemu (a lab host's, as its probe found it)
        self.helpers: dict[str, list[subprocess.Popen]] = {}  # guest label -> its virtiofsd processes

    @classmethod
    def binaries(cls) -> list[str]:
        """qemu, the guest kernel and the initramfs (made again when what it loads at boot changes)."""
        tree = qemu_image.cached_kernel(cls.kernel_package)
        return [shutil.which(QEMU) or "", *((str(tree.vmlinuz), str(tree.root / qemu_image.INITRD)) if tree else ())]

    @classmethod
    def support(cls) -> Support:
        """Whether qemu guests can run here (a skip reason when not: nothing is downloaded or installed here), and
        what their rows are labelled: accelerator, kernel, the NIC's data path."""
        missing = [f"{what} (Debian package {pkg})" for what, pkg, ok in (
            (QEMU, "qemu-system-x86", shutil.which(QEMU)), (str(VIRTIOFSD), "qemu-system-common", VIRTIOFSD.exists()),
            (str(qemu_image.BUSYBOX), "busybox-static", qemu_image.BUSYBOX.exists()),
            ("sshd", "openssh-server", shutil.which("sshd") or Path("/usr/sbin/sshd").exists())) if not ok]
        if missing:
            return Support(False, reason=f"qemu guests need {', '.join(missing)}: ./install.sh installs them")
        if not os.access("/dev/net/tun", os.R_OK | os.W_OK):
            return Support(False, reason="qemu guests need /dev/net/tun (their NICs are taps)")
        tree = qemu_image.cached_kernel(cls.kernel_package)
        if tree is None:
            which = cls.kernel_package or f"what {qemu_image.META_PACKAGE} depends on"
            return Support(False, reason=f"qemu guests: no guest kernel ({which}) in {qemu_image.cache_dir()}; "
                                         f"./install.sh gets it (python -m vnetbench.guests.qemu_image)")
        accel, vhost = probe_accel(), vhost_net()
        return Support(True, kernel=label(accel.name, vhost, queues_for(cls.vcpus), tree.version),
                       notes=notes(accel, vhost))

    # ---- a guest VM's port on its host -------------------------------------------------------------------------
    def port(self, topo, vm, a, a_if: str, b, b_if: str) -> None:
        """The VM's data tap, which qemu holds, becomes the port the host's switch enslaves: moved from the run's
        guest namespace into the host's namespace and renamed there in one step (the guest namespace's batches run
        ahead of the hosts': it is a machine's root namespace to them). Inside the guest its NIC goes into the VM's
        namespace, as for any guest VM. (OVS's userspace datapath takes the tap's frames with their checksums still
        to complete, as virtio-net's offload leaves them: TCP crossed it both ways, with nothing turned off.)"""
        topo.ip(vm.gn, f"link set {self._tap(vm)} netns {b.netns} name {b_if}")
        topo.ip(a.guest, f"link set {vm.nic} netns {a.netns}")
        topo.ip(a.label, f"link set {vm.nic} name {a_if}")

    def unport(self, topo, vm, b, b_if: str) -> list[tuple[str, str]]:
        """The tap back into the run's guest namespace under its own name, before the host's namespace goes (it
        would take the tap, and the guest's NIC with it, from under qemu)."""
        return [(b.netns, f"link set {b_if} netns {vm.netns} name {self._tap(vm)}")]

    @staticmethod
    def _tap(vm) -> str:
        return next(n.tap for n in vm.guest.nics if n.name == vm.nic)

    # ---- per guest ---------------------------------------------------------------------------------------------
    def nic_label(self, g: Guest) -> str:
        return label(self.accel.name, self.vhost, queues_for(self.vcpus_of(g)))

    def sshd_config(self, g: Guest) -> str:
        return (f"ListenAddress {g.address}\nHostKey /run/vb/ssh_host_ed25519_key\n"
                f"AuthorizedKeysFile /run/vb/authorized_keys\nPermitRootLogin prohibit-password\n"
                f"PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                f"PidFile /run/vb/sshd.pid\nUseDNS no\nPrintMotd no\nPrintLastLog no\nMaxSessions 100\n"
                f"MaxStartups 100:30:200\n")

    def setup_script(self, g: Guest, tree: qemu_image.KernelTree) -> str:
        """The guest's own setup, sourced by the initramfs's busybox sh (qemu_image.INIT) with the root at $R, once
        the NICs are named and the management address set; before stage 2 (init_script) runs on that root."""
        q = shlex.quote
        how = "-t 9p -o trans=virtio,version=9p2000.L,msize=512000" if self.rootfs == "9p" else "-t virtiofs"
        shares = "".join(f"mkdir -p $R{q(str(p))} && mount {how} vbs{k} $R{q(str(p))}\n"
                         for k, p in enumerate(g.shares))
        return f"""# vnetbench qemu guest {g.label}: tmpfs, keys, module path, shares (busybox sh, the root at $R)
d=$R{q(str(g.dir))}
# read before any tmpfs hides them (the guest's files may live under /run or /tmp on the machine)
hostkey=$(cat $d/ssh_host_ed25519_key); authorized=$(cat $d/authorized_keys); sshdconf=$(cat $d/sshd_config)
agent=$(cat $d/agent.py); stage2=$(cat $d/init)
# and the guest kernel's module tree, held by a mount of its own (the cache may be under /tmp or /run too; its path
# with no symbolic link in it: one would be resolved here, in the initramfs)
mkdir -p /m && mount --bind $R{q(str(tree.modules.resolve()))} /m || fail "no module tree {q(str(tree.modules))}"
mount -t tmpfs -o mode=1777 tmpfs $R/tmp
mount -t tmpfs -o mode=755 tmpfs $R/run
mkdir -p $R/run/vb $R/run/sshd $R/run/netns
umask 077
printf '%s\\n' "$hostkey" > $R/run/vb/ssh_host_ed25519_key
printf '%s\\n' "$authorized" > $R/run/vb/authorized_keys
printf '%s\\n' "$sshdconf" > $R/run/vb/sshd_config
umask 022
printf '%s\\n' "$agent" > $R/run/vb/agent.py
printf '%s\\n' "$stage2" > $R/run/vb/init && chmod 755 $R/run/vb/init && init=/run/vb/init
# the guest kernel's modules are in the cache on this machine's root: the kernel's autoload finds them through a
# modprobe wrapper (-d /run/m); where this machine has a /lib/modules, a plain modprobe finds them there too (a
# tmpfs over it, hiding this machine's own, with the guest's tree bound in)
mods=$R/run/m/lib/modules/$(uname -r)
mkdir -p $mods && mount --move /m $mods || fail "module tree not moved to /run/m"
printf '#!/bin/sh\\nexec /sbin/modprobe -d /run/m "$@"\\n' > $R/run/modprobe && chmod 755 $R/run/modprobe
echo /run/modprobe > /proc/sys/kernel/modprobe
[ ! -d $R/lib/modules ] || {{ mount -t tmpfs -o mode=755 tmpfs $R/lib/modules && mkdir $R/lib/modules/$(uname -r) &&
  mount --bind $mods $R/lib/modules/$(uname -r); }}
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# root's home writable over the machine's own, without its login scripts; where it is a file system of its own (a
# submount of the root, e.g. a lab machine's tmpfs), which overlayfs refused as a lower layer, an empty tmpfs
mkdir -p $R/run/home/upper $R/run/home/work
mount -t overlay overlay -o lowerdir=$R/root,upperdir=$R/run/home/upper,workdir=$R/run/home/work $R/root 2>/dev/null ||
  mount -t tmpfs -o mode=700 tmpfs $R/root || fail "root's home not writable"
: > $R/root/.bashrc; : > $R/root/.profile
{shares}"""

    def init_script(self, g: Guest) -> str:
        """Stage 2: on this machine's root, the setup done (setup_script): sshd, the agent's port, reaping."""
        return f"""#!/bin/sh
# vnetbench qemu guest {g.label}, stage 2: sshd, the agent's serial port; then reap orphans forever
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# -r: no re-exec of sshd per connection (each exec reads its binary and libraries again, on an emulated CPU)
/usr/sbin/sshd -r -f /run/vb/sshd_config -E /run/vb/sshd.log
read -r up _ < /proc/uptime
echo {UP_MARK} $up
# the agent on the virtio-serial port, niced so that it does not slow the first SSH handshake; it waits for this
# machine's end (its first write blocks until then) and is started again whenever that end lets go (it reads EOF)
port=
for p in /sys/class/virtio-ports/*; do read -r name < $p/name; [ "$name" = {AGENT_PORT} ] && port=/dev/${{p##*/}}; done
[ -z "$port" ] || (while :; do nice -n 10 python3 -u /run/vb/agent.py 0<>"$port" 1>&0 2>>/run/vb/agent.log
                              sleep 0.2; done) &
while :; do sleep 3600 & wait $!; done
"""

    def cmdline(self, fleet: Fleet, g: Guest) -> str:
        nics = [f"vb.nic={mac(g.index, None)},{MGMT_NIC},{g.address}/24"]
        nics += [f"vb.nic={n.mac},{n.name}" for n in g.nics]
        return " ".join(["console=ttyS0", "quiet", "panic=-1", self.boot_args,
                         *(["vb.rootfs=9p"] if self.rootfs == "9p" else []), f"vb.setup={g.dir / 'setup'}",
                         f"vb.init={g.dir / 'init'}",
                         f"vb.hostname={g.label}", *nics])

    def argv(self, fleet: Fleet, g: Guest) -> list[str]:
        """The qemu command line (`plan` can show it: nothing here starts anything)."""
        img = self.image or _planned_image()
        vcpus, mem = self.vcpus_of(g), g.mem_mb
        queues = queues_for(vcpus)
        accel = "kvm" if self.accel.name == "kvm" else f"tcg,thread=multi,tb-size={self.tb_size_mb}"
        out = [QEMU, "-name", f"{fleet.prefix}-{g.label},debug-threads=on", "-machine", "q35",
               "-accel", accel, "-cpu", "host" if self.accel.name == "kvm" else self.cpu_model, "-smp", str(vcpus),
               "-m", f"{mem}M",
               # vhost-user (virtiofsd) maps the guest's memory: it must be shared
               *(["-object", f"memory-backend-memfd,id=mem,size={mem}M,share=on", "-machine", "memory-backend=mem"]
                 if self.rootfs == "virtiofs" else []),
               "-nodefaults", "-no-user-config", "-display", "none", "-vga", "none", "-no-reboot",
               *(["-bios", str(QBOOT)] if self.qboot else []),
               "-kernel", str(img.boot_kernel), "-initrd", str(img.initrd), "-append", self.cmdline(fleet, g),
               "-chardev", f"file,id=con,path={g.console},append=on", "-serial", "chardev:con"]
        for k, (path, tag) in enumerate([(Path("/"), qemu_image.ROOT_TAG), *((p, f"vbs{j}") for j, p in
                                                                              enumerate(g.shares))]):
            if self.rootfs == "9p":  # qemu serves it itself: no helper process
                ro = ",readonly=on" if k == 0 else ""
                out += ["-fsdev", f"local,id=fs{k},path={path},security_model=passthrough,multidevs=remap{ro}",
                        "-device", f"virtio-9p-pci,fsdev=fs{k},mount_tag={tag}"]
            else:
                out += ["-chardev", f"socket,id=fs{k},path={_sock(g, f'fs{k}')}",
                        "-device", f"vhost-user-fs-pci,chardev=fs{k},tag={tag}"]
        vhost = "on" if self.vhost else "off"
        out += ["-netdev", f"tap,id=m,ifname={fleet.tap(g, None)},script=no,downscript=no,vhost={vhost}",
                "-device", f"virtio-net-pci,netdev=m,mac={mac(g.index, None)}"]
        for k, n in enumerate(g.nics):
            mq = f",queues={queues}" if queues > 1 else ""
            dev = f",mq=on,vectors={2 * queues + 2}" if queues > 1 else ""
            out += ["-netdev", f"tap,id=d{k},ifname={n.tap},script=no,downscript=no,vhost={vhost}{mq}",
                    "-device", f"virtio-net-pci,netdev=d{k},mac={n.mac}{dev}"]
        out += ["-device", "virtio-serial-pci", "-chardev", f"socket,id=agent,path={_sock(g, 'agent')},server=on,"
                f"wait=off", "-device", f"virtserialport,chardev=agent,name={AGENT_PORT}"]
        return out

    def virtiofsd_argv(self, source: Path, sock: Path, writable: bool) -> list[str]:
        # sandbox=chroot: the namespace sandbox would move it out of the run namespace (where `clean` finds it)
        cache = "auto" if writable else "always"  # the root is read-only here and changes little during a run
        return [str(VIRTIOFSD), f"--socket-path={sock}", "-o", f"source={source},sandbox=chroot,cache={cache}",
                "-o", "no_posix_lock", "-o", "announce_submounts"]

    def file_servers(self, g: Guest) -> list[tuple[Path, Path, bool]]:
        """(source, socket, writable) of each virtiofsd the guest needs: none over 9p (qemu serves it)."""
        if self.rootfs == "9p":
            return []
        return [(Path("/"), _sock(g, "fs0"), False)] + [(p, _sock(g, f"fs{k + 1}"), True)
                                                          for k, p in enumerate(g.shares)]

    def commands(self, fleet: Fleet, g: Guest) -> list[list[str]]:
        """Each file server, then qemu, all in the run's guest namespace."""
        netns = ["ip", "netns", "exec", fleet.netns]
        return [*([*netns, *self.virtiofsd_argv(src, sock, rw)] for src, sock, rw in self.file_servers(g)),
                [*netns, *self.argv(fleet, g)]]

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    def start(self, fleet: Fleet, g: Guest) -> None:
        if self.image is None:  # the kernel in the cache (a run downloads nothing), its initramfs made if needed
            tree = qemu_image.cached_kernel(self.kernel_package)
            if tree is None:
                raise GuestError(self.support().reason)
            try:
                self.image = qemu_image.image_of(tree)
            except (qemu_image.ImageError, OSError, subprocess.SubprocessError) as exc:
                raise GuestError(f"qemu guest kernel {tree.version}: {exc}") from None
        for name, text, mode in self.guest_files(g):
            (g.dir / name).write_text(text)
            (g.dir / name).chmod(mode)
        if queues_for(self.vcpus_of(g)) > 1:
            self.multiqueue_taps(fleet, g)
        g.console.unlink(missing_ok=True)
        *servers, vm = self.commands(fleet, g)
        socks = self.file_servers(g)
        helpers = []
        with open(g.dir / "virtiofsd.log", "ab") as log:
            for k, ((_, sock, _), argv) in enumerate(zip(socks, servers)):
                sock.unlink(missing_ok=True)
                p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                fleet.ledger.record_process(p.pid, f"guest:{g.label}:virtiofsd{k}")
                helpers.append(p)
        self.helpers[g.label] = helpers
        deadline = time.monotonic() + 10
        while not all(s.exists() for _, s, _ in socks):
            if time.monotonic() > deadline or any(p.poll() is not None for p in helpers):
                raise GuestError(f"guest {g.label}: virtiofsd did not start: "
                                 f"{(g.dir / 'virtiofsd.log').read_text(errors='replace')[-500:]}")
            time.sleep(0.01)
        with open(g.console, "ab") as console:
            g.proc = subprocess.Popen(vm, stdin=subprocess.DEVNULL, stdout=console,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        g.pid = g.proc.pid
        fleet.ledger.record_process(g.pid, f"guest:{g.label}")

    def guest_files(self, g: Guest) -> list[tuple[str, str, int]]:
        """(name, text, mode) of the files in the guest's directory its boot reads (the keys are the fleet's)."""
        return [("sshd_config", self.sshd_config(g), 0o644), ("agent.py", agent_mod.source(), 0o644),
                ("setup", self.setup_script(g, self.image.kernel), 0o644), ("init", self.init_script(g), 0o755)]

    def multiqueue_taps(self, fleet: Fleet, g: Guest) -> None:
        """The fleet's taps are single-queue; qemu's `queues=N` opens a tap with IFF_MULTI_QUEUE, which a
        persistent tap made without it refuses: made again, on the same bridge."""
        lines = []
        for n in g.nics:
            lines += [f"link del {n.tap}", f"tuntap add mode tap multi_queue name {n.tap}",
                      f"link set {n.tap} mtu {TAP_MTU} master {fleet.bridge(n.segment)} up"]
        fleet._ip_batch(lines)

    def booted(self, g: Guest) -> bool:
        try:
            with open(g.console, "rb") as fh:
                text = fh.read()
        except OSError:
            return False
        return UP_MARK.encode() in text

    def set_clock(self, ex) -> None:
        """The guest's kernel set its clock from the emulated RTC, in whole seconds: up to a second behind this
        machine's, so that a 1-s tool window stamped there (ping -D) fell outside the probes' readings here and their
        samples were lost. Set to this machine's time plus half a round trip to the guest."""
        began = time.time()
        ex.run(["true"])
        half = (time.time() - began) / 2
        ex.run(["date", "-u", "-s", f"@{time.time() + half:.6f}"], check=False)  # a guest that refuses keeps its own

    def pids(self, fleet: Fleet, g: Guest) -> list[int]:
        return ([g.pid] if g.pid else []) + [p.pid for p in self.helpers.get(g.label, []) if p.poll() is None]

    def host_cpu(self, fleet: Fleet, g: Guest) -> dict[str, float]:
        """qemu's CPU split by thread name (`debug-threads=on`): "CPU n/TCG|KVM" threads run the vCPUs, vhost's
        workers are "vhost-<pid>" (qemu's own threads since Linux 6.4, kernel threads before), the rest is the
        emulator's main loop and I/O; virtiofsd apart. Every part is a sum of threads read at one moment, so the parts
        add up to `all` (the process's own line is not: the kernel scales it apart from its threads'); a thread that
        exited within the window takes its time with it."""
        if not g.pid:
            raise OSError(f"guest {g.label} is not running")
        parts = {"vcpu": 0.0, "io": 0.0, "vhost": 0.0}
        for task in os.listdir(f"/proc/{g.pid}/task"):
            name = _comm(f"/proc/{g.pid}/task/{task}/comm")
            part = "vcpu" if name.startswith("CPU ") else "vhost" if name.startswith("vhost-") else "io"
            parts[part] += _quiet(lambda: cpu_seconds(g.pid, int(task)))
        if self.vhost:
            parts["vhost"] += sum(_quiet(lambda: cpu_seconds(pid)) for pid in _vhost_kthreads(g.pid))
        else:
            del parts["vhost"]
        if self.helpers.get(g.label):
            parts["fs"] = sum(_quiet(lambda: cpu_seconds(p.pid)) for p in self.helpers[g.label])
        return {"all": sum(parts.values()), **parts}

    def stop(self, fleet: Fleet, g: Guest) -> None:
        procs = ([g.proc] if g.proc is not None else []) + self.helpers.pop(g.label, [])
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        fleet.ledger.forget_many([("process", f"guest:{g.label}:virtiofsd{k}") for k in range(len(g.shares) + 1)])


def _sock(g: Guest, name: str) -> Path:
    """A unix socket of the guest's: in the fleet's short socket directory (the run's, or one the ledger records),
    since a long state directory would pass the 107 bytes a socket's path may have."""
    return (g.sock_dir or g.dir) / f"{g.label}-{name}.sock"


def _comm(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:  # the thread has exited
        return ""


def _quiet(read) -> float:
    try:
        return read()
    except (OSError, ValueError, IndexError):  # a thread or helper gone between listing and reading
        return 0.0


def _vhost_kthreads(pid: int) -> list[int]:
    """vhost's kernel threads of qemu process `pid` (before Linux 6.4 they are not in its thread group)."""
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()
            and _comm(f"/proc/{e.name}/comm") == f"vhost-{pid}" and int(e.name) != pid]


def _planned_image() -> qemu_image.Image:
    """The image a run would boot, as `plan` shows it (nothing downloaded or built)."""
    tree = qemu_image.cached_kernel(Qemu.kernel_package) or qemu_image.KernelTree(
        qemu_image.META_PACKAGE, "<version>", qemu_image.cache_dir() / "<package>/boot/vmlinuz-<version>",
        qemu_image.cache_dir() / "<package>")
    pvh = tree.root / "boot" / f"vmlinux-{tree.version}"
    return qemu_image.Image(tree, tree.root / qemu_image.INITRD, pvh if pvh.exists() else None)


# ---- the agent over virtio-serial -----------------------------------------------------------------------------------
def agent_channel(g: Guest, ready_timeout: float = 30.0) -> agent_mod.Channel:
    """The guest's agent over its virtio-serial port (no SSH): a relay process joins the port's socket to a pipe
    pair, which is what agent.Channel reads and writes."""
    proc = subprocess.Popen([sys.executable, "-m", "vnetbench.guests.relay", "--unix", str(_sock(g, "agent"))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True,
                            env={**os.environ, "PYTHONPATH": PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    return agent_mod.Channel(proc, f"{g.label}:serial", ready_timeout=ready_timeout)
