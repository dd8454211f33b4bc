"""Where a topology's hosts are. Without a site, emulated hosts (namespaces) on this machine; a TestbedSite maps the
scenario's hosts h1, h2, ... onto the testbed's real machines, reached over SSH.

On a real host vnetbench creates only objects named with the run's prefix (namespaces for VMs, bridges, tunnels,
a VLAN of the NIC for a flat network, macvlans of the NIC), records each in that host's own ledger
(/run/vnetbench/<prefix>/objects.jsonl) before creating it, and checks every batch line before anything is built:
a line that would touch a device not named with the prefix (other than naming the NIC as a macvlan/VLAN parent)
stops the build. The host's interfaces, addresses, routes and MTU are never changed.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor

from . import testbed as tb
from .executor import REMOTE_STATE_DIR, CommandError, SshExecutor
from .ledger import Ledger
from .probes.interfaces import InterfaceProbe
from .probes.procstat import SystemProbe
from .sample import Sample

# Device names that appear in an iproute2 line after these words.
_DEV_AFTER = {"dev", "master", "name", "set", "del"}


class SiteError(RuntimeError):
    pass


class TestbedSite:
    """The testbed's first N hosts are the scenario's h1..hN."""

    def __init__(self, bed: tb.Testbed, ledger: Ledger | None, log: list | None = None):
        self.bed, self.ledger, self.log = bed, ledger, log
        self.flat_vlan = bed.flat_vlan
        self._exec: dict[str, SshExecutor] = {}
        self._touched: set[str] = set()

    # ---- mapping -------------------------------------------------------------------------------------------
    def host(self, label: str) -> tb.Host:
        return self.bed.hosts[int(label[1:]) - 1]

    def name(self, label: str) -> str:
        return self.host(label).name

    def address(self, label: str) -> str:
        return self.host(label).address

    def nic(self, label: str) -> str:
        return self.host(label).nic

    def executor(self, label: str) -> SshExecutor:
        h = self.host(label)
        if h.name not in self._exec:
            self._exec[h.name] = tb.executor(h, self.ledger, self.log, None if self.ledger else tb.PLAN_CONTROL)
        return self._exec[h.name]

    # ---- what a scenario needs from the testbed --------------------------------------------------------------
    def check(self, sc) -> str | None:
        """Why this testbed cannot run a scenario (None: it can)."""
        if sc.hosts > len(self.bed.hosts):
            return f"the scenario needs {sc.hosts} hosts; the testbed {self.bed.source} has {len(self.bed.hosts)}"
        if sc.levels.get("hops", 0):
            return "routers between the hosts (hops) exist only in the emulated underlay"
        if sc.underlay_rate:
            return "vnetbench does not shape a real NIC (underlay.rate); the testbed's links run at their own rate"
        for i in range(1, sc.hosts + 1):
            h = self.bed.hosts[i - 1]
            mtu = int(h.facts.get("nic_mtu") or 0)
            if mtu and sc.underlay_mtu != mtu:
                return (f"needs an underlay MTU of {sc.underlay_mtu}, and {h.name}'s {h.nic} has {mtu} "
                        f"(vnetbench does not change a real NIC's MTU)")
        if sc.levels.get("ip_version") == 6 and sc.labels.get("attach") == "host":
            return "host-to-host over IPv6 needs the hosts' IPv6 underlay addresses, which a testbed file does not give"
        local_files = {"switch": {"ovs"}, "encryption": {"ipsec", "wireguard"}}
        for kind, names in local_files.items():
            if sc.labels.get(kind, "").split("(")[0] in names:
                return (f"{sc.labels[kind]} keeps its daemons' files on the machine running vnetbench; over SSH it "
                        f"is not supported yet")
        if any(w.kind in ("http",) for w in sc.workloads):
            return "the http workload writes its nginx files locally; over SSH it is not supported yet"
        return None

    def notes(self, sc) -> list[str]:
        if sc.labels.get("overlay") == "none" and sc.labels.get("attach") == "switch" and sc.hosts > 1:
            return ["testbed: the flat network's bridge port on each host is a source-mode macvlan of the NIC "
                    "(it receives the other hosts' VMs' frames); the NIC itself is not enslaved"]
        return []

    # ---- build -------------------------------------------------------------------------------------------------
    def touch(self, labels: list[str]) -> None:
        """Before the first object on a host: the local ledger says the host was touched, the host gets the
        run's directory with its owner."""
        new = [self.host(lb) for lb in labels if self.host(lb).name not in self._touched]
        if not new:
            return
        if self.ledger:
            self.ledger.record_many([tb.host_record(h, self.executor(f"h{self.bed.hosts.index(h) + 1}").control)
                                     for h in new])
        prefix = self.ledger.prefix if self.ledger else "vb0000"
        self._parallel({h.name: (self.executor(f"h{self.bed.hosts.index(h) + 1}"), tb.owner_script(prefix))
                        for h in new})
        self._touched |= {h.name for h in new}

    def machine(self, topo, label: str) -> str:
        """The scenario host a node label lives on."""
        node = topo.nodes[label]
        return node.host if node.role == "vm" else label

    def guard(self, topo, waves) -> None:
        """Every line run in a real host's root namespace may touch only the run's own devices."""
        for wave in waves:
            for step in wave:
                if step.node == "":
                    raise SiteError(f"a step for this machine's root namespace in a testbed topology: {step.lines}")
                if topo.nodes[step.node].netns is None:
                    for line in step.lines:
                        bad = _foreign(line, topo.prefix, topo.nic(step.node))
                        if bad:
                            raise SiteError(f"refusing to run `{line}` on {self.name(step.node)}: {bad}")

    def record_links(self, topo, wave) -> None:
        for step in wave:
            if step.tool == "ip" and topo.nodes[step.node].netns is None:
                for line in step.lines:
                    m = re.match(r"link add (\S+)", line)
                    if m and " netns " not in line:
                        topo.record("link", m.group(1), step.node)
                        topo.__dict__.setdefault("_links", []).append(("link", m.group(1), step.node))

    def flush(self, topo, records) -> None:
        """Append records to each host's own ledger, before the objects are created (one round trip per host)."""
        by_host: dict[str, list[str]] = {}
        for kind, name, node in records:
            label = self.machine(topo, node) if node else None
            if label is None:
                raise SiteError(f"record of {kind} {name} with no host in a testbed topology")
            by_host.setdefault(label, []).append(json.dumps({"op": "add", "kind": kind, "name": name}))
        if not by_host:
            return
        self.touch(list(by_host))
        prefix = topo.prefix
        self._parallel({lb: (self.executor(lb), _append_script(prefix, lines)) for lb, lines in by_host.items()})

    def _parallel(self, jobs: dict[str, tuple[SshExecutor, str]]) -> None:
        def one(item):
            ex, script = item
            ex.run_script(script, timeout=30)
        if len(jobs) == 1:
            one(next(iter(jobs.values())))
            return
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            list(pool.map(one, jobs.values()))

    def teardown(self, topo) -> None:
        """Per host, one round trip: kill what runs in the scenario's namespaces, delete them and the scenario's
        links, and mark them removed in the host's ledger."""
        by_host: dict[str, list] = {}
        for node in topo.nodes.values():
            if node.netns:
                by_host.setdefault(node.host, []).append(tb.Obj("netns", node.netns))
        for kind, name, node in getattr(topo, "_links", []):
            by_host.setdefault(node, []).append(tb.Obj(kind, name))
        jobs = {}
        for label, objs in by_host.items():
            script = tb.clean_script(topo.prefix, objs, remove_dir=False)
            script += "; " + _append_script(topo.prefix, [json.dumps({"op": "del", "kind": o.kind, "name": o.name})
                                                          for o in objs])
            jobs[label] = (self.executor(label), script)

        def one(item):
            ex, script = item
            try:
                ex.run_script(script, timeout=60, check=False)
            except CommandError:
                pass  # the host is gone: `vnetbench clean` finishes the job later
        with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
            list(pool.map(one, jobs.values()))

    def close(self) -> None:
        for ex in self._exec.values():
            try:
                ex.close()
            except (OSError, subprocess.SubprocessError):
                pass

    # ---- measurement ---------------------------------------------------------------------------------------
    def probes(self, topo) -> list:
        out = []
        for h in topo.hosts:
            name = self.name(h.label)
            out += [HostProbe(SystemProbe(h.exec), name), HostProbe(InterfaceProbe(h.exec), name)]
        return out

    def environment(self) -> dict:
        return {h.name: {"ssh": h.target.destination, "nic": h.nic, "address": h.address,
                         **{k: v for k, v in h.facts.items() if k not in ("time", "time2", "uid", "nic_exists")},
                         "tools": {k: v.detail for k, v in (h.caps.tools if h.caps else {}).items() if v.ok}}
                for h in self.bed.hosts}


class HostProbe:
    """A probe running on one testbed host: every sample says which host it came from."""

    def __init__(self, probe, host: str):
        self.probe, self.host = probe, host
        self.kind = probe.kind

    def start(self) -> None:
        try:
            self.probe.start()
            self.started = True
        except CommandError:  # the host stopped answering: the trial fails through its workload
            self.started = False

    def stop(self) -> list[Sample]:
        if not self.started:
            return []
        try:
            got = self.probe.stop()
        except (CommandError, RuntimeError):
            return []
        return [Sample(s.metric, s.value, s.unit, s.metadata | {"host": self.host}, s.t) for s in got]


def _append_script(prefix: str, lines: list[str]) -> str:
    d = shlex.quote(f"{REMOTE_STATE_DIR}/{prefix}")
    return f"printf '%s\\n' {' '.join(map(shlex.quote, lines))} >> {d}/objects.jsonl"


def _foreign(line: str, prefix: str, nic: str) -> str | None:
    """Why an iproute2 line would touch something that is not the run's (None: it touches only the run's)."""
    words = line.split()
    if not words:
        return None
    if words[0] == "netns":
        return None if len(words) > 2 and words[2].startswith(prefix) else "a namespace not named with the run's prefix"
    if words[0] in ("route", "rule", "addr", "address", "neigh", "xfrm"):
        dev = words[words.index("dev") + 1] if "dev" in words[:-1] else ""
        if words[0] in ("route", "rule", "xfrm") or not dev.startswith(prefix):
            return f"`{words[0]}` would change the host's own configuration"
    for i, w in enumerate(words[:-1]):
        nxt = words[i + 1]
        if words[0] == "link" and i == 0 and w == "link" and nxt in ("add", "set", "del"):
            name = words[2] if len(words) > 2 else ""
            if not name.startswith(prefix):
                return f"{name} is not one of the run's devices"
        elif w == "link" and i > 0 and nxt == nic:
            continue  # the NIC as the parent of the run's macvlan or VLAN
        elif w in ("dev", "master") and not nxt.startswith(prefix):
            return f"{nxt} is not one of the run's devices"
    return None
