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

import shlex
import shutil
from functools import lru_cache

from ..capabilities import GENL_FAMILIES, XFRM_PROBES, Capabilities, Feature
from ..ledger import Ledger
from .base import Fleet, GuestError

LEVELS = ("shared", "guest")
BACKEND = "uml"
MEM_MB = 1024  # the whole topology (daemons, iperf3, netperf) lives in it


def support():
    from . import backend
    return backend(BACKEND).support()


class GuestMachine:
    """One guest for a run, booted on first use."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.fleet: Fleet | None = None
        self.hosts = None  # the GuestHostSite of `kernel: guest-per-host` scenarios

    def host_site(self, sc):
        """One guest per emulated host (guests.hostsite), booted at the first such scenario and kept while the
        scenarios need no more hosts than it has; its underlay set to each scenario's MTU and rate."""
        from .hostsite import GuestHostSite
        if self.fleet is not None:  # both use the run's guest namespace: one kind of guests at a time
            self.close()
        if self.hosts is not None and self.hosts.hosts < sc.hosts:
            self.hosts.close()
            self.hosts = None
        if self.hosts is None:
            self.hosts = GuestHostSite(self.ledger, sc.hosts, BACKEND)
        self.hosts.prepare(sc)
        return self.hosts

    def executor(self):
        if self.hosts is not None:  # both use the run's guest namespace: one kind of guests at a time
            self.hosts.close()
            self.hosts = None
        if self.fleet is None:
            self.fleet = Fleet(self.ledger, BACKEND, boot_timeout=60)
            self.fleet.add("m1", mem_mb=MEM_MB, share_run=True)
            try:
                self.fleet.boot()
            except GuestError:
                self.close()
                raise
        return self.fleet.guests["m1"].executor

    def close(self) -> None:
        if self.hosts is not None:
            self.hosts.close()
            self.hosts = None
        if self.fleet is not None:
            self.fleet.teardown()
            shutil.rmtree(self.fleet.dir, ignore_errors=True)  # its keys: a later fleet of the run makes its own
            self.fleet = None


def probe(ex, prefix: str) -> Capabilities:
    """Tools and kernel features as the guest sees them (the same probes as on the machine)."""
    from .. import testbed
    found = testbed.kernel(ex, prefix)
    ns = f"{prefix}-probe"
    q = shlex.quote
    script = f"ip netns add {q(ns)}; "
    for feature, argv in XFRM_PROBES.items():
        script += f"echo @@{feature}; ip -n {q(ns)} {shlex.join(argv)} 2>&1 && echo @@ok; "
    for feature, family in GENL_FAMILIES.items():
        script += f"echo @@{feature}; ip netns exec {q(ns)} genl ctrl get name {q(family)} >/dev/null 2>&1 && echo @@ok; "
    script += "echo @@tun; test -c /dev/net/tun && echo @@ok; "
    script += f"ip netns del {q(ns)}"
    out = ex.run_script(script, timeout=60, check=False).stdout
    found.update(_parse(out))
    if found.get("ovs-kernel-datapath", Feature(False)).ok:
        # measured: Open vSwitch 3.1's kernel datapath in a 1-CPU UML guest loses every upcall ("lookups: ...
        # lost" in ovs-dpctl show: it sizes its per-CPU upcall handlers from 0 cores there), so nothing is forwarded
        found["ovs-kernel-datapath"] = Feature(False, "the guest's kernel has it, but Open vSwitch 3.1 loses every "
                                                      "upcall in a 1-CPU UML guest (no flows are set up)")
    tools = testbed.tools(ex)
    if tools.get("wireguard-go", Feature(False)).ok:
        # Go picks AVX from the CPU whatever glibc's tunables say, and a guest here keeps only the FXSAVE registers
        # of its processes (guests/nofpx.py): a Go program's vector registers are not safe across its switches
        tools["wireguard-go"] = Feature(False, "a Go program uses AVX, which a UML guest on this CPU does not save "
                                               "(guests/nofpx.py)")
    return Capabilities(tools=tools, kernel=found)


def _parse(out: str) -> dict[str, Feature]:
    found = {}
    for chunk in out.split("@@")[1:]:
        name, _, text = chunk.partition("\n")
        if name == "ok":
            continue
        ok = "@@ok" in chunk or out.split(f"@@{name}\n", 1)[1].startswith("@@ok")
        found[name] = Feature(ok, "" if ok else (text.strip().splitlines() or ["failed"])[-1].removeprefix("Error: "))
    return found


BOOT: dict[str, float] = {}  # the probing guest's boot time and memory, for doctor


def info() -> dict:
    """The guest backend as doctor shows it: kernel, measured boot time and memory, features inside the guest."""
    sup = support()
    out = {"backend": BACKEND, "available": sup.ok, "kernel": sup.kernel, "reason": sup.reason}
    caps = capabilities() if sup.ok else None
    if sup.ok and caps is None:
        out |= {"available": False, "reason": "a guest did not come up (run the tests in tests/test_guests.py)"}
    if caps is not None:
        out |= {"boot_s": BOOT.get("boot_s"), "memory_mb": BOOT.get("memory_mb"),
                "kernel_features": {k: v.ok for k, v in caps.kernel.items()}}
    return out


@lru_cache(maxsize=1)
def capabilities() -> Capabilities | None:
    """What a guest offers (booting one for a few seconds); None if guests cannot run here."""
    if not support().ok:
        return None
    ledger = Ledger.create()
    machine = GuestMachine(ledger)
    try:
        caps = probe(machine.executor(), ledger.prefix)
        caps.tools["kernel"] = Feature(True, support().kernel)
        g = machine.fleet.guests["m1"]
        BOOT["boot_s"], BOOT["memory_mb"] = g.boot_s, machine.fleet.memory_mb(g)
        return caps
    except GuestError:
        return None
    finally:
        machine.close()
        ledger.remove_all()
