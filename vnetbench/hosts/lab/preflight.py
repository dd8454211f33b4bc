"""Preflight of a lab: before anything is built every host is reached and probed (tools, kernel features in a
scratch namespace, the NIC, its SR-IOV functions and address) and its clock offset taken; one that cannot be reached
stops the run with one line naming it. merge() is what the whole lab offers."""
from __future__ import annotations

import re
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ...capabilities import (CHARON_PATHS, INSTALLED_SCRIPT, STRONGSWAN_PLUGINS, TOOLS, Capabilities, Feature,
                             Strongswan, parse_features, parse_list_algs, probe_kernel)
from ...guests import qemu
from ...system.executor import REMOTE_STATE_DIR, CommandError, HostUnreachable, SshExecutor, control_dir
from ...system.ledger import Ledger
from .testbed import IFNAME_RE, Host, Testbed, TestbedError, executor

FACTS_SCRIPT = r"""
n={nic}
echo "uid=$(id -u)"
echo "kernel=$(uname -sr)"
echo "machine=$(uname -m)"
echo "cpus=$(nproc)"
echo "cpu_pinning=$(c=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status); f=${{c%%[,-]*}}; \
  if taskset -c "$f" true 2>/dev/null; then echo "yes $c"; else echo "no $c $(taskset -c "$f" true 2>&1 | head -1)"; fi)"
echo "cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "nic_exists=$(test -d /sys/class/net/$n && echo 1 || echo 0)"
echo "nic_mtu=$(cat /sys/class/net/$n/mtu 2>/dev/null)"
echo "nic_addrs=$(ip -4 -o addr show dev $n 2>/dev/null | awk '{{print $4}}' | tr '\n' ' ')"
echo "nic_driver=$(ethtool -i $n 2>/dev/null | sed -n 's/^driver: //p')"
echo "nic_firmware=$(ethtool -i $n 2>/dev/null | sed -n 's/^firmware-version: //p')"
echo "nic_offloads=$(ethtool -k $n 2>/dev/null | grep -E '^(tcp-segmentation-offload|generic-receive-offload|generic-segmentation-offload|rx-checksumming|tx-checksumming):' | tr -d ' ' | tr '\n' ' ')"
echo "sriov_totalvfs=$(cat /sys/class/net/$n/device/sriov_totalvfs 2>/dev/null)"
echo "sriov_numvfs=$(cat /sys/class/net/$n/device/sriov_numvfs 2>/dev/null)"
echo "sriov_vfs=$(for v in /sys/class/net/$n/device/virtfn*; do [ -e "$v" ] || continue; i=${{v##*/virtfn}}; \
  d=$(ls "$v/net" 2>/dev/null | head -1); if [ -z "$d" ]; then printf '%s:-:0:0:0:0 ' "$i"; else \
  printf '%s:%s:%s:%s:%s:%s ' "$i" "$d" "$(( $(cat /sys/class/net/$d/flags) & 1 ))" \
  "$(test -e /sys/class/net/$d/master && echo 1 || echo 0)" "$(ip -o addr show dev $d scope global | wc -l)" \
  "$(cat /sys/class/net/$d/mtu)"; fi; done)"
echo "maxsessions=$(sshd -T 2>/dev/null | sed -n 's/^maxsessions //p')"
echo "cmdline=$(cat /proc/cmdline 2>/dev/null)"
echo "cpufreq=$(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_driver \
  /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null | tr '\n' ' ')"
echo "numa_nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)"
"""


@dataclass(frozen=True)
class VirtualFunction:
    """An SR-IOV virtual function of a host's NIC, as sysfs shows it (facts: sriov_vfs)."""
    index: int
    dev: str | None      # its network device; None: bound to another driver (vfio: a VM has it)
    up: bool
    enslaved: bool
    addresses: int       # global addresses on it
    mtu: int

    @property
    def free(self) -> bool:
        """Nobody uses it: a network device of its own that is down, in no bridge or bond, without an address."""
        return self.dev is not None and not self.up and not self.enslaved and not self.addresses


def virtual_functions(f: dict) -> list[VirtualFunction]:
    out = []
    for item in f.get("sriov_vfs", "").split():
        parts = item.split(":")
        if len(parts) == 6 and parts[0].isdigit() and all(p.isdigit() for p in parts[2:]):
            dev = None if parts[1] == "-" or not IFNAME_RE.match(parts[1]) else parts[1]
            out.append(VirtualFunction(int(parts[0]), dev, parts[2] == "1", parts[3] == "1", int(parts[4]),
                                       int(parts[5])))
    return sorted(out, key=lambda v: v.index)


def sriov(f: dict, nic: str) -> Feature:
    """Whether the NIC offers free virtual functions (vnetbench never enables VFs: sriov_numvfs is the host's)."""
    total, num = f.get("sriov_totalvfs", ""), f.get("sriov_numvfs", "")
    if not total.isdigit() or int(total) == 0:
        return Feature(False, f"{nic} offers no SR-IOV virtual functions (no sriov_totalvfs)")
    if not num.isdigit() or int(num) == 0:
        return Feature(False, f"{nic} has SR-IOV ({total} virtual functions) but none enabled (sriov_numvfs 0; "
                              f"vnetbench does not change it)")
    free = [v.dev for v in virtual_functions(f) if v.free]
    if not free:
        return Feature(False, f"all {num} enabled virtual functions of {nic} are in use (up, enslaved, addressed "
                              f"or bound to another driver)")
    return Feature(True, f"{len(free)} free virtual functions of {nic}: {' '.join(free)}")


def facts(host: Host, ex: SshExecutor) -> dict:
    """The host's facts, with what it offers qemu guest VMs (qemu.HOST_SCRIPT: qemu_*) in the same round trip."""
    script = FACTS_SCRIPT.format(nic=shlex.quote(host.nic)) + qemu.host_script(host.qemu_kernel)
    out = ex.run_script(script, timeout=20).stdout
    f = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    f.update(clock_offset(ex))
    return f


def clock_offset(ex: SshExecutor, rounds: int = 5) -> dict:
    """The host's clock minus ours, from the quickest of a few round trips over the shared connection (its
    error is at most half that round trip)."""
    best = None
    for _ in range(rounds):
        t0 = time.time()
        remote = float(ex.run(["date", "+%s.%N"], timeout=10).stdout.strip())
        t1 = time.time()
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, remote - (t0 + t1) / 2)
    return {"clock_offset_s": round(best[1], 6), "round_trip_s": round(best[0], 6)}


MISSING = "-vnetbench-missing-"
# swanctl loads every plugin it has before it prints its version (with its usage): the af-alg plugin then binds a
# socket per algorithm, each loading a crypto module, 4-5 s of a guest booted just now (measured). One plugin does.
VERSION_SETUP = {"swanctl": 'f=$(mktemp) && printf "swanctl {\\n  load = random\\n}\\n" > "$f" && '
                             'export STRONGSWAN_CONF="$f"'}


def installed(ex: SshExecutor) -> dict[str, Feature]:
    """What the host's packages offer (capabilities.INSTALLED_SCRIPT, as this machine probes itself)."""
    return parse_features(ex.run_script(INSTALLED_SCRIPT, timeout=30, check=False).stdout)


def tools(ex: SshExecutor) -> dict[str, Feature]:
    """Tool versions on the host, as capabilities.TOOLS asks for them: one round trip for all."""
    def find(name: str, argv0: str) -> str:  # charon: wherever the host's distribution puts it
        paths = CHARON_PATHS if name == "charon" else (argv0,)
        return (f"c=$(for p in {' '.join(map(shlex.quote, paths))}; do q=$(command -v \"$p\") && [ -x \"$q\" ] && "
                f"{{ echo \"$q\"; break; }}; done)")
    def ask(name: str, argv: list[str]) -> str:
        setup = VERSION_SETUP.get(name)
        line = f"\"$c\" {shlex.join(argv[1:])} 2>&1 </dev/null | head -c 2000"
        return f"( {setup}; {line}; rm -f \"$f\" )" if setup else line  # asked all the same if the setup fails
    script = "; ".join(f"echo '@@{name}'; {find(name, argv[0])}; if [ -n \"$c\" ]; then {ask(name, argv)}; "
                       f"else echo '{MISSING}'; fi" for name, (_, argv, _) in TOOLS.items())
    out = ex.run_script(script, timeout=30, check=False).stdout
    found: dict[str, Feature] = {}
    for chunk in out.split("@@")[1:]:
        name, _, text = chunk.partition("\n")
        if name not in TOOLS:
            continue
        pkg, _, pattern = TOOLS[name]
        if text.startswith(MISSING):
            found[name] = Feature(False, f"not installed (Debian package {pkg})")
        else:
            m = re.search(pattern, text)
            found[name] = Feature(True, m.group(1) if m else "unknown version")
    return {name: found.get(name, Feature(False, f"not installed (Debian package {TOOLS[name][0]})"))
            for name in TOOLS}


def kernel(ex: SshExecutor, prefix: str) -> dict[str, Feature]:
    """Kernel features probed by creating each device in a scratch namespace of the run's on the host (the one
    probe script, capabilities.kernel_script)."""
    return probe_kernel(ex, f"{prefix}-probe")


SWAN_SCRIPT = r"""
ns={ns}; d=$(mktemp -d /tmp/vnetbench-swan.XXXXXX) || exit 9; pid=
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; ip netns del $ns 2>/dev/null; rm -rf "$d"' EXIT
ip netns add $ns || exit 9
printf '%s' {conf} > "$d/strongswan.conf"
P='mount --bind "$0" /run && exec "$@"'
ip netns exec $ns unshare --mount --propagation private -- sh -c "$P" "$d" env STRONGSWAN_CONF=/run/strongswan.conf   {charon} >/dev/null 2>"$d/err" &
pid=$!
i=0; while [ ! -S "$d/charon.vici" ]; do
  kill -0 $pid 2>/dev/null || {{ echo "@@error charon exited at start: $(tail -c 300 "$d/err")"; exit 0; }}
  [ $i -ge 500 ] && {{ echo "@@error charon did not open its socket in 10 s"; exit 0; }}
  sleep 0.02; i=$((i+1)); done
sw() {{ ip netns exec $ns unshare --mount --propagation private -- sh -c "$P" "$d" swanctl "$@" --uri {vici}; }}
i=0; until out=$(sw --list-algs 2>&1); do [ $i -ge 50 ] && break; sleep 0.05; i=$((i+1)); done
echo @@algs; echo "$out"; echo @@stats; sw --stats 2>&1
"""


def strongswan(ex: SshExecutor, prefix: str, charon: str = TOOLS["charon"][1][0]) -> Strongswan:
    """capabilities.probe_strongswan on a host: a charon started as a run starts it (same plugins, private /run,
    scratch namespace), and the algorithms it really loaded. One round trip."""
    vici = "unix:///run/charon.vici"
    conf = (f"charon {{\n  load_modular = no\n  load = {STRONGSWAN_PLUGINS.format(kernel='kernel-netlink')}\n"
            f"  plugins {{\n    vici {{\n      socket = {vici}\n    }}\n  }}\n}}\n")
    script = SWAN_SCRIPT.format(ns=shlex.quote(f"{prefix}-swan"), conf=shlex.quote(conf),
                                charon=shlex.quote(charon), vici=shlex.quote(vici))
    out = ex.run_script(script, timeout=40, check=False).stdout
    if "@@error " in out:
        return Strongswan(error=out.split("@@error ", 1)[1].strip()[:300])
    if "@@algs" not in out:
        return Strongswan(error="the strongSwan probe did not run")
    algs, _, stats = out.split("@@algs", 1)[1].partition("@@stats")
    m = re.search(r"^loaded plugins: (.*)$", stats, re.M)
    plugins = tuple(p for p in (m.group(1).split() if m else ()) if p != "charon")
    return Strongswan(plugins, parse_list_algs(algs))


def merge_swan(hosts: list[Host]) -> Strongswan:
    """The algorithms every host's charon loaded (one host's error makes them unreadable, with its name)."""
    for h in hosts:
        if h.caps.swan is not None and h.caps.swan.error:
            return Strongswan(error=f"on {h.name}: {h.caps.swan.error}")
    swans = [h.caps.swan for h in hosts if h.caps.swan is not None]
    if not swans:
        return Strongswan(error="charon or swanctl is not installed on the hosts (Debian packages strongswan-charon, "
                                "strongswan-swanctl)")
    kinds = set.intersection(*(set(s.algorithms) for s in swans))
    algorithms = {k: tuple(a for a in swans[0].algorithms[k] if all(a in s.algorithms[k] for s in swans)) for k in kinds}
    plugins = tuple(p for p in swans[0].plugins if all(p in s.plugins for s in swans))
    return Strongswan(plugins, algorithms)


def merge(hosts: list[Host]) -> Capabilities:
    """What every host offers: a feature one host lacks is unavailable, with that host's reason."""
    caps = Capabilities()
    caps.installed = {}
    for kind in ("tools", "kernel", "installed"):
        names = {n for h in hosts for n in getattr(h.caps, kind) or {}}
        merged = {}
        for n in sorted(names):
            missing = [(h.name, (getattr(h.caps, kind) or {}).get(n, Feature(False, "not probed"))) for h in hosts
                       if not (getattr(h.caps, kind) or {}).get(n, Feature(False)).ok]
            if missing:
                merged[n] = Feature(False, "; ".join(f"on {name}: {f.detail or 'unavailable'}" for name, f in missing))
            else:
                merged[n] = Feature(True, getattr(hosts[0].caps, kind)[n].detail)
        setattr(caps, kind, merged)
    if caps.kernel.get("sriov-vf", Feature(False)).ok:  # as many per host as the host with the fewest has
        fewest = min(int(h.caps.kernel["sriov-vf"].detail.split()[0]) for h in hosts)
        caps.kernel["sriov-vf"] = Feature(True, f"{fewest} free virtual functions per host")
    if any(h.caps.swan is not None for h in hosts):
        caps.swan = merge_swan(hosts)
    return caps


def preflight(bed: Testbed, prefix: str | None = None, probe_kernel: bool = True) -> Capabilities:
    """Reach every host at once; raise TestbedError with one line per host that cannot take part. Its local files
    (the shared connections' sockets) belong to a scratch ledger of its own, so a kill -9 leaves nothing `clean`
    does not know of."""
    scratch = Ledger.create()
    prefix = prefix or scratch.prefix  # the scratch namespace's name, unlike any other run's
    try:
        return _preflight(bed, prefix, probe_kernel, scratch)
    finally:
        scratch.remove_all()


def _preflight(bed: Testbed, prefix: str, probe_kernel: bool, scratch: Ledger) -> Capabilities:
    controls = {h.name: control_dir(scratch.dir, f"ssh{i}", scratch) for i, h in enumerate(bed.hosts)}

    def one(h: Host) -> str | None:
        ex = executor(h, log=None, control=controls[h.name])
        ex.prefix, ex.remote_dir = prefix, f"{REMOTE_STATE_DIR}/{prefix}"
        try:
            h.facts = facts(h, ex)
            if h.facts.get("uid") != "0":
                return f"{bed.source}: host {h.name} ({h.target.destination}): vnetbench needs root there " \
                       f"(uid {h.facts.get('uid')}); use ssh: root@..."
            if h.facts.get("nic_exists") != "1":
                return f"{bed.source}: host {h.name}: no NIC {h.nic} (see `ip link` on that host)"
            if h.address not in [a.split("/")[0] for a in h.facts.get("nic_addrs", "").split()]:
                return f"{bed.source}: host {h.name}: {h.nic} does not have the address {h.address} " \
                       f"(it has: {h.facts.get('nic_addrs') or 'none'}); vnetbench does not configure it"
            h.caps = Capabilities(tools(ex), kernel(ex, prefix) if probe_kernel else {}, installed=installed(ex))
            h.caps.kernel["sriov-vf"] = sriov(h.facts, h.nic)
            if probe_kernel and h.caps.tool("charon") and h.caps.tool("swanctl"):
                h.caps.swan = strongswan(ex, prefix, h.caps.offer("charon").detail)
            return None
        except HostUnreachable as exc:
            return f"{bed.source}: host {h.name} ({h.target.destination}) cannot be reached over SSH: " \
                   f"{_last(exc.stderr)}"
        except CommandError as exc:
            return f"{bed.source}: host {h.name}: probing failed: {exc}"
        finally:
            ex.close()
    with ThreadPoolExecutor(max_workers=max(1, len(bed.hosts))) as pool:
        problems = [p for p in pool.map(one, bed.hosts) if p]
    if problems:
        raise TestbedError(problems)
    return merge(bed.hosts)


def _last(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith("@@@")]
    useful = [ln for ln in lines if "verification failed" in ln or "Permission denied" in ln]
    return (useful or lines or ["ssh failed"])[-1]


