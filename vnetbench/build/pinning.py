"""The `cpu_pinning` factor: a level other than `none` runs every process the run starts for a node under
`taskset -c CPUS` (util-linux sets the affinity, then execs the tool: the tool and every thread or child it makes
inherit it). The one place that starts a node's processes is its executor's spawn (system/executor.py): the
workload tools (iperf3, ping, sockperf, netperf, stress-ng...), the daemons of the datapaths (charon, wireguard-go,
ovs-vswitchd of a host...), locally and on a testbed host over SSH alike; add_steps gives each node's executor its
CPUs, so `plan` prints the daemons' command lines with the prefix and one comment per node.

Which CPUs. A node named in the level gets its CPUs; a VM not named takes its host's (`{h1: 0}` puts h1 and the VMs
on it on CPU 0); `spread` gives host k the k-th CPU the run may use (round robin) and its VMs the same. Short
commands a run makes in a node (ip, tc, ethtool, ss) are not pinned: they are no part of a measurement.

Before the first process, a build step per node runs `taskset -c CPUS cat /proc/self/status` there: a CPU the machine
(or testbed host) does not have, or a taskset that cannot pin, skips the scenario with what taskset said (Refused).
Per trial, the affinity of each of its processes (Cpus_allowed_list in /proc/PID/status, read once the process is
past `ip netns exec` and taskset) and of the run's daemons is stored with the trial; a process found on other CPUs
than asked flags the trial ("cpu pinning not as asked"). Processes on a testbed host are pinned but not read back
(their pids are the remote machine's, "unread" in the record).

Guests. A node that is a guest of this machine (a guest VM of vm_kernel, a host of kernel guest-per-host or qemu) is
pinned whole, here: every thread of its processes (a UML kernel and its address spaces, qemu and its vCPU threads, its
virtiofsd) gets the node's CPUs with sched_setaffinity; its threads made later inherit them. What runs inside it is
not pinned (the guest's CPUs are not this machine's). The guests outlive the topology (the next scenario reuses them),
so teardown gives them every CPU back (restore); each trial reads every thread of each guest (a thread pinned apart
shows). kernel: guest (every host in one guest) and a VM inside a host guest cannot have CPUs of their own: the matrix
skips them. Guest VMs on testbed hosts are not pinned yet (skipped too).
"""
from __future__ import annotations

import os
import threading

from ..core import pinning
from ..core.scenario import Scenario
from ..datapaths.base import Refused as LevelRefused
from ..system.executor import CommandError, Executor, LocalExecutor, NetnsExecutor

NOT_AS_ASKED = "cpu pinning not as asked"
WRAPPERS = ("ip", "taskset")  # what a pinned process is before it becomes its tool (ip netns exec, then taskset)
POLL_S = 0.02


class Refused(LevelRefused):
    """A node's CPUs cannot be had there: the scenario is skipped with this reason."""


def machine_cpus() -> list[int]:
    """The CPUs this process (and so the run) may use."""
    return sorted(os.sched_getaffinity(0))


def assigned(sc: Scenario, nodes: dict) -> dict[str, str]:
    """node label -> CPU list (taskset -c form) for every node the level pins: its own entry, else its host's."""
    level = sc.levels.get("cpu_pinning", pinning.NONE)
    if level == pinning.NONE:
        return {}
    if level == pinning.SPREAD:
        cpus = machine_cpus()
        hosts = sorted((n for n in nodes if n.startswith("h") and "v" not in n), key=lambda n: int(n[1:]))
        level = {h: str(cpus[k % len(cpus)]) for k, h in enumerate(hosts)}
    out = {}
    for label, node in nodes.items():
        own = level.get(label) or (level.get(node.host) if node.role == "vm" else None)
        if own is not None:
            out[label] = own
    return out


def add_steps(topo) -> None:
    """Each node's executor (and each pair endpoint's) gets its CPUs (None: unpinned, e.g. a shared testbed
    executor a former scenario pinned) and the topology's watch; a pinned node gets a step that tries its CPUs. A
    node inside a guest is not pinned there (the guest's CPUs are not this machine's): its guest's processes here
    are, by a step of their own."""
    want = topo.pin_asked = assigned(topo.sc, topo.nodes)
    guests = topo.placement.guests(topo)
    inside = {label for label, node in topo.nodes.items()
              if not topo.placement.pins_inside or node.guest or node.role == "guest"}
    for label, node in topo.nodes.items():  # (inside a guest: nothing to read here; the guest is read instead)
        node.exec.cpus = None if label in inside else want.get(label)
        node.exec.watch = None if label in inside else (topo.pin_watch, label)
    for p in topo.pairs:
        for end in (p.client, p.server):
            end.node.cpus = None if end.label in inside else want.get(end.label)
            end.node.watch = None if end.label in inside else (topo.pin_watch, end.label)
    shown = topo.sc.labels.get("cpu_pinning", pinning.NONE)
    for label, cpus in want.items():
        if label in guests:
            fleet, g = guests[label]
            topo.call(label, f"cpu_pinning {shown} on {label}: its {fleet.kind.name} guest's processes here (and "
                             f"every thread, e.g. qemu's vCPUs) on CPUs {cpus} with sched_setaffinity, back to every "
                             f"CPU at teardown", lambda label=label, fleet=fleet, g=g, cpus=cpus:
                      _pin_guest(topo, label, fleet, g, cpus, shown), [])
        elif label not in inside:
            ex = topo.executor(label)
            argv = ["taskset", "-c", cpus, "cat", "/proc/self/status"]
            topo.call(label, f"cpu_pinning {shown} on {label}: every process the run starts there runs under "
                             f"taskset -c {cpus} (a CPU it cannot have skips the scenario)",
                      lambda ex=ex, argv=argv, label=label: _try(ex, argv, label, shown), [])


def _tasks(pids: list[int]) -> list[int]:
    """Every thread of these processes (qemu's vCPUs are threads; sched_setaffinity sets one thread)."""
    out = []
    for pid in pids:
        try:
            out += [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            pass  # ended
    return out


def _set_tasks(tids: list[int], cpus: set[int]) -> None:
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            pass


def _pin_guest(topo, label: str, fleet, g, cpus: str, shown: str) -> None:
    """A guest's processes (and threads) on `cpus`; a CPU the machine refuses skips the scenario. The guest serves
    the next topology too: teardown (restore) gives it every CPU back."""
    pids = fleet.kind.pids(fleet, g)
    topo.pinned_guests.append(pids)  # first: a refusal half-way is undone too
    try:
        _set_tasks(_tasks(pids), set(pinning.cpus(cpus)))
    except OSError as exc:
        raise Refused(f"cpu_pinning {shown}: CPUs {cpus} cannot be had for {label}'s guest: {exc}") from None


def restore(topo) -> None:
    """The guests pinned for this topology get every CPU this run may use back (they outlive it)."""
    every = set(machine_cpus())
    for pids in topo.pinned_guests:
        _set_tasks(_tasks(pids), every)
    topo.pinned_guests.clear()


def _try(ex: Executor, argv: list[str], node: str, shown: str) -> None:
    got = ex.run(argv, check=False, timeout=30)
    allowed = next((ln.split(":", 1)[1].strip() for ln in got.stdout.splitlines()
                    if ln.startswith("Cpus_allowed_list:")), None)
    if got.returncode != 0 or allowed != argv[2]:
        said = " ".join((got.stderr or got.stdout).split())[:200]
        raise Refused(f"cpu_pinning {shown}: CPUs {argv[2]} cannot be had on {node} ({ex.name}): taskset said: "
                      f"{said or f'allowed {allowed}'}")


# ---- per trial -------------------------------------------------------------------------------------------------
class Watch:
    """The processes the run started in the topology's nodes (executor.spawn adds them): the daemons, and those of
    the trial under way; a reader thread reads each one's affinity once it is past its wrappers."""

    def __init__(self):
        self.lock = threading.Lock()
        self.daemons: list[dict] = []
        self.trial: list[dict] | None = None  # None: between trials (a build's daemons, its pings)

    def add(self, node: str, what: str, ex: Executor, pid: int) -> None:
        """A process a trial started (executor.spawn); one started between trials is not the trial's."""
        with self.lock:
            if self.trial is not None:
                self.trial.append(_entry(node, what, ex, pid))

    def daemon(self, node: str, what: str, ex: Executor, pid: int) -> None:
        with self.lock:
            self.daemons.append(_entry(node, what, ex, pid))



def _entry(node: str, what: str, ex: Executor, pid: int) -> dict:
    """A pid is this machine's only for a local executor (over SSH it is the ssh client's, or none)."""
    local = isinstance(ex, (LocalExecutor, NetnsExecutor))
    return {"node": node, "what": what, "pid": pid if local else None, "asked": ex.cpus, "cpus": None}


def _affinity(pid: int) -> tuple[str | None, bool]:
    """(Cpus_allowed_list, whether the process is past ip netns exec and taskset); (None, True) once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            comm = fh.read().strip()
        with open(f"/proc/{pid}/status") as fh:
            allowed = next(ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("Cpus_allowed_list:"))
    except (OSError, StopIteration):
        return None, True
    return allowed, comm not in WRAPPERS


def _threads_affinity(pid: int) -> str | None:
    """The CPUs of every thread of a process: one list when they agree, else each distinct one joined by ' | '."""
    seen = []
    for tid in _tasks([pid]):
        cpus, _ = _affinity(tid) if os.path.exists(f"/proc/{tid}") else (None, True)
        if cpus and cpus not in seen:
            seen.append(cpus)
    return " | ".join(seen) or None


class Reader:
    """One trial's read-back: begun before its processes start, ended after they have ended."""

    def __init__(self, topo):
        self.topo, self.watch = topo, topo.pin_watch
        self.stop = threading.Event()
        self.guests: list[dict] = []  # each guest of the topology here, with all its threads (qemu's vCPUs)
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def begin(self) -> None:
        with self.watch.lock:
            self.watch.trial = []
        for d in self.watch.daemons:
            if d["pid"]:
                d["cpus"], _ = _affinity(d["pid"])
        asked = self.topo.pin_asked
        self.guests = [{"node": label, "what": f"guest {label} ({fleet.kind.name})", "asked": asked.get(label),
                        "cpus": _threads_affinity(g.pid) if g.pid else None}
                       for label, (fleet, g) in self.topo.placement.guests(self.topo).items()]
        self.thread.start()

    def _poll(self) -> None:
        while True:
            with self.watch.lock:
                todo = [e for e in self.watch.trial or [] if e["pid"] and e["cpus"] is None and not e.get("gone")]
            for e in todo:
                cpus, past = _affinity(e["pid"])
                if cpus is None:
                    e["gone"] = True
                elif past:
                    e["cpus"] = cpus
            if self.stop.wait(POLL_S):
                return

    def end(self) -> dict:
        """The record stored with the trial: the level, each group of processes of one node on the same CPUs, how
        many were not read (ended before a look, or on a testbed host), and a flag when one is not as asked."""
        self.stop.set()
        self.thread.join(5)
        with self.watch.lock:
            seen, self.watch.trial = list(self.watch.trial or []), None
        entries = [d for d in self.watch.daemons if d["cpus"]] + self.guests + seen
        groups: dict[tuple, dict] = {}
        for e in (e for e in entries if e["cpus"]):
            g = groups.setdefault((e["node"], e["cpus"], e["asked"]), {"node": e["node"], "cpus": e["cpus"],
                                                                        "asked": e["asked"] or "any", "what": []})
            g["what"].append(e["what"])
        out = {"asked": self.topo.sc.labels.get("cpu_pinning", pinning.NONE), "groups": list(groups.values()),
               "machine": pinning.as_text(machine_cpus())}
        if unread := sum(1 for e in seen if not e["cpus"]):
            out["unread"] = unread
        wrong = [g for g in groups.values() if g["asked"] != "any" and g["cpus"] != g["asked"]]
        if wrong:
            g = wrong[0]
            out["flag"] = (f"{NOT_AS_ASKED}: {g['what'][0]} on {g['node']} ran on CPUs {g['cpus']}, not {g['asked']}"
                           + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""))
        return out


def can_pin(ex: Executor) -> tuple[bool, str]:
    """For doctor: whether `taskset -c` pins a short `true` here (and the CPUs there are)."""
    try:
        cpus = ex.run(["sh", "-c", "grep Cpus_allowed_list /proc/self/status"], check=False, timeout=30).stdout
        allowed = cpus.split(":", 1)[1].strip() if ":" in cpus else "?"
        first = allowed.split(",")[0].split("-")[0]
        got = ex.run(["taskset", "-c", first, "true"], check=False, timeout=30)
    except (CommandError, OSError) as exc:
        return False, str(exc)
    if got.returncode != 0:
        return False, f"taskset -c {first} true: {' '.join(got.stderr.split())[:200] or got.returncode}"
    n = len(pinning.cpus(allowed) or [])
    return True, f"{n} CPU{'s' * (n != 1)} ({allowed}); taskset -c {first} true pinned"

