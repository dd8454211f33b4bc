"""One trial's measurement: the workload over its tool's window, the probes started before it and read over exactly
that window, background loads beside it (ready before, wound down after), the profiler, the machine's load just
before; and what a trial's numbers are judged against (the ceiling the underlay allows, the pairs that cross it)."""
from __future__ import annotations

import threading
import time
import traceback

from ..build import offloads as offloads_
from ..build import pinning as pinning_
from ..build import steering as steering_
from ..build.topology import Topology
from ..core.sample import Sample
from ..core.scenario import Scenario
from ..probes import profile
from ..probes.procstat import LoadWatch, busy_ratio_now
from ..results import efficiency, guards
from ..system.executor import CommandError, LocalExecutor
from ..workloads.base import EarlyEnd, ToolHung, WorkloadError

FOLDED = "_profile_folded"  # the profiler's folded stacks on their way from measure() to the store
READY_TIMEOUT_S = 15.0   # a background load must be running by then, or the trial fails
FOREIGN_SAMPLE_S = 0.2   # the machine's busy share just before a trial: load that is not ours
WATCH: LoadWatch | None = None  # the machine's load while a campaign runs (set by the campaign; no sleep before a trial)


def _last_line(exc: BaseException) -> str:
    lines = [line for line in traceback.format_exception(exc) if line.strip()]
    where = next((line.strip().splitlines()[0] for line in reversed(lines[:-1]) if line.strip().startswith("File")), "")
    return f"{type(exc).__name__}: {exc}" + (f" ({where})" if where else "")


class TrialFailure(Exception):
    """Something that fails one trial (not the campaign), with the reason to store. `hung`: a tool overran its
    bound, which says nothing about the datapath, so the trial gets one more try."""

    def __init__(self, message: str, hung: bool = False):
        super().__init__(message)
        self.hung = hung


class Background(threading.Thread):
    """A workload that runs alongside a trial (a CPU load, a flood); its samples are kept with role=background.

    It must be running before the foreground starts (`wait_ready`), must not fail, and must not end before it
    has run its course (`finish`): each of those fails the trial with what the tool said."""

    def __init__(self, workload, pairs):
        super().__init__(daemon=True)
        self.workload, self.pairs = workload, pairs
        self.samples: list[Sample] = []
        self.error: str | None = None
        self.began = self.ended = 0.0
        self.ready = threading.Event()
        self.early = EarlyEnd()

    def run(self) -> None:
        self.began = time.time()
        self.workload.ready, self.workload.early = self.ready, self.early
        try:
            got = self.workload.run(self.pairs)
            self.samples = [Sample(s.metric, s.value, s.unit, s.metadata | {"role": "background",
                                   "background_workload": self.workload.kind,
                                   "background_name": self.workload.name}, s.t) for s in got]
        except WorkloadError as exc:
            self.error = f"background {self.workload.kind}: {exc}"
        except Exception as exc:  # a parser bug must not end the thread without a word
            self.error = f"background {self.workload.kind}: {_last_line(exc)}"
        finally:
            self.workload.ready = self.workload.early = None
            self.ended = time.time()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.05):
            if not self.is_alive():
                raise TrialFailure(self.error or f"background {self.workload.kind} ended before it was running")
            if time.monotonic() > deadline:
                raise TrialFailure(f"background {self.workload.kind} was not running {timeout:.0f} s after it started")

    def wind_down(self) -> None:
        """The foreground's window is over: a load that can end with its figures whole ends now (EarlyEnd)."""
        self.early.ask()

    def finish(self) -> list[Sample]:
        """Wait for the load to end; raises TrialFailure if it failed, hung or ended before its time (unless it
        was wound down)."""
        planned = self.workload.expected_duration()
        super().join(planned + 30)
        if self.is_alive():
            raise TrialFailure(f"background {self.workload.kind} did not finish within {planned + 30:.0f} s")
        if self.error:
            raise TrialFailure(self.error)
        ran = self.ended - self.began
        if ran < 0.8 * planned - 1 and not (self.early.asked and self.early.taken):
            raise TrialFailure(f"background {self.workload.kind} ended after {ran:.1f} s of its planned "
                               f"{planned:.1f} s")
        return self.samples


def measure(sc: Scenario, topo: Topology, wl, began: float | None = None,
            offloads: bool = False, steering: bool = False, pinning: bool = False) -> tuple[list[Sample], dict]:
    """The workload's samples and the probes' over exactly the tool's measurement window, plus trial metadata
    (with the seconds of each phase since `began`: see phases()). `offloads`: the offloads in force are read first
    (build/offloads.py); `steering`: the RPS/XPS masks too (build/steering.py). `pinning`: the CPUs of the trial's
    processes and daemons are read while they run (build/pinning.py). Raises TrialFailure when the tool or a
    background load failed."""
    began = began or time.time()
    in_force = offloads_.in_force(topo) if offloads else None
    masks = steering_.in_force(topo) if steering else None
    irqs = topo.placement.irq_in_force(topo)  # a lab's NICs' IRQs, when the scenario pins them
    load = _load_before()
    place = topo.placement  # where the hosts are: it knows their probes (a guest's kernel's own, a testbed host's)
    probes, guest_probes = place.probes(topo), place.guest_probes(topo)
    profiler, no_profile = profile.for_trial(sc, topo, wl, place if place.remote else None)
    at_once([p.start for p in probes])  # each may be a command on another machine: they wait together
    if profiler:  # started last: it samples from its acknowledgement on, after the others' start-up
        profiler.start()
    probes += _start_guest_probes(guest_probes, probes)
    background = [Background(b, b.select(topo.pairs)) for b in sc.workloads if b.background]
    error, hung, samples, window, uncovered, ran = None, False, [], None, [], None
    pins = pinning_.Reader(topo) if pinning else None
    if pins:
        pins.begin()
    try:
        for b in background:
            b.start()
        for b in background:
            b.wait_ready()
        ran = time.time()
        wl.spotlight = profiler.switch if profiler else None
        samples = wl.run(wl.select(topo.pairs))
        ran = (ran, time.time())
    except (WorkloadError, CommandError) as exc:  # CommandError: e.g. a testbed host stopped answering
        error, hung = str(exc), isinstance(exc, ToolHung)
    except TrialFailure as exc:
        error = str(exc)
    finally:
        wl.spotlight = None
        for b in background:  # the measurement is over: loads that can end now do (their figures stay whole)
            b.wind_down()
        window = tool_window(samples)
        probe_samples = [s for got in at_once([lambda p=p: p.stop(window) for p in probes]) for s in got]
        if profiler:  # stopped last: it resolves its symbols once the others have read (they run at once)
            probe_samples += profiler.stop(window, wl.profile_parts(samples))
        for b in background:
            try:
                samples += b.finish()
                if why := _uncovered(b, window):
                    uncovered.append(why)
            except TrialFailure as exc:
                error = error or str(exc)
    pinned = pins.end() if pins else None  # (its processes have ended: the foreground's and the background's)
    if error:
        raise TrialFailure(error, hung)
    samples = place.tag(topo, samples)  # on a testbed every sample says which hosts it came from
    probe_samples += efficiency.derive(samples + probe_samples, efficiency.payload_of(sc, wl))
    meta = load | {"phases": phases(began, ran, window, time.time())}
    if no_profile or (profiler and profiler.note):
        meta["profile_skipped"] = no_profile or profiler.note
    if profiler and profiler.folded:
        meta[FOLDED] = profiler.folded  # stored apart from the trial's metadata (profiles.py)
    if uncovered:
        meta["background_uncovered"] = uncovered
    if ended := {b.workload.name: round(b.ended - b.began, 3) for b in background if b.early.asked and b.early.taken}:
        meta["background_ended_early"] = ended  # each load's seconds: it ran until the window was over, not its duration
    # a background flood that did not offer its rate (a starved guest's sender): flagged like the foreground's
    short = [f"background {f}" for b in background
             for f in guards.check_offered(b.samples, b.workload.offer(), role="background")]
    if in_force is not None:
        meta["offloads"] = in_force
        short += [in_force.pop("flag")] if "flag" in in_force else []
    if masks is not None:
        meta["steering"] = masks
        short += [masks.pop("flag")] if "flag" in masks else []
    if irqs is not None:
        meta["irq_affinity"] = irqs
        short += [irqs.pop("flag")] if "flag" in irqs else []
    if pinned is not None:
        meta["cpu_pinning"] = pinned
        short += [pinned.pop("flag")] if "flag" in pinned else []
    if short:
        meta["flags"] = short
    if window:
        meta["window"] = list(window)
    return samples + probe_samples, meta


def _load_before() -> dict:
    """The machine's load in the FOREIGN_SAMPLE_S before a trial, for its metadata: the busy share that was not the
    run's own (foreign_busy_ratio, which guards.check_noise judges), the run's own share, and what counted as its own
    (its cgroup: every process it started; or this process and its reaped children). Outside a run (no watch) all
    of the busy share is counted as foreign."""
    if WATCH is None:
        return {"foreign_busy_ratio": busy_ratio_now(LocalExecutor(), FOREIGN_SAMPLE_S)}
    load = WATCH.load(FOREIGN_SAMPLE_S)
    if load is None:
        return {"foreign_busy_ratio": None}
    return {"foreign_busy_ratio": load.foreign, "own_busy_ratio": round(load.own, 4), "own_cpu": load.counted}


def at_once(calls: list) -> list:
    """Call each at once (threads: most wait for a command on a machine, here or over SSH) and return their results
    in order; the first exception raised is raised once all have ended."""
    if len(calls) <= 1:
        return [c() for c in calls]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(c) for c in calls]
    return [f.result() for f in futures]


def phases(began: float, ran: tuple[float, float], window, ended: float) -> dict[str, float]:
    """Where a trial's seconds went: `before` the tool (probes starting, background loads getting ready), the tool's
    `setup` (servers up, clients connecting: up to its measurement window), `measure` (the window), its `finish`
    (results exchanged and read, processes stopped) and `after` it (probes read at the window's end); a tool without
    a window has one `run` phase instead of the middle three. The runner adds `judge` (guards) so that they add up to
    the trial's stored time."""
    out = {"before": ran[0] - began}
    if window and ran[0] <= window[0] <= window[1]:
        w0, w1 = window[0], min(window[1], ran[1])
        out |= {"setup": w0 - ran[0], "measure": w1 - w0, "finish": ran[1] - w1}
    else:
        out["run"] = ran[1] - ran[0]
    out["after"] = ended - ran[1]
    return {k: round(max(v, 0.0), 4) for k, v in out.items()}


def _start_guest_probes(guest_probes: list, started: list) -> list:
    """Each guest VM's reader starts at once (a python in a one-CPU guest takes a moment); one that does not start
    fails the trial, with every probe stopped."""
    if not guest_probes:
        return []
    from concurrent.futures import ThreadPoolExecutor

    def start(p):
        try:
            p.start()
            return None
        except Exception as exc:
            return str(exc)
    with ThreadPoolExecutor(max_workers=len(guest_probes)) as pool:
        errors = [e for e in pool.map(start, guest_probes) if e]
    if errors:
        for p in started + guest_probes:
            try:
                p.stop()
            except Exception:
                pass
        raise TrialFailure("; ".join(errors))
    return guest_probes


def _uncovered(b: Background, window) -> str | None:
    """A background load that ended before the foreground's window did was not there for all of it (e.g. servers
    slow to start in a starved guest): the trial is noisy, with that reason."""
    if not window:
        return None
    ends = [s.metadata["window"][1] for s in b.samples if s.metadata.get("window")]
    end = max(ends) if ends else b.ended
    if end < window[1] - 0.25:
        return (f"background {b.workload.kind} ended {window[1] - end:.1f} s before the measurement window did "
                f"(give it a longer duration to cover it)")
    return None


def tool_window(samples: list[Sample]) -> tuple[float, float] | None:
    """The foreground tool's measurement window: from the earliest start to the latest end of its pairs' windows."""
    windows = [s.metadata["window"] for s in samples if s.metadata.get("window") and s.metadata.get("role") != "background"
               and not s.metadata.get("baseline")]  # the idle RTTs before the load are not part of its window
    if not windows:
        return None
    return min(w[0] for w in windows), max(w[1] for w in windows)


def ceiling(sc: Scenario, wl) -> float | None:
    """The payload ceiling of the scenario's rate-limited underlay for this workload's protocol (None: no limit)."""
    if not sc.underlay_rate:
        return None
    proto = getattr(wl.params, "protocol", None) or ("udp" if str(getattr(wl.params, "test", "")).startswith("UDP")
                                                     else "tcp")
    datagram = getattr(wl.params, "message_size", None) if proto == "udp" else None
    return guards.payload_ceiling(sc.underlay_rate, sc.vm_mtu, sc.overhead, proto, int(sc.levels.get("ip_version", 4)),
                                  datagram=datagram, duration=getattr(wl.params, "duration", None))


def _crossing(topo: Topology, wl) -> set[int]:
    return {p.index for p in wl.select(topo.pairs) if guards.crosses(p.meta)}
