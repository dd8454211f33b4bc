"""The cleanup ledger: every object a run creates is written here *before* it is created.

Each run owns a directory <state>/<prefix>/ holding `owner.json` (pid and kernel start time of the run's process,
so a reused pid is not mistaken for a live run), `objects.jsonl` (append-only, written before each creation) and `work/` (configs,
sockets, keys). `clean` removes the objects of runs whose owner is gone, in reverse order of creation, and only those.
"""
from __future__ import annotations

import ctypes
import json
import os
import secrets
import shutil
import signal
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import cgroup

DEFAULT_STATE_DIR = "/run/vnetbench"
PREFIX_LEN = 6  # "vb" + 4 hex digits: leaves 9 characters of a 15-character interface name

# What visits another machine a run touched, by the kind of ledger object ("host": (entry, prefix, dry_run) ->
# (removed, why pending or None)); a backend registers one per kind of record it writes (a lab's "host", a cloud's
# server) when it loads: the ledger, the lowest layer, knows no backend.
RemoteCleaner = Callable[[dict, str, bool], tuple[list[str], "str | None"]]
REMOTE_CLEANERS: dict[str, RemoteCleaner] = {}
REMOTE_KINDS = {"host"}  # kept pending, not dropped, while no backend that reaches them is loaded


def state_dir() -> Path:
    return Path(os.environ.get("VNETBENCH_STATE_DIR", DEFAULT_STATE_DIR))


def process_start_time(pid: int) -> int | None:
    """Kernel start time of a process in clock ticks, or None if it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: fields start after the last ')'.
    return int(raw.rsplit(")", 1)[1].split()[19])


def _alive(pid: int | None, start: int | None) -> bool:
    # Without a start time a pid proves nothing (it may have been reused): treat it as gone.
    return pid is not None and start is not None and process_start_time(pid) == start


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def identity() -> dict:
    """Who owns a run: the boot of the kernel and the pid namespace its process lives in (a pid and start time
    mean something only there: cloned machines share a hostname and often a machine-id, never a boot id;
    containers share a boot id, not a pid namespace), and the process itself."""
    me = os.getpid()
    try:
        pidns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pidns = None
    return {"boot": _read("/proc/sys/kernel/random/boot_id"), "pidns": pidns, "pid": me,
            "start": process_start_time(me), "created": time.time()}


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class LedgerWarning(UserWarning):
    """A line of a run's ledger that is not a record of ours: skipped (`clean` says so and goes on)."""


def _entry(line: str) -> tuple[dict | None, str]:
    """A ledger line as its record, or (None, why it is not one)."""
    try:
        e = json.loads(line)
    except json.JSONDecodeError:
        return None, "not JSON (a write cut short by kill -9, or not written by vnetbench)"
    if not isinstance(e, dict) or e.get("op") not in ("add", "del") \
            or not isinstance(e.get("kind"), str) or not isinstance(e.get("name"), str):
        return None, "not an add or del record with a kind and a name"
    if any(e.get(k) is not None and not _int(e[k]) for k in ("pid", "start")):
        return None, "its pid or start time is not a whole number"
    return e, ""


def owner_state(owner, remote: bool = False) -> tuple[str, str]:
    """("alive" | "dead" | "unknown", why) of a run's owner record. "unknown": it cannot be checked from here (not
    an owner record, or a process of another boot or pid namespace than ours): such a run is left alone. `remote`:
    a run found on a testbed host, whose owner may be any controller (the hostname proves nothing); a local run
    directory of another boot is a dead run's (this machine rebooted)."""
    if not isinstance(owner, dict) or not _int(owner.get("pid")):
        return "unknown", "its owner.json is not a vnetbench owner record"
    me = identity()
    who = f" ({owner['controller']})" if isinstance(owner.get("controller"), str) else ""
    if remote and (owner.get("boot") is None or owner.get("pidns") is None):
        return "unknown", f"its owner record{who} does not say where its process runs"
    if owner.get("boot") is not None and owner["boot"] != me["boot"]:
        return ("unknown", f"it was started by another machine, or before this one rebooted{who}") if remote \
            else ("dead", "this machine has rebooted since")
    if owner.get("pidns") is not None and owner["pidns"] != me["pidns"]:
        return "unknown", f"its process is in another pid namespace{who}"
    alive = _int(owner.get("start")) and process_start_time(owner["pid"]) == owner["start"]
    return ("alive", "still running") if alive else ("dead", "its process is gone")


@dataclass(frozen=True)
class Obj:
    kind: str  # netns | process | dir | cgroup (the run's own) | host (a testbed machine the run touched: its objects
    #            are in its own ledger)
    name: str
    pid: int | None = None
    start: int | None = None
    extra: dict | None = field(default=None, compare=False, hash=False)  # how to reach a host


class Ledger:
    """The record of one run's objects."""

    def __init__(self, prefix: str, root: Path | None = None):
        self.prefix = prefix
        self.dir = (root or state_dir()) / prefix
        self.work = self.dir / "work"

    @classmethod
    def create(cls) -> "Ledger":
        root = state_dir()
        root.mkdir(parents=True, exist_ok=True)
        taken = set(_netns_names())
        while True:
            prefix = "vb" + secrets.token_hex(2)
            if (root / prefix).exists() or any(n.startswith(prefix) for n in taken):
                continue
            ledger = cls(prefix, root)
            ledger.dir.mkdir(mode=0o700)
            ledger.work.mkdir(mode=0o700)
            (ledger.dir / "owner.json").write_text(json.dumps(identity()))
            return ledger

    def _append_many(self, entries: list[dict]) -> None:
        with open(self.dir / "objects.jsonl", "ab+") as fh:
            # A line torn by a kill -9 must not swallow the next record: start on a fresh line.
            torn = False
            if fh.seek(0, os.SEEK_END) > 0:
                fh.seek(-1, os.SEEK_END)
                torn = fh.read(1) != b"\n"
            fh.write(("\n" if torn else "").encode() + "".join(json.dumps(e) + "\n" for e in entries).encode())
            # Flushed to the kernel, not fsynced: a killed run cannot lose what write() handed over, and a machine
            # crash takes the namespaces and processes with it, so there is nothing left to clean.
            fh.flush()

    def _append(self, entry: dict) -> None:
        self._append_many([entry])

    def record(self, kind: str, name: str, **extra) -> None:
        self._append({"op": "add", "kind": kind, "name": name, **extra})

    def record_many(self, objs: list[dict]) -> None:
        """Several objects in one write: a topology records all its namespaces before creating any."""
        self._append_many([{"op": "add", **o} for o in objs])

    def forget_many(self, objs: list[tuple[str, str]]) -> None:
        self._append_many([{"op": "del", "kind": k, "name": n} for k, n in objs])

    def record_process(self, pid: int, name: str) -> None:
        self.record("process", name, pid=pid, start=process_start_time(pid))

    def forget(self, kind: str, name: str) -> None:
        self._append({"op": "del", "kind": kind, "name": name})

    def objects(self) -> list[Obj]:
        """Objects recorded and not yet removed, in creation order."""
        path = self.dir / "objects.jsonl"
        live: dict[tuple[str, str], Obj] = {}
        if path.exists():
            # every record ends with its newline: a last line without one is an append not finished when read (a
            # live run's other thread mid-write: a read sees part of a write across a page), or one kill -9 cut
            # short; its object was not made yet either way, so it is skipped, silently
            lines = path.read_text(errors="replace").split("\n")[:-1]
            for n, line in enumerate(lines, 1):
                e, why = _entry(line)
                if e is None:
                    # a line torn by kill -9 mid-write that a later append ended, or one of another hand: a crash
                    # here left every run uncleaned, so it is skipped, and said
                    if line.strip():
                        warnings.warn(f"run {self.prefix}: line {n} of {path} skipped: {why}", LedgerWarning)
                    continue
                key = (e["kind"], e["name"])
                if e["op"] == "add":
                    live[key] = Obj(e["kind"], e["name"], e.get("pid"), e.get("start"), e)
                else:
                    live.pop(key, None)
        return list(live.values())

    def owner_alive(self) -> bool:
        return self.owner_state()[0] == "alive"

    def owner_state(self) -> tuple[str, str]:
        """As ledger.owner_state; a run directory without a readable owner.json is a dead run's (it is written
        right after the directory is made)."""
        try:
            owner = json.loads((self.dir / "owner.json").read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return "dead", "no owner record"
        return owner_state(owner)

    def _visit(self, obj: Obj, dry_run: bool) -> tuple[list[str], str | None]:
        """Clean a host the run touched, by its backend's cleaner; a record that cannot reach it stays pending."""
        visit = REMOTE_CLEANERS.get(obj.kind)
        if visit is None:
            return [], "no host backend is loaded to reach it; `vnetbench clean` visits it"
        try:
            return visit(obj.extra or {}, self.prefix, dry_run)
        except (KeyError, TypeError, ValueError) as exc:  # a record of the wrong shape must not stop every clean
            return [], f"its record in {self.dir / 'objects.jsonl'} cannot reach it ({type(exc).__name__}: {exc})"

    def still_running(self) -> list[str]:
        """What of this run still runs on this machine: its owner, or a process it recorded (pid and kernel start
        time both match, under whichever pid namespace's numbers they were taken)."""
        try:
            owner = json.loads((self.dir / "owner.json").read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            owner = None
        wanted = [("its owner", owner.get("pid"), owner.get("start"))] if isinstance(owner, dict) else []
        wanted += [(f"process {o.name}", o.pid, o.start) for o in self.objects() if o.kind == "process"]
        running = _running()
        return [f"{what} (pid {pid})" for what, pid, start in wanted if _int(pid) and _int(start)
                and (pid, start) in running]

    def remove_all(self, dry_run: bool = False) -> list[str]:
        """Remove every live object of this run, newest first; returns what was (or would be) removed. A testbed
        host that cannot be reached is left in `self.pending` (with why), and the run's directory is kept so that
        a later `clean` visits it again. A Ctrl-C or SIGTERM meanwhile waits until it is done (one that arrived as
        a probe's scratch namespace was being removed left its ledger directory behind)."""
        with signals_held():
            return self._remove_all(dry_run)

    def _remove_all(self, dry_run: bool) -> list[str]:
        done: list[str] = []
        self.pending: list[str] = []
        objs = self.objects()
        for obj in reversed([o for o in objs if o.kind == "process"]):
            if _alive(obj.pid, obj.start):
                done.append(f"process {obj.name} (pid {obj.pid})")
                if not dry_run:
                    _kill(obj.pid)
        remote = [o for o in objs if o.kind in REMOTE_KINDS or o.kind in REMOTE_CLEANERS]
        for obj in remote:  # another machine the run touched: a lab's host, or whatever a backend registered for
            removed, why = self._visit(obj, dry_run)
            done += removed
            if why is not None:
                self.pending.append(f"{obj.kind} {obj.name}: {why}")
            elif not dry_run:
                self.forget(obj.kind, obj.name)
        namespaces = [o.name for o in reversed(objs) if o.kind == "netns"]
        inside = pids_in_namespaces(namespaces)
        done += [f"process pid {pid} in a namespace of the run" for pid in inside]
        if not dry_run:
            kill_pids(inside)
        present = set(_netns_names())
        for ns in namespaces:
            if ns in present:
                done.append(f"netns {ns}")
        if not dry_run and namespaces:
            delete_namespaces([ns for ns in namespaces if ns in present])
            # a namespace that outlived its delete stays recorded (and the run's directory with it): its ledger was
            # removed regardless before, and 500 namespaces of two 256-pair runs were left that no clean could find
            survived = set(_netns_names()) & set(namespaces)
            if survived:
                delete_namespaces(sorted(survived))
                survived = set(_netns_names()) & survived
            for ns in sorted(survived):
                self.pending.append(f"netns {ns} is still there after its delete")
            self.forget_many([("netns", ns) for ns in namespaces if ns not in survived])
        for obj in [o for o in objs if o.kind == "cgroup"]:  # after the processes: what is left moves out of it
            done.append(f"cgroup {obj.name}")
            why = None if dry_run else cgroup.dissolve(obj.name, self.prefix)
            if why is not None:
                self.pending.append(why)
            elif not dry_run:
                self.forget("cgroup", obj.name)
        for obj in reversed([o for o in objs if o.kind == "dir"]):
            # a directory of the run outside its own (e.g. short socket paths); only one named with the prefix
            if os.path.isabs(obj.name) and self.prefix in os.path.basename(obj.name) and os.path.isdir(obj.name):
                done.append(f"directory {obj.name}")
                if not dry_run:
                    shutil.rmtree(obj.name, ignore_errors=True)
        if self.pending:
            return done
        done.append(f"directory {self.dir}")
        if not dry_run:
            shutil.rmtree(self.dir, ignore_errors=True)
        return done


@contextmanager
def signals_held():
    """SIGINT and SIGTERM wait until the block ends: removing what a run made must not stop halfway. (Handlers, not
    the signal mask: a mask would be inherited by every process started meanwhile, e.g. an ssh master.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {sig: signal.signal(sig, lambda n, _f: got.append(n)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for sig in got[:1]:
            signal.raise_signal(sig)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


NETNS_DIR = "/run/netns"
_libc = None


def _netns_names() -> list[str]:
    """The named network namespaces of this machine: what `ip netns list` prints, read from its directory (the
    command also asks the kernel each one's id, a request per namespace: 7 ms with 128 of them)."""
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def surviving(names: list[str]) -> set[str]:
    """Those of these namespaces of this machine that are still there (e.g. after their delete)."""
    return set(_netns_names()) & set(names) if names else set()


def pids_in_namespaces(names: list[str]) -> list[int]:
    """Processes living in any of the named network namespaces (one pass over /proc, no fork per namespace)."""
    inodes = set()
    for name in names:
        try:
            inodes.add(os.stat(f"{NETNS_DIR}/{name}").st_ino)
        except OSError:
            pass
    if not inodes:
        return []
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.stat(f"/proc/{entry.name}/ns/net").st_ino in inodes:
                    found.append(int(entry.name))
            except OSError:
                pass  # gone meanwhile, or a kernel thread
    return found


def _running() -> set[tuple[int, int]]:
    """(pid, kernel start time) of every process visible from here, under each pid it has (NSpid: a run whose
    owner is in a container recorded the container's pids)."""
    out: set[tuple[int, int]] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry.name}/status").read_text()
        except OSError:
            continue  # gone meanwhile
        if "\nState:\tZ" in status:
            continue  # ended, not yet reaped: nothing of it runs
        start = process_start_time(int(entry.name))
        pids = next((ln.split()[1:] for ln in status.splitlines() if ln.startswith("NSpid:")), [entry.name])
        out |= {(int(p), start) for p in pids if start is not None}
    return out


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        _kill(pid)


def delete_namespaces(names: list[str]) -> None:
    """Delete these namespaces of this machine, each process still in one killed first (a namespace whose last
    process is gone goes with its interfaces). The one way vnetbench removes local namespaces; names not there are
    passed over (as `ip -force -batch` of `netns del` would)."""
    if names:
        kill_pids(pids_in_namespaces(names))
        _pyroute2_netns()  # imported here, before the threads
        with ThreadPoolExecutor(max_workers=min(len(names), 16)) as pool:
            list(pool.map(_netns_del, names))


def _pyroute2_netns():
    """pyroute2's netns module and the process's libc for it (given, so that pyroute2 does not search for its file);
    imported by the first delete (a build over netlink has imported pyroute2 already)."""
    global _libc
    from pyroute2 import netns
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return netns


def _netns_del(name: str) -> None:
    """What `ip netns del NAME` does, by pyroute2's netns.remove: detach its mount (a failure passed over, as `ip`
    does) and remove the name. From several threads at once: each detach ends waiting for an RCU grace period after
    the mount table's lock is released, and those waits overlap (512 VMs' namespaces: about 0.03 s with 16 threads,
    0.02-0.26 s in one `ip -batch`, alternated)."""
    try:
        _pyroute2_netns().remove(f"{NETNS_DIR}/{name}", libc=_libc)
    except OSError:
        pass  # gone already, or left: the caller asks which survived


def runs(root: Path | None = None) -> list[Ledger]:
    root = root or state_dir()
    if not root.is_dir():
        return []
    return [Ledger(p.name, root) for p in sorted(root.iterdir()) if p.is_dir() and p.name.startswith("vb")]


def clean(dry_run: bool = False) -> tuple[list[str], list[str]]:
    """Remove the objects of every run whose process is gone. Returns (removed, prefixes of the runs left alone:
    still running, or with an owner that cannot be checked)."""
    removed, left, _ = clean_all(dry_run)
    return removed, [prefix for prefix, _ in left]


def clean_all(dry_run: bool = False) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """As clean(), with why each run was left alone, plus the testbed hosts that could not be reached
    (`prefix: host NAME: why`)."""
    removed: list[str] = []
    left: list[tuple[str, str]] = []
    pending: list[str] = []
    known = runs()
    for ledger in known:
        state, why = ledger.owner_state()
        if state != "dead":
            left.append((ledger.prefix, why if state == "alive" else f"its owner cannot be checked: {why}"))
        else:
            done, waiting = _remove(ledger, dry_run)
            removed, pending = removed + done, pending + waiting
    for prefix, path in cgroup.orphans({ledger.prefix for ledger in known}):
        removed.append(f"{prefix}: cgroup {path} (empty; its run's ledger is gone)")
        if not dry_run:
            cgroup.dissolve(str(path), prefix)
    return removed, left, pending


def _remove(ledger: Ledger, dry_run: bool) -> tuple[list[str], list[str]]:
    """Remove a run's objects: (what was removed, what is pending), each line named with the run."""
    done = ledger.remove_all(dry_run)
    return [f"{ledger.prefix}: {what}" for what in done], [f"{ledger.prefix}: {why}" for why in ledger.pending]


def clean_run(prefix: str, dry_run: bool = False) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """`clean --run PREFIX`: remove this machine's run PREFIX on purpose, also when its owner cannot be checked from
    here (another pid namespace, a foreign owner.json), once none of its processes, its owner's included, is alive
    here: a live run's ssh clients to its hosts are among them. As clean_all: (removed, left alone, pending)."""
    ledger = Ledger(prefix)
    state, why = ledger.owner_state()
    alive = ledger.still_running() if state == "unknown" else []
    if state == "alive" or alive:
        return [], [(prefix, why if state == "alive" else f"{', '.join(alive)} still running: end it, then retry")], []
    removed, pending = _remove(ledger, dry_run)
    return removed, [], pending
