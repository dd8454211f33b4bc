"""WireGuard: the kernel module where the kernel has it, else wireguard-go (userspace, over TUN).

Every node of a peering (the VMs of each pair, or every host) gets an interface with a tunnel address; the
workloads of vm-to-vm scenarios target the VMs' tunnel addresses, and host-to-host overlays run between the hosts'
tunnel addresses. Keys: `wg genkey` / `wg pubkey` at build time, run on the node's machine, the private key
written to a 0600 file in the node's directory (it never leaves that machine) and loaded with
`wg set IF private-key FILE`; peers (public keys only) with `wg addconf`.
wireguard-go and every `wg` call addressing it run with the node's directory as /run, since the UAPI socket is
fixed at /run/wireguard/<if>.sock.
"""
from __future__ import annotations

import subprocess

from . import register
from .base import Availability
from .encrypted import EncryptedTunnel

PORT = 51820
OVERHEAD = 60  # outer IPv4 20 + UDP 8 + WireGuard data header 16 + Poly1305 tag 16 (IPv6 outer: 80)


@register
class WireGuard(EncryptedTunnel):
    name = "wireguard"
    summary = "WireGuard: kernel module where available, else wireguard-go (userspace over TUN)"
    kernel: bool = False  # decided by check()

    def tunnel_mtu(self, link_mtu: int) -> int:
        return link_mtu - OVERHEAD

    def outer_size(self, inner: int) -> int:
        return inner + OVERHEAD

    def adopt(self, implementation):
        self.kernel = implementation.endswith("kernel-wireguard")  # "uml-6.1.176 + kernel-wireguard" in guest VMs

    def check(self, scenario, caps):
        problem = self.scope_problem(scenario)
        if problem:
            return Availability.no(problem)
        if not caps.tool("wg"):
            return Availability.no(caps.missing_tool("wg"))
        link = self.link_mtu(scenario)
        common = (f"Curve25519 keys generated per run; ChaCha20-Poly1305 on UDP port {PORT}; tunnel MTU "
                  f"{self.tunnel_mtu(link)} for a {link}-byte link")
        if caps.has("wireguard"):
            self.kernel = True
            return Availability(True, "kernel-wireguard", notes=(common,))
        if not caps.tool("wireguard-go"):
            return Availability.no(f"{caps.missing_kernel('wireguard')}, and {caps.missing_tool('wireguard-go')}")
        if not caps.has("tun"):
            return Availability.no(f"{caps.missing_kernel('wireguard')}, and wireguard-go needs a TUN device: "
                                   f"{caps.missing_kernel('tun')}")
        version = caps.tools["wireguard-go"].detail
        return Availability(True, f"wireguard-go-{version}", notes=(
            f"WireGuard in userspace: wireguard-go {version} over a TUN device, because the "
            f"{caps.missing_kernel('wireguard')}", common))

    def build(self, topo):
        links = self.peers(topo)
        nodes = self.members(links)
        dev = topo.ifname("wg")
        self.make_dirs(topo, nodes)
        topo.call(nodes[0], f"generate WireGuard keys with wg genkey/wg pubkey, write wg.key (0600) and peers.conf for "
                      f"{', '.join(nodes)}", lambda: self._write_keys(topo, links, nodes))
        for n in nodes:
            if self.kernel:
                topo.ip(n, f"link add {dev} type wireguard")
            else:
                sock = f"{topo.workdir(n)}/wireguard/{dev}.sock"
                topo.daemon(n, f"wireguard-go@{n}",
                            self.privrun(topo, n, ["env", "LOG_LEVEL=error", "wireguard-go", "-f", dev]),
                            ready=self.wait_socket(topo, f"wireguard-go@{n}", sock, label=n))
        inside = "/run" if not self.kernel else None
        for n in nodes:
            d = inside or topo.workdir(n)
            for argv in (["wg", "set", dev, "listen-port", str(PORT), "private-key", f"{d}/wg.key"],
                         ["wg", "addconf", dev, f"{d}/peers.conf"]):
                topo.run(n, argv if self.kernel else self.privrun(topo, n, argv))
        mtu = self.tunnel_mtu(self.link_mtu(topo.sc))
        for n in nodes:
            v4, v6 = self.tunnel_addrs(n)
            plen = 16 if topo.nodes[n].role == "vm" else 24  # a VM's tunnel address is in a /16 (encrypted.VM_TUNNEL)
            topo.ip(n, f"addr add {v4}/{plen} dev {dev}", f"addr add {v6}/64 dev {dev} nodad",
                    f"link set {dev} mtu {mtu} up")
        if not self.host_to_host(topo.sc) or topo.sc["attach"] == "host":
            self.target_tunnel_addrs(topo)

    def endpoint(self, topo, label: str) -> str:
        node = topo.nodes[label]
        return f"{node.v4 if node.role == 'vm' else topo.host_ip(label)}:{PORT}"

    def _write_keys(self, topo, links, nodes) -> None:
        public = {}
        for n in nodes:  # each node makes its own key: the private key never leaves the node's machine
            key_file = f"{topo.workdir(n)}/wg.key"
            out = topo.executor(n).run(["sh", "-c", 'umask 077 && wg genkey > "$1" && wg pubkey < "$1"', "sh",
                                        key_file], timeout=20).stdout.strip()
            if not out:
                raise subprocess.SubprocessError(f"wg pubkey printed nothing on {n}")
            public[n] = out
        for n in nodes:
            peers = [b if a == n else a for a, b in links if n in (a, b)]
            text = "".join(f"[Peer]\nPublicKey = {public[p]}\nEndpoint = {self.endpoint(topo, p)}\n"
                           f"AllowedIPs = {self.tunnel_addrs(p)[0]}/32, {self.tunnel_addrs(p)[1]}/128\n\n"
                           for p in peers)
            topo.write_file(n, "peers.conf", text)
