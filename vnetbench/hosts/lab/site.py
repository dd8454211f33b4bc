"""A lab as the site of a scenario: its hosts h1, h2, ... mapped onto the lab's machines reached over SSH, each
batch checked to touch only what the run made, the probes that run on each host (HostProbe)."""
from __future__ import annotations

import json
import secrets
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor

from ...core.sample import Sample
from ...datapaths.ovs import KERNEL_TUNNEL_IN_OVS
from ...probes.interfaces import InterfaceProbe
from ...probes.procstat import SystemProbe
from ...system.executor import CommandError, SshExecutor, _batch_error, remote_ledger_append
from ...system.ledger import Ledger, Obj
from ..steps import BATCH_TOOLS
from . import clean as lab_clean
from . import irq
from . import preflight
from . import testbed as tb

# Device names that appear in an iproute2 line after these words.
_DEV_AFTER = {"dev", "master", "name", "set", "del"}


class SiteError(RuntimeError):
    pass


# A lost first WireGuard handshake is sent again after 5 s (seen once in ~4 runs of host-to-host WireGuard on the
# lab, with a 3-s check): the check waits past that; a reply ends it at once.
PING_CHECK_S = 8


class TestbedSite:
    """The testbed's first N hosts are the scenario's h1..hN."""

    # A site whose hosts are the run's own (guests.hostsite): its NIC and address are given to the host's namespace
    # of the run (TestbedPlacement.owned), host-to-host traffic starts there.
    owns_hosts = False

    def __init__(self, bed: tb.Testbed, ledger: Ledger | None, log: list | None = None):
        self.bed, self.ledger, self.log = bed, ledger, log
        self.flat_vlan = bed.flat_vlan
        self._exec: dict[str, SshExecutor] = {}
        self._vni = 0
        self._touched: set[str] = set()
        self._extra: dict[tuple[str, str], dict] = {}  # (kind, name) -> what a ledger record needs beyond its name
        self.irqs: dict[str, dict[int, str]] = {}  # host label -> {IRQ: its CPUs before}: the scenario's irq_affinity

    # ---- mapping -------------------------------------------------------------------------------------------
    def host(self, label: str) -> tb.Host:
        return self.bed.hosts[int(label[1:]) - 1]

    def name(self, label: str) -> str:
        return self.host(label).name

    def address(self, label: str) -> str:
        return self.host(label).address

    def nic(self, label: str) -> str:
        return self.host(label).nic

    def tool_path(self, topo, label: str, tool: str):
        """The Feature of the host running a node that says where a tool is (its path may differ per host)."""
        h = self.host(self.host_of(topo, label))
        return h.caps.offer(tool) if h.caps is not None and h.caps.installed is not None else None

    def executor(self, label: str) -> SshExecutor:
        h = self.host(label)
        if h.name not in self._exec:
            self._exec[h.name] = tb.executor(h, self.ledger, self.log, None if self.ledger else tb.PLAN_CONTROL)
            self._exec[h.name].agent = self.ledger is not None  # a run's hosts: one agent each (agent.py)
        return self._exec[h.name]

    def mac_serial(self) -> int:
        """A number for each topology's run-owned MACs: the previous scenario's macvlans die with its namespaces
        asynchronously, and a macvlan whose MAC its NIC still holds cannot come up (EADDRINUSE)."""
        self._mac_serial = getattr(self, "_mac_serial", 0) % 255 + 1
        return self._mac_serial

    def vni_offset(self) -> int:
        self._vni = self._vni % 16000 + 1
        return self._vni * 1000

    # ---- what a scenario needs from the testbed --------------------------------------------------------------
    def check(self, sc) -> str | None:
        """Why this testbed cannot run a scenario (None: it can)."""
        if sc.hosts > len(self.bed.hosts):
            return f"the scenario needs {sc.hosts} hosts; the testbed {self.bed.source} has {len(self.bed.hosts)}"
        if sc.levels.get("hops", 0):
            return "routers between the hosts (hops) exist only in the emulated underlay"
        if (sc.underlay_rate or sc.underlay_impairment) and not (self.bed.run_subnet and self.run_underlay(sc)):
            return ("vnetbench does not shape a real NIC (underlay rate, delay, jitter, loss): it shapes the run's own "
                    "endpoints, for host-to-host traffic, host-to-host encryption and OVS's tunnel ports, when the "
                    "testbed file gives `run_subnet:` (an IPv4 subnet nothing on the hosts' link uses)")
        for i in range(1, sc.hosts + 1):
            h = self.bed.hosts[i - 1]
            mtu = int(h.facts.get("nic_mtu") or 0)
            if mtu and sc.underlay_mtu != mtu and not h.allow_mtu:
                return (f"needs an underlay MTU of {sc.underlay_mtu}, and {h.name}'s {h.nic} has {mtu} "
                        f"(vnetbench changes a real NIC's MTU only where the testbed file says `allow_mtu: true` "
                        f"for the host)")
        if sc.levels.get("ip_version") == 6 and sc.labels.get("attach") == "host" and not self.bed.run_subnet:
            return ("host-to-host over IPv6 needs the hosts' IPv6 underlay addresses, which a testbed file does not "
                    "give: with `run_subnet:` (an IPv4 subnet nothing on the hosts' link uses) the run's own endpoints "
                    "get IPv6 addresses too")
        if self.host_to_host_encryption(sc) and not self.bed.run_subnet:
            return ("host-to-host encryption would run in the hosts' own network stacks (their addresses, routes and "
                    "xfrm policies), which vnetbench does not change on a testbed: give the testbed file "
                    "`run_subnet:` (an IPv4 subnet nothing on the hosts' link uses) for endpoints of the run's own, "
                    "or use encryption_scope vm-to-vm")
        if self.ovs_tunnel_ports(sc) and not self.bed.run_subnet:
            return (f"OVS's own {sc.labels.get('overlay')} tunnel ports would need the host's underlay address inside "
                    f"the run's namespace (the userspace datapath routes tunnels out of an OVS bridge holding it), "
                    f"and vnetbench never moves a testbed host's address: give the testbed file `run_subnet:` (an "
                    f"IPv4 subnet nothing on the hosts' link uses) for endpoints of the run's own, or use switch "
                    f"{{type: ovs, tunnel: kernel}} with overlay vxlan (a kernel VXLAN device on the host's address "
                    f"as an OVS port)")
        return None

    @staticmethod
    def ovs_tunnel_ports(sc) -> bool:
        """OVS's own tunnel ports across hosts: they route their packets out of an OVS bridge that holds the tunnel's
        local address (userspace datapath), so they need an underlay address inside the run's namespace. A kernel
        VXLAN device made from the host's root namespace (`tunnel: kernel`) has its socket on the host's address."""
        return (sc.labels.get("switch", "").split("(")[0] == "ovs" and sc.labels.get("attach") == "switch"
                and sc.hosts > 1 and sc.labels.get("overlay") not in ("none", "vlan")
                and sc.implementation.get("overlay") != KERNEL_TUNNEL_IN_OVS)

    @staticmethod
    def host_to_host_encryption(sc) -> bool:
        return sc.labels.get("encryption", "none") != "none" and sc.levels.get("encryption_scope") == "host-to-host"

    @classmethod
    def run_underlay(cls, sc) -> bool:
        """Whether the scenario's hosts talk through endpoints of the run's own (`run_subnet`) rather than the hosts'
        addresses: host-to-host encryption, whose tunnel must not enter a host's own stack, and OVS's own tunnel
        ports, which need their local address in the run's namespace."""
        if cls.owns_hosts:  # a site whose hosts are the run's own (guests.hostsite) has its underlay already
            return False
        # Host to host over IPv6, or shaped: the run's own endpoints have an IPv6 address and may be shaped.
        own = sc.labels.get("attach") == "host" and (sc.levels.get("ip_version") == 6 or bool(
            sc.underlay_rate or sc.underlay_impairment))
        return own or cls.host_to_host_encryption(sc) or cls.ovs_tunnel_ports(sc)

    def underlay_ip(self, label: str) -> tuple[str, int]:
        """A scenario host's run-owned underlay address (and prefix length), from the testbed's run_subnet."""
        return self.bed.run_address(int(label[1:]))

    def underlay_ip6(self, label: str) -> str:
        """Its run-owned IPv6 address (a /64 named after run_subnet)."""
        return self.bed.run_address6(int(label[1:]))

    def notes(self, sc) -> list[str]:
        out = []
        if self.run_underlay(sc) and self.bed.run_subnet:
            out.append(f"testbed: the hosts' endpoints are the run's own: a macvlan of each NIC in the run's host "
                       f"namespace, addressed from run_subnet {self.bed.run_subnet}; the tunnels run there, never in "
                       f"the hosts' own stacks")
        changed = [f"{h.name}'s {h.nic} from {h.facts['nic_mtu']}" for h in self.bed.hosts[:sc.hosts]
                   if int(h.facts.get("nic_mtu") or 0) not in (0, sc.underlay_mtu)]
        if changed:
            out.append(f"testbed: MTU {sc.underlay_mtu} set on {', '.join(changed)} (allow_mtu), restored at teardown")
        ovs_vlan = sc.labels.get("overlay") == "vlan" and sc.labels.get("switch", "").startswith("ovs")
        if (sc.labels.get("overlay") == "none" or ovs_vlan) and sc.labels.get("attach") == "switch" and sc.hosts > 1:
            out.append("testbed: the flat network's bridge port on each host is a source-mode macvlan of the NIC "
                       "(it receives the other hosts' VMs' frames); the NIC itself is not enslaved")
        if sc.levels.get("irq_affinity", "default") != "default":
            nics = ", ".join(f"{h.name}'s {h.nic}" for h in self.bed.hosts[:sc.hosts])
            out.append(f"testbed: irq_affinity {sc.labels['irq_affinity']}: the IRQs of {nics} go to these CPUs "
                       f"(their old lists in each host's ledger first), restored at teardown or by clean")
        if isinstance(sc.levels.get("offloads"), dict):  # build/offloads.py: only devices the run creates
            nics = ", ".join(f"{h.name}'s {h.nic}" for h in self.bed.hosts[:sc.hosts])
            out.append(f"testbed: offloads {sc.labels['offloads']} are set on the run's own devices only; {nics} "
                       f"belong to the lab and keep their offloads (recorded in the campaign's testbed facts)")
        return out

    # ---- build -------------------------------------------------------------------------------------------------
    def touch(self, labels: list[str], run: bool = True) -> dict[str, str]:
        """Before the first object on a host: the local ledger says the host was touched, the host gets the
        run's directory with its owner. Returns the scripts that make the directories (run here unless not `run`:
        the caller then puts each in front of its own script for that host)."""
        new = [lb for lb in dict.fromkeys(labels) if self.host(lb).name not in self._touched]
        if not new:
            return {}
        if self.ledger:
            self.ledger.record_many([lab_clean.host_record(self.host(lb), self.executor(lb).control) for lb in new])
        prefix = self.ledger.prefix if self.ledger else "vb0000"
        scripts = {lb: lab_clean.owner_script(prefix) for lb in new}
        self._touched |= {self.host(lb).name for lb in new}
        if run:
            self._parallel({lb: (self.executor(lb), script) for lb, script in scripts.items()})
            return {}
        return scripts

    def execute(self, topo, place, waves) -> None:
        """Build on the hosts: the batches between two commands or daemons go to each host as ONE script (the
        records of what they create appended to its ledger first), all hosts at once. A host's batches keep their
        order; hosts do not wait for each other, since no batch on one host needs an object of another."""
        self.guard(topo, place, waves)
        self._set_mtu(topo)
        self.irqs = {}
        self.irqs = irq.apply(self, topo)  # before anything of the run's: a host that refuses skips the scenario
        pending: list = []
        for wave in waves:
            if wave and wave[0].tool in BATCH_TOOLS:
                pending += wave
                continue
            self._batches(topo, pending, place)
            pending = []
            topo.flush_records()
            for step in wave:
                topo.run_step(step)
        self._batches(topo, pending, place, check=True)

    def attach_vf(self, topo, place, vm, dev: str) -> None:
        """Move a free SR-IOV virtual function of the host's NIC into the VM, as its NIC `dev`. Its name and MTU go
        into the host's ledger first: teardown and `clean` give it back to the host as it was."""
        h = self.host(vm.host)
        used = place.vfs  # VM label -> VirtualFunction, for the topology's life
        taken = {v.dev for label, v in used.items() if topo.nodes[label].host == vm.host}
        vf = next((v for v in preflight.virtual_functions(h.facts) if v.free and v.dev not in taken), None)
        if vf is None:
            raise SiteError(f"no free SR-IOV virtual function of {h.nic} left on {h.name}")
        used[vm.label] = vf
        self._extra[("vf", vf.dev)] = {"ns": vm.netns, "dev": dev, "mtu": vf.mtu}
        topo.record("vf", vf.dev, vm.host)
        topo.ip(topo.nic_node(vm.host), f"link set dev {vf.dev} netns {vm.netns}")
        topo.ip(vm.label, f"link set dev {vf.dev} name {dev}")

    def mtu_changes(self, topo) -> dict[str, tuple[str, int, int]]:
        """label -> (NIC, its MTU, the scenario's) for the hosts whose NIC MTU the scenario changes (allow_mtu)."""
        out = {}
        for node in topo.hosts:
            h = self.host(node.label)
            old = int(h.facts.get("nic_mtu") or 0)
            if h.allow_mtu and old and old != topo.sc.underlay_mtu:
                out[node.label] = (h.nic, old, topo.sc.underlay_mtu)
        return out

    def _set_mtu(self, topo) -> None:
        """The NIC's old MTU goes into the host's ledger first, so that teardown or `clean` puts it back."""
        changes = self.mtu_changes(topo)
        if not changes:
            return
        self.touch(list(changes))
        jobs = {}
        for label, (nic, old, new) in changes.items():
            record = json.dumps({"op": "add", "kind": "mtu", "name": nic, "mtu": old})
            jobs[label] = (self.executor(label), f"{remote_ledger_append(topo.prefix, [record])} && "
                                                 f"ip link set dev {shlex.quote(nic)} mtu {int(new)}")
        self._parallel(jobs)

    def _pings(self, topo, skip: set[int] = frozenset()) -> dict[str, list[str]]:
        """The ping check of every pair (but those in `skip`), by the client's host once every host is built: one
        echo answered within PING_CHECK_S, asked every 10 ms."""
        out: dict[str, list[str]] = {}
        for p in topo.pairs:
            if p.index in skip:
                continue
            node = topo.nodes[p.meta["client"]]
            if node.guest:  # a guest VM pings from its own kernel: the placement's own check (pings)
                continue
            inside = node.role == "vm" or self.owns_hosts or (node.netns and self.run_underlay(topo.sc))
            argv, why = _ping_check(p, node.netns if inside else None)
            out.setdefault(self.host_of(topo, node.label), []).append(f"{argv} >/dev/null || {why}")
        return out

    def _batches(self, topo, steps, place, check: bool = False) -> None:
        early = self._early_pings(topo, place) if check else {}
        inside = [st for st in steps if self.in_guest(topo, st.node)]
        if inside:  # the steps in the run's guests (a guest VM's own) beside the hosts' scripts: none needs another's
            with ThreadPoolExecutor(max_workers=1) as pool:
                done = pool.submit(self._in_guests, topo, inside)
                self._build_scripts(topo, [st for st in steps if not self.in_guest(topo, st.node)], early)
                done.result()
        else:
            self._build_scripts(topo, steps, early)
        if check:
            # Once every host's script is done: a host that pinged while its peer was still building would lose
            # the first ARP request and wait the kernel's 1-s retransmit (seen in 1 build of 2 under load).
            late = self._pings(topo, skip={i for lines in early.values() for i, _ in lines})
            if late:
                self._run_scripts({lb: ("set -e\n" + "\n".join(lines), []) for lb, lines in late.items()})

    @staticmethod
    def in_guest(topo, label: str) -> bool:
        """Whether a node lives in a guest of the run on a host (a guest VM, or its guest's own root namespace): its
        steps run through the guest's executor, never in its host's build script."""
        node = topo.nodes[label]
        return bool(node.guest) or node.role == "guest"

    def _in_guests(self, topo, steps) -> None:
        """Each guest's batches in order, guests at once."""
        by_guest: dict[str, list] = {}
        for st in steps:
            node = topo.nodes[st.node]
            by_guest.setdefault(node.guest or node.label, []).append(st)
        topo.ran(steps)

        def one(mine) -> str | None:
            try:
                for st in mine:
                    topo.executor(st.node).batch(st.tool, st.lines)
            except CommandError as exc:
                return str(exc)
            return None
        with ThreadPoolExecutor(max_workers=len(by_guest)) as pool:
            errors = [e for e in pool.map(one, by_guest.values()) if e]
        if errors:
            raise SiteError("; ".join(errors))

    def _early_pings(self, topo, place) -> dict[str, list[tuple[int, str]]]:
        """The ping check of a pair between two VMs whose MACs are known beforehand, at the end of the client host's
        build script (one round trip less per scenario). Client and server know each other's MAC (permanent
        neighbour entries, kept for the topology's life): no ARP request is lost to a peer still building, and no
        ARP answer comes from the previous scenario's VM with the same address whose macvlan was still dying on the
        same NIC (TCP then stalled at 0 bytes in about one run in two on the lab)."""
        out: dict[str, list[tuple[int, str]]] = {}
        for p in topo.pairs:
            client, server = p.meta["client"], p.meta["server"]
            known = place.known_macs
            dev = known.get(client)
            if dev is None or server not in known:
                continue
            ns, addr = shlex.quote(topo.nodes[client].netns), shlex.quote(p.server.addr)
            neigh = f"ip -n {ns} neigh replace {addr} lladdr {topo.mac(server)} dev {shlex.quote(dev)} nud permanent"
            ping, why = _ping_check(p, topo.nodes[client].netns)
            out.setdefault(self.host_of(topo, client), []).append((p.index, (
                f"echo @@ping >&2\n{neigh}\nr=0; {ping} >/dev/null || r=$?\n[ $r = 0 ] || {why}")))
            sns, sdev = shlex.quote(topo.nodes[server].netns), shlex.quote(known[server])
            out.setdefault(self.host_of(topo, server), []).append((p.index, (
                f"ip -n {sns} neigh replace {shlex.quote(p.client.addr)} lladdr {topo.mac(client)} dev {sdev} "
                f"nud permanent")))
        return out

    def _build_scripts(self, topo, steps, pings: dict[str, list[tuple[int, str]]] | None = None) -> None:
        records = topo.take_records()
        pings = pings or {}
        if not steps and not records:
            return
        by_host: dict[str, list[str]] = {}
        parts: dict[str, list] = {}
        for kind, name, node in records:
            if node and self.in_guest(topo, node):
                continue  # made inside a guest of the run: it goes with the guest
            by_host.setdefault(self.host_of(topo, node), []).append(json.dumps({"op": "add", "kind": kind, "name": name, **self._extra.get((kind, name), {})}))
        for step in steps:
            parts.setdefault(self.host_of(topo, step.node), []).append(step)
        topo.ran(list(steps))
        labels = list(dict.fromkeys([*by_host, *parts]))
        owners = self.touch(labels, run=False)
        jobs = {}
        for lb in labels:
            script = ["set -e"] + ([owners[lb]] if lb in owners else [])
            script += [remote_ledger_append(topo.prefix, by_host[lb])] if lb in by_host else []
            for k, step in enumerate(parts.get(lb, [])):
                ex = topo.executor(step.node)
                delim = f"VNETBENCH_{secrets.token_hex(6)}"
                script.append(f"echo @@{k} >&2\n{shlex.join(ex.batch_cmd(step.tool))} <<'{delim}'\n"
                              + "\n".join(step.lines) + f"\n{delim}")
            script += [line for _, line in pings.get(lb, [])]
            jobs[lb] = ("\n".join(script), parts.get(lb, []))
        self._run_scripts(jobs)

    def _run_scripts(self, scripts: dict[str, tuple[str, list]]) -> None:
        """One script per host, all hosts at once; the batch (or ping) that failed is named."""
        jobs = {lb: (self.executor(lb), script, mine) for lb, (script, mine) in scripts.items()}
        errors = []

        def one(item):
            lb, (ex, script, mine) = item
            try:
                ex.run_script(script, timeout=120, shown=["sh", "-c", f"(build script of {len(mine)} batches)"])
            except CommandError as exc:
                errors.append(_which(exc, mine, ex.name))
        with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
            list(pool.map(one, jobs.items()))
        if errors:
            raise SiteError("; ".join(errors))

    def host_of(self, topo, label: str) -> str:
        """The scenario host a node label lives on."""
        node = topo.nodes[label]
        return node.host or "h" + label[1:]

    def guard(self, topo, place, waves) -> None:
        """In a machine's root namespace a line may only add a namespace of the run, or create a device of the run
        straight into one (naming the NIC as a macvlan's parent): refuse anything else before building."""
        for wave in waves:
            for step in wave:
                if step.node == "":
                    raise SiteError(f"a step for this machine's root namespace in a testbed topology: {step.lines}")
                if place.in_root(topo, step.node) and step.tool != "call":  # a call's lines are only shown
                    for line in step.lines:
                        bad = _foreign(line, topo.prefix, topo.nic(self.host_of(topo, step.node)),
                                       {v.dev for v in place.vfs.values()})
                        if bad:
                            raise SiteError(f"refusing to run `{line}` on {self.name(self.host_of(topo, step.node))}: {bad}")

    def flush(self, topo, records) -> None:
        """Append records to each host's own ledger, before the objects are created (one round trip per host)."""
        by_host: dict[str, list[str]] = {}
        for kind, name, node in records:
            if node and self.in_guest(topo, node):
                continue  # made inside a guest of the run: it goes with the guest
            label = self.host_of(topo, node) if node else None
            if label is None:
                raise SiteError(f"record of {kind} {name} with no host in a testbed topology")
            by_host.setdefault(label, []).append(json.dumps({"op": "add", "kind": kind, "name": name, **self._extra.get((kind, name), {})}))
        if not by_host:
            return
        self.touch(list(by_host))
        prefix = topo.prefix
        self._parallel({lb: (self.executor(lb), remote_ledger_append(prefix, lines)) for lb, lines in by_host.items()})

    def _parallel(self, jobs: dict[str, tuple[SshExecutor, str]]) -> None:
        def one(item):
            ex, script = item
            ex.run_script(script, timeout=30)
        if len(jobs) == 1:
            one(next(iter(jobs.values())))
            return
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            list(pool.map(one, jobs.values()))

    def teardown(self, topo, place) -> None:
        """Per host, one round trip: kill what runs in the scenario's namespaces, delete them and the scenario's
        links, and mark them removed in the host's ledger."""
        by_host: dict[str, list] = {}
        for node in topo.nodes.values():
            if node.netns and not node.guest:  # a guest VM's namespace is inside its guest (the placement's)
                by_host.setdefault(self.host_of(topo, node.label), []).append(Obj("netns", node.netns))
        for label, (nic, old, _) in self.mtu_changes(topo).items():
            by_host.setdefault(label, []).insert(0, Obj("mtu", nic, extra={"mtu": old}))
        for label, old in self.irqs.items():
            by_host.setdefault(label, []).extend(irq.objects(old))
        self.irqs = {}
        for label, vf in place.vfs.items():
            by_host.setdefault(topo.nodes[label].host, []).append(Obj("vf", vf.dev, extra=self._extra[("vf", vf.dev)]))
        jobs = {}
        for label, objs in by_host.items():
            script = lab_clean.clean_script(topo.prefix, objs, remove_dir=False)
            script += "; " + remote_ledger_append(topo.prefix, [json.dumps({"op": "del", "kind": o.kind, "name": o.name})
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
            name, machine = self.name(h.label), self.executor(h.label)
            # the machine's CPU and the counters of the run's host namespace and of the NIC (read only)
            out += [HostProbe(SystemProbe(machine), name), HostProbe(InterfaceProbe(h.exec), name),
                    HostProbe(InterfaceProbe(machine), name, only=self.nic(h.label))]
        return out

    def tag(self, topo, samples: list[Sample]) -> list[Sample]:
        """A workload's samples get the hosts of their pair's client and server."""
        hosts = {}
        for p in topo.pairs:
            ends = [topo.nodes[p.meta[k]] for k in ("client", "server")]
            hosts[p.index] = {f"{k}_host": self.name(n.host or n.label) for k, n in zip(("client", "server"), ends)}
        return [Sample(s.metric, s.value, s.unit, s.metadata | hosts.get(s.metadata.get("pair"), {}), s.t)
                if "host" not in s.metadata else s for s in samples]

    def environment(self) -> dict:
        return {h.name: {"ssh": h.target.destination, "nic": h.nic, "address": h.address,
                         **{k: v for k, v in h.facts.items() if k not in ("time", "time2", "uid", "nic_exists")},
                         "tools": {k: v.detail for k, v in (h.caps.tools if h.caps else {}).items() if v.ok}}
                for h in self.bed.hosts}


class HostProbe:
    """A probe running on one testbed host: every sample says which host it came from."""

    def __init__(self, probe, host: str, only: str | None = None):
        self.probe, self.host, self.only = probe, host, only  # only: keep this interface's samples alone
        self.kind = probe.kind

    def start(self) -> None:
        try:
            self.probe.start()
            self.started = True
        except CommandError:  # the host stopped answering: the trial fails through its workload
            self.started = False

    def stop(self, window=None) -> list[Sample]:
        if not self.started:
            return []
        try:
            got = self.probe.stop(window)
        except (CommandError, RuntimeError):
            return []
        return [Sample(s.metric, s.value, s.unit, s.metadata | {"host": self.host}, s.t) for s in got
                if self.only is None or s.metadata.get("interface") == self.only]


def _which(exc: CommandError, steps, host: str) -> str:
    """Name the batch (and its line) that failed in a host's build script."""
    head, _, tail = exc.stderr.rpartition("@@")
    k, _, err = tail.partition("\n")
    if k.startswith("ping "):
        return k[5:]
    if not head and not exc.stderr.startswith("@@") or not k.strip().isdigit() or int(k) >= len(steps):
        return str(exc)
    step = steps[int(k)]
    return f"[{host}] `{step.tool} -batch -` failed: {_batch_error(err, step.lines)}"


def _foreign(line: str, prefix: str, nic: str, vfs: set[str] = frozenset()) -> str | None:
    """Why a line for a machine's root namespace is refused (None: it only adds a namespace of the run, creates a
    device of the run straight into one, or moves a free virtual function the run took into one)."""
    words = line.split()
    if len(words) == 6 and words[:3] == ["link", "set", "dev"] and words[4] == "netns" and words[3] in vfs:
        return None if words[5].startswith(prefix + "-") else "a virtual function may only go into a namespace of the run"
    if words[:2] == ["netns", "add"] and len(words) == 3 and words[2].startswith(prefix + "-"):
        return None
    if words[:2] != ["link", "add"] or len(words) < 3 or not words[2].startswith(prefix + "-"):
        return "only the run's namespaces and devices may be created there"
    targets = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "netns"]
    if not targets or not all(t.startswith(prefix + "-") for t in targets):
        return "a device of the run must be created inside one of the run's namespaces"
    parents = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "link" and i > 0]
    if any(p != nic for p in parents):
        return f"the only parent device allowed is the testbed's NIC {nic}"
    if "peer" in words:
        rest = words[words.index("peer") + 1:]
        if rest[:1] == ["name"] and (len(rest) < 2 or not rest[1].startswith(prefix + "-")):
            return "a veth peer must be the run's"
        if "netns" not in rest:
            return "a veth peer must be created inside one of the run's namespaces"
    return None


def _ping_check(pair, netns: str | None) -> tuple[str, str]:
    """The shell line of a pair's ping check (one echo answered within PING_CHECK_S, asked every 10 ms; in `netns`
    if given), and the line that reports its failure (@@ping, exit 3)."""
    argv = ["ping", "-n", "-q", "-c", "1", "-i", "0.01", "-w", str(PING_CHECK_S), pair.server.addr]
    argv = ["ip", "netns", "exec", netns, *argv] if netns else argv
    why = (f"pair {pair.index} ({pair.client.label} -> {pair.server.label} {pair.server.addr}): no reply to ping "
           f"within {PING_CHECK_S} s: this topology does not pass traffic")
    return shlex.join(argv), f"{{ echo {shlex.quote('@@ping ' + why)} >&2; exit 3; }}"
