"""A campaign: build each scenario's topology, run every workload for every repetition while the probes
watch, commit each trial as it finishes, tear down. Ctrl-C or SIGTERM stops cleanly and can be resumed."""
from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import environment
from .capabilities import detect
from .ledger import Ledger
from .matrix import Scenario, expand
from .probes.interfaces import InterfaceProbe
from .probes.process import ProcessProbe
from .probes.procstat import SystemProbe
from .executor import CommandError, LocalExecutor
from .spec import LoadedSpec, loads
from .sample import Sample
from .store import Store
from .guests.base import GuestError
from .topology import BuildError, Topology
from .workloads.base import WorkloadError

TRIAL_OVERHEAD_S = 0.5   # probes, servers starting, commit: for the time estimate only
BUILD_OVERHEAD_S = 1.0


class Background(threading.Thread):
    """A workload that runs alongside a trial (a CPU load, a flood); its samples are kept with role=background."""

    def __init__(self, workload, pairs):
        super().__init__(daemon=True)
        self.workload, self.pairs = workload, pairs
        self.samples: list[Sample] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            got = self.workload.run(self.pairs)
            self.samples = [Sample(s.metric, s.value, s.unit, s.metadata | {"role": "background",
                                   "background_workload": self.workload.kind}, s.t) for s in got]
        except WorkloadError as exc:
            self.error = f"background {self.workload.kind}: {exc}"

    def join(self, timeout: float | None = None) -> list[Sample]:
        super().join(self.workload.expected_duration() + 30 if timeout is None else timeout)
        return self.samples


@dataclass
class Outcome:
    campaign: int
    status: str          # done | interrupted
    trials_ok: int = 0
    trials_failed: int = 0


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM takes the same clean path as Ctrl-C: topology removed, finished trials kept."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class Runner:
    def __init__(self, store: Store, console: Console | None = None, progress: bool = True, testbed=None,
                 caps=None):
        self.store = store
        self.testbed, self.caps = testbed, caps  # a real testbed (testbed.Testbed, preflighted) and what it offers
        self.site = None
        self.console = console or Console(stderr=True)
        self.progress = progress

    def run(self, spec: LoadedSpec | None = None, resume: int | None = None) -> Outcome:
        caps = self.caps or detect()
        if resume is not None:
            camp = self.store.campaign(resume)
            spec = loads(camp.spec_text, camp.source)
            cid = camp.id
        else:
            env = environment.capture(caps)
            if self.testbed:
                from .sites import TestbedSite
                env["testbed"] = TestbedSite(self.testbed, None).environment()
            cid = self.store.new_campaign(spec.experiment.name, spec.source, spec.text, spec.sha256, env)
        scenarios = expand(spec.experiment, caps)
        if self.testbed:
            from .sites import TestbedSite
            for sc in scenarios:
                why = None if sc.skip else TestbedSite(self.testbed, None).check(sc)
                sc.skip = f"testbed: {why}" if why else sc.skip
                sc.notes = sc.notes + TestbedSite(self.testbed, None).notes(sc)
        if resume is None:
            for sc in scenarios:
                self._put(cid, sc)
        done = self.store.done_trials(cid)
        todo = [(sc, [(r, w) for r in range(1, spec.experiment.repetitions + 1) for w in range(len(sc.workloads))
                      if not sc.workloads[w].background and (sc.index, r, sc.workload_ids[w]) not in done])
                for sc in scenarios if sc.skip is None]
        todo = [(sc, trials) for sc, trials in todo if trials]
        self.varying = [f for f in scenarios[0].labels if len({sc.labels[f] for sc in scenarios}) > 1] if scenarios else []
        ledger = Ledger.create()
        if self.testbed:
            from .sites import TestbedSite
            self.site = TestbedSite(self.testbed, ledger)
        from .guests.machine import GuestMachine
        self.guest = GuestMachine(ledger)  # booted at the first `kernel: guest` scenario, if any
        self.store.set_campaign(cid, prefix=ledger.prefix, status="running")
        outcome = Outcome(cid, "interrupted")
        try:
            with _sigterm_as_interrupt(), self._progress() as bar:
                total = sum(BUILD_OVERHEAD_S + sum(sc.workloads[w].expected_duration() + TRIAL_OVERHEAD_S
                                                   for _, w in trials) for sc, trials in todo)
                task = bar.add_task("starting", total=max(total, 1e-9))
                for k, (sc, trials) in enumerate(todo, 1):
                    self._scenario(cid, sc, trials, ledger, spec.experiment, bar, task, f"{k}/{len(todo)}", outcome)
                outcome.status = "done"
        except KeyboardInterrupt:
            self.console.print(f"[yellow]Interrupted: topology removed, finished trials kept. "
                               f"Continue with: vnetbench run --resume {cid}[/]")
        finally:
            self.store.set_campaign(cid, status=outcome.status, finished=time.time())
            self.guest.close()
            ledger.remove_all()
            if self.site:
                self.site.close()
            for why in getattr(ledger, "pending", []):
                self.console.print(f"[red]not cleaned: {why}[/]; retry with: vnetbench clean")
        return outcome

    def _put(self, cid: int, sc: Scenario) -> None:
        self.store.put_scenario(cid, sc.index, sc.key, sc.levels, sc.labels,
                                "skipped" if sc.skip else "pending", sc.skip, sc.implementation, sc.notes)

    def _progress(self) -> Progress:
        return Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                        TextColumn("left"), TimeRemainingColumn(), console=self.console,
                        disable=not self.progress, transient=False)

    def _short(self, sc: Scenario) -> str:
        return ", ".join(f"{f}={sc.labels[f]}" for f in self.varying) or sc.labels["switch"]

    def _scenario(self, cid, sc, trials, ledger, exp, bar, task, position, outcome) -> None:
        bar.update(task, description=f"scenario {position} building: {self._short(sc)}")
        try:
            machine = self.guest.executor() if sc.levels.get("kernel") == "guest" else None
        except GuestError as exc:
            self.store.set_scenario(cid, sc.index, "failed", f"guest did not come up: {exc}")
            self.console.print(f"[red]scenario {sc.index} ({sc.key}): the guest did not come up:[/] {exc}")
            bar.advance(task, BUILD_OVERHEAD_S + sum(sc.workloads[w].expected_duration() for _, w in trials))
            return
        topo = Topology(sc, ledger, site=self.site, machine=machine)
        try:
            try:
                topo.build()
            except BuildError as exc:
                self.store.set_scenario(cid, sc.index, "failed", f"build failed: {exc}")
                self.console.print(f"[red]scenario {sc.index} ({sc.key}) failed to build:[/] {exc}")
                bar.advance(task, BUILD_OVERHEAD_S + sum(sc.workloads[w].expected_duration() for _, w in trials))
                return
            bar.advance(task, BUILD_OVERHEAD_S)
            for n, (rep, w) in enumerate(trials, 1):
                wl = sc.workloads[w]
                bar.update(task, description=f"scenario {position} rep {rep}/{exp.repetitions} {wl.kind}: "
                                             f"{self._short(sc)}")
                ok = self._trial(cid, sc, topo, rep, w)
                outcome.trials_ok += ok
                outcome.trials_failed += not ok
                bar.advance(task, wl.expected_duration() + TRIAL_OVERHEAD_S)
                if exp.cooldown:
                    time.sleep(exp.cooldown)
            self.store.set_scenario(cid, sc.index, "done")
        finally:
            topo.teardown()

    def _trial(self, cid: int, sc: Scenario, topo: Topology, rep: int, w: int) -> bool:
        wl = sc.workloads[w]
        # in a guest: the guest kernel's own /proc/stat and interface counters (its CPUs, interrupts, switches)
        probes = self.site.probes(topo) if self.site else [
            SystemProbe(topo.machine), *[InterfaceProbe(h.exec) for h in topo.hosts]] if topo.machine else [
            SystemProbe(LocalExecutor()), ProcessProbe(LocalExecutor(), topo.daemon_pids()),
            *[InterfaceProbe(h.exec) for h in topo.hosts]]
        started = time.time()
        for p in probes:
            p.start()
        error, samples = None, []
        background = [Background(b, b.select(topo.pairs)) for b in sc.workloads if b.background]
        try:
            for b in background:
                b.start()
            samples = wl.run(wl.select(topo.pairs))
        except (WorkloadError, CommandError) as exc:  # CommandError: e.g. a testbed host stopped answering
            error = str(exc)
        finally:
            probe_samples = [s for p in probes for s in p.stop()]
            for b in background:
                samples += b.join()
                error = error or b.error
        if self.site:  # on a testbed every sample says which hosts it came from
            samples = self.site.tag(topo, samples)
        meta = {"vm_mtu": sc.vm_mtu, "underlay_mtu": sc.underlay_mtu, "prefix": topo.prefix,
                "pairs": [p.meta | {"client_addr": p.client.addr, "server_addr": p.server.addr} for p in topo.pairs]}
        self.store.save_trial(cid, sc.index, rep, sc.workload_ids[w], wl.kind, wl.params.model_dump(), "failed" if error else "ok",
                              error, started, time.time(), samples + (probe_samples if not error else []), meta)
        return error is None
