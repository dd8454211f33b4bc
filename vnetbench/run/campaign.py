"""A campaign: build each scenario's topology, run every workload for every repetition while the probes
watch, commit each trial as it finishes, tear down. Ctrl-C or SIGTERM stops cleanly and can be resumed.

Order: by default trials run in blocks, one repetition of every scenario per block, the scenarios of a block
shuffled with a seed recorded in the campaign, so drift over time spreads over all scenarios instead of landing on
whole ones. Scenarios cannot share the machine (their namespaces have the same names), so a topology is rebuilt for
each of its repetitions; `order: sequential` builds it once and runs all its repetitions in a row.
"""
from __future__ import annotations

import os
import random
import shlex
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..build.topology import BuildError, Topology
from ..capabilities import detect
from ..core.sample import Sample
from ..core.scenario import NOT_APPLICABLE
from ..datapaths.base import Refused
from ..experiment.matrix import Scenario, expand
from ..experiment.spec import LoadedSpec, Repetitions, Rounds, loads
from ..hosts import Hosts, Unavailable
from ..probes.procstat import LoadWatch
from ..results import cpu_profiles as profiles
from ..results import guards
from ..results.store import Store, StoreError
from ..system import cgroup, rawlog, wakeup
from ..system.executor import CommandError
from ..system.ledger import Ledger, _alive, process_start_time
from ..workloads.base import KEPT
from . import adaptive, environment, rounds, trial
from .progress import RunProgress, log_path
from .trial import FOLDED, TrialFailure, _crossing, _last_line, ceiling, measure

TRIAL_OVERHEAD_S = 0.5   # probes, servers starting, commit: for the time estimate only
BUILD_OVERHEAD_S = 1.0


@dataclass
class Outcome:
    campaign: int
    status: str          # done | interrupted
    trials_ok: int = 0
    trials_failed: int = 0
    trials_invalid: int = 0
    scenarios_failed: int = 0       # failed to build: none of their trials ran
    scenarios_runnable: int = 0
    signal: int | None = None       # what interrupted the run: SIGINT or SIGTERM
    trials_retried: int = 0  # a tool hung on the first attempt; the second one is the trial
    trials_noisy: int = 0   # ok, but measured under steal or foreign load (metadata `noisy` says which)
    stopped: dict[int, str] = field(default_factory=dict)  # scenario index -> why it stopped (adaptive)
    rounds: list[str] = field(default_factory=list)         # a card's rounds: how many scenarios each ran, why it ended
    builds: int = 0                                         # topologies built, and the seconds their builds and
    topology_s: float = 0.0                                 # teardowns took (what the random order costs)


class CampaignBusy(Exception):
    """`run --resume` of a campaign whose process is still running."""


# ---- where a campaign runs ------------------------------------------------------------------------------------------
def place_of(bed) -> dict:
    """Where a campaign runs, stored with it: this machine, or a testbed (its file, and its hosts by name and ssh
    destination: what says they are the same machines)."""
    if bed is None:
        return {"testbed": None}
    return {"testbed": str(Path(bed.source).resolve()),
            "hosts": {h.name: h.target.destination + (f":{h.target.port}" if h.target.port else "") for h in bed.hosts}}


def stored_place(env: dict) -> dict:
    """The place of a stored campaign; one stored before places were (its environment has the testbed's hosts)."""
    if "place" in env:
        return env["place"]
    if env.get("testbed"):
        return {"testbed": "", "hosts": {n: h.get("ssh") for n, h in env["testbed"].items()}, "legacy": True}
    return {"testbed": None}


def resume_command(cid: int, db, testbed: str | None = None) -> str:
    """The full command that resumes a campaign from anywhere: the results file (and testbed file) by absolute path."""
    return (f"vnetbench run --resume {cid} --db {shlex.quote(str(Path(db).resolve()))}"
            + (f" --testbed {shlex.quote(testbed)}" if testbed else ""))


def wrong_place(camp, bed, db) -> str | None:
    """Why campaign `camp` cannot be resumed with this testbed (None: no testbed), or None: one campaign never
    mixes trials measured in two places."""
    want, here = stored_place(camp.environment), place_of(bed)
    if want["testbed"] is None:
        return None if bed is None else (f"campaign {camp.id} ran on this machine, not on a testbed: resume it "
                                         f"without --testbed: {resume_command(camp.id, db)}")
    hosts = ", ".join(f"{n} ({d})" for n, d in want["hosts"].items())
    again = resume_command(camp.id, db, want["testbed"] or "TESTBED-FILE")
    if bed is None:
        return f"campaign {camp.id} runs on a testbed (hosts {hosts}), not on this machine: resume it with: {again}"
    got = {n: d.rsplit(":", 1)[0] if want.get("legacy") and ":" in d else d for n, d in here["hosts"].items()}
    if got != want["hosts"]:
        return (f"campaign {camp.id} runs on the hosts {hosts}; {bed.source} has other hosts "
                f"({', '.join(f'{n} ({d})' for n, d in got.items())}): resume it with: {again}")
    return None


@contextmanager
def _signals_as_interrupt(outcome: Outcome):
    """SIGTERM takes the same clean path as Ctrl-C: topology removed, finished trials kept. The signal is noted
    for the exit code (SIGINT 130, SIGTERM 143)."""
    def handler(signum, frame):
        outcome.signal = signum
        raise KeyboardInterrupt
    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def _uninterruptible():
    """Cleanup that a second Ctrl-C must not cut short; a signal arriving meanwhile is delivered after."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class Runner:
    def __init__(self, store: Store, console: Console | None = None, progress: bool = True, testbed=None,
                 caps=None):
        self.store = store
        self.testbed, self.caps = testbed, caps  # a real testbed (testbed.Testbed, preflighted) and what it offers
        self.hosts: Hosts | None = None  # where the scenarios' hosts are (hosts/), for the run
        self.console = console or Console(stderr=True)
        self.progress = progress

    def run(self, spec: LoadedSpec | None = None, resume: int | None = None, order: str | None = None) -> Outcome:
        """The handlers go in before anything is created: a SIGTERM during the capability probe, which builds a
        scratch namespace, takes the probe's own clean-up path instead of killing the process."""
        outcome = Outcome(resume or 0, "interrupted")
        trial.WATCH = LoadWatch().start()
        try:
            with _signals_as_interrupt(outcome):
                self._run(spec, resume, order, outcome)
        except StoreError as exc:
            exc.campaign = outcome.campaign or None  # for the --resume hint: finished trials are kept
            raise
        except KeyboardInterrupt:
            outcome.signal = outcome.signal or signal.SIGINT
            hint = f" Continue with: {self.resume_command(outcome.campaign)}" if outcome.campaign else ""
            self.console.print(f"Interrupted: topology removed, finished trials kept.{hint}", style="yellow",
                               markup=False, highlight=False, soft_wrap=True)  # the command on one line, as is
        finally:
            trial.WATCH.stop()
            trial.WATCH = None
        return outcome

    def resume_command(self, cid: int) -> str:
        return resume_command(cid, self.store.path, place_of(self.testbed)["testbed"])

    def _run(self, spec: LoadedSpec | None, resume: int | None, order: str | None, outcome: Outcome) -> None:
        me = (os.getpid(), process_start_time(os.getpid()))
        if resume is not None:
            holder = self.store.claim(resume, me, _alive)
            if holder is not None:
                raise CampaignBusy(f"campaign {resume} is still being run by process {holder}; wait for it to "
                                   f"finish, or stop it (kill {holder}) and resume again")
        caps = self.caps or detect()
        scenarios, self.steal_env = None, None
        if resume is not None:
            camp = self.store.campaign(resume)
            spec = loads(camp.spec_text, camp.source)
            plan = camp.environment.get("order") or {"order": "sequential", "seed": None}
        else:
            plan = {"order": order or spec.experiment.order,
                    "seed": spec.experiment.seed if spec.experiment.seed is not None else random.randrange(2 ** 31)}
        # the matrix (which may probe the guest for a while) before the campaign exists: an interrupt before this
        # point leaves no campaign, and after it the campaign has its scenarios; and before the environment: it
        # asks strongSwan only if a scenario needs charon
        scenarios = expand(spec.experiment, caps, Hosts(None, self.testbed))  # each asked of the backend running it
        if resume is not None:
            cid = camp.id
            stored = {s["idx"] for s in self.store.scenarios(cid)}
        else:
            env = environment.capture(caps, nics=not self.testbed, steal=trial.WATCH.steal(0) if trial.WATCH else None,
                                      swan=caps.swan is not None) | {"order": plan, "place": place_of(self.testbed)}
            self.steal_env = env  # its steal is measured again over a longer span once the first trial is stored
            env |= Hosts(None, self.testbed).environment()
            cid = self.store.new_campaign(spec.experiment.name, spec.source, spec.text, spec.sha256, env, owner=me)
            stored = set()
        outcome.campaign = cid
        for sc in scenarios:  # a campaign interrupted between its creation and this gets them on resume
            if sc.index not in stored:
                self._put(cid, sc)
        outcome.scenarios_runnable = sum(sc.skip is None for sc in scenarios)
        self.varying = [f for f in scenarios[0].labels
                        if len({sc.shown_labels[f] for sc in scenarios} - {NOT_APPLICABLE}) > 1] if scenarios else []
        ledger = None
        try:
            ledger = Ledger.create()
            self._count_own(ledger)
            self.hosts = Hosts(ledger, self.testbed)  # guests booted at the first scenario that wants them
            self.store.set_campaign(cid, prefix=ledger.prefix, status="running")
            with self._progress(cid) as bar, wakeup.Wakeup(spec.experiment.cpu_idle) as idle:
                self._record_idle(cid, idle.state)
                Campaign(self, cid, spec.experiment, [sc for sc in scenarios if sc.skip is None], plan, ledger,
                         bar, outcome).run()
                outcome.status = "done"
        finally:
            if trial.WATCH is not None:
                trial.WATCH.count(None)  # the run's cgroup goes with its ledger
            with _uninterruptible():
                try:  # a full disk failing the status write must not keep the run's namespaces and files
                    self.store.set_campaign(cid, status=outcome.status, finished=time.time())
                finally:
                    if self.hosts is not None:
                        self.hosts.close()
                    if ledger is not None:
                        ledger.remove_all()
                        if self.hosts is not None:
                            self.hosts.disconnect()
                        for why in getattr(ledger, "pending", []):
                            self.console.print(f"[red]not cleaned: {why}[/]; retry with: vnetbench clean")

    def _record_idle(self, cid: int, state: str) -> None:
        """What the CPUs did when idle, in the campaign's environment (a resume that held it differently says so)."""
        env = self.store.campaign(cid).environment
        held = env.get("cpu_idle")
        env["cpu_idle"] = state if held in (None, state) else f"{held}; on resume: {state}"
        self.store.set_campaign(cid, environment=env)
        if self.steal_env is not None:  # rewritten with the steal measured after the first trial
            self.steal_env["cpu_idle"] = env["cpu_idle"]

    def _count_own(self, ledger: Ledger) -> None:
        """Every process the run starts goes into its cgroup, whose CPU the load watch counts as the run's own; where
        none can be made, it counts this process and its reaped children, and says so once."""
        if trial.WATCH is None:
            return
        try:
            trial.WATCH.count(cgroup.join(ledger))
        except cgroup.Unavailable as exc:
            self.console.print(f"[yellow]load watch:[/] {exc}; the CPU of guests and daemons still running counts as "
                               "other load (trials may be flagged noisy by the run's own work)", highlight=False)

    def _put(self, cid: int, sc: Scenario) -> None:
        self.store.put_scenario(cid, sc.index, sc.key, sc.levels, sc.shown_labels,
                                "skipped" if sc.skip else "pending", sc.skip, sc.implementation, sc.notes)

    def _progress(self, cid: int) -> RunProgress:
        return RunProgress(self.console, self.progress, log_path(self.store.path), cid)

    def _short(self, sc: Scenario) -> str:
        shown = sc.shown_labels
        return ", ".join(f"{f}={shown[f]}" for f in self.varying) or \
            next(f"{f}={shown[f]}" for f in ("switch", "attach") if shown[f] != NOT_APPLICABLE)


class Campaign:
    """The trial loop of one campaign: which scenario runs when, how often, and each trial's measurement."""

    def __init__(self, runner: Runner, cid: int, exp, scenarios: list[Scenario], plan: dict, ledger: Ledger,
                 bar: RunProgress, outcome: Outcome):
        self.r, self.store, self.cid, self.exp = runner, runner.store, cid, exp
        self.scenarios, self.plan, self.ledger, self.bar, self.outcome = scenarios, plan, ledger, bar, outcome
        reps = exp.repetitions
        self.rule = reps if isinstance(reps, Repetitions) else None
        self.rounds = reps if isinstance(reps, Rounds) else None
        self.max_reps = exp.max_repetitions
        self.spent: dict[tuple[int, int], list[float]] = {}  # (scenario index, workload) -> seconds of each trial here
        self.build_s: list[float] = []  # seconds of each build here, with the teardown before it and its warm-up
        self.only: dict[int, set[int]] = {}  # a card's later rounds: the workloads a scenario still runs (else all)
        self.done = self.store.done_trials(cid)
        self.values = adaptive.stored_values(self.store, cid, scenarios, self.rule)
        # the topology standing now (by Scenario.topology_key), kept while scenarios that share it run on it
        self.topo: tuple[str, Topology] | None = None
        self.failed_builds: set[int] = set()
        self.ran: set[int] = set()
        self.described: set[int] = set()
        self.raw: bytes | None = None  # the last attempt's commands and tool output (rawlog.pack)
        self.descriptions: dict[str, dict] = {}  # topology key -> its interfaces as built
        self.build: dict | None = None
        # each trial records the offloads in force when any scenario sets some: the `on` rows' too, to compare
        self.read_offloads = any(isinstance(sc.levels.get("offloads"), dict) for sc in scenarios)
        self.read_steering = any(isinstance(sc.levels.get("steering"), dict) for sc in scenarios)  # likewise
        # and the CPUs its processes ran on when any scenario pins some (build/pinning.py)
        self.read_pinning = any(sc.levels.get("cpu_pinning", "none") != "none" for sc in scenarios)

    # ---- order -------------------------------------------------------------------------------------------
    def run(self) -> None:
        runnable = [sc for sc in self.scenarios if self._todo_any(sc)]
        first = self.rounds.rounds[0] if self.rounds else self.max_reps  # a card's later rounds are added as they start
        self.task = self.bar.add_task("starting", total=max(self._seconds(runnable, 0, first), 1e-9),
                                      trials=self._trials(runnable, 0, first))
        KEPT.enabled = True  # servers stay up between the trials of a topology (stopped before its teardown)
        try:
            if self.rounds is None and self.plan["order"] == "sequential":
                self._sequential(self.scenarios, range(1, self.max_reps + 1), finish=True)
            else:
                if self.rounds:
                    self._rounds()
                else:
                    self._random(random.Random(self.plan["seed"]), self.scenarios, range(1, self.max_reps + 1))
                for sc in self.scenarios:
                    self._finish(sc)
        finally:
            try:
                self._teardown()
            finally:
                KEPT.stop_all()
                KEPT.enabled = False

    def _seconds(self, scenarios: list[Scenario], after: int, upto: int) -> float:
        """Estimated wall time of repetitions after+1..upto of the scenarios: each trial and build as measured here
        (a trial of a workload not yet run: as its kind ran here), else as expected."""
        reps = range(after + 1, upto + 1)
        busy = [sc for sc in scenarios if any(self._todo(sc, rep) for rep in reps)]
        builds = len({sc.topology_key for sc in busy}) * (len(reps) if self.plan["order"] == "random" else 1)
        by_kind: dict[str, list[float]] = {}
        for (i, w), xs in self.spent.items():
            by_kind.setdefault(self._kind(i, w), []).extend(xs)

        def one(sc: Scenario, w: int) -> float:
            seen = self.spent.get((sc.index, w)) or by_kind.get(sc.workloads[w].kind)
            return sum(seen) / len(seen) if seen else sc.workloads[w].expected_duration() + TRIAL_OVERHEAD_S
        build = sum(self.build_s) / len(self.build_s) if self.build_s else BUILD_OVERHEAD_S
        return build * builds + sum(one(sc, w) for sc in busy for rep in reps for w in self._todo(sc, rep))

    def _kind(self, index: int, w: int) -> str:
        return next(sc.workloads[w].kind for sc in self.scenarios if sc.index == index)

    def _trials(self, scenarios: list[Scenario], after: int, upto: int) -> int:
        return sum(len(self._todo(sc, rep)) for sc in scenarios for rep in range(after + 1, upto + 1))

    def _rounds(self) -> None:
        """Round after round, the scenarios whose claims are still open, while the next round fits the budget."""
        rng, began, after = random.Random(self.plan["seed"]), time.monotonic(), 0
        active = list(self.scenarios)
        for k, upto in enumerate(self.rounds.rounds, 1):
            if k > 1:
                active = self._still_open(active, k, after)
                if not active:
                    self.outcome.rounds.append(f"after round {k - 1}: every claim decided, or beyond what more "
                                               f"trials could decide")
                    return
                need, left = self._seconds(active, after, upto), self.rounds.budget - (time.monotonic() - began)
                if need > left:
                    self.outcome.rounds.append(f"round {k} ({upto} trials a cell for {len(active)} scenarios) would "
                                               f"take ~{need / 60:.0f} min, {max(left, 0) / 60:.0f} left: not run")
                    for sc in active:
                        self.outcome.stopped[sc.index] = (
                            f"budget: round {k} ({upto} trials a cell) would take ~{need / 60:.0f} min, "
                            f"{max(left, 0) / 60:.0f} of {self.rounds.budget / 60:g} min left")
                    return
                self.bar.extend(self.task, need, self._trials(active, after, upto))
            cells = sum(len(self.only.get(sc.index, self._foreground(sc))) for sc in active)
            self.outcome.rounds.append(f"round {k}: {len(active)} of {len(self.scenarios)} scenarios to {upto} trials "
                                       f"a cell" + (f" ({cells} cells)" if k > 1 else ""))
            if self.plan["order"] == "random":
                self._random(rng, active, range(after + 1, upto + 1))
            else:
                self._sequential(active, range(after + 1, upto + 1))
            after = upto

    def _still_open(self, active: list[Scenario], k: int, after: int) -> list[Scenario]:
        """The scenarios an open claim still needs, each with the workloads it needs (self.only)."""
        keep = rounds.still_open(self.store, self.cid, active)
        for sc in active:
            if sc.index not in keep:
                self.outcome.stopped.setdefault(sc.index, f"after {after} trials a cell (round {k - 1}): every claim "
                                                          f"its cells serve is decided, or needs more trials than the "
                                                          f"card's rounds give")
        self.only.update(keep)
        return [sc for sc in active if sc.index in keep]

    @staticmethod
    def _foreground(sc: Scenario) -> set[int]:
        return {w for w in range(len(sc.workloads)) if not sc.workloads[w].background}

    def _random(self, rng: random.Random, scenarios: list[Scenario], reps: range) -> None:
        active = list(scenarios)
        for rep in reps:
            block = list(active)
            rng.shuffle(block)  # shuffled even when nothing in it is left to do, so a resume repeats the order
            block = by_topology(block)
            for k, sc in enumerate(block, 1):
                self._repetition(sc, rep, f"block {rep}, {k}/{len(block)}")
            active = [sc for sc in active if not self._stopped(sc, rep)]
            if not active:
                break

    def _sequential(self, scenarios: list[Scenario], reps: range, finish: bool = False) -> None:
        for k, sc in enumerate(scenarios, 1):
            for rep in reps:
                self._repetition(sc, rep, f"scenario {k}/{len(scenarios)}")
                if self._stopped(sc, rep):
                    break
            if finish:
                self._finish(sc)

    def _stopped(self, sc: Scenario, rep: int) -> bool:
        if sc.index in self.failed_builds:
            return True
        if self.rule is None:
            return rep >= self.max_reps
        why = adaptive.decide(sc, self._values(sc, rep), self.rule, rep)
        if why:
            self.outcome.stopped[sc.index] = why
        return why is not None

    def _values(self, sc: Scenario, rep: int) -> dict[int, list[float]]:
        """Each workload's trial values up to repetition `rep`: a resume decides as the first run did."""
        return {w: [v for r, v in got if r <= rep] for w, got in self.values.get(sc.index, {}).items()}

    def _finish(self, sc: Scenario) -> None:
        if sc.index in self.failed_builds:
            return
        why = self.outcome.stopped.get(sc.index)
        if self.rule is not None and why is None:
            why = adaptive.decide(sc, self._values(sc, self.max_reps), self.rule, self.max_reps) or ""
        self.store.set_scenario(self.cid, sc.index, "done", why or None)

    # ---- one repetition of a scenario ----------------------------------------------------------------------
    def _todo(self, sc: Scenario, rep: int) -> list[int]:
        only = self.only.get(sc.index)
        return [w for w in range(len(sc.workloads)) if not sc.workloads[w].background
                and (only is None or w in only) and (sc.index, rep, sc.workload_ids[w]) not in self.done]

    def _todo_any(self, sc: Scenario) -> bool:
        return any(self._todo(sc, rep) for rep in range(1, self.max_reps + 1))

    def _todo_seconds(self, sc: Scenario, rep: int) -> float:
        return sum(sc.workloads[w].expected_duration() + TRIAL_OVERHEAD_S for w in self._todo(sc, rep))

    def _repetition(self, sc: Scenario, rep: int, position: str) -> None:
        todo = self._todo(sc, rep)
        if not todo or sc.index in self.failed_builds:
            return
        self._play(sc, rep, position, todo)

    def _play(self, sc: Scenario, rep: int, position: str, todo: list[int]) -> None:
        topo = self._topology(sc, position)
        if topo is None:
            self.bar.advance(self.task, self._todo_seconds(sc, rep))
            return
        for w in todo:
            wl = sc.workloads[w]
            self.bar.update(self.task, description=f"{position} rep {rep}/{self.max_reps} {wl.kind}: {self.r._short(sc)}",
                            trial=True)
            began = time.monotonic()
            status, value = self._trial(sc, topo, rep, w)
            self.outcome.trials_ok += status == "ok"
            self.outcome.trials_failed += status == "failed"
            self.outcome.trials_invalid += status == "invalid"
            if value is not None:
                self.values.setdefault(sc.index, {}).setdefault(w, []).append((rep, value))
            self.bar.advance(self.task, wl.expected_duration() + TRIAL_OVERHEAD_S)
            if self.exp.cooldown:
                time.sleep(self.exp.cooldown)
            self.spent.setdefault((sc.index, w), []).append(time.monotonic() - began)

    def _topology(self, sc: Scenario, position: str) -> Topology | None:
        if sc.index not in self.ran:
            self.store.set_scenario(self.cid, sc.index, "running")
            self.ran.add(sc.index)
        key = sc.topology_key
        if self.topo is None or self.topo[0] != key:
            began = time.monotonic()
            topo = self._build(sc, position)
            if topo is None:
                return None
            self.topo = (key, topo)
            self._warm_up(sc, topo, position)
            self.build_s.append(time.monotonic() - began)  # the last one's teardown, the build and its warm-up
        if sc.index not in self.described:  # the interfaces as built: MTU, qdiscs, offloads
            if key not in self.descriptions:
                try:
                    self.descriptions[key] = environment.scenario_interfaces(self.topo[1])
                except CommandError as exc:  # a host lost right after the build: its trials fail, with the reason
                    self.descriptions[key] = {"error": str(exc)}
            self.store.set_scenario_environment(self.cid, sc.index, self.descriptions[key])
            self.described.add(sc.index)
        return self.topo[1]

    def _warm_up(self, sc: Scenario, topo: Topology, position: str) -> None:
        """The spec's `warmup` trials of each foreground workload on a fresh build, measured and thrown away."""
        for _ in range(self.exp.warmup):
            for wl in sc.workloads:
                if not wl.background:
                    self.bar.update(self.task, description=f"{position} warm-up {wl.kind}: {self.r._short(sc)}")
                    noisy = self.outcome.trials_noisy
                    with rawlog.recording():
                        self._measured(sc, topo, wl)
                    self.outcome.trials_noisy = noisy  # a warm-up is no trial

    def _build(self, sc: Scenario, position: str) -> Topology | None:
        self._teardown()
        self.bar.update(self.task, description=f"{position} building: {self.r._short(sc)}")
        try:
            placement = self.r.hosts.open(sc)  # booting or reusing guests, connecting
        except Unavailable as exc:
            self.failed_builds.add(sc.index)
            self.outcome.scenarios_failed += 1
            self.store.set_scenario(self.cid, sc.index, "failed", str(exc))
            self.r.console.print(f"[red]scenario {sc.index} ({sc.key}):[/] {exc}")
            return None
        topo = Topology(sc, self.ledger, placement=placement)
        began = time.monotonic()
        try:
            topo.build()
        except BuildError as exc:
            topo.teardown()
            self.failed_builds.add(sc.index)
            if isinstance(exc, Refused):  # a level refused (offloads, steering, irq_affinity, a node's CPUs)
                self.outcome.scenarios_runnable -= 1
                self.store.set_scenario(self.cid, sc.index, "skipped", str(exc))
                self.r.console.print(f"[yellow]scenario {sc.index} ({escape(sc.key)}) skipped:[/] {escape(str(exc))}",
                                     highlight=False)  # escaped: ethtool's `[fixed]` is no markup
                return None
            self.outcome.scenarios_failed += 1
            self.store.set_scenario(self.cid, sc.index, "failed", f"build failed: {exc}")
            self.r.console.print(f"[red]scenario {sc.index} ({sc.key}) failed to build:[/] {exc}")
            return None
        except BaseException:
            topo.teardown()
            raise
        self.outcome.builds += 1
        self.outcome.topology_s += time.monotonic() - began
        self.build = {"n": self.outcome.builds, "s": round(time.monotonic() - began, 4)}  # kept with its trials
        self.bar.advance(self.task, BUILD_OVERHEAD_S)
        return topo

    def _teardown(self) -> None:
        if self.topo is not None:
            _, topo, self.topo = *self.topo, None
            began = time.monotonic()
            KEPT.stop_all()
            topo.teardown()
            self.outcome.topology_s += time.monotonic() - began

    # ---- one trial ---------------------------------------------------------------------------------------
    def _trial(self, sc: Scenario, topo: Topology, rep: int, w: int) -> tuple[str, float | None]:
        """Run, judge and store one trial; returns its status and its main metric's value (None unless ok)."""
        wl = sc.workloads[w]
        KEPT.keep_only([wl, *(b for b in sc.workloads if b.background)], topo.pairs)  # none on this trial's ports
        started = time.time()
        meta = {"vm_mtu": sc.vm_mtu, "underlay_mtu": sc.underlay_mtu, "prefix": topo.prefix, "order": self.plan,
                "build": self.build,  # the build of the topology it ran on: its number in this run and seconds
                "pairs": [p.meta | {"client_addr": p.client.addr, "server_addr": p.server.addr} for p in topo.pairs],
                "workload_name": wl.name}
        status, error, samples, extra, hung = self._attempt(sc, topo, wl)
        if hung:  # the first attempt's reason stays with the trial: a reader sees it was tried twice
            self.r.console.print(f"[yellow]trial hung[/] (scenario {sc.index}, rep {rep}, {wl.kind}): {error}; "
                                 "trying once more", highlight=False)
            meta["retried_after"] = error
            self.outcome.trials_retried += 1
            started = time.time()
            status, error, samples, extra, _ = self._attempt(sc, topo, wl)
        folded = extra.pop(FOLDED, None)
        meta |= extra
        if status == "failed":
            samples = []
        ended = time.time()
        if "phases" in meta:  # the phases add up to the trial's time: the rest is judging it
            meta["phases"]["judge"] = round(max(0.0, ended - started - sum(meta["phases"].values())), 4)
        try:
            tid = self.store.save_trial(self.cid, sc.index, rep, sc.workload_ids[w], wl.kind, wl.params.model_dump(),
                                        status, error, started, ended, samples, meta, raw=self.raw)
            if folded and status != "failed":
                self._save_profile(tid, folded)
        except StoreError:  # the results file cannot take the trial (a full disk): measuring on would lose them all
            raise
        except Exception as exc:  # a bug in what is stored fails this trial: try to record that much, then go on
            status, error = "failed", f"store: {_last_line(exc)}"
            try:
                self.store.save_trial(self.cid, sc.index, rep, sc.workload_ids[w], wl.kind, wl.params.model_dump(),
                                      status, error, started, time.time(), [], {})
            except Exception:
                pass
        self.done.add((sc.index, rep, sc.workload_ids[w]))
        self._steal_at_start()
        if status != "ok":
            self.r.console.print(f"[{'red' if status == 'failed' else 'yellow'}]trial {status}[/] "
                                 f"(scenario {sc.index}, rep {rep}, {wl.kind}): {error}", highlight=False)
        return status, adaptive.trial_value(samples, wl, self.rule) if status == "ok" else None

    def _save_profile(self, tid: int, folded: dict) -> None:
        """The trial's stacks; losing them loses the flame graph only, never the trial (its figures are samples)."""
        try:
            profiles.save(self.store, tid, folded)
        except Exception as exc:
            self.r.console.print(f"[yellow]profile of trial {tid} not stored:[/] {_last_line(exc)}", highlight=False)

    def _steal_at_start(self) -> None:
        """The steal at the campaign's start, over the span watched up to its first trial's end (start-up, build,
        that trial) instead of a 0.5-s sleep before anything ran."""
        env = getattr(self.r, "steal_env", None)
        if env is None or trial.WATCH is None:
            return
        self.r.steal_env = None
        steal = trial.WATCH.steal(0)
        if steal == steal:  # not nan
            env["cpu_steal_ratio_at_start"] = round(steal, 4)
            self.store.set_campaign(self.cid, environment=env)

    def _attempt(self, sc: Scenario, topo: Topology, wl) -> tuple[str, str | None, list[Sample], dict, bool]:
        """Measure and judge once: status, error, samples, trial metadata, and whether a tool hung. The commands
        and what the tools printed are kept (self.raw) for the trial's record."""
        with rawlog.recording() as record:
            try:
                return self._measured(sc, topo, wl)
            finally:
                self.raw = rawlog.pack(record)

    def _measured(self, sc: Scenario, topo: Topology, wl) -> tuple[str, str | None, list[Sample], dict, bool]:
        try:
            samples, extra = measure(sc, topo, wl, began=time.time(), offloads=self.read_offloads,
                                     steering=self.read_steering, pinning=self.read_pinning)
        except TrialFailure as exc:
            return "failed", str(exc), [], {}, exc.hung
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # a parser or probe bug fails this trial, not the campaign
            return "failed", _last_line(exc), [], {}, False
        verdict = guards.judge(samples, ceiling=ceiling(sc, wl), crossing=_crossing(topo, wl),
                               foreign_busy=extra.get("foreign_busy_ratio"), offer=wl.offer())
        if verdict.flags:  # shown with the trial's numbers: a load not offered, a goodput no ceiling checked
            extra["flags"] = extra.get("flags", []) + verdict.flags
        noisy = verdict.noisy + extra.get("background_uncovered", [])
        if noisy:
            extra["noisy"] = noisy
            self.outcome.trials_noisy += 1
        return ("invalid" if verdict.invalid else "ok"), "; ".join(verdict.invalid) or None, verdict.samples, extra, False


def by_topology(block: list[Scenario]) -> list[Scenario]:
    """A shuffled block with the scenarios that share a topology next to each other (the groups in the order of
    their first member, each group's members in shuffled order): a split-plot order, where the topology, the
    factor that is costly to change, is randomised per block and the workloads' parameters within it."""
    groups: dict[str, list[Scenario]] = {}
    for sc in block:
        groups.setdefault(sc.topology_key, []).append(sc)
    return [sc for group in groups.values() for sc in group]
