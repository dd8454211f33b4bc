"""iproute2 batch lines applied over rtnetlink from this process, for the many small namespaces of a large topology.

Each `ip -n NS -batch -` process copies the machine's whole mount table into a mount namespace of its own (iproute2
remounts /sys for the namespace), and every namespace of the run is a mount under /run/netns: with 512 VMs the
processes cost far more than the kernel's work (7.9 s for a wave the kernel does in about 2 s). Here a netlink
socket is opened in each namespace with setns(2) on a worker thread (the thread returns to its own namespace at
once: only the socket stays), and the lines are sent as the same netlink requests `ip` would send.

The messages are packed here with struct, by hand, as the agent reads interface counters (agent.py): a netlink
library cost 0.8 s to import and 4-7 ms a namespace, more than a 16-pair build's whole VM wave by `ip`.

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
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

CLONE_NEWNET = 0x40000000
IFA_F_NODAD = 0x02
NUD_PERMANENT = 0x80
IFF_UP = 0x1
MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
NETNS_DIR = "/run/netns"

# rtnetlink message types, flags and attributes (linux/rtnetlink.h, if_link.h, if_addr.h, neighbour.h)
NLMSG_ERROR = 2
RTM_NEWLINK, RTM_GETLINK, RTM_NEWADDR, RTM_NEWNEIGH = 16, 18, 20, 28
NLM_F_REQUEST, NLM_F_ACK, NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x100, 0x200, 0x400
IFLA_IFNAME, IFLA_MTU, IFLA_MASTER, IFLA_LINKINFO = 3, 4, 10, 18
IFLA_INFO_KIND, IFLA_INFO_DATA, IFLA_BR_FORWARD_DELAY = 1, 2, 1
IFA_ADDRESS, IFA_LOCAL = 1, 2
NDA_DST, NDA_LLADDR = 1, 2


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
    """Whether this kernel offers rtnetlink sockets (Linux: always; the standard library is all this needs)."""
    return hasattr(socket, "AF_NETLINK")


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


class Refused(OSError):
    """The kernel answered a request with an error (errno, as `ip` reports it)."""


_libc = None
_local = threading.local()


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _socket_in(netns: str) -> socket.socket:
    """An rtnetlink socket of the namespace: this thread enters it, opens the socket and goes back."""
    if not hasattr(_local, "home"):
        _local.home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    fd = os.open(f"{NETNS_DIR}/{netns}", os.O_RDONLY)
    try:
        _setns(fd)
        try:
            return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        finally:
            _setns(_local.home)
    finally:
        os.close(fd)


def _attr(kind: int, data: bytes) -> bytes:
    """One netlink attribute (rtattr), padded to 4 bytes."""
    return struct.pack("=HH", 4 + len(data), kind) + data + b"\0" * (-len(data) % 4)


class Missing(LookupError):
    """A line names a device the namespace does not have."""


class _Rtnl:
    """One rtnetlink socket: each request waits for its answer (the first refusal stops the batch, as in `ip`)."""

    def __init__(self, sk: socket.socket):
        self.sk, self.seq = sk, 0
        self.known: dict[str, int] = {}  # device name -> ifindex (no line renames a device)

    def talk(self, kind: int, flags: int, body: bytes) -> bytes:
        """Send one request; returns the answer's payload (b'' for an acknowledgement), raises Refused."""
        self.seq += 1
        self.sk.send(struct.pack("=IHHII", 16 + len(body), kind, NLM_F_REQUEST | flags, self.seq, 0) + body)
        while True:
            data, pos = self.sk.recv(1 << 16), 0
            while pos + 16 <= len(data):
                length, got, _, seq, _ = struct.unpack_from("=IHHII", data, pos)
                if seq == self.seq:
                    if got != NLMSG_ERROR:
                        return data[pos + 16:pos + length]
                    err = -struct.unpack_from("=i", data, pos + 16)[0]
                    if err:
                        raise Refused(err, os.strerror(err))
                    return b""
                pos += max(16, (length + 3) & ~3)

    def index(self, dev: str) -> int:
        """The device's ifindex; Missing if there is no such device."""
        if dev not in self.known:
            try:
                reply = self.talk(RTM_GETLINK, 0, struct.pack("=BxHiII", 0, 0, 0, 0, 0) +
                                  _attr(IFLA_IFNAME, dev.encode() + b"\0"))
            except Refused:
                raise Missing(dev) from None
            self.known[dev] = struct.unpack_from("=i", reply, 4)[0]
        return self.known[dev]

    def apply(self, op: Op) -> None:
        if op.bridge:  # link add DEV type bridge [forward_delay N]
            data = _attr(IFLA_BR_FORWARD_DELAY, struct.pack("=I", op.forward_delay)) \
                if op.forward_delay is not None else b""
            info = _attr(IFLA_INFO_KIND, b"bridge") + (_attr(IFLA_INFO_DATA, data) if data else b"")
            self.talk(RTM_NEWLINK, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, struct.pack("=BxHiII", 0, 0, 0, 0, 0) +
                      _attr(IFLA_IFNAME, op.dev.encode() + b"\0") + _attr(IFLA_LINKINFO, info))
        elif op.lladdr is not None:  # neigh replace ... nud permanent
            family, raw = _address(op.address)
            self.talk(RTM_NEWNEIGH, NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
                      struct.pack("=BxxxiHBB", family, self.index(op.dev), NUD_PERMANENT, 0, 0) +
                      _attr(NDA_DST, raw) + _attr(NDA_LLADDR, bytes.fromhex(op.lladdr.replace(":", ""))))
        elif op.address is not None:  # addr add: IFA_LOCAL and IFA_ADDRESS, scope global, as `ip` sends them
            family, raw = _address(op.address)
            self.talk(RTM_NEWADDR, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
                      struct.pack("=BBBBI", family, op.prefixlen, IFA_F_NODAD if op.nodad else 0, 0,
                                  self.index(op.dev)) + _attr(IFA_LOCAL, raw) + _attr(IFA_ADDRESS, raw))
        else:
            self._link_set(op)

    def _link_set(self, op: Op) -> None:
        """One request, as `ip` sends it; the state's flag is changed only if the line names it."""
        attrs = _attr(IFLA_MTU, struct.pack("=I", op.mtu)) if op.mtu is not None else b""
        attrs += _attr(IFLA_MASTER, struct.pack("=I", self.index(op.master))) if op.master else b""
        up = IFF_UP if op.state == "up" else 0
        self.talk(RTM_NEWLINK, NLM_F_ACK,
                  struct.pack("=BxHiII", 0, 0, self.index(op.dev), up, IFF_UP if op.state else 0) + attrs)


def _address(text: str) -> tuple[int, bytes]:
    addr = ipaddress.ip_address(text)
    return (socket.AF_INET6 if addr.version == 6 else socket.AF_INET), addr.packed


def apply(netns: str, ops: list[Op]) -> None:
    """Send one namespace's operations in order; the first refusal raises NetlinkError naming its line."""
    try:
        sk = _socket_in(netns)
    except OSError as exc:
        raise NetlinkError(netns, ops[0].line if ops else "", 1, f"cannot enter the namespace: {exc.strerror}") \
            from None
    rtnl = _Rtnl(sk)
    with sk:
        for n, op in enumerate(ops, 1):
            try:
                rtnl.apply(op)
            except Missing as exc:
                raise NetlinkError(netns, op.line, n, f"Cannot find device \"{exc.args[0]}\"") from None
            except Refused as exc:
                raise NetlinkError(netns, op.line, n, exc.strerror) from None


def apply_many(batches: list[tuple[str, list[Op]]], workers: int = 4) -> list[str]:
    """Each namespace's operations, a few namespaces at once (the kernel work of two cores); the errors, one line
    each (empty: all applied)."""
    def one(item: tuple[str, list[Op]]) -> str | None:
        try:
            apply(*item)
        except NetlinkError as exc:
            return str(exc)
        return None
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return [e for e in pool.map(one, batches) if e]
