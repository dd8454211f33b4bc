"""The emulated underlay: the network between emulated hosts (namespaces here, in one guest, or guests of their own),
which a real lab has already. Two hosts share a veth pair, or a chain of routers (`hops`); three or more a switch
namespace (tor); one host a NIC with nothing behind it. Each host's NIC gets its address and, across routers, a default
route. Placements whose hosts are emulated build it (hosts/base.py); the topology never does."""
from __future__ import annotations

from .steps import ROOT, PlacementHost


def build(topo: PlacementHost) -> None:
    """The emulated underlay between the hosts' namespaces (a placement whose hosts are emulated asks for it)."""
    mtu = topo.sc.underlay_mtu
    up = topo.ifname("u")
    ns = {label: node.netns for label, node in topo.nodes.items()}
    if len(topo.hosts) == 2 and topo.hops:
        _routers(topo, mtu)
    elif len(topo.hosts) == 2:
        topo.ip(ROOT, f"link add {up} netns {ns['h1']} type veth peer name {up} netns {ns['h2']}")
    elif len(topo.hosts) == 1:  # a NIC with nothing behind it, so direct attachments have a parent
        topo.ip(ROOT, f"link add {up} netns {ns['h1']} type veth peer name {topo.ifname('x')} netns {ns['h1']}")
        topo.ip("h1", f"link set {topo.ifname('x')} mtu {mtu} up")
    else:
        # The bridge first, so its ports' ifindexes differ from their peers' (each `u`, index 2 in its host):
        # a veth whose index equals its peer's gets its carrier through the kernel's linkwatch, which delays
        # such an event by up to 1 s, and the bridge forwards through that port only after it (every build
        # with 3 or more hosts lost its first ping to that second).
        tor = topo.ifname("tor")
        topo.ip(ROOT, f"link add {tor} netns {ns['tor']} type bridge")
        topo.ip("tor", f"link set {tor} mtu {mtu} up")
        for h in topo.hosts:
            port = topo.ifname(f"p{h.label[1:]}")
            topo.ip(ROOT, f"link add {up} netns {h.netns} type veth peer name {port} netns {ns['tor']}")
            topo.ip("tor", f"link set {port} mtu {mtu} master {tor} up")
    for h in topo.hosts:
        topo.ip(h.label, f"link set {up} mtu {mtu} up")
        if qdiscs := topo.sc.underlay_qdiscs(up):
            topo.batch("tc", h.label, *qdiscs)


def _routers(topo: PlacementHost, mtu: int) -> None:
    """h1 - r1 - ... - rN - h2: link k (0..N) is the subnet 10.250.k.0/24 (fd00:250:k::/64), its west end .1
    and its east end .2. Each router forwards and has a route to every subnet beyond its neighbours; the hosts
    get a default route (underlay_address). The hosts' NICs keep their name (u); a router's are w and e."""
    n, up = topo.hops, topo.ifname("u")
    for k in range(n + 1):
        west, wdev = ("h1", up) if k == 0 else (f"r{k}", topo.ifname("e"))
        east, edev = ("h2", up) if k == n else (f"r{k + 1}", topo.ifname("w"))
        a, b = topo.nodes[west].netns, topo.nodes[east].netns
        topo.ip(ROOT, f"link add {wdev} netns {a} type veth peer name {edev} netns {b}")
    for k in range(1, n + 1):
        w, e = topo.ifname("w"), topo.ifname("e")
        lines = [f"link set {w} mtu {mtu} up", f"link set {e} mtu {mtu} up",
                 f"addr add 10.250.{k - 1}.2/24 dev {w}", f"addr add fd00:250:{k - 1}::2/64 dev {w} nodad",
                 f"addr add 10.250.{k}.1/24 dev {e}", f"addr add fd00:250:{k}::1/64 dev {e} nodad"]
        for j in range(n + 1):
            if j < k - 1:
                lines += [f"route add 10.250.{j}.0/24 via 10.250.{k - 1}.1 dev {w} onlink",
                          f"route add fd00:250:{j}::/64 via fd00:250:{k - 1}::1 dev {w} onlink"]
            elif j > k:
                lines += [f"route add 10.250.{j}.0/24 via 10.250.{k}.2 dev {e} onlink",
                          f"route add fd00:250:{j}::/64 via fd00:250:{k}::2 dev {e} onlink"]
        topo.ip(f"r{k}", *lines)
    for k in range(1, n + 1):
        topo.run(f"r{k}", ["sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"])


def address(topo: PlacementHost, host: str, dev: str) -> None:
    """An emulated host's address; across routers (hops), also a default route to its neighbouring router."""
    topo.ip(host, f"addr add {topo.host_ip(host)}/24 dev {dev}",
            f"addr add {topo.nodes[host].v6}/64 dev {dev} nodad")
    if topo.hops and host in ("h1", "h2"):
        k = 0 if host == "h1" else topo.hops
        end = 2 if host == "h1" else 1  # the router's end of the host's link
        topo.ip(host, f"link set {dev} up", f"route add default via 10.250.{k}.{end} dev {dev} onlink",
                f"route add default via fd00:250:{k}::{end} dev {dev} onlink")
