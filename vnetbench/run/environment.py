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

from ..build.offloads import parse_ethtool_k
from ..capabilities import Capabilities
from ..probes.procstat import steal_ratio_now
from ..system.executor import Executor, LocalExecutor

# The offloads that change what a packet costs (ethtool -k names); the rest are fixed or irrelevant here.
OFFLOADS = ("rx-checksumming", "tx-checksumming", "scatter-gather", "tcp-segmentation-offload",
            "generic-segmentation-offload", "generic-receive-offload", "large-receive-offload", "rx-gro-hw",
            "rx-udp-gro-forwarding", "tx-udp_tnl-segmentation")
SOURCE_DIR = Path(__file__).resolve().parents[2]

# The sysctls that decide a TCP/UDP result (Flent and iperf3's own JSON record the same kind): congestion control,
# socket buffer limits, backlog and busy polling, GRO/TSO batching, forwarding. NETNS_SYSCTLS are each network
# namespace's own (a new namespace starts from defaults for many of them, not from the machine's values), so they
# are read again in every node of a scenario: those are what the traffic saw.
NETNS_SYSCTLS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.core.somaxconn",
                 "net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding", "net.ipv4.tcp_mtu_probing",
                 "net.ipv4.tcp_timestamps", "net.ipv4.tcp_sack", "net.ipv4.tcp_window_scaling", "net.ipv4.tcp_ecn",
                 "net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_limit_output_bytes", "net.ipv4.tcp_notsent_lowat",
                 "net.ipv4.tcp_min_tso_segs", "net.ipv4.tcp_tso_win_divisor", "net.ipv4.tcp_autocorking")
SYSCTLS = ("net.ipv4.tcp_available_congestion_control", "net.ipv4.tcp_allowed_congestion_control",
           "net.core.default_qdisc", "net.core.rmem_max", "net.core.wmem_max", "net.core.rmem_default",
           "net.core.wmem_default", "net.ipv4.tcp_mem", "net.ipv4.udp_mem", "net.ipv4.udp_rmem_min",
           "net.ipv4.udp_wmem_min", "net.core.netdev_max_backlog", "net.core.netdev_budget",
           "net.core.netdev_budget_usecs", "net.core.dev_weight", "net.core.gro_normal_batch", "net.core.busy_poll",
           "net.core.busy_read") + NETNS_SYSCTLS


def read_sysctls(names=SYSCTLS, root: Path = Path("/proc/sys")) -> dict[str, str]:
    """This machine's values (its own network namespace), whitespace collapsed ('4096 131072 6291456'); a sysctl
    this kernel lacks is left out."""
    out = {}
    for name in names:
        try:
            out[name] = " ".join((root / name.replace(".", "/")).read_text().split())
        except OSError:
            continue
    return out


def _sysctl_script(names) -> str:
    # one process for them all (`grep -H . FILE...` prints path:value): a `$(cat f)` per sysctl started a process
    # each, ~0.1 s apiece in a busy one-CPU guest (describing a topology's 6 namespaces there took 10-13 s)
    paths = " ".join(f"/proc/sys/{n.replace('.', '/')}" for n in names)
    return f"grep -H . {paths} 2>/dev/null; "


def parse_sysctls(text: str) -> dict[str, str]:
    """name=value lines, or grep -H's /proc/sys/a/b:value lines (see _sysctl_script)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("/proc/sys/"):
            path, sep, value = line.partition(":")
            name = path[len("/proc/sys/"):].replace("/", ".")
        else:
            name, sep, value = line.partition("=")
        if sep and value.strip():
            out[name.strip()] = " ".join(value.split())
    return out


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
        "sysctls": read_sysctls() if nics else {},
        "tools": {k: v.detail for k, v in caps.tools.items() if v.ok},
        "kernel_features": {k: v.ok for k, v in caps.kernel.items()},
        "strongswan_plugins": list(caps.strongswan().plugins) if nics and swan and caps.tool("charon") else [],
        "nics": interfaces(LocalExecutor(), [n for n in _names() if (Path("/sys/class/net") / n / "device").exists()])
        if nics else {},
        **(cpu_policy() if nics else {}),  # a testbed's hosts: their own facts (hosts/lab/preflight.py)
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _read(path: Path) -> str | None:
    try:
        return " ".join(path.read_text().split())
    except OSError:
        return None


def cpu_ranges(cpus) -> str:
    """{0, 1, 2, 5} -> '0-2,5' (the kernel's cpulist form)."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def cpu_policy(system: Path = Path("/sys/devices/system"), proc: Path = Path("/proc")) -> dict:
    """What RFC 8204 §3 asks of the machine beyond its CPU model and cores, read from /sys and /proc (a few files,
    once per campaign): each CPU's frequency driver and governor ("none" without cpufreq, as in most VMs), the idle
    driver and governor, SMT, NUMA nodes with their CPUs, isolated CPUs and the CPUs the run may use (vnetbench pins
    nothing), huge pages and the kernel command line. A file this kernel lacks is left out (None)."""
    cpu = system / "cpu"
    if (cpu / "cpu0" / "cpufreq").is_dir():
        groups: dict[tuple, list[int]] = {}
        for d in cpu.glob("cpu[0-9]*"):
            key = (_read(d / "cpufreq" / "scaling_driver") or "?", _read(d / "cpufreq" / "scaling_governor") or "?")
            groups.setdefault(key, []).append(int(d.name[3:]))
        freq: list | str = [{"cpus": cpu_ranges(c), "driver": k[0], "governor": k[1]} for k, c in sorted(
            groups.items(), key=lambda kv: min(kv[1]))]
    else:
        freq = "none"
    idle = {"driver": _read(cpu / "cpuidle" / "current_driver"),
            "governor": _read(cpu / "cpuidle" / "current_governor") or _read(cpu / "cpuidle" / "current_governor_ro")}
    nodes = {d.name: _read(d / "cpulist") for d in sorted(system.glob("node/node[0-9]*"), key=lambda d: int(d.name[4:]))
             } if (system / "node").is_dir() else None
    meminfo = {k: v.strip() for k, _, v in (line.partition(":") for line in (_read_lines(proc / "meminfo")))}
    try:
        affinity = cpu_ranges(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {"cpu_frequency": freq, "cpu_idle_driver": idle if any(idle.values()) else "none",
            "smt": _read(cpu / "smt" / "control"), "numa_nodes": nodes, "isolated_cpus": _read(cpu / "isolated"),
            "cpu_affinity": affinity,
            "hugepages": {k: meminfo[k] for k in ("HugePages_Total", "Hugepagesize") if k in meminfo} or None,
            "kernel_cmdline": _read(proc / "cmdline")}


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


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
                      'for i in /sys/class/net/*; do i=${i##*/}; echo "@@ $i"; ethtool -k "$i" 2>/dev/null; done; '
                      'echo "@@SYSCTL"; ' + _sysctl_script(NETNS_SYSCTLS))


def interfaces(where: Executor, names: list[str] | None = None) -> dict[str, dict]:
    """MTU, kind, qdiscs (with their options, e.g. a tbf rate) and offloads of the interfaces of one place (a
    namespace of the run, or the machine): what shapes the packets a figure counts. `names` limits the list."""
    return _place(where, names)[0]


def _place(where: Executor, names: list[str] | None = None) -> tuple[dict[str, dict], dict[str, str]]:
    """(interfaces, the namespace's own sysctls) of one place, in one command."""
    text = where.run(["sh", "-c", _INTERFACES_SCRIPT], check=False, timeout=30).stdout
    text, _, sysctl_part = text.partition("@@SYSCTL\n")
    link_part, _, rest = text.partition("\n@@TC\n")
    tc_part, _, eth_part = rest.partition("\n@@ETHTOOL\n")
    try:
        links = json.loads(link_part.strip() or "[]")
        qdiscs = json.loads(tc_part.strip() or "[]")
    except json.JSONDecodeError:
        return {}, parse_sysctls(sysctl_part)
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
    return out, parse_sysctls(sysctl_part)


def scenario_interfaces(topo) -> dict[str, dict]:
    """Every interface of a built scenario, per node (h1, h1v1, ...), and under "sysctls" each node's own network
    sysctls: recorded with the scenario, because the run's namespaces exist only while it is built. The nodes are
    read at once: a namespace costs a few commands."""
    from concurrent.futures import ThreadPoolExecutor
    nodes = list(topo.nodes.values())
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = list(pool.map(lambda n: _place(n.exec), nodes))
    return {n.label: ifs for n, (ifs, _) in zip(nodes, found)} | \
        {"sysctls": {n.label: sysctls for n, (_, sysctls) in zip(nodes, found)}}
