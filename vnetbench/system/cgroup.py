"""The run's own cgroup: every process the run starts is in it, wherever the process ends up, so the CPU the run's
work took is one counter.

The run's process moves itself into a new cgroup of the unified (v2) hierarchy, `vnetbench-<prefix>` under the one it
was in; every process it starts from then on inherits it and stays in it: User-Mode Linux guest kernels and each host
process a guest consists of, servers kept up between trials, daemons that detach and are reparented to init. The
group's `cpu.stat` (usage_usec) adds up their CPU, the dead ones' included: one file read (16 us), where walking
/proc for the run's processes took 1.5 ms of CPU per pass with 100 processes on the machine (measured here), and the
load watch reads 20 times a second.

No controller is enabled and no limit set: the group only counts. The kernel keeps cpu.stat's usage in every v2
cgroup, whether the cpu controller is enabled or not: the same files serve a pure v2 machine (Debian 12's default,
/sys/fs/cgroup, the run's process in a session's or a service's cgroup) and a hybrid one with the unified hierarchy
mounted beside the v1 ones (/sys/fs/cgroup/unified, as here). Without a writable v2 hierarchy (a pure v1 machine, a
container with a read-only /sys/fs/cgroup) `join` says why not, and the load watch counts what it did before: this
process and the children it has reaped.

The group is recorded in the run's ledger before it is made; at the run's end, or by `clean` after a dead run, its
processes (none, normally) move back to the parent and the directory goes.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

NAME = "vnetbench-"  # + the run's prefix
ORPHAN_AGE_S = 10    # an empty group younger than this may be a run's that is joining it now (microseconds)


class Unavailable(RuntimeError):
    """No cgroup can be made here (the reason is the message)."""


def _unified_mount(mountinfo: str) -> tuple[Path, str] | None:
    """(mount point, root of the hierarchy it shows) of the first cgroup2 mount."""
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        if rest.split()[:1] == ["cgroup2"]:
            f = fields.split()
            return Path(f[4]), f[3]
    return None


def current(pid: int | str = "self") -> Path:
    """A process's (this one's) cgroup directory in the unified hierarchy; Unavailable if there is none."""
    try:
        mount = _unified_mount(Path("/proc/self/mountinfo").read_text())
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError as exc:
        raise Unavailable(f"cannot read the process's cgroups: {exc}") from None
    if mount is None:
        raise Unavailable("no cgroup v2 hierarchy is mounted (a cgroup v1 only machine)")
    where = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    point, root = mount
    if where is None or not (where == root or where.startswith(root.rstrip("/") + "/")):
        raise Unavailable("this process's cgroup is not under the mounted v2 hierarchy")
    return point / where[len(root):].lstrip("/")


def path_for(prefix: str) -> Path:
    return current() / f"{NAME}{prefix}"


def join(ledger) -> Path:
    """Make the run's cgroup (recorded in its ledger first) and move this process into it; returns its directory.
    Unavailable (with nothing left behind) when it cannot be made here."""
    path = path_for(ledger.prefix)
    ledger.record("cgroup", str(path))
    try:
        path.mkdir()
        (path / "cgroup.procs").write_text(str(os.getpid()))  # every thread of the process moves with it
        usage_s(path)
    except OSError as exc:
        dissolve(str(path), ledger.prefix)
        ledger.forget("cgroup", str(path))
        raise Unavailable(f"cannot make the cgroup {path}: {exc.strerror or exc}") from None
    return path


def usage_s(path: Path) -> float:
    """CPU seconds every process that was ever in the group has used there (cpu.stat usage_usec)."""
    with open(path / "cpu.stat") as fh:
        for line in fh:
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    raise OSError(f"{path}/cpu.stat has no usage_usec")


def dissolve(name: str, prefix: str) -> str | None:
    """Move every process still in the run's cgroup `name` (this one at the run's end; normally no other) to its
    parent and remove it. Returns why it is still there, or None. Only a directory named for the run is touched."""
    path = Path(name)
    if not path.is_absolute() or path.name != f"{NAME}{prefix}" or not path.is_dir():
        return None
    procs = path.parent / "cgroup.procs"
    for _ in range(20):  # a process forked meanwhile joins the group: go round again
        try:
            pids = (path / "cgroup.procs").read_text().split()
        except OSError:
            return None  # gone already
        for pid in pids:
            try:
                procs.write_text(pid)
            except ProcessLookupError:
                pass  # ended meanwhile
            except OSError as exc:
                return f"cgroup {path}: cannot move process {pid} out: {exc.strerror or exc}"
        try:
            path.rmdir()
            return None
        except FileNotFoundError:
            return None
        except OSError:
            time.sleep(0.05)  # still populated: an exiting process, or one forked as we moved the others
    return f"cgroup {path} still has processes in it"


def orphans(ledgers: set[str]) -> list[tuple[str, Path]]:
    """(prefix, directory) of the empty run groups beside the one this process would make whose run has no ledger
    here (`ledgers`: the prefixes that have one), made over ORPHAN_AGE_S ago: a run whose ledger was wiped after a
    kill -9 leaves one. A live run's group is never empty (its own process is in it)."""
    try:
        here = current()
    except Unavailable:
        return []
    found = []
    for path in here.glob(f"{NAME}vb*"):
        prefix = path.name[len(NAME):]
        try:
            empty = not (path / "cgroup.procs").read_text().strip()
            old = time.time() - path.stat().st_mtime > ORPHAN_AGE_S
        except OSError:
            continue
        if empty and old and prefix not in ledgers:
            found.append((prefix, path))
    return found
