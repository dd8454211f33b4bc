"""iproute2 batch lines applied over rtnetlink from this process, for the many small namespaces of a large topology.

Each `ip -n NS -batch -` process copies the machine's whole mount table into a mount namespace of its own (iproute2
remounts /sys for the namespace), and every namespace of the run is a mount under /run/netns: with 512 VMs the
processes cost far more than the kernel's work (7.9 s for a wave the kernel does in about 2 s). Here a netlink
socket is opened in each namespace with setns(2) on a worker thread (the thread returns to its own namespace at
once: only the socket stays), and the lines are sent as the same netlink requests `ip` would send.

The messages are pyroute2's (pinned in pyproject.toml): its message classes (ifinfmsg, ifaddrmsg, ndmsg) encode
each request and its rtnetlink parser (MarshalRtnl) decodes each answer, a refusal as its NetlinkError; its
netns.setns enters the namespace. The socket is a plain AF_NETLINK one, each request waiting for its acknowledgement
(the first refusal stops the batch, as in `ip`): pyroute2's own sockets run an asyncio event loop each. For a VM's 6
lines, 128 namespaces, alternated at load 2-3: 1.1 ms a namespace here (one thread; 1.7 ms with 4 contending for the
interpreter's lock), 1.8-2.2 ms through pyroute2's IPRSocket on the same socket (4 threads), 0.4-0.8 ms with the
messages packed by hand with struct as before (4 threads). A device's index is asked by name with if_nametoindex(3)
while the thread is in the namespace (decoding a netlink lookup's answer costs 0.2 ms); a device a line creates (a
bridge) is looked up over netlink. Importing pyroute2 costs about 0.15-0.2 s (any of its modules imports the whole
package), paid once, by a process's first build that uses netlink.

Only a small grammar is understood: `link set DEV [mtu N] [master DEV] [up|down]`, `link add DEV type bridge
[forward_delay N]`, `addr add ADDR/LEN dev DEV [nodad]` and `neigh replace ADDR lladdr MAC dev DEV nud permanent`: the
lines of a VM's namespace, and of an emulated host's or switch's bridge and its ports. `parse` returns None for a
batch with any other line, and the caller runs that batch with `ip -batch` as printed by `plan`; a batch parsed here
does exactly what its printed lines say.
"""
from __future__ import annotations

import ctypes
import ipaddress
import os
import re
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
NETNS_DIR = "/run/netns"


@dataclass(frozen=True)
class Op:
    line: str                  # the batch line as printed
    dev: str
    mtu: int | None = None
    state: str | None = None   # up | down
    address: str | None = None
    prefixlen: int = 0
    nodad: bool = False
    lladdr: str | None = None  # a permanent neighbour: address -> lladdr
    master: str | None = None  # link set ... master DEV
    bridge: bool = False       # link add DEV type bridge
    forward_delay: int | None = None


def available() -> bool:
    """Whether netlink can be used here: a kernel with rtnetlink sockets (Linux) and pyroute2 installed (pinned in
    pyproject.toml; an older environment without it builds with `ip`). Imports pyroute2: asked only by a wave that
    has batches to send."""
    if not hasattr(socket, "AF_NETLINK"):
        return False
    try:
        _pyroute2()
    except ImportError:
        return False
    return True


def parse(lines: Sequence[str]) -> list[Op] | None:
    """The lines as operations, or None if any line is outside the grammar (then `ip -batch` runs them)."""
    ops = []
    for line in lines:
        op = _parse_line(line)
        if op is None:
            return None
        ops.append(op)
    return ops


def _parse_line(line: str) -> Op | None:
    w = line.split()
    if w[:2] == ["link", "set"] and len(w) >= 4:
        return _link_set(line, w[2], w[3:])
    if w[:2] == ["link", "add"] and w[3:5] == ["type", "bridge"] and len(w) in (5, 7):
        if len(w) == 5:
            return Op(line, w[2], bridge=True)
        return Op(line, w[2], bridge=True, forward_delay=int(w[6])) if w[5] == "forward_delay" and \
            w[6].isdigit() else None
    if w[:2] == ["addr", "add"] and len(w) in (5, 6) and w[3] == "dev" and w[5:] in ([], ["nodad"]):
        try:
            iface = ipaddress.ip_interface(w[2])
        except ValueError:
            return None
        if "/" not in w[2]:
            return None
        return Op(line, w[4], address=str(iface.ip), prefixlen=iface.network.prefixlen, nodad=w[5:] == ["nodad"])
    if w[:2] == ["neigh", "replace"] and len(w) == 9 and (w[3], w[5], w[7:]) == ("lladdr", "dev", ["nud", "permanent"]):
        try:
            addr = ipaddress.ip_address(w[2])
        except ValueError:
            return None
        return Op(line, w[6], address=str(addr), lladdr=w[4]) if MAC.match(w[4]) else None
    return None


def _link_set(line: str, dev: str, rest: list[str]) -> Op | None:
    """`link set DEV [mtu N] [master DEV] [up|down]`, the words in any order, each once at most (as `ip` takes them)."""
    got: dict = {}
    while rest:
        if rest[0] in ("mtu", "master") and len(rest) > 1 and rest[0] not in got:
            if rest[0] == "mtu" and not rest[1].isdigit():
                return None
            got[rest[0]], rest = (int(rest[1]) if rest[0] == "mtu" else rest[1]), rest[2:]
        elif rest[0] in ("up", "down") and "state" not in got:
            got["state"], rest = rest[0], rest[1:]
        else:
            return None
    return Op(line, dev, mtu=got.get("mtu"), state=got.get("state"), master=got.get("master"))


class NetlinkError(RuntimeError):
    def __init__(self, netns: str, line: str, n: int, reason: str):
        self.netns, self.line, self.n = netns, line, n
        super().__init__(f"[{netns}] netlink, as `ip -n {netns} -batch -` line {n} `{line}`: {reason}")


class Missing(LookupError):
    """A line names a device the namespace does not have."""


_libc = None
_local = threading.local()
_rtnl = None  # pyroute2's modules, imported by the first build that sends netlink requests


def _pyroute2():
    """pyroute2's rtnetlink message classes, constants, parser and setns; imported once, the first time a build
    uses netlink (a build whose batches all run as `ip` processes does not pay for it). Importing any of its modules
    runs the package's __init__, which imports all of pyroute2: about 0.2 s, paid by a process's first such build."""
    global _rtnl, _libc
    if _rtnl is None:
        from types import SimpleNamespace

        from pyroute2 import netns
        from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST, NLMSG_ERROR
        from pyroute2.netlink.exceptions import NetlinkError as Refused
        from pyroute2.netlink.rtnl import RTM_GETLINK, RTM_NEWADDR, RTM_NEWLINK, RTM_NEWNEIGH
        from pyroute2.netlink.rtnl.ifaddrmsg import IFA_F_NODAD, ifaddrmsg
        from pyroute2.netlink.rtnl.ifinfmsg import IFF_UP, ifinfmsg
        from pyroute2.netlink.rtnl.marshal import MarshalRtnl
        from pyroute2.netlink.rtnl.ndmsg import NUD_PERMANENT, ndmsg
        _libc = ctypes.CDLL(None, use_errno=True)  # the process's libc, for netns.setns (no search for its file)
        _rtnl = SimpleNamespace(
            netns=netns, Refused=Refused, MarshalRtnl=MarshalRtnl, ifinfmsg=ifinfmsg, ifaddrmsg=ifaddrmsg, ndmsg=ndmsg,
            NLM_F_ACK=NLM_F_ACK, NLM_F_CREATE=NLM_F_CREATE, NLM_F_EXCL=NLM_F_EXCL, NLM_F_REPLACE=NLM_F_REPLACE,
            NLM_F_REQUEST=NLM_F_REQUEST, NLMSG_ERROR=NLMSG_ERROR, RTM_GETLINK=RTM_GETLINK, RTM_NEWADDR=RTM_NEWADDR,
            RTM_NEWLINK=RTM_NEWLINK, RTM_NEWNEIGH=RTM_NEWNEIGH, IFA_F_NODAD=IFA_F_NODAD, IFF_UP=IFF_UP,
            NUD_PERMANENT=NUD_PERMANENT)
    return _rtnl


def _socket_in(netns: str, devs: set[str]) -> tuple[socket.socket, dict[str, int]]:
    """An rtnetlink socket of the namespace, and the ifindex of each of these devices it has: this thread enters the
    namespace, opens the socket, asks the kernel the indexes by name (if_nametoindex(3), an ioctl: a netlink lookup's
    reply costs 0.2 ms to decode) and goes back. A device a line creates is looked up over netlink when named."""
    setns = _pyroute2().netns.setns
    if not hasattr(_local, "home"):
        _local.home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    fd = os.open(f"{NETNS_DIR}/{netns}", os.O_RDONLY)
    try:
        setns(fd, flags=0, libc=_libc)
        try:
            sk = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            known = {}
            for dev in devs:
                try:
                    known[dev] = socket.if_nametoindex(dev)
                except OSError:
                    pass
            return sk, known
        finally:
            setns(_local.home, flags=0, libc=_libc)
    finally:
        os.close(fd)


class _Rtnl:
    """One rtnetlink socket: each request, encoded by pyroute2's message class, waits for its answer, decoded by
    pyroute2's rtnetlink parser (the first refusal stops the batch, as in `ip`)."""

    def __init__(self, sk: socket.socket, known: dict[str, int]):
        self.sk, self.seq, self.lib = sk, 0, _pyroute2()
        self.parser = self.lib.MarshalRtnl()
        self.known = known  # device name -> ifindex (no line renames or deletes a device)

    def talk(self, msg, kind: int, flags: int):
        """Send one request; returns the answer (None for an acknowledgement), raises pyroute2's NetlinkError."""
        self.seq += 1
        msg["header"].update(type=kind, flags=self.lib.NLM_F_REQUEST | flags, sequence_number=self.seq, pid=0)
        msg.encode()
        self.sk.send(msg.data)
        while True:
            for reply in self.parser.parse(self.sk.recv(1 << 16)):
                if reply["header"]["sequence_number"] == self.seq:
                    if reply["header"]["error"] is not None:
                        raise reply["header"]["error"]
                    return None if reply["header"]["type"] == self.lib.NLMSG_ERROR else reply

    def index(self, dev: str) -> int:
        """The device's ifindex; Missing if there is no such device."""
        if dev not in self.known:
            try:
                reply = self.talk(_msg(self.lib.ifinfmsg, attrs=[("IFLA_IFNAME", dev)]), self.lib.RTM_GETLINK, 0)
            except self.lib.Refused:
                raise Missing(dev) from None
            self.known[dev] = reply["index"]
        return self.known[dev]

    def apply(self, op: Op) -> None:
        lib = self.lib
        if op.bridge:  # link add DEV type bridge [forward_delay N]
            info = [("IFLA_INFO_KIND", "bridge")]
            if op.forward_delay is not None:
                info.append(("IFLA_INFO_DATA", {"attrs": [("IFLA_BR_FORWARD_DELAY", op.forward_delay)]}))
            self.talk(_msg(lib.ifinfmsg, attrs=[("IFLA_IFNAME", op.dev), ("IFLA_LINKINFO", {"attrs": info})]),
                      lib.RTM_NEWLINK, lib.NLM_F_ACK | lib.NLM_F_CREATE | lib.NLM_F_EXCL)
        elif op.lladdr is not None:  # neigh replace ... nud permanent
            self.talk(_msg(lib.ndmsg, family=_family(op.address), ifindex=self.index(op.dev), state=lib.NUD_PERMANENT,
                           attrs=[("NDA_DST", op.address), ("NDA_LLADDR", op.lladdr)]),
                      lib.RTM_NEWNEIGH, lib.NLM_F_ACK | lib.NLM_F_CREATE | lib.NLM_F_REPLACE)
        elif op.address is not None:  # addr add: IFA_LOCAL and IFA_ADDRESS, scope global, as `ip` sends them
            self.talk(_msg(lib.ifaddrmsg, family=_family(op.address), prefixlen=op.prefixlen,
                           flags=lib.IFA_F_NODAD if op.nodad else 0, index=self.index(op.dev),
                           attrs=[("IFA_LOCAL", op.address), ("IFA_ADDRESS", op.address)]),
                      lib.RTM_NEWADDR, lib.NLM_F_ACK | lib.NLM_F_CREATE | lib.NLM_F_EXCL)
        else:
            self._link_set(op)

    def _link_set(self, op: Op) -> None:
        """One request, as `ip` sends it; the state's flag is changed only if the line names it."""
        attrs = [("IFLA_MTU", op.mtu)] if op.mtu is not None else []
        attrs += [("IFLA_MASTER", self.index(op.master))] if op.master else []
        iff_up = self.lib.IFF_UP
        self.talk(_msg(self.lib.ifinfmsg, index=self.index(op.dev), flags=iff_up if op.state == "up" else 0,
                       change=iff_up if op.state else 0, attrs=attrs),
                  self.lib.RTM_NEWLINK, self.lib.NLM_F_ACK)


def _msg(cls, **fields):
    """A pyroute2 message of this class with these fields and attributes (its header is set when it is sent)."""
    msg = cls()
    msg.update(fields)
    return msg


def _family(address: str) -> int:
    return socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET


def apply(netns: str, ops: list[Op]) -> None:
    """Send one namespace's operations in order; the first refusal raises NetlinkError naming its line."""
    try:
        sk, known = _socket_in(netns, {d for op in ops for d in (op.dev, op.master) if d})
    except OSError as exc:
        raise NetlinkError(netns, ops[0].line if ops else "", 1,
                           f"cannot enter the namespace: {os.strerror(exc.errno)}") from None
    rtnl = _Rtnl(sk, known)
    with sk:
        for n, op in enumerate(ops, 1):
            try:
                rtnl.apply(op)
            except Missing as exc:
                raise NetlinkError(netns, op.line, n, f"Cannot find device \"{exc.args[0]}\"") from None
            except rtnl.lib.Refused as exc:  # as `ip` reports it: the errno's text
                raise NetlinkError(netns, op.line, n, os.strerror(exc.code)) from None


def apply_many(batches: list[tuple[str, list[Op]]], workers: int = 1) -> list[str]:
    """Each namespace's operations, one namespace after another on a worker thread; the errors, one line each
    (empty: all applied). Encoding and decoding pyroute2's messages is Python work that holds the interpreter's lock:
    more threads only contend for it (64 pairs' VM wave, 6 alternating builds: median 0.20 s with one thread, 0.25 s
    with 4; 256 pairs' about 1 s either way)."""
    def one(item: tuple[str, list[Op]]) -> str | None:
        try:
            apply(*item)
        except NetlinkError as exc:
            return str(exc)
        return None
    _pyroute2()  # imported here, before the threads
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return [e for e in pool.map(one, batches) if e]
