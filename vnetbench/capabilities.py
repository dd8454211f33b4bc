"""What this machine offers: tools with versions, and kernel features probed by really creating each device
in a scratch namespace (the surest test: a user's kernel will differ from ours)."""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from .executor import LocalExecutor, NetnsExecutor
from .ledger import Ledger


@dataclass(frozen=True)
class Feature:
    ok: bool
    detail: str = ""  # version when ok, reason when not


# tool -> (Debian package, argv printing the version, regex picking the version out)
TOOLS: dict[str, tuple[str, list[str], str]] = {
    "ip": ("iproute2", ["ip", "-V"], r"iproute2-([\w.]+)"),
    "tc": ("iproute2", ["tc", "-V"], r"iproute2-([\w.]+)"),
    "bridge": ("iproute2", ["bridge", "-V"], r"(\d+\.\d[\d.]*)"),
    "ss": ("iproute2", ["ss", "-V"], r"iproute2-([\w.]+)"),
    "iperf3": ("iperf3", ["iperf3", "--version"], r"iperf (\S+)"),
    "sockperf": ("sockperf", ["sockperf", "--version"], r"[Vv]ersion:?\s*(\S+)"),
    "ping": ("iputils-ping", ["ping", "-V"], r"iputils[- ](\S+)"),
    "netperf": ("netperf (non-free)", ["netperf", "-V"], r"[Vv]ersion ([\d.]+)"),
    "netserver": ("netperf (non-free)", ["netserver", "-V"], r"[Vv]ersion ([\d.]+)"),
    "mpstat": ("sysstat", ["mpstat", "-V"], r"sysstat version (\S+)"),
    "ethtool": ("ethtool", ["ethtool", "--version"], r"version (\S+)"),
    "tcpdump": ("tcpdump", ["tcpdump", "--version"], r"tcpdump version (\S+)"),
    "ovs-vswitchd": ("openvswitch-switch", ["ovs-vswitchd", "--version"], r"\) (\S+)"),
    "ovsdb-server": ("openvswitch-switch", ["ovsdb-server", "--version"], r"\) (\S+)"),
    "ovs-vsctl": ("openvswitch-switch", ["ovs-vsctl", "--version"], r"\) (\S+)"),
    "charon": ("strongswan-charon", ["/usr/lib/ipsec/charon", "--version"], r"(\d[\w.]+)"),
    "swanctl": ("strongswan-swanctl", ["swanctl", "--version"], r"(\d[\w.]+)"),
    "wireguard-go": ("wireguard-go", ["wireguard-go", "--version"], r"v?(\d[\w.\-+]+)"),
    "wg": ("wireguard-tools", ["wg", "--version"], r"v(\S+)"),
    "nginx": ("nginx", ["nginx", "-v"], r"nginx/(\S+)"),
    "stress-ng": ("stress-ng", ["stress-ng", "--version"], r"version (\S+)"),
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


@dataclass
class Capabilities:
    tools: dict[str, Feature] = field(default_factory=dict)
    kernel: dict[str, Feature] = field(default_factory=dict)

    def tool(self, name: str) -> bool:
        return self.tools.get(name, Feature(False)).ok

    def has(self, feature: str) -> bool:
        return self.kernel.get(feature, Feature(False)).ok

    def missing_tool(self, name: str) -> str:
        pkg = TOOLS[name][0] if name in TOOLS else name
        return f"{name} is not installed (Debian package {pkg})"

    def missing_kernel(self, feature: str) -> str:
        return f"kernel has no {feature}: {self.kernel.get(feature, Feature(False, 'not probed')).detail}"

    def as_dict(self) -> dict:
        return {"tools": {k: asdict(v) for k, v in self.tools.items()},
                "kernel": {k: asdict(v) for k, v in self.kernel.items()}}


@lru_cache(maxsize=1)
def detect() -> Capabilities:
    caps = Capabilities(tools={name: _tool(name) for name in TOOLS})
    caps.kernel = _kernel()
    return caps


def _tool(name: str) -> Feature:
    pkg, argv, pattern = TOOLS[name]
    if not shutil.which(argv[0]):
        return Feature(False, f"not installed (Debian package {pkg})")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Feature(False, f"does not run: {exc}")
    m = re.search(pattern, proc.stdout + proc.stderr)
    return Feature(True, m.group(1) if m else "unknown version")


def _kernel() -> dict[str, Feature]:
    ledger = Ledger.create()
    ns = f"{ledger.prefix}-probe"
    ledger.record("netns", ns)
    try:
        LocalExecutor().ip_batch([f"netns add {ns}"])
        node = NetnsExecutor(ns)
        found = _batch_probe(node, "ip", {k: v for k, v in KERNEL_PROBES.items() if not v.startswith("tc ")})
        found |= _batch_probe(node, "tc", {k: v[3:] for k, v in KERNEL_PROBES.items() if v.startswith("tc ")})
        for feature, argv in XFRM_PROBES.items():
            proc = subprocess.run([*node.ip(), *argv], capture_output=True, text=True)
            found[feature] = Feature(proc.returncode == 0, _first_error(proc.stderr) if proc.returncode else "")
        for feature, family in GENL_FAMILIES.items():
            proc = node.run(["genl", "ctrl", "get", "name", family], check=False)
            found[feature] = Feature(proc.returncode == 0, "" if proc.returncode == 0 else
                                     f"generic netlink family {family} absent (module not loaded or not built)")
        tun = subprocess.run(["test", "-c", TUN_DEVICE]).returncode == 0
        found["tun"] = Feature(tun, "" if tun else f"{TUN_DEVICE} missing")
        return found
    finally:
        ledger.remove_all()


def _batch_probe(node: NetnsExecutor, tool: str, probes: dict[str, str]) -> dict[str, Feature]:
    names = list(probes)
    argv = [tool, "-n", node.netns, "-force", "-batch", "-"]
    proc = subprocess.run(argv, input="\n".join(probes.values()) + "\n", capture_output=True, text=True)
    failed: dict[int, str] = {}
    last_error = ""
    for line in proc.stderr.splitlines():
        m = re.match(r"Command failed -:(\d+)", line)
        if m:
            failed[int(m.group(1))] = last_error or "failed"
            last_error = ""
        elif line.strip():
            last_error = line.strip().removeprefix("Error: ")
    return {name: Feature(i + 1 not in failed, failed.get(i + 1, "")) for i, name in enumerate(names)}


def _first_error(stderr: str) -> str:
    return next((ln.strip().removeprefix("Error: ") for ln in stderr.splitlines() if ln.strip()), "failed")
