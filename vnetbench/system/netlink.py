"""iproute2 batch lines applied over netlink from this process (pyroute2), for the many small namespaces of a large
topology.

Each `ip -n NS -batch -` process copies the machine's whole mount table into a mount namespace of its own (iproute2
remounts /sys for the namespace), and every namespace of the run is a mount under /run/netns: with 512 VMs the
processes cost far more than the kernel's work (7.9 s for a wave the kernel does in about 2 s). Here a netlink
socket is opened in each namespace with setns(2) on a worker thread (the thread returns to its own namespace at
once: only the socket stays), and the lines are sent as the same netlink requests `ip` would send.

Only a small grammar is understood: `link set DEV [mtu N] [up|down]`, `addr add ADDR/LEN dev DEV [nodad]` and
`neigh replace ADDR lladdr MAC dev DEV nud permanent`, the lines of a VM's namespace. `parse` returns None for a batch
with any other line, and the caller runs that batch with `ip -batch` as printed by `plan`; a batch parsed here does
exactly what its printed lines say.
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

CLONE_NEWNET = 0x40000000
IFA_F_NODAD = 0x02
NUD_PERMANENT = 0x80
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


def available() -> bool:
    """Whether pyroute2 is installed (pinned in pyproject.toml; an older environment without it builds with `ip`)."""
    try:
        import pyroute2  # noqa: F401
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
        dev, rest, mtu, state = w[2], w[3:], None, None
        while rest:
            if rest[0] == "mtu" and len(rest) > 1 and rest[1].isdigit():
                mtu, rest = int(rest[1]), rest[2:]
            elif rest[0] in ("up", "down"):
                state, rest = rest[0], rest[1:]
            else:
                return None
        return Op(line, dev, mtu=mtu, state=state)
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


class NetlinkError(RuntimeError):
    def __init__(self, netns: str, line: str, n: int, reason: str):
        self.netns, self.line, self.n = netns, line, n
        super().__init__(f"[{netns}] netlink, as `ip -n {netns} -batch -` line {n} `{line}`: {reason}")


_libc = None
_local = threading.local()


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _socket_in(netns: str):
    """An rtnetlink socket of the namespace: this thread enters it, opens the socket and goes back."""
    from pyroute2 import IPRoute
    if not hasattr(_local, "home"):
        _local.home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    fd = os.open(f"{NETNS_DIR}/{netns}", os.O_RDONLY)
    try:
        _setns(fd)
        try:
            return IPRoute()
        finally:
            _setns(_local.home)
    finally:
        os.close(fd)


def apply(netns: str, ops: list[Op]) -> None:
    """Send one namespace's operations in order; the first refusal raises NetlinkError naming its line."""
    from pyroute2.netlink.exceptions import NetlinkError as Refused
    try:
        ipr = _socket_in(netns)
    except OSError as exc:
        raise NetlinkError(netns, ops[0].line if ops else "", 1, f"cannot enter the namespace: {exc.strerror}") \
            from None
    index: dict[str, int] = {}
    try:
        for n, op in enumerate(ops, 1):
            try:
                if op.dev not in index:
                    found = ipr.link_lookup(ifname=op.dev)
                    if not found:
                        raise NetlinkError(netns, op.line, n, f"Cannot find device \"{op.dev}\"")
                    index[op.dev] = found[0]
                if op.lladdr is not None:
                    ipr.neigh("replace", dst=op.address, lladdr=op.lladdr, ifindex=index[op.dev], state=NUD_PERMANENT,
                              family=socket.AF_INET6 if ":" in op.address else socket.AF_INET)
                elif op.address is not None:
                    ipr.addr("add", index=index[op.dev], address=op.address, prefixlen=op.prefixlen,
                             **({"flags": IFA_F_NODAD} if op.nodad else {}))
                else:
                    ipr.link("set", index=index[op.dev], **({"mtu": op.mtu} if op.mtu else {}),
                             **({"state": op.state} if op.state else {}))
            except Refused as exc:
                raise NetlinkError(netns, op.line, n, os.strerror(exc.code) if exc.code else str(exc)) from None
    finally:
        ipr.close()


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
