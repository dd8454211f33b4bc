"""What this machine offers: tools with versions, and kernel features probed by really creating each device
in a scratch namespace (the surest test: a user's kernel will differ from ours)."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from .catalog import workload_tools
from .system.executor import Executor, LocalExecutor, NetnsExecutor, SshExecutor
from .system.ledger import Ledger


@dataclass(frozen=True)
class Feature:
    ok: bool
    detail: str = ""  # version when ok, reason when not


# tool -> (Debian package, argv printing the version, regex picking the version out): the tools of the machine and
# its datapaths here, and every registered workload's own (each workload class declares its `tools`).
TOOLS: dict[str, tuple[str, list[str], str]] = {
    "ip": ("iproute2", ["ip", "-V"], r"iproute2-([\w.]+)"),
    "tc": ("iproute2", ["tc", "-V"], r"iproute2-([\w.]+)"),
    "bridge": ("iproute2", ["bridge", "-V"], r"(\d+\.\d[\d.]*)"),
    "ss": ("iproute2", ["ss", "-V"], r"iproute2-([\w.]+)"),
    "mpstat": ("sysstat", ["mpstat", "-V"], r"sysstat version (\S+)"),
    "ethtool": ("ethtool", ["ethtool", "--version"], r"version (\S+)"),
    "taskset": ("util-linux", ["taskset", "--version"], r"util-linux (\S+)"),  # cpu_pinning (build/pinning.py)
    "tcpdump": ("tcpdump", ["tcpdump", "--version"], r"tcpdump version (\S+)"),
    "ovs-vswitchd": ("openvswitch-switch", ["ovs-vswitchd", "--version"], r"\) (\S+)"),
    "ovsdb-server": ("openvswitch-switch", ["ovsdb-server", "--version"], r"\) (\S+)"),
    "ovs-vsctl": ("openvswitch-switch", ["ovs-vsctl", "--version"], r"\) (\S+)"),
    "ovsdb-tool": ("openvswitch-common", ["ovsdb-tool", "--version"], r"\) (\S+)"),
    "charon": ("strongswan-charon", ["/usr/lib/ipsec/charon", "--version"], r"(\d[\w.]+)"),
    "swanctl": ("strongswan-swanctl", ["swanctl", "--version"], r"(\d[\w.]+)"),
    "wireguard-go": ("wireguard-go", ["wireguard-go", "--version"], r"v?(\d[\w.\-+]+)"),
    "wg": ("wireguard-tools", ["wg", "--version"], r"v(\S+)"),
    "perf": ("linux-perf", ["perf", "--version"], r"perf version (\S+)"),  # the profiler (workload option profile)
    **workload_tools(),
}

# kernel feature -> the line in a scratch namespace that creates it (ip batch unless it starts with "tc ")
KERNEL_PROBES: dict[str, str] = {
    "veth": "link add p-veth type veth peer name p-veth1",
    "bridge": "link add p-br type bridge",
    "vxlan": "link add p-vx type vxlan id 1 dstport 4789 local 10.0.0.1",
    "macvlan": "link add p-mv link p-veth type macvlan mode bridge",
    "gre": "link add p-gre type gre remote 10.0.0.2 local 10.0.0.1",
    "gretap": "link add p-gt type gretap remote 10.0.0.2 local 10.0.0.1",
    "geneve": "link add p-gen type geneve id 1 remote 10.0.0.2",
    "vlan": "link add p-vl link p-veth type vlan id 10",
    "wireguard": "link add p-wg type wireguard",
    "tbf": "tc qdisc add dev p-veth root tbf rate 1gbit burst 32k latency 10ms",
    "htb": "tc qdisc add dev p-veth1 root handle 1: htb default 1",
    "netem": "tc qdisc add dev p-br root netem delay 1ms",
}
_KEY = "0x" + "00112233445566778899aabbccddeeff" * 2
XFRM_PROBES = {
    "xfrm-esp": ["xfrm", "state", "add", "src", "10.0.0.1", "dst", "10.0.0.2", "proto", "esp", "spi", "0x100",
                 "mode", "transport", "enc", "cbc(aes)", _KEY[:34], "auth", "hmac(sha256)", _KEY],
    "xfrm-ah": ["xfrm", "state", "add", "src", "10.0.0.1", "dst", "10.0.0.2", "proto", "ah", "spi", "0x101",
                "mode", "transport", "auth", "hmac(sha1)", _KEY[:42]],
}
GENL_FAMILIES = {"ovs-kernel-datapath": "ovs_datapath"}
TUN_DEVICE = "/dev/net/tun"

# Where distributions put charon (Debian first: TOOLS' own path); its plugins are in `plugins/` beside it.
CHARON_PATHS = ("/usr/lib/ipsec/charon", "/usr/libexec/ipsec/charon", "/usr/lib/strongswan/charon",
                "/usr/libexec/strongswan/charon")
OSSL_LEGACY = ("/usr/lib/x86_64-linux-gnu/ossl-modules/legacy.so", "/usr/lib/aarch64-linux-gnu/ossl-modules/legacy.so",
               "/usr/lib64/ossl-modules/legacy.so", "/usr/lib/ossl-modules/legacy.so")
# What the installed packages offer beyond a tool's presence, asked of the machine that runs them (this one, or each
# testbed host over SSH: the same script): one `@@F name ok DETAIL` or `@@F name no WHY` line each.
INSTALLED_SCRIPT = r"""
c=; for p in {charons}; do [ -x "$p" ] && {{ c=$p; break; }}; done
if [ -n "$c" ]; then echo "@@F charon ok $c"; else echo "@@F charon no charon is not installed (Debian package strongswan-charon; looked in {charons})"; fi
d=${{c%/*}}/plugins
if [ -n "$c" ] && [ -e "$d/libstrongswan-kernel-libipsec.so" ]; then echo "@@F strongswan-kernel-libipsec ok $d"
else echo "@@F strongswan-kernel-libipsec no strongSwan's kernel-libipsec plugin is not installed (Debian package libcharon-extra-plugins)"; fi
b=; [ -n "$c" ] && [ -e "$d/libstrongswan-gcrypt.so" ] && b="gcrypt plugin"
[ -z "$b" ] && for p in {legacy}; do [ -e "$p" ] && {{ b="OpenSSL legacy provider"; break; }}; done
if [ -n "$b" ]; then echo "@@F strongswan-blowfish ok $b"; else echo "@@F strongswan-blowfish no strongSwan has no Blowfish: it needs its gcrypt plugin (Debian package libstrongswan-extra-plugins) or OpenSSL's legacy provider"; fi
v=$(command -v ovs-vswitchd)
if [ -n "$v" ] && ldd "$v" 2>/dev/null | grep -qE 'libbpf|libxdp'; then echo "@@F ovs-afxdp ok linked to libxdp/libbpf"
else echo "@@F ovs-afxdp no this ovs-vswitchd is built without AF_XDP support (not linked to libxdp/libbpf)"; fi
""".format(charons=" ".join(CHARON_PATHS), legacy=" ".join(OSSL_LEGACY))

# strongSwan: the plugins every charon of a run loads (datapaths/ipsec.py), the ones that can provide each
# algorithm, and the Debian package of each plugin (what a user installs when one is missing).
STRONGSWAN_PLUGINS = ("random nonce openssl gcrypt aes sha1 sha2 md5 hmac gcm chapoly curve25519 kdf "
                      "{kernel} socket-default vici")
STRONGSWAN_PROBE_TIMEOUT_S = 10.0
ALGORITHM_PLUGINS: dict[str, tuple[str, ...]] = {
    "AES_GCM_16": ("gcm", "openssl"), "CHACHA20_POLY1305": ("chapoly", "openssl"),
    "AES_CBC": ("aes", "openssl", "gcrypt"), "3DES_CBC": ("openssl", "gcrypt"),
    "BLOWFISH_CBC": ("openssl", "gcrypt"), "NULL": ("openssl",),
    "CURVE_25519": ("curve25519", "openssl"),
}
PLUGIN_PACKAGES = {"gcm": "libstrongswan-standard-plugins", "openssl": "libstrongswan-standard-plugins",
                   "gcrypt": "libstrongswan-extra-plugins", "chapoly": "libstrongswan-extra-plugins",
                   "curve25519": "libstrongswan-extra-plugins"}


@dataclass(frozen=True)
class Strongswan:
    """What a charon started as a run starts it really loaded: its plugins and the algorithms they provide
    (`swanctl --list-algs`: type -> names such as AES_GCM_16). `error` says why nothing could be read."""
    plugins: tuple[str, ...] = ()
    algorithms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    error: str = ""

    def has(self, algorithm: str) -> bool:
        return any(algorithm in names for names in self.algorithms.values())

    def missing(self, algorithm: str, use: str) -> str | None:
        """Why charon cannot do `algorithm` (for `use`, e.g. "ESP aes128gcm16"), naming the plugins that would
        provide it and their Debian package; None if it can."""
        if self.error:
            return f"strongSwan's algorithms could not be read: {self.error}"
        if self.has(algorithm):
            return None
        plugins = ALGORITHM_PLUGINS.get(algorithm, ())
        packages = sorted({PLUGIN_PACKAGES.get(p, "libstrongswan") for p in plugins})
        return (f"strongSwan's charon here has no {algorithm} ({use})"
                + (f": it needs its plugin {' or '.join(plugins)} (Debian package {' or '.join(packages)}), "
                   f"which is not loaded" if plugins else ""))

    def as_dict(self) -> dict:
        return {"plugins": list(self.plugins), "algorithms": {k: list(v) for k, v in self.algorithms.items()},
                "error": self.error}


@dataclass
class Capabilities:
    tools: dict[str, Feature] = field(default_factory=dict)
    kernel: dict[str, Feature] = field(default_factory=dict)
    swan: Strongswan | None = None  # probed on first use: only a spec with IPsec pays for starting a charon
    # what the installed packages offer (INSTALLED_SCRIPT); None: this machine's, probed on first use
    installed: dict[str, Feature] | None = None

    def strongswan(self) -> Strongswan:
        if self.swan is None:
            self.swan = probe_strongswan() if self.tool("charon") and self.tool("swanctl") else \
                Strongswan(error="charon or swanctl is not installed (Debian packages strongswan-charon, "
                                 "strongswan-swanctl)")
        return self.swan

    def offer(self, name: str) -> Feature:
        """A feature of the installed packages (INSTALLED_SCRIPT), e.g. charon's path or strongSwan's Blowfish."""
        found = self.installed if self.installed is not None else local_installed()
        return found.get(name, Feature(False, f"{name}: not probed"))

    def tool(self, name: str) -> bool:
        return self.tools.get(name, Feature(False)).ok

    def has(self, feature: str) -> bool:
        return self.kernel.get(feature, Feature(False)).ok

    def missing_tool(self, name: str) -> str:
        pkg = TOOLS[name][0] if name in TOOLS else name
        found = self.tools.get(name)
        if found is not None and found.detail.startswith("on "):  # a testbed's: the hosts that lack it (merge)
            return f"{name} is missing {found.detail}"
        if found is not None and found.detail and not found.detail.startswith("not installed"):
            # installed but unusable here, with the probe's reason (in a guest: wireguard-go and AVX)
            return f"{name} {found.detail}" if found.detail.startswith("does not run") \
                else f"{name} is installed but cannot run here: {found.detail}"
        return f"{name} is not installed (Debian package {pkg})"

    def missing_kernel(self, feature: str) -> str:
        return f"kernel has no {feature}: {self.kernel.get(feature, Feature(False, 'not probed')).detail}"

    def as_dict(self) -> dict:
        return {"tools": {k: asdict(v) for k, v in self.tools.items()},
                "kernel": {k: asdict(v) for k, v in self.kernel.items()},
                "installed": {k: asdict(v) for k, v in
                              (self.installed if self.installed is not None else local_installed()).items()},
                "strongswan": self.strongswan().as_dict()}


@lru_cache(maxsize=1)
def detect() -> Capabilities:
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=8) as pool:  # each asks a tool its version: 22 processes, at once
        caps = Capabilities(tools=dict(zip(TOOLS, pool.map(_tool, TOOLS))))
    caps.kernel = _kernel()
    return caps


@lru_cache(maxsize=1)
def local_installed() -> dict[str, Feature]:
    proc = subprocess.run(["sh", "-c", INSTALLED_SCRIPT], capture_output=True, text=True, timeout=30)
    return parse_features(proc.stdout)


def parse_features(text: str) -> dict[str, Feature]:
    """`@@F name ok DETAIL` / `@@F name no WHY` lines (the probes run by a shell script, here or on a host)."""
    found: dict[str, Feature] = {}
    for line in text.splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 3 and parts[0] == "@@F":
            found[parts[1]] = Feature(parts[2] == "ok", parts[3] if len(parts) > 3 else "")
    return found


def _tool(name: str) -> Feature:
    pkg, argv, pattern = TOOLS[name]
    if name == "charon":  # wherever this distribution puts it
        argv = [next((p for p in CHARON_PATHS if shutil.which(p)), argv[0]), *argv[1:]]
    if not shutil.which(argv[0]):
        return Feature(False, f"not installed (Debian package {pkg})")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Feature(False, f"does not run: {exc}")
    m = re.search(pattern, proc.stdout + proc.stderr)
    return Feature(True, m.group(1) if m else "unknown version")


def _kernel() -> dict[str, Feature]:
    with _scratch("probe") as (_, ns):
        return parse_kernel(_in_own_group(kernel_script(ns), 30))


@contextmanager
def _scratch(suffix: str):
    """A probe's own ledger and the name of its scratch namespace (recorded), removed afterwards: a signal that comes
    while they are made, or while they are removed, is held until the clean-up is done (one between the ledger's
    creation and the `try` that removes it left its directory behind; so did one during the removal, on a busy
    machine where the test saw the directory just as the probe finished)."""
    held, ledger = _Held(), None
    try:
        ledger = Ledger.create()
        ns = f"{ledger.prefix}-{suffix}"
        ledger.record("netns", ns)
        held.release()
        yield ledger, ns
    finally:
        cleanup = _Held()  # a signal during the removal (the probe done) is sent after it, not into it
        try:
            if ledger is not None:
                ledger.remove_all()
        finally:
            cleanup.release()
            held.release()


def _in_own_group(script: str, timeout: float) -> str:
    """A local probe script's output. Interrupted (a signal, a timeout), its whole process group is killed and
    waited for before the caller cleans up: killing the shell alone left its `ip netns add` running, and the
    namespace it made after the ledger's clean-up was left behind."""
    held = _Held()  # a signal inside Popen would leave a started script that no one can find to kill
    try:
        proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True)
    except BaseException:
        held.release()
        raise
    try:
        held.release()  # here, a signal held meanwhile (or arriving now) kills the group below
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:  # a hung probe: what it said so far (the rest reads "not probed")
        _kill_group(proc)
        return ""
    except BaseException:
        _kill_group(proc)
        raise


class _Held:
    """SIGINT and SIGTERM noted, not acted on, until release(), which restores the handlers and sends again what
    came meanwhile (in the main thread only: elsewhere the handlers cannot be swapped, and signals go as they come)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.got: list[int] = []
        main = threading.current_thread() is threading.main_thread()
        self.old = {s: signal.signal(s, lambda signum, frame: self.got.append(signum)) for s in self.SIGNALS} \
            if main else {}

    def release(self) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)
        self.old = {}
        for s in self.got:
            os.kill(os.getpid(), s)
        self.got = []


def _kill_group(proc: subprocess.Popen, settle_s: float = 5.0) -> None:
    """Kill the group and wait until none of it is left: a killed `ip netns add` still finishes the syscall it is in
    (the namespace's mount), after its shell is reaped, and a namespace made then outlived the clean-up."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)


PKTGEN_CTRL = "/proc/net/pktgen/pgctrl"


def kernel_script(ns: str, may_load: bool = False) -> str:
    """The one kernel probe, as a shell script for any machine (this one, a guest, a testbed host): it makes the
    scratch namespace `ns`, creates each device of KERNEL_PROBES in it (one ip batch, one tc batch), then the rest
    one line each (`@@F name ok` or `@@F name no why`): xfrm states, generic netlink families, the TUN device, the
    kernel's packet generator. pktgen is a module nothing loads on its own: it counts where it is loaded, or, in a
    guest the run boots (`may_load`), where its module is there to load (modprobe -n: nothing is loaded here)."""
    q = shlex.quote
    ip_lines = [v for v in KERNEL_PROBES.values() if not v.startswith("tc ")]
    tc_lines = [v[3:] for v in KERNEL_PROBES.values() if v.startswith("tc ")]
    checks = [(name, f"ip -n {q(ns)} {shlex.join(argv)}") for name, argv in XFRM_PROBES.items()]
    checks += [(name, f"ip netns exec {q(ns)} genl ctrl get name {q(family)}") for name, family in GENL_FAMILIES.items()]
    checks += [("tun", f"test -c {q(TUN_DEVICE)}")]
    dry = ('{ if [ -r /proc/sys/kernel/modprobe ]; then $(cat /proc/sys/kernel/modprobe) -n pktgen; '
           'else echo "this kernel has no pktgen and loads no modules" >&2; false; fi; }')
    loadable = f" || {dry}" if may_load else \
        (f' || {{ if e=$({dry} 2>&1); then echo "the pktgen module is not loaded, and vnetbench loads modules only in '
         f'guests it boots" >&2; else echo "$e" >&2; fi; false; }}')
    checks += [("pktgen", f"{{ test -e {PKTGEN_CTRL}{loadable}; }}")]
    rest = "; ".join(f"e=$({cmd} 2>&1 >/dev/null) && echo '@@F {name} ok' || echo \"@@F {name} no $(echo \"$e\" | head -1)\""
                     for name, cmd in checks)
    return (f"ip netns add {q(ns)} || exit 9; "
            f"printf '%s\\n' {' '.join(map(q, ip_lines))} | ip -n {q(ns)} -force -batch - 2>&1; echo @@tc; "
            f"printf '%s\\n' {' '.join(map(q, tc_lines))} | tc -n {q(ns)} -force -batch - 2>&1; echo @@rest; "
            f"{rest}; ip netns del {q(ns)}")


def parse_kernel(out: str) -> dict[str, Feature]:
    """Each feature kernel_script probed, available or not with the kernel's reason."""
    out, _, rest_out = out.partition("@@rest")
    ip_out, _, tc_out = out.partition("@@tc")
    found: dict[str, Feature] = {}
    for names, text in (([k for k, v in KERNEL_PROBES.items() if not v.startswith("tc ")], ip_out),
                        ([k for k, v in KERNEL_PROBES.items() if v.startswith("tc ")], tc_out)):
        found |= batch_features(names, text)
    for line in rest_out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 3 and parts[0] == "@@F":
            why = (parts[3] if len(parts) > 3 else "").removeprefix("Error: ")
            if parts[1] == "tun" and parts[2] != "ok":
                why = f"{TUN_DEVICE} missing"
            elif parts[1] in GENL_FAMILIES and parts[2] != "ok":
                why = f"generic netlink family {GENL_FAMILIES[parts[1]]} absent (module not loaded or not built)"
            found[parts[1]] = Feature(parts[2] == "ok", "" if parts[2] == "ok" else why or "failed")
    return found


def probe_kernel(ex: Executor, ns: str, timeout: float = 30, may_load: bool = False) -> dict[str, Feature]:
    """Kernel features where `ex` runs (this machine, a guest, a testbed host over SSH), probed by creating each
    device in the scratch namespace `ns` (the caller's: recorded in its ledger); may_load: a guest the run boots."""
    script = kernel_script(ns, may_load)
    if isinstance(ex, SshExecutor):  # a script over SSH: one round trip, no quoting of the whole on a command line
        out = ex.run_script(script, timeout=timeout, check=False).stdout
    else:
        out = ex.run(["sh", "-c", script], timeout=timeout, check=False).stdout
    return parse_kernel(out)


def batch_features(names: list[str], said: str) -> dict[str, Feature]:
    """What `ip|tc -force -batch` said about each line (`Command failed -:N` after the line's own error): the
    feature each line probes, available or not with the kernel's reason."""
    failed: dict[int, str] = {}
    last_error = ""
    for line in said.splitlines():
        m = re.match(r"Command failed -:(\d+)", line)
        if m:
            failed[int(m.group(1))] = last_error or "failed"
            last_error = ""
        elif line.strip():
            last_error = line.strip().removeprefix("Error: ")
    return {name: Feature(i + 1 not in failed, failed.get(i + 1, "")) for i, name in enumerate(names)}


def _first_error(stderr: str) -> str:
    return next((ln.strip().removeprefix("Error: ") for ln in stderr.splitlines() if ln.strip()), "failed")


def probe_strongswan(load: str | None = None) -> Strongswan:
    """Start a charon the way a run starts one (same plugin list, own /run, in a scratch namespace) and read
    what it really loaded. `load` replaces the plugin list (a test simulates a missing plugin with it)."""
    load = load or STRONGSWAN_PLUGINS.format(kernel="kernel-netlink")
    with _scratch("swan") as (ledger, ns):
        LocalExecutor().ip_batch([f"netns add {ns}"])
        node = NetnsExecutor(ns, ledger)
        run_dir = ledger.work / "swan"
        run_dir.mkdir(mode=0o700)
        vici = "unix:///run/charon.vici"
        (run_dir / "strongswan.conf").write_text(
            f"charon {{\n  load_modular = no\n  load = {load}\n"
            f"  plugins {{\n    vici {{\n      socket = {vici}\n    }}\n  }}\n}}\n")
        priv = [sys.executable, "-m", "vnetbench.system.privrun", str(run_dir), "--"]
        path = local_installed().get("charon", Feature(False)).detail or TOOLS["charon"][1][0]
        charon = node.spawn([*priv, "env", "STRONGSWAN_CONF=/run/strongswan.conf", path],
                            label="charon-probe", stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + STRONGSWAN_PROBE_TIMEOUT_S
            while not (run_dir / "charon.vici").exists():
                if charon.poll() is not None:
                    return Strongswan(error=f"charon exited {charon.returncode} at start: "
                                            f"{charon.stderr.read().strip()[-300:]}")
                if time.monotonic() > deadline:
                    return Strongswan(error=f"charon did not open its socket in {STRONGSWAN_PROBE_TIMEOUT_S:.0f} s")
                time.sleep(0.01)
            while True:  # the socket file appears at bind(), a moment before charon listens on it
                algs = node.run([*priv, "swanctl", "--list-algs", "--uri", vici], timeout=10, check=False)
                if algs.returncode == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            stats = node.run([*priv, "swanctl", "--stats", "--uri", vici], timeout=10, check=False)
        finally:
            charon.terminate()
            try:
                charon.wait(timeout=5)
            except subprocess.TimeoutExpired:
                charon.kill()
                charon.wait()
        if algs.returncode != 0:
            return Strongswan(error=f"swanctl --list-algs exited {algs.returncode}: {_first_error(algs.stderr)}")
        m = re.search(r"^loaded plugins: (.*)$", stats.stdout, re.M)
        plugins = tuple(p for p in (m.group(1).split() if m else ()) if p != "charon")
        return Strongswan(plugins, parse_list_algs(algs.stdout))


def parse_list_algs(text: str) -> dict[str, tuple[str, ...]]:
    """`swanctl --list-algs`: "type:" lines, then "  NAME[plugin]" lines."""
    out: dict[str, list[str]] = {}
    kind = None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            kind = line.strip()[:-1]
            out[kind] = []
        elif kind and line.strip():
            out[kind].append(line.strip().split("[", 1)[0])
    return {k: tuple(v) for k, v in out.items()}
