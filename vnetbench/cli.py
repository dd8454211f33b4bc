"""The `vnetbench` command."""
from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from . import datapaths, export, ledger, report, spec as specmod
from .matrix import expand
from .store import DEFAULT_DB, Store

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="What does this virtual-network technology cost me? Build, measure, compare, clean up.")
# Wide tables stay readable when piped to a file or another program.
out = Console() if sys.stdout.isatty() else Console(width=250)
err = Console(stderr=True)
DB = typer.Option(DEFAULT_DB, "--db", help="SQLite file holding the results")


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
    from . import testbed
    try:
        bed = testbed.load(path)
        return bed, (testbed.preflight(bed, probe_kernel=probe_kernel) if reach else None)
    except testbed.TestbedError as exc:
        sys.stderr.write("".join(line + "\n" for line in exc.lines))
        raise typer.Exit(2)


def load_spec(path: Path | str, profile: str | None = None) -> specmod.LoadedSpec:
    if str(path).startswith("suite:") and profile is None:
        profile = "quick"  # a built-in suite without --profile runs its quick profile
    try:
        return specmod.load(path, profile)
    except specmod.SpecError as exc:
        sys.stderr.write("".join(line + "\n" for line in exc.lines))  # one line each, never wrapped
        raise typer.Exit(2)


def open_campaign(db: str, ref: str):
    if not Path(db).exists():
        fail(f"no results file {db}; run an experiment first or pass --db")
    store = Store(db)
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
    from .capabilities import detect
    bed, caps = load_testbed(testbed)
    caps = caps or detect()
    paths = datapath_report(caps)
    from .guests import machine
    guest = machine.info() if not bed else None
    if guest and guest.get("available"):
        guest["datapaths"] = datapath_report(caps, {"kernel": "guest"})
    if as_json:
        hosts = {h.name: h.caps.as_dict() | {"facts": h.facts} for h in bed.hosts} if bed else {}
        out.print_json(json.dumps(caps.as_dict() | {"datapaths": paths} | ({"hosts": hosts} if bed else {})
                                  | ({"guest": guest} if guest else {})))
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
    groups = [(f"{title} on {h.name}", getattr(h.caps, attr)) for h in bed.hosts
              for title, attr in (("tools", "tools"), ("kernel features", "kernel"))] if bed else \
        [("tools", caps.tools), ("kernel features", caps.kernel)]
    for title, items in groups:
        table = Table(title=title, title_justify="left")
        for col in ("name", "available", "version / reason"):
            table.add_column(col)
        for name, f in items.items():
            table.add_row(name, "[green]yes[/]" if f.ok else "[red]no[/]", f.detail)
        out.print(table)
    if guest:
        table = Table(title="guests with their own kernel (kernel: guest)", title_justify="left")
        for col in ("backend", "available", "kernel / reason", "boot", "memory", "kernel features inside the guest"):
            table.add_column(col)
        feats = guest.get("kernel_features", {})
        extra = [f"{k}{'' if caps.has(k) else ' (not here)'}" for k, ok in feats.items() if ok]
        table.add_row(guest["backend"], "[green]yes[/]" if guest["available"] else "[red]no[/]",
                      guest["kernel"] if guest["available"] else guest["reason"],
                      f"{guest['boot_s']:.2f} s" if guest.get("boot_s") else "-",
                      f"{guest['memory_mb']:.0f} MB" if guest.get("memory_mb") else "-", ", ".join(extra))
        out.print(table)
    table = Table(title="datapaths", title_justify="left")
    for col in ("factor", "level", "available", "implementation / reason"):
        table.add_column(col)
    for d in paths + ((guest or {}).get("datapaths") or []):
        table.add_row(d["factor"], d["level"], "[green]yes[/]" if d["ok"] else "[red]no[/]",
                      d["implementation"] if d["ok"] else d["reason"])
    out.print(table)


def datapath_report(caps, extra: dict | None = None) -> list[dict]:
    """Every switch x overlay, attach and encryption level, checked through the same matrix logic a run uses."""
    reg = datapaths.load_all()
    probes = [("switch+overlay", {"switch": s, "overlay": o}) for s in reg["switch"] for o in reg["overlay"]]
    probes += [("attach", {"attach": a}) for a in reg["attach"] if a != "switch"]
    probes += [("encryption", {"encryption": e}) for e in reg["encryption"] if e != "none"]
    result = []
    for factor, levels in probes:
        exp = specmod.Experiment(name="doctor", workloads=[{"type": "ping"}], factors=levels | (extra or {}))
        sc = expand(exp, caps)[0]
        impl = " + ".join(v for v in sc.implementation.values() if v)
        where = "".join(f" ({k}: {v})" for k, v in (extra or {}).items())
        result.append({"factor": factor + where, "level": "+".join(levels.values()), "ok": sc.skip is None,
                       "implementation": impl, "reason": sc.skip or ""})
    return result


@app.command()
def plan(spec: str = typer.Argument(..., help="experiment file, or suite:NAME"), profile: Optional[str] = PROFILE,
         testbed: Optional[str] = TESTBED) -> None:
    """Print the matrix and the exact commands each host would run, as a shell script. Runs nothing."""
    need_root()
    from .capabilities import detect
    from .topology import Topology
    loaded = load_spec(spec, profile)
    bed, caps = load_testbed(testbed)
    site = None
    scenarios = expand(loaded.experiment, caps or detect())
    if bed:
        from .sites import TestbedSite
        site = TestbedSite(bed, None)
        for sc in scenarios:
            why = None if sc.skip else site.check(sc)
            sc.skip = f"testbed: {why}" if why else sc.skip
            sc.notes = sc.notes + site.notes(sc)
    runnable = [s for s in scenarios if not s.skip]
    out.print(f"#!/bin/sh\n# vnetbench plan for {spec}: {len(scenarios)} scenarios, {len(runnable)} runnable, "
              f"{len(scenarios) - len(runnable)} skipped; x{loaded.experiment.repetitions} repetitions.\n"
              f"# A run uses its own prefix instead of vb0000.", highlight=False, markup=False)
    for sc in scenarios:
        out.print(f"\n# ---- scenario {sc.index}: {sc.key}", highlight=False, markup=False)
        if sc.skip:
            out.print(f"# SKIPPED: {sc.skip}", highlight=False, markup=False)
            continue
        out.print(f"# implementation: {sc.implementation}; vm mtu {sc.vm_mtu}, underlay mtu {sc.underlay_mtu}"
                  + "".join(f"\n# note: {n}" for n in sc.notes), highlight=False, markup=False)
        topo = Topology(sc, None, site=site)
        if sc.levels.get("kernel") == "guest":
            out.print(f"# kernel: guest: every command below runs inside a {sc.implementation.get('kernel', 'guest')} "
                      f"guest booted for the run, over SSH", highlight=False, markup=False)
        if site:
            out.print("# on the testbed, each host runs its batches below as one script (then pings its pairs' "
                      "servers), all hosts at once", highlight=False, markup=False)
        out.print(topo.script(), highlight=False, markup=False)
        places = {n.exec.name: n.exec for n in topo.nodes.values()}
        for wl in sc.workloads:
            where = [f"pairs {','.join(map(str, wl.only_pairs))}"] if wl.only_pairs else []
            where += [f"to the server of pair {wl.target_pair}"] if wl.target_pair else []
            where += ["background, alongside every trial"] if wl.background else []
            out.print(f"# workload {wl.kind}" + (f" ({'; '.join(where)})" if where else ""), highlight=False, markup=False)
            for cmd in wl.commands(wl.select(topo.pairs)):
                line = shlex.join(places[cmd.where].wrap(cmd.argv) if cmd.where in places else cmd.argv)
                out.print(line + (" &" if cmd.background else ""), highlight=False, markup=False)
        if site:
            out.print("# teardown: on each host, the processes in the scenario's namespaces are killed and the "
                      "namespaces deleted", highlight=False, markup=False)
            continue
        out.print("# teardown\nip -force -batch - <<'EOF'\n" +
                  "\n".join(f"netns del {n.exec.name}" for n in topo.nodes.values()) + "\nEOF",
                  highlight=False, markup=False)


@app.command()
def run(spec: Optional[str] = typer.Argument(None, help="experiment file, or suite:NAME"), db: str = DB,
        profile: Optional[str] = PROFILE,
        resume: Optional[int] = typer.Option(None, "--resume", help="continue this campaign id"),
        progress: bool = typer.Option(True, "--progress/--no-progress"), testbed: Optional[str] = TESTBED) -> None:
    """Build, measure, store and tear down every scenario of an experiment."""
    need_root()
    from .runner import Runner
    if (spec is None) == (resume is None):
        fail("give an experiment file, or --resume CAMPAIGN (not both)")
    loaded = load_spec(spec, profile) if spec else None
    bed, caps = load_testbed(testbed)
    store = Store(db)
    if resume is not None and store.campaign(resume) is None:
        fail(f"no campaign {resume} in {db}")
    outcome = Runner(store, err, progress, testbed=bed, caps=caps).run(loaded, resume)
    report.show(store, outcome.campaign, out)
    out.print(f"campaign {outcome.campaign}: {outcome.status}, {outcome.trials_ok} trials ok, "
              f"{outcome.trials_failed} failed (results in {db})")
    if outcome.status != "done":
        raise typer.Exit(130)


@app.command("list")
def list_(db: str = DB) -> None:
    """Campaigns in the results file."""
    if not Path(db).exists():
        fail(f"no results file {db}")
    store = Store(db)
    table = Table()
    for col in ("id", "name", "status", "created", "scenarios", "trials", "spec"):
        table.add_column(col)
    import datetime as dt
    for c in store.campaigns():
        table.add_row(str(c.id), c.name, c.status, dt.datetime.fromtimestamp(c.created).strftime("%Y-%m-%d %H:%M"),
                      str(len(store.scenarios(c.id))), str(len(store.trials(c.id))), c.source or "")
    out.print(table)


@app.command()
def show(campaign: str = typer.Argument("last", help="campaign id, or 'last'"), db: str = DB,
         metric: Optional[list[str]] = typer.Option(None, "--metric", "-m", help="only these metrics"),
         all_metrics: bool = typer.Option(False, "--all", help="every metric, not just the main ones")) -> None:
    """Statistics per metric and scenario: n, median, IQR, mean, std, CV, min, max, 95% CIs."""
    store, camp = open_campaign(db, campaign)
    chosen = tuple(metric) if metric else (None if all_metrics else report.DEFAULT_METRICS)
    report.show(store, camp.id, out, chosen)


@app.command("export")
def export_(campaign: str = typer.Argument("last"), db: str = DB,
            fmt: str = typer.Option("jsonl", "--format", help="jsonl or csv"),
            output: Optional[Path] = typer.Option(None, "-o", "--output", help="file (default: stdout)")) -> None:
    """One line per sample, values in SI base units."""
    if fmt not in ("jsonl", "csv"):
        fail(f"--format {fmt}: use jsonl or csv")
    store, camp = open_campaign(db, campaign)
    if output:
        with open(output, "w", newline="") as fh:
            n = export.write(store, camp.id, fmt, fh)
        err.print(f"{n} samples written to {output}")
    else:
        export.write(store, camp.id, fmt, sys.stdout)


@app.command("report")
def report_(campaign: str = typer.Argument("last", help="campaign id, or 'last'"), db: str = DB,
            output: Optional[Path] = typer.Option(None, "-o", "--output", help="file (default: report-ID.html or .md)"),
            fmt: Optional[str] = typer.Option(None, "--format", help="html or md (default: from -o's suffix, else html)"),
            figures: Optional[Path] = typer.Option(None, "--figures", help="also write every figure into this directory"),
            figure_format: str = typer.Option("png", "--figure-format", help="png or svg, for --figures")) -> None:
    """One self-contained HTML (or Markdown) report: environment, scenarios, warnings, statistics, figures, study."""
    from . import document, render
    fmt = fmt or ("md" if output and output.suffix.lower() in (".md", ".markdown") else "html")
    if fmt not in render.FORMATS:
        fail(f"--format {fmt}: use html or md")
    if figure_format not in render.FIGURE_FORMATS:
        fail(f"--figure-format {figure_format}: use png or svg")
    store, camp = open_campaign(db, campaign)
    output = output or Path(f"report-{camp.id}.{fmt}")
    try:
        written = render.write(document.build(store, camp.id), output, fmt, figures, figure_format)
    except OSError as exc:
        fail(f"cannot write the report: {exc}")
    err.print(f"report of campaign {camp.id} written to {output}" +
              (f" ({len(written) - 1} figures in {figures})" if figures else ""), highlight=False)


@app.command()
def clean(dry_run: bool = typer.Option(False, "--dry-run", help="only say what would be removed"),
          testbed: Optional[str] = TESTBED) -> None:
    """Remove every namespace, process and file of vnetbench runs that are no longer alive, and nothing else; on
    every testbed host a run touched (and, with --testbed, on every host of that testbed) too."""
    need_root()
    removed, running, pending = ledger.clean_all(dry_run)
    if testbed:
        from . import testbed as tb
        bed, _ = load_testbed(testbed, reach=False)
        more, left, unreachable = tb.clean_testbed(bed, {lg.prefix for lg in ledger.runs()}, dry_run)
        removed, running, pending = removed + more, running + left, pending + unreachable
    verb = "would remove" if dry_run else "removed"
    for line in removed:
        out.print(f"{verb} {line}", highlight=False)
    for prefix in running:
        out.print(f"left alone: run {prefix} is still running", highlight=False)
    for line in pending:
        out.print(f"pending: {line}; retry with: vnetbench clean" + (f" --testbed {testbed}" if testbed else ""),
                  highlight=False)
    if not removed and not pending:
        out.print("nothing to clean")
    if pending:
        raise typer.Exit(1)


@app.command()
def suites() -> None:
    """The built-in suites: the five studies, each runnable as `vnetbench run suite:NAME --profile smoke|quick|full`."""
    import yaml
    table = Table()
    for col in ("suite", "study", "profiles", "analysis"):
        table.add_column(col)
    for path in sorted(specmod.SUITES_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        table.add_row(f"suite:{path.stem}", data.get("description", ""), ", ".join(data.get("profiles", {})),
                      data.get("analysis") or "-")
    out.print(table)


@app.command()
def metrics() -> None:
    """Every metric vnetbench records, with its SI unit and which direction is better."""
    from .sample import METRICS
    table = Table()
    for col in ("metric", "unit", "better", "meaning"):
        table.add_column(col)
    for m in METRICS.values():
        table.add_row(m.name, m.unit, m.better, m.description)
    out.print(table)


@app.command()
def schema() -> None:
    """The JSON Schema of the experiment file."""
    out.print_json(json.dumps(specmod.schema()))


def main() -> None:
    app()
