"""User-Mode Linux guests: the Debian `user-mode-linux` kernel (/usr/bin/linux.uml) booting the machine's own root
read-only through hostfs, so every tool installed here is there inside the guest, with no image to build.

The init script (written per guest) makes the writable state itself: proc, sys, tmpfs on /run and /tmp, the guest's
module directory (the modules live in /usr/lib/uml/modules/<version>, so a symlink under /run and a modprobe wrapper
in /proc/sys/kernel/modprobe let the kernel autoload crypto, GRE, OVS, ...), the NICs, and an sshd from the machine's
own binary with the run's host key and authorized key under the guest's /run. NICs are vector taps with gro=1
(without GRO a TCP stream between guests crawls at a few Mbit/s).
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

from . import register
from .base import Fleet, Guest, GuestKind, Support

LINUX_UML = "linux.uml"
MODULES = Path("/usr/lib/uml/modules")
UP_MARK = "VNETBENCH-GUEST-UP"
# The guest saves only the FXSAVE area of its processes' registers (see nofpx.py): no AVX in the guest's userspace.
NO_AVX_ENV = {
    "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX2,-AVX,-AVX_Fast_Unaligned_Load,"
                      "-XSAVE,-XSAVEC",
    "OPENSSL_ia32cap": "~0x1c00000000000000:0",
}


@lru_cache(maxsize=1)
def kernel_version() -> str | None:
    """The UML kernel's version, from its module directory (running `linux.uml --version` boots nothing but is
    slower and prints to the terminal)."""
    if not shutil.which(LINUX_UML):
        return None
    versions = sorted(p.name for p in MODULES.iterdir()) if MODULES.is_dir() else []
    return versions[-1] if versions else "unknown"


@register
class Uml(GuestKind):
    name = "uml"
    saves_vector_registers = False  # only the FXSAVE registers of its processes, on this CPU (nofpx.py)

    @classmethod
    def binaries(cls) -> list[str]:
        return [shutil.which(LINUX_UML) or ""]

    @classmethod
    def support(cls) -> Support:
        if not shutil.which(LINUX_UML):
            return Support(False, reason="User-Mode Linux is not installed (Debian package user-mode-linux)")
        if not shutil.which("sshd") and not Path("/usr/sbin/sshd").exists():
            return Support(False, reason="sshd is not installed (Debian package openssh-server): guests are "
                                         "driven over SSH")
        return Support(True, kernel=f"uml-{kernel_version()}")

    # ---- files -------------------------------------------------------------------------------------------
    def sshd_config(self, g: Guest) -> str:
        env = " ".join(f"{k}={v}" for k, v in NO_AVX_ENV.items())
        return (f"ListenAddress {g.address}\nHostKey /run/vb/ssh_host_ed25519_key\n"
                f"AuthorizedKeysFile /run/vb/authorized_keys\nPermitRootLogin prohibit-password\n"
                f"PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                f"PidFile /run/vb/sshd.pid\nUseDNS no\nPrintMotd no\nPrintLastLog no\nMaxSessions 100\n"
                f"MaxStartups 100:30:200\nSetEnv {env}\n")

    def init_script(self, g: Guest) -> str:
        d = shlex.quote(str(g.dir))
        # the run's directories on the machine, read-write at the same path (configs and keys written by the
        # build, logs written by the guest's daemons); they may be under /run or /tmp, now the guest's own tmpfs
        shares = "".join(f"mkdir -p {shlex.quote(str(p))} && mount -t hostfs none {shlex.quote(str(p))} "
                         f"-o {shlex.quote(str(p))}\n" for p in g.shares)
        nics = "".join(f"ip link set vec{k + 1} name {shlex.quote(n.name)}\n"
                       f"ip link set {shlex.quote(n.name)} up\n" for k, n in enumerate(g.nics))
        return f"""#!/bin/sh
# vnetbench guest {g.label}: writable state on tmpfs, NICs, sshd; then reap orphans forever.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# the guest's files are read before any tmpfs hides them (they may live under /run or /tmp on the host)
hostkey=$(cat {d}/ssh_host_ed25519_key); authorized=$(cat {d}/authorized_keys); sshdconf=$(cat {d}/sshd_config)
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/vb /run/sshd /run/netns /run/m/lib/modules
umask 077
printf '%s\n' "$hostkey" > /run/vb/ssh_host_ed25519_key
printf '%s\n' "$authorized" > /run/vb/authorized_keys
printf '%s\n' "$sshdconf" > /run/vb/sshd_config
umask 022
ln -s {MODULES}/$(uname -r) /run/m/lib/modules/$(uname -r)
# the kernel starts its module helper with a bare environment: give kmod the guest's no-AVX settings
printf '#!/bin/sh\\nexport GLIBC_TUNABLES="%s" OPENSSL_ia32cap="%s"\\nexec /sbin/modprobe -d /run/m "$@"\\n' \\
  "$GLIBC_TUNABLES" "$OPENSSL_ia32cap" > /run/modprobe && chmod 755 /run/modprobe
echo /run/modprobe > /proc/sys/kernel/modprobe
# the guest's own device nodes (the machine's /dev seen through hostfs has no /dev/net/tun for the guest's kernel)
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs -o mode=1777 tmpfs /dev/shm
/run/modprobe tun
# root's home (where SSH sessions start, and tools write temporary files) writable over the machine's own, without
# its login scripts (e.g. a pyenv init would run before every command)
mkdir -p /run/home/upper /run/home/work
mount -t overlay overlay -o lowerdir=/root,upperdir=/run/home/upper,workdir=/run/home/work /root
: > /root/.bashrc; : > /root/.profile
{shares}hostname {shlex.quote(g.label)}
ip link set lo up
ip addr add {g.address}/24 dev vec0
ip link set vec0 up
{nics}/usr/sbin/sshd -f /run/vb/sshd_config -E /run/vb/sshd.log
echo {UP_MARK} $(cut -d" " -f1 /proc/uptime)
while :; do sleep 3600 & wait $!; done
"""

    def argv(self, fleet: Fleet, g: Guest) -> list[str]:
        nics = [f"vec0:transport=tap,ifname={fleet.tap(g, None)},mac=52:54:00:{g.index // 256:02x}:{g.index % 256:02x}:00,gro=1"]
        nics += [f"vec{k + 1}:transport=tap,ifname={n.tap},mac={n.mac},gro=1" for k, n in enumerate(g.nics)]
        env = [f"{k}={v}" for k, v in NO_AVX_ENV.items()]  # unknown key=value arguments: the init's environment
        return ["ip", "netns", "exec", fleet.netns, "env", "TMPDIR=/dev/shm",
                sys.executable, "-m", "vnetbench.guests.nofpx", LINUX_UML,
                f"mem={g.mem_mb}M", "root=/dev/root", "rootfstype=hostfs", "rootflags=/", "ro",
                f"init={g.dir / 'init'}", f"umid={fleet.prefix}-{g.label}", f"uml_dir={fleet.dir / 'uml'}",
                "con=none", "con0=null,fd:1", "quiet", *nics, *env]

    def commands(self, fleet: Fleet, g: Guest) -> list[list[str]]:
        return [self.argv(fleet, g)]

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self, fleet: Fleet, g: Guest) -> None:
        (g.dir / "sshd_config").write_text(self.sshd_config(g))
        init = g.dir / "init"
        init.write_text(self.init_script(g))
        init.chmod(0o755)
        (fleet.dir / "uml").mkdir(mode=0o700, exist_ok=True)
        pkg_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": pkg_root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        with open(g.console, "wb") as console:
            # The run's namespace is in the ledger already: `clean` stops every process in it, this one included.
            g.proc = subprocess.Popen(self.argv(fleet, g), stdin=subprocess.DEVNULL, stdout=console,
                                      stderr=subprocess.STDOUT, start_new_session=True, env=env)
        g.pid = g.proc.pid
        fleet.ledger.record_process(g.pid, f"guest:{g.label}")

    def booted(self, g: Guest) -> bool:
        try:
            with open(g.console, "rb") as fh:
                return UP_MARK.encode() in fh.read()
        except OSError:
            return False

    def pids(self, fleet: Fleet, g: Guest) -> list[int]:
        """Every host process of the guest: the kernel, its helpers and one per guest address space."""
        found = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == g.pid:
                        found.append(int(entry.name))
                except OSError:
                    pass
        return found

    def stop(self, fleet: Fleet, g: Guest) -> None:
        if g.proc is None:
            return
        try:
            os.killpg(g.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            g.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._reap_group(fleet, g)

    def _reap_group(self, fleet: Fleet, g: Guest, timeout: float = 10.0) -> None:
        """Wait until the rest of the guest's process group is gone too: its ledger record is forgotten next, and a
        busy machine took seconds to finish the address-space processes of a guest whose kernel had exited."""
        deadline = time.monotonic() + timeout
        while [p for p in self.pids(fleet, g) if not _zombie(p)] and time.monotonic() < deadline:
            try:
                os.killpg(g.pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def _zombie(pid: int) -> bool:
    """Dead, waiting for its parent (init, for a guest's orphans) to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return True
