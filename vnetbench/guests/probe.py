"""The `kernel: guest` level: a scenario's emulated hosts, VMs and routers run as namespaces inside a guest with its
own kernel (User-Mode Linux here) instead of on the machine's kernel, so every datapath the guest's kernel has (GRE,
Geneve, 802.1Q, netem, xfrm ESP/AH, the OVS kernel datapath) runs where this machine's kernel lacks it.

Every command of the topology, the datapaths and the workloads reaches the guest through the SSH executor (a guest
is just another machine); the run's directory on this machine is mounted in the guest at the same path, so configs
and keys written by the build are read there and the guest's daemons' logs and sockets stay in the run's directory.
One guest per run serves every `kernel: guest` scenario in turn; it is a run object like the others (see
guests.base) and `clean` removes it after a kill -9.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from functools import lru_cache
from pathlib import Path

from ..capabilities import Capabilities, Feature, probe_kernel
from ..datapaths.ovs import YOUNG_KERNEL_BUG, wait_for_cpu_count
from ..hosts.lab import preflight
from ..system.executor import CommandError
from ..system.ledger import Ledger
from . import DEFAULT_KIND, kind_class
from .base import Fleet, GuestError

LEVELS = ("shared", "guest")
MEM_MB = 1024  # the whole topology (daemons, iperf3, netperf) lives in it


def support(kind: str = DEFAULT_KIND):
    return kind_class(kind).support()


def why_not_per_host(sc, kind: str = DEFAULT_KIND) -> str | None:
    """Why a scenario cannot run with one guest of this kind per host (None: it can), from what that kind's kernel
    offers (a qemu guest's cloud kernel has WireGuard, a UML guest's has not)."""
    if sc.levels.get("hops", 0):
        return "routers between host guests are not built yet (kernel: guest runs them)"
    if sc.labels.get("encryption", "").split("(")[0] == "wireguard":
        caps = capabilities(kind)
        kernel, go = (caps.kernel.get("wireguard"), caps.tools.get("wireguard-go")) if caps else (None, None)
        if not (kernel and kernel.ok) and not (go and go.ok):
            return (f"WireGuard: the guest's kernel has no wireguard device ({kernel.detail if kernel else 'not probed'})"
                    f", and wireguard-go cannot run in it: {go.detail if go else 'not probed'}")
    return None


class SharedGuest:
    """One guest for a run, booted on first use."""

    def __init__(self, ledger: Ledger, kind: str = DEFAULT_KIND):
        self.ledger, self.kind = ledger, kind
        self.fleet: Fleet | None = None

    def executor(self):
        if self.fleet is None:
            self.fleet = Fleet(self.ledger, self.kind, boot_timeout=60)
            self.fleet.add("m1", mem_mb=MEM_MB, share_run=True)
            try:
                self.fleet.boot()
            except GuestError:
                self.close()
                raise
        return self.fleet.guests["m1"].executor

    def close(self) -> None:
        if self.fleet is not None:
            self.fleet.teardown()
            shutil.rmtree(self.fleet.dir, ignore_errors=True)  # its keys: a later fleet of the run makes its own
            self.fleet = None


def probe(ex, prefix: str, kind: str = DEFAULT_KIND) -> Capabilities:
    """Tools and kernel features as the guest sees them (the same probe script as on the machine and on a host)."""
    # The OVS probe goes first: it waits for the young guest's clock (ovs_forwards), and the kernel features and the
    # tools are asked meanwhile (they took 2.6 s and 7.3 s after the wait in a guest just booted, each binary read
    # cold through hostfs).
    with ThreadPoolExecutor(1) as pool:
        ovs = pool.submit(ovs_forwards, ex, prefix)
        found = probe_kernel(ex, f"{prefix}-probe", timeout=60, may_load=True)
        tools = preflight.tools(ex)
        forwards = ovs.result()  # its namespaces are gone before the guest is used, whatever the kernel said
    if found.get("ovs-kernel-datapath", Feature(False)).ok:  # the module is there: does OVS forward through it?
        found["ovs-kernel-datapath"] = forwards
    if tools.get("wireguard-go", Feature(False)).ok and not kind_class(kind).saves_vector_registers:
        # Go picks AVX from the CPU whatever glibc's tunables say, and a guest here keeps only the FXSAVE registers
        # of its processes (guests/nofpx.py): a Go program's vector registers are not safe across its switches
        tools["wireguard-go"] = Feature(False, "a Go program uses AVX, which a UML guest on this CPU does not save "
                                               "(guests/nofpx.py)")
    return Capabilities(tools=tools, kernel=found)


def ovs_forwards(ex, prefix: str) -> Feature:
    """ovs-vswitchd with a `system` bridge between two namespaces in the guest: ok if a ping crosses it with flows
    set up in the kernel and no upcall lost (Open vSwitch 3.1.0 loses them all in a kernel up for less than 10 s:
    datapaths/ovs.py waits for that, here as in a run). All but ovs-vswitchd is ready before that wait, the bridge
    already in the database: `--detach` returns once ovs-vswitchd has configured it, so the ping follows at once."""
    q = shlex.quote
    young = "|".join(f'*") {v}"' for v in YOUNG_KERNEL_BUG)
    d, sw, a, b = (q(f"/tmp/{prefix}-ovsprobe"), q(f"{prefix}-ps"), q(f"{prefix}-pa"), q(f"{prefix}-pb"))
    # one ip process per namespace (`ip -batch` takes no -n per line) instead of one per line
    batches = {"": [f"netns add {n}" for n in (sw, a, b)] + [
        f"link add e0 netns {ns} type veth peer name {port} netns {sw}" for ns, port in ((a, "pa"), (b, "pb"))],
        a: ["addr add 10.255.0.1/24 dev e0", "link set e0 up"], b: ["addr add 10.255.0.2/24 dev e0", "link set e0 up"],
        sw: ["link set pa up", "link set pb up"]}
    links = "\n".join(f"printf '%s\\n' {' '.join(map(q, lines))} | ip {f'-n {ns} ' if ns else ''}-batch -"
                      for ns, lines in batches.items())
    script = f"""
d={d}; mkdir -p $d; export OVS_RUNDIR=$d OVS_DBDIR=$d OVS_LOGDIR=$d
{links}
ovsdb-tool create $d/conf.db
ip netns exec {sw} ovsdb-server $d/conf.db --remote=punix:$d/db.sock --unixctl=$d/db.ctl --pidfile=$d/db.pid \\
  --detach --no-chdir -vconsole:off
ovs-vsctl --db=unix:$d/db.sock --timeout=20 --no-wait add-br br -- set bridge br datapath_type=system \\
  -- add-port br pa -- add-port br pb
case "$(ovs-vswitchd --version | head -n 1)" in {young}) {shlex.join(wait_for_cpu_count())};; esac
ip netns exec {sw} ovs-vswitchd unix:$d/db.sock --unixctl=$d/sw.ctl --pidfile=$d/sw.pid --log-file=$d/sw.log \\
  --detach --no-chdir -vconsole:off
ip netns exec {a} ping -n -c 2 -i 0.2 -W 2 10.255.0.2 >/dev/null && echo @@ping
ip netns exec {sw} sh -c 'echo @@flows $(ovs-dpctl dump-flows 2>/dev/null | grep -c actions); ovs-dpctl show 2>&1 | \\
  grep lookups'
for f in $d/sw.pid $d/db.pid; do read -r p < $f && kill $p; done 2>/dev/null
printf 'netns del %s\\n' {sw} {a} {b} | ip -batch -; rm -rf $d
"""
    try:
        out = ex.run_script(script, timeout=90, check=False).stdout
    except CommandError as exc:
        return Feature(False, f"the guest's kernel has it, but probing Open vSwitch there failed: {exc}")
    lookups = next((ln.strip() for ln in out.splitlines() if "lookups:" in ln), "no datapath (ovs-dpctl show)")
    flows = next((ln.split()[1] for ln in out.splitlines() if ln.startswith("@@flows ")), "0")
    if "@@ping" in out and flows != "0" and " lost:0" in lookups:
        return Feature(True, f"a ping crossed ovs-vswitchd's kernel datapath ({flows} flows; {lookups})")
    return Feature(False, f"the guest's kernel has it, but Open vSwitch forwarded no ping through it ({flows} flows "
                          f"set up; {lookups})")


BOOT: dict[str, float] = {}  # the probing guest's boot time and memory, for doctor


def info(kind: str = DEFAULT_KIND) -> dict:
    """The guest backend as doctor shows it: kernel, measured boot time and memory, features inside the guest."""
    sup = support(kind)
    out = {"backend": kind, "available": sup.ok, "kernel": sup.kernel, "reason": sup.reason}
    caps = capabilities(kind) if sup.ok else None
    if sup.ok and caps is None:
        out |= {"available": False, "reason": "a guest did not come up (run the tests in tests/test_guests.py)"}
    if caps is not None:
        out |= {"boot_s": BOOT.get("boot_s"), "memory_mb": BOOT.get("memory_mb"),
                "probed": (time.strftime("%Y-%m-%d %H:%M:%S UTC (kept in " + str(PROBE_CACHE) + ")",
                                         time.gmtime(BOOT["probed_at"])) if "probed_at" in BOOT else "now"),
                "kernel_features": {k: v.ok for k, v in caps.kernel.items()}}
    return out


def kept_info(kind: str) -> dict:
    """A guest kind as doctor shows it without booting one: its support, and the features its last probe found if
    one is kept (a run probes it when a scenario needs it)."""
    sup = support(kind)
    out = {"backend": kind, "available": sup.ok, "kernel": sup.kernel, "reason": sup.reason, "notes": list(sup.notes)}
    entry = _read_probes().get(_probe_key(kind)) if sup.ok else None
    if entry and isinstance(entry.get("kernel"), dict):
        out |= {"boot_s": entry.get("boot", {}).get("boot_s"), "memory_mb": entry.get("boot", {}).get("memory_mb"),
                "kernel_features": {k: bool(v[0]) for k, v in entry["kernel"].items() if isinstance(v, list) and v}}
    elif sup.ok:
        out["probed"] = "not yet: a run probes it when a scenario needs it (a guest of 1 GB, 30-55 s once)"
    return out


@lru_cache(maxsize=None)
def capabilities(kind: str = DEFAULT_KIND) -> Capabilities | None:
    """What a guest offers (booting one for ~12 s: OVS's kernel datapath is tried with real traffic); None if guests
    cannot run here. A probe's result is kept on disk (PROBE_CACHE) for the same guest kernel, tools and vnetbench
    code, for a day: every `vnetbench run` with guest scenarios would otherwise pay for it again."""
    if not support(kind).ok:
        return None
    key = _probe_key(kind)
    if (cached := _cached_probe(key)) is not None:
        return cached
    ledger = Ledger.create()
    machine = SharedGuest(ledger, kind)
    try:
        caps = probe(machine.executor(), ledger.prefix, kind)
        caps.tools["kernel"] = Feature(True, support(kind).kernel)
        g = machine.fleet.guests["m1"]
        BOOT["boot_s"], BOOT["memory_mb"] = g.boot_s, machine.fleet.memory_mb(g)
        _keep_probe(key, caps)
        return caps
    except GuestError:
        return None
    finally:
        machine.close()
        ledger.remove_all()


PROBE_CACHE = Path(os.environ.get("VNETBENCH_CACHE_DIR", "/var/cache/vnetbench")) / "guest-probe.json"
PROBE_MAX_AGE_S = 86400
PROBE_KEYS = 8  # answers kept: one per checkout (or kernel, package set) that runs guests here


def _probe_key(kind: str = DEFAULT_KIND) -> str:
    """What a guest probe's answer depends on: the guest kernel binary, every installed package (dpkg's status
    changes with each install or removal: the tools the guest runs come from the machine's own root), the machine's
    kernel and CPU flags (the AVX workaround), and vnetbench's own probing code."""
    parts = [kind, support(kind).kernel, os.uname().release]
    for path in (*kind_class(kind).binaries(), "/var/lib/dpkg/status"):
        with suppress(OSError):
            st = os.stat(path)
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    here = Path(__file__).resolve().parent
    for src in (here / "probe.py", Path(sys.modules[kind_class(kind).__module__].__file__), here / "base.py",
                here / "nofpx.py",
                here.parent / "capabilities.py", here.parent / "hosts" / "lab" / "testbed.py"):
        with suppress(OSError):
            parts.append(hashlib.sha256(src.read_bytes()).hexdigest())
    with suppress(OSError):
        parts.append(hashlib.sha256(b"".join(ln for ln in Path("/proc/cpuinfo").read_bytes().splitlines(True)
                                             if ln.startswith(b"flags"))).hexdigest())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _read_probes() -> dict[str, dict]:
    """The kept answers by key; none when the file is missing or unreadable (each is then probed again)."""
    try:
        data = json.loads(PROBE_CACHE.read_text())
    except (OSError, ValueError):
        return {}
    if isinstance(data, dict) and "key" in data:  # the one answer an older vnetbench kept
        data = {"probes": {data["key"]: data}}
    probes = data.get("probes") if isinstance(data, dict) else None
    return {k: v for k, v in probes.items() if _fresh(v)} if isinstance(probes, dict) else {}


def _fresh(entry) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("time"), (int, float))
            and 0 <= time.time() - entry["time"] < PROBE_MAX_AGE_S)


def _cached_probe(key: str) -> Capabilities | None:
    entry = _read_probes().get(key)
    if entry is None:
        return None
    try:
        caps = Capabilities(tools={k: Feature(*v) for k, v in entry["tools"].items()},
                            kernel={k: Feature(*v) for k, v in entry["kernel"].items()})
        BOOT.update(entry.get("boot", {}), probed_at=entry["time"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # a damaged entry: probed again
    return caps


@contextmanager
def _probes_locked():
    """Whoever keeps an answer holds this lock from reading the file to replacing it: two runs that finish their
    probes together both keep theirs (the replace alone kept the file whole, but only one of the two answers)."""
    PROBE_CACHE.parent.mkdir(parents=True, exist_ok=True)
    with open(PROBE_CACHE.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _keep_probe(key: str, caps: Capabilities) -> None:
    """Only a probe whose every answer is settled is kept: one that timed out on a busy machine, or a datapath the
    guest's kernel has that did not forward (a ping lost to load?), is asked again. The answers of PROBE_KEYS keys
    are kept, the oldest dropped: checkouts with different code on one machine each keep their own."""
    if any("timed out" in f.detail or "timeout" in f.detail.lower() or f.detail.startswith("the guest's kernel has it")
           for f in [*caps.tools.values(), *caps.kernel.values()] if not f.ok):
        return
    entry = {"time": time.time(), "boot": dict(BOOT),
             "tools": {k: [f.ok, f.detail] for k, f in caps.tools.items()},
             "kernel": {k: [f.ok, f.detail] for k, f in caps.kernel.items()}}
    with suppress(OSError), _probes_locked():
        probes = {k: v for k, v in _read_probes().items() if k != key}
        probes[key] = entry
        kept = dict(sorted(probes.items(), key=lambda kv: kv[1]["time"])[-PROBE_KEYS:])
        tmp = PROBE_CACHE.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"probes": kept}))
        tmp.replace(PROBE_CACHE)
