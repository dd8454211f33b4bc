"""Run a command with a private /run: `python -m vnetbench.system.privrun DIR -- argv...`

Some daemons and their control tools use fixed paths under /run (charon's pid file /run/charon.pid,
wireguard-go's and wg's UAPI socket /run/wireguard/<if>.sock), so two instances on one machine collide. This
helper enters a new mount namespace, makes every mount in it private (nothing propagates back to the machine),
bind-mounts DIR on /run and replaces itself by argv (exec, no fork: the pid is the daemon's, no shell involved).
Inside, DIR's files are seen under /run. Used as `ip netns exec NS python -m vnetbench.system.privrun DIR -- argv`.
The mount namespace disappears with the last process in it; nothing is left to unmount.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def enter(directory: str) -> None:
    """Give this process (and what it execs) a private mount namespace with `directory` on /run."""
    libc = _libc()
    src = os.path.realpath(directory)
    if not os.path.isdir(src):
        raise FileNotFoundError(f"{directory} is not a directory")
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(libc.mount(src.encode(), b"/run", None, MS_BIND, None), f"mount --bind {src} /run")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m vnetbench.system.privrun DIR -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    try:
        enter(argv[0])
        os.execvp(argv[2], argv[2:])
    except OSError as exc:
        print(f"privrun: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
