"""Open vSwitch: a private ovsdb-server + ovs-vswitchd per emulated host, run in the foreground inside the host's
namespace (so their pids are known for CPU accounting and cleanup), with database, sockets and logs in the host's
work directory -- never the system service or /var/run/openvswitch.

Layout per host (userspace datapath, `datapath_type=netdev`):
  overlay none     one bridge `bi`: VM ports, the underlay veth, the host address on the bridge's internal port
                   (every tenant shares the flat provider network, as with the Linux bridge)
  overlay vlan     the same bridge; VM ports are access ports tag=100+tenant, the underlay veth is a trunk and the
                   host's internal port is untagged (tag=0)
  vxlan/gre/geneve bridge `bi` holds the VM ports (local VLAN tag per tenant keeps tenants apart) and one tunnel port
                   per tenant and remote host (key = 100+tenant); bridge `bp` holds the underlay veth and the host
                   address, because userspace tunnels are routed through an OVS bridge (OVS mirrors the kernel route)
  tunnel: kernel   (vxlan only) per tenant a kernel VXLAN device added to `bi` as an ordinary port; the kernel
                   encapsulates and routes, the host address stays on the underlay veth
With the kernel datapath (`system`) tunnels are kernel vports, so `bp` is not needed and the address stays on the NIC
(this machine's kernel has no openvswitch module; a guest's has: `kernel: guest`, see guests/probe.py's probe).
Tunnel ports are `protected` (no forwarding among them: split horizon for more than two hosts).

port_type afxdp: the VM ports and the underlay veth are AF_XDP ports polled by a PMD thread (an XDP program on each
veth, so MTUs are limited to one page); pmd-maxsleep lets the idle PMD sleep instead of spinning a core. XDP takes
the frames before any packet tap: tcpdump on the underlay veth sees nothing then (OVS's port statistics do).

The userspace datapath forwards what it receives from a veth as is: a VM that leaves TCP/UDP checksums to the NIC
(CHECKSUM_PARTIAL) sends packets whose checksums nobody fills in, so ping works and TCP does not. Each VM's NIC gets
`ethtool -K <if> tx off` (TSO goes with it); OVS's experimental userspace TSO stays off because OVS 3.1 drops tunnelled
packets that carry offload flags. The userspace datapath never fragments either: the scenario's MTUs already leave room
for the overlay header.
"""
from __future__ import annotations

import json
import time
from typing import Literal

from ..system.executor import CommandError
from . import register
from .base import Availability, Options, Switch

TENANT_TAG_BASE = 100          # VLAN tag / tunnel key of tenant t = 100 + t, as the Linux-bridge overlays use
PMD_MAXSLEEP_US = 10000        # afxdp: let idle PMD threads sleep up to 10 ms (the 3.1 maximum) instead of spinning
AFXDP_MAX_MTU = 3506          # measured: `ip link set mtu` on a veth whose peer has XDP refuses more (4 KiB pages)
VSCTL_TIMEOUT_S = 30
READY_TIMEOUT_S = 15
OVS_TUNNEL_TYPES = {"vxlan": "vxlan", "gre": "gre", "geneve": "geneve"}
KERNEL_TUNNEL_IN_OVS = "kernel-vxlan-in-ovs"  # the overlay's implementation with tunnel: kernel
# Open vSwitch 3.1.0 caches its CPU count with a timestamp that starts at 0, so it counts no CPU until the kernel's
# monotonic clock passes 10 s (fixed in 3.1.1: upstream b354cee2e, on branch-3.1 fff04b838, "ovs-thread: Fix cpus
# not read for the first 10s"). With per-CPU upcall dispatch it then opens 0 upcall handlers and loses every upcall:
# no flow is ever set up.
# A guest booted a few seconds ago is that young, so its first ovs-vswitchd waits until the clock passes the mark.
YOUNG_KERNEL_BUG = ("3.1.0",)
YOUNG_KERNEL_S = 10.5
YOUNG_KERNEL_WAIT = "ovs: ovs-vswitchd starts once the kernel has been up"
YOUNG_KERNEL_NOTE = (YOUNG_KERNEL_WAIT + " {s} s: Open vSwitch {v} counts no CPU before its 10th second (fixed in "
                     "3.1.1), and with per-CPU upcall dispatch it would then lose every upcall (a guest booted just "
                     "before waits once)")
CSUM_NOTE = ("ovs: VM NICs run with `ethtool -K <if> tx off` (no TX checksum offload, hence no TSO) because the OVS "
             "userspace datapath does not complete partial checksums; other_config:userspace-tso-enable=false")


class OvsOptions(Options):
    datapath: Literal["auto", "netdev", "system"] = "auto"
    port_type: Literal["veth", "afxdp"] = "veth"
    tunnel: Literal["ovs", "kernel"] = "ovs"


def wait_for_cpu_count() -> list[str]:
    """A command that returns once the kernel has been up YOUNG_KERNEL_S (an ovs-vswitchd of YOUNG_KERNEL_BUG then
    counts its CPUs): at once on a kernel up for longer (any machine's), after up to ~8 s on a guest booted just now.
    It sleeps what is left in one go, then reads the clock again: a poll every 0.1 s started ~150 processes in a
    one-CPU guest whose build or probe goes on beside the wait. A kernel past its 11th second (every build but a
    guest's first) is told by shell builtins alone, with no process started."""
    left = f"awk '{{d = {YOUNG_KERNEL_S} - $1; if (d <= 0) exit 1; print d + 0.01}}' /proc/uptime"
    return ["sh", "-c", f'read -r u _ < /proc/uptime; [ "${{u%.*}}" -ge {int(YOUNG_KERNEL_S) + 1} ] 2>/dev/null || '
                        f"{{ i=0; while d=$({left}) && [ $i -lt 5 ]; do sleep $d; i=$((i+1)); done; }}"]


def after_cpu_count(argv: list[str]) -> list[str]:
    """argv, started now but run once the kernel has been up YOUNG_KERNEL_S: a shell waits (wait_for_cpu_count),
    then becomes argv (exec: the same process, so its record in the ledger and its CPU accounting hold)."""
    return ["sh", "-c", wait_for_cpu_count()[2] + '; exec "$@"', "sh", *argv]


@register
class Ovs(Switch):
    name = "ovs"
    summary = "Open vSwitch (private ovsdb-server + ovs-vswitchd per host); overlays as OVS tunnel ports or VLAN tags"
    Options = OvsOptions

    # ---- availability ------------------------------------------------------------------------------------
    def datapath(self, caps) -> str:
        dp = self.options.datapath
        if dp == "auto":
            return "system" if caps is not None and caps.has("ovs-kernel-datapath") else "netdev"
        return dp

    def check(self, scenario, caps):
        for tool in ("ovs-vswitchd", "ovsdb-server", "ovs-vsctl"):
            if not caps.tool(tool):
                return Availability.no(caps.missing_tool(tool))
        if not caps.tool("ovsdb-tool"):
            return Availability.no(caps.missing_tool("ovsdb-tool"))
        dp = self.datapath(caps)
        if dp == "system" and not caps.has("ovs-kernel-datapath"):
            return Availability.no("datapath system needs the kernel's Open vSwitch datapath (module openvswitch): "
                                   + caps.missing_kernel("ovs-kernel-datapath") + "; use datapath netdev")
        impl, notes = f"ovs-{dp}", []
        version = caps.tools["ovs-vswitchd"].detail
        if dp == "system" and version in YOUNG_KERNEL_BUG:
            notes.append(YOUNG_KERNEL_NOTE.format(v=version, s=YOUNG_KERNEL_S))
        if dp == "netdev":
            if not caps.tool("ethtool"):
                return Availability.no("the OVS userspace datapath needs TX checksum offload off in the VMs: "
                                       + caps.missing_tool("ethtool"))
            notes.append(CSUM_NOTE)
        if self.options.port_type == "afxdp":
            if dp != "netdev":
                return Availability.no("afxdp ports belong to the userspace datapath; use datapath netdev")
            if not (afxdp := caps.offer("ovs-afxdp")).ok:
                return Availability.no(afxdp.detail)
            mtu = max(scenario.vm_mtu, scenario.underlay_mtu if scenario.hosts > 1 else 0)
            if mtu > AFXDP_MAX_MTU:
                return Availability.no(f"afxdp ports put an XDP program on the veths OVS owns, and a veth whose peer "
                                       f"has XDP takes frames of one 4 KiB page: MTU at most {AFXDP_MAX_MTU}, this "
                                       f"scenario needs {mtu}")
            impl += "+afxdp"
            notes.append(f"ovs: VM ports and the underlay veth are type=afxdp, polled by a PMD thread "
                         f"(other_config:pmd-maxsleep={PMD_MAXSLEEP_US} us, so an idle PMD sleeps instead of "
                         f"spinning a core)")
        elif dp == "netdev":
            notes.append("ovs: veth ports are read through packet sockets whose 208 KiB receive buffer (rmem_default, "
                         "not settable inside a namespace) overflows under TCP bursts: expect drops and retransmits "
                         "that a vhost-user port would not have (port_type afxdp avoids them)")
        return Availability(True, impl, notes=tuple(notes))

    def overlay_support(self, overlay, scenario, caps):
        name, dp = overlay.name, self.datapath(caps)
        if self.options.tunnel == "kernel":
            if name != "vxlan":
                return Availability.no(f"tunnel: kernel puts the kernel's VXLAN device in OVS; it applies to overlay "
                                       f"vxlan only, not {name}")
            if not caps.has("vxlan"):
                return Availability.no("tunnel: kernel needs the kernel's vxlan device: "
                                       + caps.missing_kernel("vxlan"))
            return Availability(True, KERNEL_TUNNEL_IN_OVS)
        if name == "none":
            return Availability(True, "flat (underlay in the OVS bridge)")
        if name == "vlan":
            return Availability(True, "ovs-vlan", notes=("ovs-vlan: access ports tag=100+tenant, underlay veth as "
                                                         "trunk",))
        if name not in OVS_TUNNEL_TYPES:
            return Availability.no(f"ovs has no {name} support")
        enc = scenario.element("encryption")
        if (dp == "netdev" and scenario.levels["encryption_scope"] == "host-to-host"
                and scenario.labels["encryption"] != "none"):
            return Availability.no("OVS userspace tunnels are routed out of an OVS bridge port only; host-to-host "
                                   f"encryption ({enc}) moves the tunnel endpoints onto its own device outside "
                                   "OVS; use tunnel: kernel (vxlan) or encryption_scope vm-to-vm")
        if dp == "system" and overlay.kernel_kind and not caps.has(overlay.kernel_kind):
            return Availability.no(f"the OVS kernel datapath builds {name} ports on the kernel's {overlay.kernel_kind} "
                                   f"device: {caps.missing_kernel(overlay.kernel_kind)}")
        return Availability(True, f"ovs-{name}")

    # ---- names and paths ---------------------------------------------------------------------------------
    def _mode(self, topo) -> str:
        """flat | vlan | tunnel (OVS tunnel ports) | kernel (kernel VXLAN devices as OVS ports)."""
        overlay = topo.sc.element("overlay")
        if overlay == "none":
            return "flat"
        if overlay == "vlan":
            return "vlan"
        return "kernel" if self.options.tunnel == "kernel" else "tunnel"

    def _dp(self, topo) -> str:
        impl = topo.sc.implementation.get("switch", "")
        if impl:
            return "system" if impl.startswith("ovs-system") else "netdev"
        return self.options.datapath if self.options.datapath != "auto" else "netdev"

    @staticmethod
    def _files(topo, host: str) -> dict[str, str]:
        w = topo.workdir(host)
        return {"dir": w, "db": f"{w}/conf.db", "sock": f"{w}/db.sock", "dbctl": f"{w}/ovsdb-server.ctl",
                "swctl": f"{w}/ovs-vswitchd.ctl", "dblog": f"{w}/ovsdb-server.log", "swlog": f"{w}/ovs-vswitchd.log"}

    def vsctl(self, topo, host: str) -> list[str]:
        """The ovs-vsctl command line that talks to this host's private database."""
        return ["ovs-vsctl", f"--db=unix:{self._files(topo, host)['sock']}", f"--timeout={VSCTL_TIMEOUT_S}"]

    def appctl(self, topo, host: str) -> list[str]:
        return ["ovs-appctl", "-t", self._files(topo, host)["swctl"]]

    @staticmethod
    def _tag(tenant: int) -> int:
        return TENANT_TAG_BASE + tenant

    @staticmethod
    def _hwaddr(host: str) -> str:
        # A fixed MAC for the bridge holding a host's address: every host can then seed the others' tunnel
        # endpoints (tnl/neigh/set) instead of losing the first packets to OVS's own ARP. Locally administered,
        # so never the veth's own MAC (frames for the bridge stay "other host" for the kernel on the veth).
        return f"02:00:0a:fa:00:{int(host[1:]):02x}"

    # ---- build -------------------------------------------------------------------------------------------
    def _ready(self, topo, host: str, name: str, sock: str, log: str, timeout: float = READY_TIMEOUT_S):
        def ready() -> None:
            where = topo.executor(host)  # the daemon's files are on its host's machine
            deadline = time.monotonic() + timeout
            while not where.appears(sock, 0.25):  # a guest's agent waits there: no round trip per look
                proc = topo.daemons.get(name)
                if proc is not None and proc.poll() is not None:
                    err = proc.stderr.read() if proc.stderr else ""
                    raise CommandError(name, proc.args, proc.returncode, f"{err.strip()} {where.tail(log)}".strip())
                if time.monotonic() > deadline:
                    raise CommandError(name, ["ready"], -1, f"no control socket {sock} after {timeout:.0f} s; "
                                                            f"log: {where.tail(log)}")
                time.sleep(0.005)
        return ready

    def build(self, topo):
        self._pending: dict[str, tuple[list[str], str]] = {}  # host -> (ovs-vsctl argv, device of the address)
        self._flushed: set[str] = set()
        self._tap_steps: dict = {}  # host -> the ip step that brings its VM ports up, ahead of ovs-vsctl
        self._plugged = 0
        # host -> ovs-vswitchd's ready check, when it waits for a young kernel: asked in _finish, not at its start
        self._late: dict = {}
        dp, mode = self._dp(topo), self._mode(topo)
        multi = len(topo.hosts) > 1
        young = dp == "system" and any(n.startswith(YOUNG_KERNEL_WAIT) for n in topo.sc.notes)
        topo.make_dirs([h.label for h in topo.hosts], mode=None)
        for host in topo.hosts:
            h, f = host.label, self._files(topo, host.label)
            env = ["env", f"OVS_RUNDIR={f['dir']}", f"OVS_DBDIR={f['dir']}", f"OVS_LOGDIR={f['dir']}"]
            topo.run(h, ["ovsdb-tool", "create", f["db"]])
            topo.daemon(h, f"ovsdb-server@{h}", [*env, "ovsdb-server", f["db"], f"--remote=punix:{f['sock']}",
                                                 f"--unixctl={f['dbctl']}", f"--log-file={f['dblog']}",
                                                 "-vconsole:off", "-vfile:info"],
                        ready=self._ready(topo, h, f"ovsdb-server@{h}", f["sock"], f["dblog"]))
            argv = [*env, "ovs-vswitchd", f"unix:{f['sock']}", f"--unixctl={f['swctl']}", f"--log-file={f['swlog']}",
                    "-vconsole:off", "-vfile:info"]
            if young:
                # On a kernel just booted only ovs-vswitchd waits for its 10.5th second, in a shell of its own
                # (on each host's kernel); the rest of the build (namespaces, ports, bridges in the database,
                # addresses) goes on meanwhile, and _finish waits for it. A build took 11.7 s, 7.4 s of it waiting.
                self._late[h] = self._ready(topo, h, f"ovs-vswitchd@{h}", f["swctl"], f["swlog"],
                                            READY_TIMEOUT_S + YOUNG_KERNEL_S)
                topo.daemon(h, f"ovs-vswitchd@{h}", after_cpu_count(argv))
            else:
                topo.daemon(h, f"ovs-vswitchd@{h}", argv, ready=self._ready(topo, h, f"ovs-vswitchd@{h}", f["swctl"],
                                                                             f["swlog"]))
        for host in topo.hosts:
            h = host.label
            argv = [*self.vsctl(topo, h), "--no-wait"]
            if self.options.port_type == "afxdp":
                argv += ["--", "set", "Open_vSwitch", ".", f"other_config:pmd-maxsleep={PMD_MAXSLEEP_US}"]
            bi, bp, up = topo.ifname("bi"), topo.ifname("bp"), topo.ifname("u")
            argv += ["--", "add-br", bi, "--", "set", "bridge", bi, f"datapath_type={dp}"]
            tunnels = []
            underlay_dev = up
            # afxdp on the underlay veth too: as a plain (AF_PACKET) port it drops bursts at its socket buffer, which
            # cut cross-host TCP to ~0.4 Gbit/s with ~20k retransmits/3 s against ~1.6 Gbit/s and none (measured)
            if multi and mode in ("flat", "vlan"):
                up = topo.uplink(h)  # the emulated NIC, or on a testbed the run's macvlan of the real one
            uplink = [up] + (["--", "set", "interface", up, "type=afxdp"] if self.options.port_type == "afxdp" else [])
            if topo.sc.underlay_qdiscs(up):  # a port without QoS gets its qdisc reset: the underlay's tbf was gone
                uplink += ["--", "set", "port", up, "qos=@noop", "--", "--id=@noop", "create", "qos", "type=linux-noop"]
            if not multi:
                pass  # one host: the underlay veth has nothing behind it; its address stays on the veth
            elif mode in ("flat", "vlan"):
                argv += ["--", "set", "bridge", bi, f"other_config:hwaddr={self._hwaddr(h)}",
                         "--", "set", "interface", bi, f"mtu_request={topo.sc.underlay_mtu}",
                         "--", "add-port", bi, *uplink]
                if mode == "vlan":
                    argv += ["--", "set", "port", bi, "tag=0"]  # the host's own address is on the untagged network
                underlay_dev = bi
            elif mode == "tunnel":
                if dp == "netdev":
                    argv += ["--", "add-br", bp, "--", "set", "bridge", bp, f"datapath_type={dp}",
                             f"other_config:hwaddr={topo.underlay_mac(h) or self._hwaddr(h)}",
                             "--", "set", "interface", bp, f"mtu_request={topo.sc.underlay_mtu}",
                             "--", "add-port", bp, *uplink]
                    underlay_dev = bp
                kind = OVS_TUNNEL_TYPES[topo.sc.element("overlay")]
                for other in topo.hosts:
                    if other.label == h:
                        continue
                    for t in range(1, topo.sc.tenants + 1):
                        port = topo.ifname(f"{kind[:2]}{t}{other.label}")
                        # protected: no forwarding between tunnel ports (split horizon), or >2 hosts make a loop
                        argv += ["--", "add-port", bi, port, f"tag={self._tag(t)}", "protected=true",
                                 "--", "set", "interface", port, f"type={kind}",
                                 f"options:remote_ip={topo.transport_ip(other.label)}", f"options:key={self._tag(t)}"]
            else:  # the overlay's tunnels (asked of the topology) as kernel devices, each an OVS port
                for t in range(1, topo.sc.tenants + 1):
                    tunnels.append(tun := topo.overlay_tunnel(h, t))
                    argv += ["--", "add-port", bi, tun.dev, f"tag={self._tag(t)}"]
            if underlay_dev != up:
                # The kernel stack still sees every frame on a veth that OVS reads with a packet socket: it must
                # neither answer ARP for the bridge's address nor speak IPv6 there, nor take in a tunnel packet that
                # reaches it with the bridge's MAC (a testbed's run-owned macvlan has it: rp_filter drops them there,
                # as their source is routed through the bridge, instead of answering "protocol unreachable").
                topo.run(h, ["sysctl", "-q", "-w", f"net.ipv4.conf.{up}.arp_ignore=1",
                             f"net.ipv6.conf.{up}.disable_ipv6=1", f"net.ipv4.conf.{up}.rp_filter=1"])
            for tun in tunnels:
                topo.add_tunnel(h, tun)
                topo.ip(h, f"link set {tun.dev} mtu {topo.sc.vm_mtu} up")
            for tun in tunnels:
                topo.flood(h, tun)
            if underlay_dev == up:
                topo.underlay_address(h, up)
            self._pending[h] = (argv, underlay_dev)
            if not any(vm.host == h for vm in topo.vms):
                self._flush(topo, h)

    def _flush(self, topo, host: str) -> None:
        """Emit the host's one configuring ovs-vsctl. The VM ports are known only as plug() is called and their veths
        exist only from the attach step on, so the step is emitted at the host's first plug(); later plug() calls
        extend the same argv list (the steps run only once all are emitted). It runs with --no-wait, so that every
        host's ovs-vswitchd configures itself at the same time; _finish() waits for them."""
        self._flushed.add(host)
        topo.run(host, self._pending[host][0])

    def _finish(self, topo) -> None:
        for host in topo.hosts:
            h, dev = host.label, self._pending[host.label][1]
            if h in self._late:
                topo.call(h, f"wait for ovs-vswitchd@{h}'s control socket (it starts once the kernel has been up "
                             f"{YOUNG_KERNEL_S} s)", self._late[h])
            # Any change made without --no-wait returns once ovs-vswitchd has applied everything before it.
            topo.run(h, [*self.vsctl(topo, h), "set", "Open_vSwitch", ".", f"external_ids:vnetbench-run={topo.prefix}"])
            if dev != topo.ifname("u"):
                topo.underlay_address(h, dev)
                topo.ip(h, f"link set {dev} up")
        for host in topo.hosts:  # once every host has its address
            if self._pending[host.label][1] == topo.ifname("bp"):
                self._seed_neighbours(topo, host.label, topo.ifname("bp"))

    def _seed_neighbours(self, topo, h: str, dev: str) -> None:
        """Userspace tunnels resolve the next hop's MAC themselves and drop the packet that asked (the VM's first
        ARP, retried only after 1 s). A remote host on the same link has a bridge MAC of our choosing: seed it. Behind
        routers (hops), let the kernel resolve the way to each remote host, then copy its neighbours to OVS."""
        routed = []
        for other in topo.hosts:
            if other.label == h:
                continue
            remote = topo.host_ip(other.label)
            if remote.rsplit(".", 1)[0] == topo.host_ip(h).rsplit(".", 1)[0]:
                topo.run(h, [*self.appctl(topo, h), "tnl/neigh/set", dev, remote,
                             topo.underlay_mac(other.label) or self._hwaddr(other.label)])
            else:
                routed.append(remote)
        if not routed:
            return
        node = topo.nodes[h].exec

        def seed() -> None:
            for remote in routed:
                node.run(["ping", "-n", "-c", "1", "-W", "1", remote], check=False)
            for n in json.loads(node.run(["ip", "-j", "-4", "neigh", "show", "dev", dev]).stdout or "[]"):
                if n.get("dst") and n.get("lladdr"):
                    node.run([*self.appctl(topo, h), "tnl/neigh/set", dev, n["dst"], n["lladdr"]])
        topo.call(h, f"ping {', '.join(routed)} from {h}, then copy the kernel's neighbours on {dev} to OVS "
                     f"(ovs-appctl tnl/neigh/set)", seed)

    def plug(self, topo, host, ifname, tenant):
        argv = self._pending[host][0]
        line = f"link set {ifname} mtu {topo.sc.vm_mtu} up"
        if host in self._tap_steps:
            self._tap_steps[host].lines.append(line)  # up before OVS opens it, like the host's first VM port
        else:
            topo.ip(host, line)
            self._tap_steps[host] = topo.steps[-1]
        argv += ["--", "add-port", topo.ifname("bi"), ifname]
        if self._mode(topo) != "flat":
            argv.append(f"tag={self._tag(tenant)}")
        if self.options.port_type == "afxdp":
            argv += ["--", "set", "interface", ifname, "type=afxdp"]
        if host not in self._flushed:
            self._flush(topo, host)
        vm = next((v for v in topo.vms if v.host == host and topo.ifname(f"t{v.label.split('v')[1]}") == ifname), None)
        if vm is not None and self._dp(topo) == "netdev":
            topo.run(vm.label, ["ethtool", "-K", topo.ifname("e0"), "tx", "off"])
        self._plugged += 1
        if self._plugged == len(topo.vms):
            self._finish(topo)

    def teardown(self, topo):
        # The daemons stop with the topology (SIGTERM); their database, sockets and logs go with this step.
        topo.remove_dirs([h.label for h in topo.hosts])
