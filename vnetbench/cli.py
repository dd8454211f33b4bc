"""The `vnetbench` command."""
from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.markup import escape as markup_escape
from rich.table import Table
from typer.core import TyperGroup

from .results.store import DEFAULT_DB, Store, StoreError

if TYPE_CHECKING:
    from .experiment.spec import LoadedSpec


def expand(*args, **kwargs):
    from .experiment.matrix import expand as expand_
    return expand_(*args, **kwargs)


class _Commands(TyperGroup):
    """Every command: a results-file fault is one line and exit 2, wherever it happens."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except StoreError as exc:
            err.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:  # Ctrl-C before a run has anything to clean up
            raise typer.Exit(128 + signal.SIGINT) from None


app = typer.Typer(cls=_Commands, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every command
                  help="What does this virtual-network technology cost me? Build, measure, compare, clean up.\n\n"
                       "Environment: VNETBENCH_STATE_DIR is where runs record what they create, for `clean` "
                       "(default /run/vnetbench); VNETBENCH_DB_TIMEOUT is how many seconds a command waits for "
                       "a results file another process is writing (default 30).")
# Wrapped to the terminal; to $COLUMNS or 100 columns when there is none (piped to a file or another program).
out = Console() if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else Console(width=100)
err = Console(stderr=True)
DB = typer.Option(DEFAULT_DB, "--db", help="SQLite file holding the results (waits up to $VNETBENCH_DB_TIMEOUT "
                                           "seconds, default 30, while another process writes it)")


def version_text() -> str:
    """The installed version, and the commit when the package runs from a git checkout."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        text = f"vnetbench {version('vnetbench')}"
    except PackageNotFoundError:
        text = "vnetbench (not installed)"
    import subprocess
    try:
        git = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "describe", "--always", "--dirty",
                              "--abbrev=12"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return text
    return text + (f" (commit {git.stdout.strip()})" if git.returncode == 0 and git.stdout.strip() else "")


def _print_version(value: bool) -> None:
    if value:
        print(version_text())
        raise typer.Exit(0)


@app.callback()
def _main(show_version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                            help="print the version (and git commit) and exit")) -> None:
    if os.environ.get("VNETBENCH_HOSTS"):  # a host backend named from outside: checked before anything runs
        from .hosts import choose
        try:
            choose({})
        except KeyError as exc:
            fail(exc.args[0])


def fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def need_root() -> None:
    if os.geteuid() != 0:
        fail("vnetbench builds network namespaces and devices and must run as root (try: sudo vnetbench ...)")


PROFILE = typer.Option(None, "--profile", help="a profile of the spec or suite: smoke, quick or full")
TESTBED = typer.Option(None, "--testbed", help="a testbed file (or Ansible inventory): real hosts over SSH")


def load_testbed(path: str | None, reach: bool = True, probe_kernel: bool = True):
    """The testbed file, and (reach) every host reached and probed: (testbed, capabilities). Any problem: one
    line per host or field, exit 2, nothing built anywhere."""
    if path is None:
        return None, None
    from .hosts.lab import preflight, testbed
    try:
        bed = testbed.load(path)
        return bed, (preflight.preflight(bed, probe_kernel=probe_kernel) if reach else None)
    except testbed.TestbedError as exc:
        sys.stderr.write("".join(line + "\n" for line in exc.lines))
        raise typer.Exit(2)


def load_spec(path: Path | str, profile: str | None = None) -> LoadedSpec:
    from .experiment import spec as specmod
    if str(path).startswith("suite:") and profile is None:
        profile = "quick"  # a built-in suite without --profile runs its quick profile
    try:
        return specmod.load(path, profile)
    except specmod.SpecError as exc:
        sys.stderr.write("".join(line + "\n" for line in exc.lines))  # one line each, never wrapped
        raise typer.Exit(2)


def open_campaign(db: str, ref: str):
    store = Store(db, readonly=True)
    camp = store.campaign(ref)
    if camp is None:
        fail(f"no campaign '{ref}' in {db}; `vnetbench list --db {db}` shows them")
    return store, camp


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
           testbed: Optional[str] = TESTBED) -> None:
    """What this machine (or each testbed host) offers: tools, kernel features and every datapath, with the reason
    when unavailable."""
    need_root()
    from .capabilities import detect, local_installed
    bed, caps = load_testbed(testbed)
    caps = caps or detect()
    paths = datapath_report(caps)
    pins = _pinning_report(bed)
    from .hosts import choose
    guest = choose({"kernel": "guest"}, bed).info()  # the guest backend's (none on a testbed)
    if guest and guest.get("available"):
        guest["datapaths"] = datapath_report(caps, {"kernel": "guest"})
    # every other kind of guest, as far as it is known without booting one (none on a testbed)
    others = [i for i in (choose({"kernel": "qemu"}, bed).info(),) if i]
    if as_json:
        hosts = {h.name: h.caps.as_dict() | {"facts": h.facts, "qemu": _qemu_report(h)}
                 for h in bed.hosts} if bed else {}
        out.print_json(json.dumps(caps.as_dict() | {"datapaths": paths} | ({"hosts": hosts} if bed else {})
                                  | ({"guest": guest} if guest else {}) | ({"guests": others} if others else {})
                                  | {"tuning": tuning_report(bed), "cpu_pinning": pins}))
        return
    if bed:
        table = Table(title=f"testbed {testbed}", title_justify="left")
        for col in ("host", "ssh", "kernel", "cpus", "nic", "mtu", "driver", "clock offset", "round trip"):
            table.add_column(col)
        for h in bed.hosts:
            f = h.facts
            table.add_row(h.name, h.target.destination, f.get("kernel", ""), f.get("cpus", ""),
                          f"{h.nic} {h.address}", f.get("nic_mtu", ""), f.get("nic_driver") or "?",
                          f"{f['clock_offset_s'] * 1e3:+.1f} ms" if f.get("clock_offset_s") is not None else "?",
                          f"{f['round_trip_s'] * 1e3:.1f} ms")
        out.print(table)
        _qemu_table(bed)
    groups = [(f"{title} on {h.name}", getattr(h.caps, attr) or {}) for h in bed.hosts
              for title, attr in (("tools", "tools"), ("kernel features", "kernel"), ("installed", "installed"))] \
        if bed else [("tools", caps.tools), ("kernel features", caps.kernel), ("installed", local_installed())]
    for title, items in groups:
        table = Table(title=title, title_justify="left")
        for col in ("name", "available", "version / reason"):
            table.add_column(col)
        for name, f in items.items():
            table.add_row(name, "[green]yes[/]" if f.ok else "[red]no[/]", f.detail)
        out.print(table)
    if guest:
        table = Table(title="guests with their own kernel (kernel: guest | qemu, vm_kernel)", title_justify="left")
        for col in ("backend", "available", "kernel / reason", "boot", "memory", "kernel features inside the guest"):
            table.add_column(col)
        for g in (guest, *others):
            table.add_row(*_guest_row(g, caps))
        out.print(table)
        for note in (n for g in others for n in g.get("notes", [])):
            out.print(markup_escape(note), highlight=False)
        if guest.get("probed", "now") != "now":
            out.print(f"guest probed {guest['probed']}; delete that file to probe again")
    table = Table(title="datapaths", title_justify="left")
    for col in ("factor", "level", "available", "implementation / reason"):
        table.add_column(col)
    for d in paths + ((guest or {}).get("datapaths") or []):
        table.add_row(d["factor"], d["level"], "[green]yes[/]" if d["ok"] else "[red]no[/]",
                      d["implementation"] if d["ok"] else d["reason"])
    out.print(table)
    _tuning_table(bed)
    _pinning_table(pins)
    swan = caps.strongswan()
    out.print(f"strongSwan: a charon started as a run starts it loaded {' '.join(swan.plugins)}" if not swan.error
              else f"strongSwan: {swan.error}", highlight=False)  # wrapped to the console: it was 167 wide


def tuning_report(bed) -> list[dict]:
    """Whether each host can take the tuning factors (steering: RPS/XPS masks; irq_affinity: its NIC's IRQs), with
    the reason when not: this machine's, or each testbed host's over SSH."""
    import subprocess

    from .build import steering
    from .hosts.lab import irq
    from .hosts.lab import testbed as tb
    from .system.executor import CommandError
    if not bed:
        here = steering.support(subprocess.run(["sh", "-c", steering.PROBE_SCRIPT], capture_output=True,
                                               text=True).stdout)
        return [{"host": "this machine", "factor": "steering", "ok": here[0], "detail": here[1]},
                {"host": "this machine", "factor": "irq_affinity", "ok": False,
                 "detail": "irq_affinity needs a lab's real NIC: see doctor --testbed"}]
    rows = []
    for h in bed.hosts:
        ex = tb.executor(h)
        try:
            got = steering.support(ex.run_script(steering.PROBE_SCRIPT, timeout=30, check=False).stdout)
        except CommandError as exc:
            got = (False, str(exc))
        rows.append({"host": h.name, "factor": "steering", "ok": got[0], "detail": got[1]})
        ok, detail = irq.support(ex, h.name, h.nic)
        rows.append({"host": h.name, "factor": "irq_affinity", "ok": ok, "detail": detail})
        ex.close()
    return rows


def _tuning_table(bed) -> None:
    table = Table(title="tuning factors (steering, irq_affinity)", title_justify="left")
    for col in ("host", "factor", "available", "how / reason"):
        table.add_column(col)
    for r in tuning_report(bed):
        table.add_row(r["host"], r["factor"], "[green]yes[/]" if r["ok"] else "[red]no[/]", markup_escape(r["detail"]))
    out.print(table)


GUESTS_PINNED = ("a guest on this machine is pinned whole (every thread of its UML or qemu processes); kernel: guest "
                 "(every host in one guest) and guest VMs on testbed hosts are skipped with the reason")


def _pinning_report(bed) -> dict:
    """Where the `cpu_pinning` factor can pin (build/pinning.py): this machine (or each testbed host: its preflight
    tried `taskset -c FIRST true` there), with its CPUs; guests cannot be pinned yet."""
    from .build.pinning import can_pin
    from .core import pinning
    from .system.executor import LocalExecutor
    if bed:
        hosts = {}
        for h in bed.hosts:
            word, _, rest = (h.facts.get("cpu_pinning") or "no ? not asked (an older preflight)").partition(" ")
            allowed, _, said = rest.partition(" ")
            n = len(pinning.cpus(allowed) or [])
            hosts[h.name] = {"ok": word == "yes", "cpus": allowed, "detail": f"{n} CPUs ({allowed}); taskset -c "
                             f"{allowed.split(',')[0].split('-')[0]} true pinned" if word == "yes" else said}
    else:
        ok, detail = can_pin(LocalExecutor())
        hosts = {"this machine": {"ok": ok, "cpus": pinning.as_text(sorted(os.sched_getaffinity(0))),
                                  "detail": detail}}
    return {"hosts": hosts, "guests": {"ok": not bed, "detail": GUESTS_PINNED}}


def _pinning_table(report: dict) -> None:
    table = Table(title="cpu pinning (cpu_pinning: taskset -c on each node's processes)", title_justify="left")
    for col in ("where", "can pin", "CPUs / reason"):
        table.add_column(col)
    for name, r in report["hosts"].items():
        table.add_row(name, "[green]yes[/]" if r["ok"] else "[red]no[/]", markup_escape(r["detail"]))
    table.add_row("guests", "[green]yes[/]" if report["guests"]["ok"] else "[red]no[/]", report["guests"]["detail"])
    out.print(table)


def _qemu_report(host) -> dict:
    from .guests import qemu
    return qemu.host_report(host.facts, host.qemu_kernel)


def _qemu_table(bed) -> None:
    """Each host's side of qemu guest VMs (vm_kernel: qemu): KVM, vhost-net, the guest kernel image."""
    table = Table(title="qemu guest VMs on each host (vm_kernel: qemu)", title_justify="left")
    for col in ("host", "KVM", "vhost-net", "guest kernel image / reason"):
        table.add_column(col, overflow="fold")  # a path cut short would name no file
    for h in bed.hosts:
        r = _qemu_report(h)
        kvm = "[green]yes[/]" if r["kvm"] else f"[red]no[/]: {markup_escape(r['kvm_reason'])} (TCG)"
        table.add_row(h.name, kvm, "[green]yes[/]" if r["vhost_net"] else "[red]no[/]",
                      markup_escape(r["kernel"] if r["available"] else r["reason"]))
    out.print(table)


def _guest_row(g: dict, caps) -> list[str]:
    """One guest kind in doctor's table: its kernel or why not, its probe's boot and memory, the features found in
    it that this machine lacks marked so (or when it will be probed)."""
    feats = [f"{k}{'' if caps.has(k) else ' (not here)'}" for k, ok in g.get("kernel_features", {}).items() if ok]
    return [markup_escape(g["backend"]), "[green]yes[/]" if g["available"] else "[red]no[/]",
            markup_escape((g["kernel"] if g["available"] else g["reason"]) or ""),
            f"{g['boot_s']:.2f} s" if g.get("boot_s") else "-", f"{g['memory_mb']:.0f} MB" if g.get("memory_mb") else "-",
            markup_escape(", ".join(feats) or g.get("probed", ""))]


def datapath_report(caps, extra: dict | None = None) -> list[dict]:
    """Every switch x overlay, attach and encryption level, checked through the same matrix logic a run uses."""
    from . import datapaths
    from .experiment import spec as specmod
    reg = datapaths.load_all()
    probes = [("switch+overlay", {"switch": s, "overlay": o}) for s in reg["switch"] for o in reg["overlay"]]
    probes += [("attach", {"attach": a}) for a in reg["attach"] if a != "switch"]
    probes += [("encryption", {"encryption": e}) for e in reg["encryption"] if e != "none"]
    from .datapaths.ipsec import CIPHERS  # every IPsec cipher: each is checked against what charon really loaded
    probes += [("encryption", {"encryption": {"type": "ipsec", "cipher": c}}) for c in CIPHERS
               if c != IPSEC_DEFAULT_CIPHER]
    result = []
    for factor, levels in probes:
        exp = specmod.Experiment(name="doctor", workloads=[{"type": "ping"}], factors=levels | (extra or {}))
        sc = expand(exp, caps)[0]
        impl = " + ".join(v for v in sc.implementation.values() if v)
        where = "".join(f" ({k}: {v})" for k, v in (extra or {}).items())
        result.append({"factor": factor + where, "level": "+".join(sc.labels[f] for f in levels), "ok": sc.skip is None,
                       "implementation": impl, "reason": sc.skip or ""})
    return result


IPSEC_DEFAULT_CIPHER = "aes-128-gcm"  # the plain `ipsec` level above


def _card_coverage(loaded, scenarios) -> str:
    """plan's lines on a card: its checkable claims, each cell no runnable scenario measures, each workload no claim
    names (what a card profile should not spend time on)."""
    from .build.topology import comment
    from .results.scorecard import coverage
    exp = loaded.experiment
    if not exp.scorecard:
        return ""
    cov = coverage(exp.model_dump(), scenarios)
    lines = [f"scorecard: {cov.claims} checkable claims; {len(cov.unmeasured)} cells no runnable scenario measures, "
             f"{len(cov.unneeded)} workloads no claim names"]
    lines += _first(f"unmeasured {x}" for x in cov.unmeasured) + _first(f"unneeded {x}" for x in cov.unneeded)
    return "\n".join(comment(x) for x in lines) + "\n"


PLAN_LIST_MAX = 8  # lines of one kind before the rest is counted: a profile that is not the card misses most cells


def _first(lines) -> list[str]:
    lines = list(lines)
    if len(lines) <= PLAN_LIST_MAX:
        return [f"  {x}" for x in lines]
    return [f"  {x}" for x in lines[:PLAN_LIST_MAX - 1]] + [f"  ... and {len(lines) - PLAN_LIST_MAX + 1} more"]


@app.command()
def plan(spec: str = typer.Argument(..., help="experiment file, or suite:NAME"), profile: Optional[str] = PROFILE,
         testbed: Optional[str] = TESTBED,
         as_json: bool = typer.Option(False, "--json", help="machine-readable: each scenario, its steps and commands")
         ) -> None:
    """Print the matrix and the exact commands each host would run, as a shell script. Runs nothing."""
    need_root()
    from .build.topology import Topology, comment
    from .capabilities import detect
    from .hosts import Hosts
    loaded = load_spec(spec, profile)
    bed, caps = load_testbed(testbed)
    hosts = Hosts(None, bed)  # the backends `run` would choose, opened for showing only
    scenarios = expand(loaded.experiment, caps or detect(), hosts)
    if as_json:
        return _plan_json(spec, scenarios, hosts)
    runnable = [s for s in scenarios if not s.skip]
    # Plain text, never wrapped: a wrapped comment would put the rest of the comment on a line of its own.
    sys.stdout.write("#!/bin/sh\n" + comment(
        f"vnetbench plan for {spec}: {len(scenarios)} scenarios, {len(runnable)} runnable, "
        f"{len(scenarios) - len(runnable)} skipped; repetitions: {loaded.experiment.repetitions}.") +
        "\n" + comment("A run uses its own prefix instead of vb0000.") + "\n" + _card_coverage(loaded, scenarios))
    for sc in scenarios:
        shown = ", ".join(f"{k}={v}" for k, v in sc.shown_labels.items())  # as show and the report name it
        lines = ["", comment(f"---- scenario {sc.index}: {shown}")]
        if sc.skip:
            sys.stdout.write("\n".join(lines + [comment(f"SKIPPED: {sc.skip}")]) + "\n")
            continue
        lines.append(comment(f"implementation: {sc.implementation}; vm mtu {sc.vm_mtu}, underlay mtu {sc.underlay_mtu}"))
        lines += [comment(f"note: {n}") for n in sc.notes]
        topo = Topology(sc, None, placement=hosts.plan(sc))
        lines += [comment(text) for text in topo.placement.describe(topo)]
        lines.append(topo.script())
        for wl in sorted(sc.workloads, key=lambda w: not w.background):  # as a run: the loads first, then each trial
            where = [f"pairs {','.join(map(str, wl.only_pairs))}"] if wl.only_pairs else []
            where += [f"to the server of pair {wl.target_pair}"] if wl.target_pair else []
            where += ["background, alongside every trial"] if wl.background else []
            where += ["profiled: perf record -a -g -e cpu-clock over the tool's window"] if wl.params.profile else []
            lines.append(comment(f"workload {wl.kind}" + (f" ({'; '.join(where)})" if where else "")))
            for cmd, argv in _commands(topo, wl):
                lines.append(shlex.join(argv) + (" &" if cmd.background else ""))
        lines += topo.placement.shown_teardown(topo)
        sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def _commands(topo, wl) -> list[tuple]:
    """(command, the argv as its node runs it: under taskset when the node is pinned) of a workload on a topology,
    as `plan` shows them."""
    places = {n.exec.name: n.exec for n in topo.nodes.values()}
    return [(c, places[c.where].wrap(places[c.where].pinned(c.argv)) if c.where in places else c.argv)
            for c in wl.commands(wl.select(topo.pairs))]


def _step_argv(topo, st) -> list[str]:
    """A command or daemon step's argv as its node runs it (a daemon under taskset when the node is pinned)."""
    if not st.argv:
        return []
    where = topo.executor(st.node)
    return where.wrap(where.pinned(st.argv) if st.tool == "daemon" else st.argv)


def _plan_json(spec: str, scenarios: list, hosts) -> None:
    """plan as data: each scenario (levels, skip, implementation, notes), the steps its build runs in order (node,
    tool, batch lines or argv) and each workload's commands, as `run` executes them."""
    from .build.topology import Topology
    out = []
    for sc in scenarios:
        item = sc.to_dict() | {"key": sc.key}
        if not sc.skip:
            topo = Topology(sc, None, placement=hosts.plan(sc))
            topo.emit()
            item["steps"] = [{"node": st.node, "tool": st.tool, "lines": st.lines, "argv": _step_argv(topo, st),
                              "name": st.name}
                             for wave in topo.placement.arrange(topo, topo.waves()) for st in wave]
            item["workloads"] = [{"kind": wl.kind, "background": wl.background,
                                  "commands": [argv for _, argv in _commands(topo, wl)]}
                                 for wl in sorted(sc.workloads, key=lambda w: not w.background)]
        out.append(item)
    sys.stdout.write(json.dumps({"spec": spec, "prefix": "vb0000", "scenarios": out}, default=str) + "\n")


@app.command()
def run(spec: Optional[str] = typer.Argument(None, help="experiment file, or suite:NAME"), db: str = DB,
        profile: Optional[str] = PROFILE,
        resume: Optional[int] = typer.Option(None, "--resume", help="continue this campaign id"),
        progress: bool = typer.Option(True, "--progress/--no-progress"),
        order: Optional[str] = typer.Option(None, "--order", help="random (default: shuffled blocks, seeded) or "
                                                                   "sequential; overrides the spec's `order`"),
        testbed: Optional[str] = TESTBED) -> None:
    """Build, measure, store and tear down every scenario of an experiment. Everything a run creates is recorded
    first under $VNETBENCH_STATE_DIR (default /run/vnetbench), so `vnetbench clean` can remove it after a crash."""
    from .report import tables as report
    need_root()
    from .run.campaign import CampaignBusy, Runner
    if (spec is None) == (resume is None):
        fail("give an experiment file, or --resume CAMPAIGN (not both)")
    if order not in (None, "random", "sequential"):
        fail(f"--order: '{order}' is not an order; use random or sequential")
    loaded = load_spec(spec, profile) if spec else None
    if resume is not None:
        check_resume(db, resume, testbed)
    bed, caps = load_testbed(testbed)
    store = Store(db)
    try:
        outcome = Runner(store, err, progress, testbed=bed, caps=caps).run(loaded, resume, order)
    except CampaignBusy as exc:
        fail(str(exc))
    except StoreError as exc:
        cid = getattr(exc, "campaign", None)
        from .run.campaign import place_of, resume_command
        fail(f"{exc}" + (f"; finished trials are kept: continue with {resume_command(cid, db, place_of(bed)['testbed'])}"
                         if cid else ""))
    if outcome.status != "done":
        raise typer.Exit(128 + (outcome.signal or signal.SIGINT))
    report.summary(store, outcome.campaign, narrow(), db)
    out.print(last_line(outcome, db, resume is not None), highlight=False)
    problems = []
    if outcome.trials_failed:
        problems.append(f"{outcome.trials_failed} of {outcome.trials_ok + outcome.trials_failed} trials failed")
    if outcome.trials_invalid:
        problems.append(f"{outcome.trials_invalid} trials invalid (impossible values; reasons above)")
    if outcome.scenarios_failed:
        problems.append(f"{outcome.scenarios_failed} of {outcome.scenarios_runnable} runnable scenarios failed to build")
    if not outcome.scenarios_runnable:
        problems.append("nothing ran: every scenario was skipped (reasons above)")
    if problems:
        fail("; ".join(problems), 1)


def check_resume(db: str, resume: int, testbed: str | None) -> None:
    """Before anything is probed or built: the results file exists (a resume never creates an empty one), holds
    the campaign, its stored spec still validates, and the place is the campaign's own."""
    from .experiment import spec as specmod
    from .run.campaign import wrong_place
    if not Path(db).is_file():
        fail(f"no results file {db}: --resume continues a campaign stored in one; give the --db it was run with")
    store = Store(db, readonly=True)
    camp = store.campaign(resume)
    if camp is None:
        fail(f"no campaign {resume} in {db}; `vnetbench list --db {db}` shows them")
    try:
        specmod.loads(camp.spec_text, camp.source or "<stored spec>")
    except specmod.SpecError as exc:
        sys.stderr.write("".join(f"campaign {resume} cannot be resumed by this vnetbench (start a new campaign): "
                                 f"{line}\n" for line in exc.lines))
        raise typer.Exit(2)
    why = wrong_place(camp, load_testbed(testbed, reach=False)[0], db)
    store.close()
    if why:
        fail(why)


@app.command("list")
def list_(db: str = DB, as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """Campaigns in the results file."""
    store = Store(db, readonly=True)
    import datetime as dt
    rows = [{"id": c.id, "name": c.name, "status": c.status,
             "created": dt.datetime.fromtimestamp(c.created, dt.timezone.utc).isoformat(timespec="seconds"),
             "scenarios": len(store.scenarios(c.id)), "trials": len(store.trials(c.id)), "spec": c.source or None}
            for c in store.campaigns()]
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    table = Table()
    for col in ("id", "name", "status", "created", "scenarios", "trials", "spec"):
        table.add_column(col)
    for c, r in zip(store.campaigns(), rows):
        table.add_row(str(c.id), c.name, c.status, dt.datetime.fromtimestamp(c.created).strftime("%Y-%m-%d %H:%M"),
                      str(r["scenarios"]), str(r["trials"]), c.source or "")
    out.print(table)


EXCLUDE_NOISY = typer.Option(False, "--exclude-noisy", help="leave out the trials the run flagged noisy (CPU steal, "
                                                               "a busy machine, a load that did not cover the test)")


def known_metrics(names: list[str] | None) -> None:
    """A metric name that is not one: one line naming it and the nearest names, exit 2 (every one of the 47 names
    made a line of 1,200 characters in which to look for the typo)."""
    import difflib

    from .catalog import METRICS
    for name in names or ():
        if name not in METRICS:
            near = difflib.get_close_matches(name, list(METRICS), n=3, cutoff=0.6)
            fail(f"--metric {name!r} is not a metric; " + (f"did you mean {' or '.join(near)}? " if near else "")
                 + "`vnetbench metrics` lists every one")


@app.command()
def show(campaign: str = typer.Argument("last", help="campaign id, or 'last'"), db: str = DB,
         metric: Optional[list[str]] = typer.Option(None, "--metric", "-m", help="only these metrics"),
         all_metrics: bool = typer.Option(False, "--all", help="every metric, not just the main ones"),
         wide: bool = typer.Option(False, "--wide", help="every statistic: n, median, IQR, mean, std, CV, min, max, "
                                                         "95% CIs of the mean and the median"),
         exclude_noisy: bool = EXCLUDE_NOISY,
         as_json: bool = typer.Option(False, "--json", help="machine-readable: every row with its per-trial values")
         ) -> None:
    """Per metric and scenario: median [95% CI], n and what ran, one line each (--wide: every statistic)."""
    from .report import tables as report
    known_metrics(metric)
    store, camp = open_campaign(db, campaign)
    chosen = tuple(metric) if metric else (None if all_metrics else report.DEFAULT_METRICS if wide
                                           else report.SHORT_METRICS)
    if as_json:
        sys.stdout.write(json.dumps(report.as_json(store, camp.id, tuple(metric) if metric else None, exclude_noisy),
                                    indent=1) + "\n")
        return
    tails = report.SHORT_TAILS if chosen in (report.DEFAULT_METRICS, report.SHORT_METRICS) else report.ALL_TAILS
    from .report import packet_rates
    from .results import dataset, scorecard
    with dataset.cached():  # the card, the tables and the packet rates read the campaign once (3 times: 0.25 s)
        if card := scorecard.for_campaign(store, camp.id):
            scorecard.print_card(card, out if wide else narrow())
        report.show(store, camp.id, out if wide else narrow(), chosen, wide=wide, exclude_noisy=exclude_noisy,
                    tails=tails)
        packet_rates.show(store, camp.id, out if wide else narrow())


def narrow() -> Console:
    """The console of the short summary: at most 100 columns, and no wider than the terminal (or $COLUMNS)."""
    from .report import tables as report
    return Console(width=min(out.width, report.COMPACT_WIDTH))


@app.command("compare")
def compare_(a: str = typer.Argument(..., help="campaign A (the baseline): id or 'last'"),
             b: Optional[str] = typer.Argument(None, help="campaign B (default: A, with --a-where/--b-where)"),
             db: str = DB, b_db: Optional[str] = typer.Option(None, "--b-db", help="B's results file (default: --db)"),
             a_where: list[str] = typer.Option([], "--a-where", help="select A's scenarios: FACTOR=LEVEL (repeatable)"),
             b_where: list[str] = typer.Option([], "--b-where", help="select B's scenarios: FACTOR=LEVEL (repeatable)"),
             metric: Optional[list[str]] = typer.Option(None, "--metric", "-m", help="only these metrics"),
             alpha: float = typer.Option(0.05, "--alpha", help="significance level, after Holm's correction"),
             fail_on_regression: Optional[str] = typer.Option(
                 None, "--fail-on-regression", help="exit 1 if a metric is significantly worse by more than this, e.g. 5%"),
             allow_missing: bool = typer.Option(False, "--allow-missing", help="with --fail-on-regression: a "
                                                "scenario that ran on one side only (e.g. failed to build) does not "
                                                "fail the gate"),
             gate: Optional[list[str]] = typer.Option(
                 None, "--gate", help="only this metric can fail --fail-on-regression (repeatable; default: all)"),
             fmt: str = typer.Option("table", "--format", help="table or json"),
             exclude_noisy: bool = EXCLUDE_NOISY) -> None:
    """B against A per scenario and metric: means, ratio with 95% CI, Welch p (Holm), better/worse/not significant."""
    from .report import compare as cmp
    if fmt not in ("table", "json"):
        fail(f"--format {fmt}: use table or json")
    if not 0 < alpha < 1:
        fail(f"--alpha {alpha}: use a level between 0 and 1, e.g. 0.05")
    store_a, camp_a = open_campaign(db, a)
    store_b, camp_b = open_campaign(b_db or db, b if b is not None else str(camp_a.id))
    try:
        threshold = cmp.parse_threshold(fail_on_regression) if fail_on_regression is not None else None
        side_a = cmp.Side(store_a, camp_a, cmp.parse_where(a_where, "--a-where"))
        side_b = cmp.Side(store_b, camp_b, cmp.parse_where(b_where, "--b-where"))
        if (camp_a.id, str(store_a.path), side_a.where) == (camp_b.id, str(store_b.path), side_b.where) and a_where:
            fail("--a-where and --b-where select the same scenarios; give B a different selection")
        if b is None and not a_where and not b_where:  # `compare last` alone was a table of 'not significant', exit 0
            fail(f"B is A (campaign {camp_a.id} of {store_a.path}): give campaign B, or split one campaign with "
                 f"--a-where FACTOR=LEVEL --b-where FACTOR=OTHER, e.g. --a-where overlay=none --b-where overlay=vxlan")
        rows = cmp.compare(side_a, side_b, metric or None, alpha, threshold, gate or None,
                           exclude_noisy=exclude_noisy)
        gone = cmp.missing(side_a, side_b)
        not_carried = cmp.uncarried([side_a, side_b], metric or None)
    except cmp.CompareError as exc:
        fail(str(exc))
    noisy = {k: noisy_trials(side) for k, side in (("a", side_a), ("b", side_b))}
    if fmt == "json":
        doc = json.loads(cmp.as_json(side_a, side_b, rows, alpha, threshold, gone))
        doc |= {"exclude_noisy": exclude_noisy, "noisy_trials": noisy, "not_carried": not_carried}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        console = narrow()
        console.print(cmp.table(side_a, side_b, rows, alpha, threshold, console.width))
        named = [m["scenario"] for m in gone] + [r.scenario for r in rows]
        keys = cmp.distinguishing(named) or list(dict.fromkeys(k for sc in named for k in sc))
        for line in not_carried:
            out.print(line, style="yellow", highlight=False, markup=False)
        for m in gone:  # named by what sets it apart (every factor, constant ones too, made lines of 200 columns)
            narrow().print(f"missing in {m['missing_in']}: " + ", ".join(f"{k}={m['scenario'][k]}" for k in keys
                                                                         if k in m["scenario"])
                           + f" ({m['why']})", highlight=False, markup=False)
        if noisy["a"] or noisy["b"]:
            out.print(f"trials flagged noisy while they ran (steal, other load, intervals above the ceiling): "
                      f"A {noisy['a']}, B {noisy['b']}; "
                      + ("left out (--exclude-noisy)" if exclude_noisy else "counted; --exclude-noisy leaves them out"),
                      style="yellow")
    if any(r.regression for r in rows):
        raise typer.Exit(1)
    if gone and threshold is not None and not allow_missing:
        err.print(f"{len(gone)} scenario{'s' if len(gone) != 1 else ''} ran on one side only: the gate fails "
                  f"(--allow-missing lets it pass)", highlight=False)
        raise typer.Exit(1)


def last_line(outcome, db: str, resumed: bool) -> str:
    """What this invocation ran. A resume counts only its own trials and says so: the table above counts the whole
    campaign, and "done, 0 trials ok" under a table of 12 trials read as if they were lost."""
    if resumed and not outcome.trials_ok + outcome.trials_failed + outcome.trials_invalid:
        return f"campaign {outcome.campaign}: {outcome.status}; nothing was left to run (results in {db})"
    return (f"campaign {outcome.campaign}: {outcome.status}, " + ("this run: " if resumed else "")
            + f"{outcome.trials_ok} trials ok, {outcome.trials_failed} failed"
            + (f", {outcome.trials_invalid} invalid" if outcome.trials_invalid else "")
            + (f", {outcome.trials_noisy} noisy (why: above, and in each trial's metadata)"
               if outcome.trials_noisy else "")
            + (f", {outcome.trials_retried} tried twice (a tool hung; metadata retried_after)"
               if outcome.trials_retried else "")
            + f" (results in {db})" + "".join(f"\n  {line}" for line in outcome.rounds))


def noisy_trials(side) -> int:
    """Trials of a compare side's scenarios that finished ok but were flagged noisy."""
    chosen = {s["idx"] for s in side.store.scenarios(side.campaign.id)
              if all(str(s["labels"].get(k)) == v for k, v in side.where.items())}
    return sum(1 for t in side.store.trials(side.campaign.id)
               if t["status"] == "ok" and t["scenario"] in chosen and t["metadata"].get("noisy"))


@app.command("trend")
def trend_(db: Optional[list[str]] = typer.Option(None, "--db", help="results file(s), their campaigns in the order "
                                                                     "they ran (repeatable; default vnetbench.db)"),
           metric: Optional[list[str]] = typer.Option(None, "--metric", "-m", help="only these metrics"),
           where: list[str] = typer.Option([], "--where", help="only scenarios with FACTOR=LEVEL (repeatable)"),
           fmt: str = typer.Option("text", "--format", help="text or json"),
           plot: Optional[str] = typer.Option(None, "--plot", help="draw the series that changed into this PNG"),
           every: bool = typer.Option(False, "--all", help="also list the series without a change"),
           fail_on_regression: bool = typer.Option(False, "--fail-on-regression",
                                                   help="exit 1 if the newest campaign starts a regression")) -> None:
    """Each scenario and metric over the campaigns, in the order they ran: change points (jumpavg), each with its
    size and 95% CI, and what changed beside it (kernel, tool versions, implementation)."""
    from .report import compare as cmp
    from .report import trend
    if fmt not in ("text", "json"):
        fail(f"--format {fmt}: use text or json")
    paths = db or [DEFAULT_DB]
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        fail(f"no results file {missing[0]}; run an experiment first or pass --db")
    try:
        chosen = cmp.parse_where(where, "--where")
    except cmp.CompareError as exc:
        fail(str(exc))
    series = trend.history([Store(p, readonly=True) for p in paths], metric, chosen)
    if not series:
        fail("no scenario ran in two campaigns or more: a trend needs at least two campaigns of the same scenario")
    if fmt == "json":
        out.print_json(json.dumps(trend.as_json(series)))
    else:
        for line in trend.text(series, every):
            out.print(line, highlight=False, soft_wrap=True)
    if plot:
        trend.draw(series, Path(plot))
    if fail_on_regression and any(s.newest_regression for s in series):
        raise typer.Exit(1)


@app.command("export")
def export_(campaign: str = typer.Argument("last"), db: str = DB,
            fmt: Optional[str] = typer.Option(None, "--format", help="jsonl, csv, parquet or folded (profiled "
                                                                     "stacks for FlameGraph and speedscope; default "
                                                                     "jsonl); with --raw: json or sh"),
            output: Optional[Path] = typer.Option(None, "-o", "--output", help="file (default: stdout; parquet: "
                                                                                 "samples-ID.parquet)"),
            raw: Optional[int] = typer.Option(None, "--raw", metavar="TRIAL",
                                              help="instead: that trial's exact commands (argv, where each ran) and "
                                                   "raw tool output, as JSON (or, --format sh, the commands as a "
                                                   "script); trial ids are in the samples' `trial` field"),
            trial: Optional[int] = typer.Option(None, "--trial", help="--format folded: this trial's stacks only"),
            scenario: Optional[int] = typer.Option(None, "--scenario", help="--format folded: this scenario's "
                                                                            "trials, added up"),
            card: bool = typer.Option(False, "--scorecard", help="instead: the study's reproduction scorecard as "
                                                                "JSON (a suite campaign)")) -> None:
    """One line per sample, values in SI base units, with what it measures and its trial's status and flags
    (--raw TRIAL: one trial's commands and raw tool output; --format folded: the profiled stacks)."""
    from .results import export
    if raw is not None:
        return export_raw(db, raw, fmt or "json", output)
    if card:
        from .results import scorecard
        store, camp = open_campaign(db, campaign)
        text = json.dumps([r.as_dict() for r in scorecard.for_campaign(store, camp.id)], indent=1) + "\n"
        with out_file(output) as fh:
            fh.write(text)
        return
    fmt = fmt or "jsonl"
    if fmt not in export.FORMATS + ("folded",):
        fail(f"--format {fmt}: use {', '.join(export.FORMATS + ('folded',))}")
    store, camp = open_campaign(db, campaign)
    if fmt == "folded":
        from .results import cpu_profiles as profiles
        try:
            folded = profiles.export(store, camp.id, trial, scenario)
        except ValueError as exc:
            fail(str(exc))
        with out_file(output) as fh:
            n = profiles.write_folded(folded, fh)
        if output:
            err.print(f"{n} stacks written to {output}")
        return
    if fmt == "parquet":
        output = output or Path(f"samples-{camp.id}.parquet")
        make_parent(output)
        try:
            n = export.write_parquet(store, camp.id, output)
        except OSError as exc:
            fail(f"cannot write {output}: {exc}")
        err.print(f"{n} samples written to {output}")
    elif output:
        with out_file(output, newline="") as fh:
            n = export.write(store, camp.id, fmt, fh)
        err.print(f"{n} samples written to {output}")
    else:
        export.write(store, camp.id, fmt, sys.stdout)


def out_file(output: Path | None, newline: str | None = None):
    """-o's file for writing (stdout without -o), its directory made as `report` makes it; a file that cannot be
    written is one line and exit 2 (an open() of a missing directory was a traceback, exit 1)."""
    if not output:
        return nullcontext(sys.stdout)
    make_parent(output)
    try:
        return open(output, "w", newline=newline)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}; give -o a file in a writable directory")


def make_parent(output: Path) -> None:
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        fail(f"cannot write {output}: {exc.filename} is a file, not a directory; give -o a file in a directory")
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}; give -o a file in a writable directory")


def export_raw(db: str, tid: int, fmt: str, output: Path | None) -> None:
    from .results import export
    if fmt not in ("json", "sh"):
        fail(f"--format {fmt}: with --raw use json or sh")
    record = export.raw_record(Store(db, readonly=True), tid)
    if record is None:
        fail(f"no trial {tid} in {db}; `vnetbench export --db {db}` gives each sample's trial")
    if not record["recorded"]:
        err.print(f"trial {tid} has no recorded commands or output (it was run by a vnetbench older than this "
                  f"record)", highlight=False)
    text = export.raw_script(record) if fmt == "sh" else json.dumps(record, indent=1) + "\n"
    if output:
        with out_file(output) as fh:
            fh.write(text)
        err.print(f"trial {tid}: {len(record['commands'])} commands written to {output}", highlight=False)
    else:
        sys.stdout.write(text)


@app.command("report")
def report_(campaign: Optional[list[str]] = typer.Argument(None, help="campaign id, or 'last'; two or more: "
                                                                          "those campaigns side by side"),
            db: str = DB,
            output: Optional[Path] = typer.Option(None, "-o", "--output", help="file (default: report-ID.html or .md)"),
            fmt: Optional[str] = typer.Option(None, "--format", help="html or md (default: from -o's suffix, else html)"),
            figures: Optional[Path] = typer.Option(None, "--figures", help="also write every figure into this directory"),
            figure_format: str = typer.Option("png", "--figure-format", help="png or svg, for --figures"),
            exclude_noisy: bool = EXCLUDE_NOISY) -> None:
    """One self-contained HTML (or Markdown) report: environment, scenarios, warnings, statistics, figures, study.
    Several campaigns (`report 3 4 last`): each scenario's metrics side by side, their distributions overlaid."""
    from .report import document, render
    fmt = fmt or ("md" if output and output.suffix.lower() in (".md", ".markdown") else "html")
    if fmt not in render.FORMATS:
        fail(f"--format {fmt}: use html or md")
    if figure_format not in render.FIGURE_FORMATS:
        fail(f"--figure-format {figure_format}: use png or svg")
    refs = campaign or ["last"]
    opened = [open_campaign(db, ref) for ref in refs]
    store, camp = opened[0]
    ids = [c.id for _, c in opened]
    if len(ids) > 1:
        twice = next(i for i in ids if ids.count(i) > 1) if len(set(ids)) < len(ids) else None
        if twice is not None:
            named = " and ".join(r for r, i in zip(refs, ids) if i == twice)
            fail(f"campaign {twice} is named twice ({named}); name each campaign once, e.g. "
                 f"`vnetbench report {' '.join(dict.fromkeys(map(str, ids)))} --db {db}`")
        return _overlay_report(store, ids, output, fmt, figures, figure_format, exclude_noisy)
    output = output or Path(f"report-{camp.id}.{fmt}")
    # the figures' second process starts now: it imports matplotlib while this one builds the document
    with render.Second(fmt == "html" or figures is not None) as second:
        try:
            written = render.write(document.build(store, camp.id, exclude_noisy=exclude_noisy), output, fmt, figures,
                                   figure_format, second)
        except OSError as exc:
            fail(f"cannot write the report: {exc}")
    err.print(f"report of campaign {camp.id} written to {output}" +
              (f" ({len(written) - 1} figures in {figures})" if figures else ""), highlight=False)


def _overlay_report(store: Store, ids: list[int], output: Path | None, fmt: str, figures: Path | None,
                    figure_format: str, exclude_noisy: bool) -> None:
    """`report A B ...`: the campaigns side by side (report/overlay.py)."""
    from .report import overlay, render
    output = output or Path(f"report-{'-'.join(map(str, ids))}.{fmt}")
    with render.Second(fmt == "html" or figures is not None) as second:
        try:
            doc = overlay.build(store, ids, exclude_noisy=exclude_noisy)
        except overlay.OverlayError as exc:  # leaving the block ends the second process
            fail(str(exc))
        try:
            written = render.write(doc, output, fmt, figures, figure_format, second)
        except OSError as exc:
            fail(f"cannot write the report: {exc}")
    err.print(f"report of campaigns {', '.join(map(str, ids))} side by side written to {output}" +
              (f" ({len(written) - 1} figures in {figures})" if figures else ""), highlight=False)


@app.command()
def clean(dry_run: bool = typer.Option(False, "--dry-run", help="only say what would be removed"),
          testbed: Optional[str] = TESTBED,
          run: Optional[str] = typer.Option(None, "--run", help="only the run with this prefix (e.g. vb1a2b), also one "
                                            "whose owner cannot be checked from here: removed once no process of it "
                                            "is alive (with --testbed: on the hosts its directory is on)")) -> None:
    """Remove every namespace, process and file of vnetbench runs that are no longer alive, and nothing else; on
    every testbed host a run touched (and, with --testbed, on every host of that testbed) too. The runs' records
    are read from $VNETBENCH_STATE_DIR (default /run/vnetbench)."""
    from .system import ledger
    need_root()
    import warnings

    from .hosts.lab import clean as _  # noqa: F401 (registers how the ledger reaches a lab host a run touched)
    with warnings.catch_warnings(record=True) as caught:  # a malformed ledger line: said, once, and skipped
        warnings.simplefilter("always", ledger.LedgerWarning)
        removed, running, pending = _clean_run(run, testbed, dry_run) if run is not None else \
            _clean_every_run(testbed, dry_run)
    for line in dict.fromkeys(str(w.message) for w in caught):
        err.print(f"warning: {line}", highlight=False, markup=False, soft_wrap=True)
    verb = "would remove" if dry_run else "removed"
    retry = "vnetbench clean" + (f" --run {run}" if run else "") + (f" --testbed {shlex.quote(testbed)}" if testbed
                                                                      else "")
    # one line each, never wrapped (a script greps them; a wrapped command cannot be pasted), markup not obeyed
    for line in removed:
        out.print(f"{verb} {line}", highlight=False, markup=False, soft_wrap=True)
    for line in running:
        out.print(f"left alone: {line}", highlight=False, markup=False, soft_wrap=True)
    for line in pending:
        out.print(f"pending: {line}; retry with: {retry}", highlight=False, markup=False, soft_wrap=True)
    if not removed and not pending and not (run and running):
        out.print("nothing to clean")
    if pending or (run and running):  # a run named on purpose and not removed: the command did not do its job
        raise typer.Exit(1)


def _clean_every_run(testbed: str | None, dry_run: bool) -> tuple[list[str], list[str], list[str]]:
    """(removed, left alone, pending) of every run whose owner is gone, here and on the testbed's hosts."""
    from .system import ledger
    removed, left, pending = ledger.clean_all(dry_run)
    running = [_how_to_remove(f"run {prefix}: {why}", None) for prefix, why in left]
    if testbed:
        from .hosts import choose
        bed, _ = load_testbed(testbed, reach=False)
        more, left, unreachable = choose({}, bed).clean(bed, {lg.prefix for lg in ledger.runs()}, dry_run)
        removed, pending = removed + more, pending + unreachable
        running += [_how_to_remove(line, testbed) for line in left]
    return removed, running, pending


def _how_to_remove(line: str, testbed: str | None) -> str:
    """A run left alone because its owner cannot be checked ("run PREFIX[ on HOST]: its owner cannot be checked:
    why") stays so for good (a lab run whose controller rebooted): the line says how to remove it on purpose."""
    if ": its owner cannot be checked: " not in line:
        return line
    command = f"vnetbench clean --run {line.split()[1].rstrip(':')}" + (f" --testbed {shlex.quote(testbed)}"
                                                                        if testbed else "")
    return f"{line}; `{command}` removes it once no process of it is alive"


def _clean_run(prefix: str, testbed: str | None, dry_run: bool) -> tuple[list[str], list[str], list[str]]:
    """`clean --run PREFIX`: that run only, named on purpose: by this machine's ledger of it, else (--testbed) on
    the hosts its directory is on. A prefix no run has: one line, exit 2."""
    from .system import ledger
    if not (prefix.startswith("vb") and prefix.isascii() and prefix[2:].isalnum()):
        fail(f"--run {prefix!r}: a run's prefix is vb and letters or digits, e.g. vb1a2b; `vnetbench clean --dry-run` "
             f"names the runs it leaves alone")
    if (ledger.state_dir() / prefix).is_dir():
        removed, left, pending = ledger.clean_run(prefix, dry_run)
        return removed, [f"run {p}: {why}" for p, why in left], pending
    if testbed is None:
        fail(f"--run {prefix}: no run {prefix} in {ledger.state_dir()}; a run whose directory is only on testbed "
             f"hosts: add --testbed FILE")
    bed, _ = load_testbed(testbed, reach=False)
    return _clean_run_on_hosts(bed, prefix, testbed, dry_run)


def _clean_run_on_hosts(bed, prefix: str, testbed: str, dry_run: bool) -> tuple[list[str], list[str], list[str]]:
    """A run whose ledger is only on testbed hosts (its controller rebooted: the owner cannot be checked): every
    host it is on must be reached and show no process of it alive before any is cleaned."""
    from .hosts.lab import clean as lab_clean
    from .system import ledger
    found, left, pending = [], [], []
    for h in bed.hosts:
        try:
            owner = dict(lab_clean.remote_runs(h)).get(prefix)
            if owner is None:
                continue
            alive = _alive_on(h, prefix)
        except lab_clean.CommandError as exc:
            pending.append(f"{prefix}: host {h.name}: {exc}")
            continue
        found.append(h)
        state, why = ledger.owner_state(owner, remote=True)
        if state == "alive" or alive:
            left.append(f"run {prefix} on {h.name}: "
                        + (why if state == "alive" else f"{', '.join(alive)} still running: end it, then retry"))
    if not found and not pending:
        fail(f"--run {prefix}: no run {prefix} in {ledger.state_dir()} nor on the hosts of {testbed}")
    if left or pending:  # one host that cannot confirm keeps the run whole on all of them
        return [], left, pending
    removed = []
    for h in found:
        got, why = lab_clean.clean_host(lab_clean.host_record(h, ""), prefix, dry_run)
        removed += [f"{prefix}: {line}" for line in got]
        pending += [f"{prefix}: host {h.name}: {why}"] if why else []
    return removed, [], pending


def _alive_on(host, prefix: str) -> list[str]:
    """The processes a run recorded on a testbed host that still run there (pid and kernel start time match)."""
    from .hosts.lab import clean as lab_clean
    from .hosts.lab import testbed as tb
    ex = tb.executor(host)
    try:
        out = ex.run_script(lab_clean.SURVEY.format(d=shlex.quote(f"{lab_clean.REMOTE_STATE_DIR}/{prefix}")), timeout=30).stdout
    finally:
        ex.close()
    text, _, rest = out.partition("@@netns\n")
    running = {tuple(map(int, ln.split())) for ln in rest.partition("@@pids\n")[2].splitlines() if len(ln.split()) == 2}
    return [f"process {o.name} (pid {o.pid})" for o in lab_clean.parse_objects(text)
            if o.kind == "process" and (o.pid, o.start) in running]


@app.command()
def suites(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """The built-in suites: the five studies, each runnable as `vnetbench run suite:NAME --profile smoke|quick|full`."""
    import yaml

    from .capabilities import detect
    from .experiment import spec as specmod
    caps = detect()
    table = Table()
    for col in ("suite", "study", "profiles: trials, tool time (at least)", "analysis"):
        table.add_column(col)
    rows: list[dict] = []
    for path in sorted(specmod.SUITES_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        sizes = {p: _profile_size(path.stem, p, caps) for p in data.get("profiles", {})}
        rows.append({"suite": f"suite:{path.stem}", "study": data.get("description", ""), "profiles": sizes,
                     "analysis": data.get("analysis")})
        table.add_row(rows[-1]["suite"], rows[-1]["study"], "\n".join(f"{p}: {v}" for p, v in sizes.items()),
                      data.get("analysis") or "-")
    if as_json:
        out.print_json(json.dumps(rows))
        return
    out.print(table)
    out.print("Tool time: the workloads' own durations and probes on this machine's plan; builds, guest boots and a "
              "busy machine add to it (docs/suites.md has each profile measured). A card's range: its first round "
              "to its last, within its budget.", highlight=False)


def _profile_size(suite: str, profile: str, caps) -> str:
    """A profile's trials and tool time from its expanded matrix: a card's first round .. its last."""
    from .experiment import spec as specmod
    from .experiment.spec import Repetitions, Rounds
    from .run.campaign import TRIAL_OVERHEAD_S
    exp = specmod.load(f"suite:{suite}", profile).experiment
    runnable = [sc for sc in expand(exp, caps) if not sc.skip]
    per = [(len([w for w in sc.workloads if not w.background]),
            sum(w.expected_duration() + TRIAL_OVERHEAD_S for w in sc.workloads if not w.background)) for sc in runnable]
    reps = exp.repetitions
    counts = reps.rounds if isinstance(reps, Rounds) else [reps.min, reps.max] if isinstance(reps, Repetitions) \
        else [reps]
    trials = [sum(n for n, _ in per) * k for k in (counts[0], counts[-1])]
    secs = [sum(t for _, t in per) * k for k in (counts[0], counts[-1])]
    if isinstance(reps, Rounds):  # a later round runs only if it fits in what the first left of the budget
        secs[1] = max(secs[0], min(secs[1], reps.budget))
    budget = f", budget {reps.budget / 60:g} min" if isinstance(reps, Rounds) else ""
    span = lambda xs, f: f(xs[0]) if xs[0] == xs[1] else f"{f(xs[0])}..{f(xs[1])}"  # noqa: E731
    return f"{span(trials, str)} trials, {span(secs, _minutes)}{budget}"


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 \
        else f"{seconds / 3600:.1f} h"


@app.command()
def metrics(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """Every metric vnetbench records, with its SI unit and which direction is better."""
    from .catalog import METRICS
    if as_json:
        out.print_json(json.dumps([{"metric": m.name, "unit": m.unit, "better": m.better, "meaning": m.description}
                                   for m in METRICS.values()]))
        return
    table = Table()
    for col in ("metric", "unit", "better", "meaning"):
        table.add_column(col)
    for m in METRICS.values():
        table.add_row(m.name, m.unit, m.better, m.description)
    out.print(table)


@app.command()
def schema() -> None:
    """The JSON Schema of the experiment file."""
    from .experiment import spec as specmod
    out.print_json(json.dumps(specmod.schema()))


def environment_problems(env=os.environ) -> list[str]:
    """The environment variables vnetbench reads, checked before any command: each wrong one is a line naming it
    and the fix (a state directory that is a file, or an unparsable timeout, was a traceback)."""
    from .results.store import seconds_from_env
    problems = []
    raw = env.get("VNETBENCH_DB_TIMEOUT")
    if raw is not None and seconds_from_env(raw) is None:
        problems.append(f"VNETBENCH_DB_TIMEOUT={raw!r} is not a number of seconds; give one, e.g. 120, or unset it")
    state = env.get("VNETBENCH_STATE_DIR")
    if state is not None:
        if not state.strip():
            problems.append("VNETBENCH_STATE_DIR is set but empty; give a directory or unset it (default "
                            "/run/vnetbench)")
        else:
            path = Path(state)
            while not path.exists() and path != path.parent:
                path = path.parent
            if not path.is_dir():
                problems.append(f"VNETBENCH_STATE_DIR={state!r}: {str(path)!r} is a file, not a directory; give a "
                                f"directory or unset it (default /run/vnetbench)")
    return problems


def main() -> None:
    if problems := environment_problems():
        from rich.markup import escape
        for line in problems:
            err.print(f"[red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
        sys.exit(2)
    app()
