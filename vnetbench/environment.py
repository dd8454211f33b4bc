"""What a reader needs to trust or reproduce a figure, recorded once per campaign."""
from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from importlib.metadata import version
from pathlib import Path

from .capabilities import Capabilities
from .executor import Executor, LocalExecutor
from .probes.procstat import steal_ratio_now

# The offloads that change what a packet costs (ethtool -k names); the rest are fixed or irrelevant here.
OFFLOADS = ("rx-checksumming", "tx-checksumming", "scatter-gather", "tcp-segmentation-offload",
            "generic-segmentation-offload", "generic-receive-offload", "large-receive-offload", "rx-gro-hw",
            "rx-udp-gro-forwarding", "tx-udp_tnl-segmentation")
SOURCE_DIR = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def capture(caps: Capabilities, nics: bool = True, steal: float | None = None, swan: bool = True) -> dict:
    """`nics`: this machine carries the traffic (not so when it only drives a testbed over SSH: its NICs and its
    strongSwan are then not what ran, and probing them would run commands that did not go to the testbed).
    `steal`: the CPU steal share already watched at the start (else sampled now, for 0.5 s). `swan`: charon's
    plugins are listed (a charon started to see them: only for a campaign that runs one)."""
    uname = platform.uname()
    return {
        "hostname": socket.gethostname(),
        "kernel": f"{uname.system} {uname.release} {uname.version}",
        "machine": uname.machine,
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "load_average": os.getloadavg(),
        "cpu_steal_ratio_at_start": round(steal_ratio_now(LocalExecutor()) if steal is None else steal, 4),
        "python": platform.python_version(),
        "vnetbench": version("vnetbench"),
        "vnetbench_git": git_commit(),
        "tools": {k: v.detail for k, v in caps.tools.items() if v.ok},
        "kernel_features": {k: v.ok for k, v in caps.kernel.items()},
        "strongswan_plugins": list(caps.strongswan().plugins) if nics and swan and caps.tool("charon") else [],
        "nics": interfaces(LocalExecutor(), [n for n in _names() if (Path("/sys/class/net") / n / "device").exists()])
        if nics else {},
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def git_commit(source: Path = SOURCE_DIR) -> str | None:
    """The commit vnetbench runs from, '+dirty' when it has local changes; None outside a git checkout."""
    if not (source / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5)
        dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def _names() -> list[str]:
    try:
        return sorted(os.listdir("/sys/class/net"))
    except OSError:
        return []


# One command per place (over SSH, into a guest, each command is a round trip): links, qdiscs, then every
# interface's offloads, the three parts split by marker lines.
_INTERFACES_SCRIPT = ('ip -j -d link show; echo; echo "@@TC"; tc -j qdisc show; echo; echo "@@ETHTOOL"; '
                      'for i in $(ls /sys/class/net); do echo "@@ $i"; ethtool -k "$i" 2>/dev/null; done')


def interfaces(where: Executor, names: list[str] | None = None) -> dict[str, dict]:
    """MTU, kind, qdiscs (with their options, e.g. a tbf rate) and offloads of the interfaces of one place (a
    namespace of the run, or the machine): what shapes the packets a figure counts. `names` limits the list."""
    text = where.run(["sh", "-c", _INTERFACES_SCRIPT], check=False, timeout=30).stdout
    link_part, _, rest = text.partition("\n@@TC\n")
    tc_part, _, eth_part = rest.partition("\n@@ETHTOOL\n")
    try:
        links = json.loads(link_part.strip() or "[]")
        qdiscs = json.loads(tc_part.strip() or "[]")
    except json.JSONDecodeError:
        return {}
    out: dict[str, dict] = {}
    for link in links:
        name = link.get("ifname")
        if not name or (names is not None and name not in names):
            continue
        out[name] = {"mtu": link.get("mtu"), "kind": (link.get("linkinfo") or {}).get("info_kind", ""),
                     "qdiscs": [{"kind": q.get("kind"), "root": bool(q.get("root")), "options": q.get("options", {})}
                                for q in qdiscs if q.get("dev") == name]}
    for dev, features in parse_ethtool_k(eth_part).items():
        if dev in out:
            out[dev]["offloads"] = {k: v for k, v in features.items() if k in OFFLOADS}
    return out


def parse_ethtool_k(text: str) -> dict[str, dict[str, str]]:
    """'@@ dev' then `ethtool -k dev` lines ('feature: on [fixed]') -> dev -> feature -> 'on'/'off' (+' fixed')."""
    out: dict[str, dict[str, str]] = {}
    dev = None
    for line in text.splitlines():
        if line.startswith("@@ "):
            dev = line[3:].strip()
            out[dev] = {}
        elif dev and ":" in line and not line.startswith("Features for"):
            key, _, value = line.strip().partition(": ")
            out[dev][key] = value.replace("[", "").replace("]", "").strip()
    return out


def scenario_interfaces(topo) -> dict[str, dict]:
    """Every interface of a built scenario, per node (h1, h1v1, ...): recorded with the scenario, because the run's
    namespaces exist only while it is built. The nodes are read at once: a namespace costs a few commands."""
    from concurrent.futures import ThreadPoolExecutor
    nodes = list(topo.nodes.values())
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = pool.map(lambda n: interfaces(n.exec), nodes)
    return {n.label: ifs for n, ifs in zip(nodes, found)}
