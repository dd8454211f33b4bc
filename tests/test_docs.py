"""The README and docs/ say only what is true: the README fits on about three screens, every relative link resolves,
every command parses, the cheap ones run as written, every spec in them is valid, and they name only real metrics,
commands, factors and workload parameters (and all of them).

A command that cannot run in a test carries one of these markers in its comment, for the reader and for this test:
`(needs a testbed)` or `(takes minutes)`. Such a line is only parsed (with `--help` appended); every other line of
the `sh` blocks of README.md and docs/*.md runs as written, a block at a time, in one directory, README first."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from vnetbench.catalog import METRICS

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"\((needs a testbed|takes minutes)\)")
COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(vnetbench|\.venv/bin/vnetbench|\.venv/bin/python bench/\S+\.py)(\s|$)")


def blocks(page: Path) -> list[tuple[str, str]]:
    """(info string, text) of every fenced block of a page."""
    return re.findall(r"^```(\S*)[^\n]*\n(.*?)^```$", page.read_text(), re.S | re.M)


def sh_blocks(page: Path) -> list[str]:
    return [text for info, text in blocks(page) if info == "sh"]


def command_lines() -> list[tuple[str, str]]:
    """(page, line) of every vnetbench or bench command in an sh block, and of every `$ vnetbench` transcript line."""
    found = []
    for page in PAGES:
        for info, text in blocks(page):
            for line in text.splitlines():
                if info != "sh":
                    if not line.startswith("$ vnetbench"):
                        continue
                    line = line[2:]
                if COMMAND.match(line):
                    found.append((page.name, line))
    return found


def help_argv(line: str) -> list[str]:
    """The command of a doc line with `--help` appended: it parses the subcommand and every option, runs nothing."""
    words = shlex.split(line, comments=True)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words.pop(0)
    if ">" in words:
        words = words[:words.index(">")]
    if words[0] in ("vnetbench", ".venv/bin/vnetbench"):
        return [sys.executable, "-m", "vnetbench", *words[1:], "--help"]
    assert words[0] == ".venv/bin/python", line
    return [sys.executable, *words[1:], "--help"]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_readme_fits_on_about_three_screens():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move reference text to docs/"
    long = [(n, len(line)) for n, line in enumerate(lines, 1) if len(line) > 120]
    assert not long, f"README.md lines longer than 120 characters (line, length): {long}"


def test_the_readme_starts_with_the_two_commands_and_links_every_page():
    readme = (ROOT / "README.md").read_text()
    first = sh_blocks(ROOT / "README.md")[0]
    assert first.startswith("./install.sh demo") and "\n./install.sh test" in first
    assert readme.index("./install.sh demo") < readme.index("## ")
    linked = set(re.findall(r"\]\(docs/([^)#]+)", readme))
    assert {p.name for p in PAGES[1:]} <= linked, {p.name for p in PAGES[1:]} - linked


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        text = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_the_docs_name_only_real_metrics_and_commands():
    text = "\n".join(p.read_text() for p in PAGES)
    named = set(re.findall(r"`([a-z0-9_]+_(?:bps|s|ratio|per_s|retransmits))`", text))
    assert named and not named - set(METRICS), named - set(METRICS)
    helptext = subprocess.run([sys.executable, "-m", "vnetbench", "--help"], capture_output=True, text=True,
                              cwd=ROOT, env=os.environ | {"COLUMNS": "120"}).stdout
    commands = set(re.findall(r"^│ ([a-z]+) ", helptext, re.M))
    assert {"run", "show", "clean"} <= commands
    assert set(re.findall(r"`vnetbench ([a-z]+)", text)) <= commands, set(re.findall(r"`vnetbench ([a-z]+)",
                                                                                      text)) - commands


def test_every_option_named_exists_and_every_option_is_in_the_command_table():
    """The synopses (`vnetbench CMD [--opt X]` in the text) name only real options, and docs/commands.md names
    every option of every command: a new option is documented there."""
    from typer.main import get_command
    from vnetbench.cli import app
    cli = get_command(app)
    options = {name: {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}
               for name, cmd in cli.commands.items()}
    spans = [(page.name, m.group(1), m.group(2)) for page in PAGES
             for m in re.finditer(r"`(?:\.venv/bin/)?vnetbench ([a-z]+)([^`]*)`", page.read_text())]
    unknown = [f"{page}: vnetbench {cmd}{rest}" for page, cmd, rest in spans
               if set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", rest)) - options[cmd] - {"--help"}]
    assert not unknown, unknown
    table = {}
    for page, cmd, rest in spans:
        if page == "commands.md":
            table.setdefault(cmd, set()).update(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", rest))
    missing = {cmd: sorted(o for p in c.params if (o := p.opts[0]).startswith("-") and
                           not set(p.opts + p.secondary_opts) & table.get(cmd, set()))
               for cmd, c in cli.commands.items()}
    missing = {cmd: opts for cmd, opts in missing.items() if opts}
    assert not missing, f"options missing from the table in docs/commands.md: {missing}"


def test_every_factor_and_workload_parameter_is_documented():
    from vnetbench import workloads
    from vnetbench.core.scenario import TOPOLOGY_FACTORS
    from vnetbench.workloads.base import Params
    page = (ROOT / "docs" / "experiment-file.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z_0-9]+)` \|.*$", page, re.M)}
    assert set(TOPOLOGY_FACTORS) <= set(rows), set(TOPOLOGY_FACTORS) - set(rows)
    workloads.load_all()
    for kind, cls in workloads.REGISTRY.items():
        assert kind in rows, f"workload {kind} is not in docs/experiment-file.md"
        cells = re.split(r"(?<!\\)\|", rows[kind])
        named = set(re.findall(r"`([a-z_]+)`", cells[3]))
        missing = set(cls.Params.model_fields) - set(Params.model_fields) - named
        assert not missing, f"{kind}: parameters missing from docs/experiment-file.md: {missing}"
    common = set(Params.model_fields) - {"type"}  # every workload's: documented once, not in each row
    assert all(f"`{p}: " in page for p in common), [p for p in common if f"`{p}: " not in page]


def test_every_spec_and_testbed_file_in_the_docs_is_valid(tmp_path):
    from vnetbench.hosts.lab import testbed
    from vnetbench.experiment.spec import loads
    specs = []
    for page in PAGES:
        for info, text in blocks(page):
            if info == "yaml" and "workloads:" in text:
                specs.append((page.name, text))
            elif info == "yaml" and "hosts:" in text:
                (tmp_path / "lab.yaml").write_text(text)
                assert testbed.load(tmp_path / "lab.yaml").hosts, page.name
            for name, body in re.findall(r"cat > (\S+\.yaml) <<'EOF'\n(.*?)^EOF$", text, re.S | re.M):
                specs.append((f"{page.name}: {name}", body))
    assert any(name == "README.md: first.yaml" for name, _ in specs)
    for name, text in specs:
        assert loads(text, name).experiment.name, name


# Parses each bench script's argv as the script does, in one child process: the scripts run as __main__ until their
# parse_args, which checks every option (unknown ones too: an appended --help exits before argparse reports them)
# and stops there. They share their imports (scipy, vnetbench), which were most of 23 interpreters' time. Prints one
# JSON line: the exit code (or error) per script.
BENCH_HELP = """
import argparse, contextlib, io, json, os, runpy, sys, traceback
def parse_only(self, args=None, namespace=None):
    _, extra = self.parse_known_args(args, namespace)
    if extra:
        self.error("unrecognized arguments: " + " ".join(extra))
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parse_only
codes, path = [], list(sys.path)
for argv in json.loads(sys.argv[1]):
    sys.argv, err = argv, io.StringIO()
    sys.path[:] = [os.path.dirname(os.path.abspath(argv[0]))] + path
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            runpy.run_path(argv[0], run_name="__main__")
        codes.append("ran to its end without parsing its options (no argparse parser)")
    except SystemExit as exc:
        codes.append(exc.code if exc.code not in (None, 0) else 0)
        if exc.code not in (None, 0):
            codes[-1] = f"exit {exc.code}: {err.getvalue().strip().splitlines()[-1:]}"
    except BaseException:
        codes.append(traceback.format_exc().strip().splitlines()[-1])
print(json.dumps(codes))
"""


def bench_help_codes(argvs: list[list[str]]) -> list:
    proc = subprocess.run([sys.executable, "-c", BENCH_HELP, json.dumps(argvs)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_command_in_the_docs_parses(capsys):
    from typer.main import get_command
    from vnetbench.cli import app
    cli = get_command(app)
    lines = command_lines()
    assert len(lines) >= 20 and any(page == "README.md" for page, _ in lines)
    bad, seen, scripts = [], set(), []
    for page, line in lines:
        argv = help_argv(line)
        if tuple(argv) in seen:
            continue
        seen.add(tuple(argv))
        if argv[1:3] != ["-m", "vnetbench"]:
            scripts.append((page, line, argv[1:-1]))  # without --help: parsed by the script's own parser
            continue
        try:  # in this process: the CLI's own parser, fast
            code = cli.main(args=argv[3:], prog_name="vnetbench", standalone_mode=False)
        except Exception as exc:  # click's UsageError: no such command or option
            code = f"{type(exc).__name__}: {exc}"
        capsys.readouterr()
        if code not in (0, None):
            bad.append(f"{page}: `{line}`: {code}")
    codes = bench_help_codes([argv for _, _, argv in scripts])
    bad += [f"{page}: `{line}`: {code}" for (page, line, _), code in zip(scripts, codes) if code not in (0, None)]
    assert not bad, "\n".join(bad)


def test_a_bench_script_that_does_not_parse_is_named():
    """The one-process parser reports what a script's own interpreter would: an unknown option or a bad value is
    exit 2 with argparse's line, and the script itself does not run."""
    codes = bench_help_codes([["bench/trend.py"], ["bench/trend.py", "--no-such-option"],
                              ["bench/scale.py", "--rounds", "three"], ["tests/simdata.py"]])
    assert codes[0] == 0 and "without parsing" in codes[3], codes
    assert str(codes[1]).startswith("exit 2") and "unrecognized arguments: --no-such-option" in codes[1], codes
    assert str(codes[2]).startswith("exit 2") and "invalid int value" in codes[2], codes


def working_dir(tmp_path: Path) -> Path:
    """A directory like a clone of the repository: `.venv` (install.sh's, else a stand-in running this interpreter's
    vnetbench), `examples` and `bench`."""
    work = tmp_path / "clone"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    (work / "bench").symlink_to(ROOT / "bench")
    if (ROOT / ".venv" / "bin" / "activate").exists() and (ROOT / ".venv" / "bin" / "vnetbench").exists():
        (work / ".venv").symlink_to(ROOT / ".venv")
        return work
    bin_ = work / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "vnetbench").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m vnetbench \"$@\"\n")
    (bin_ / "python").symlink_to(sys.executable)
    (bin_ / "vnetbench").chmod(0o755)
    (bin_ / "activate").write_text(f"PATH={shlex.quote(str(bin_))}:$PATH\nexport PATH\n")
    return work


def runnable(block: str) -> str:
    """An sh block as a script: every line as written, but a marked command is left out (it is parsed by
    test_every_command_in_the_docs_parses)."""
    out = []
    for line in block.splitlines():
        out.append(":" if MARKER.search(line) else line)
    return "\n".join(out) + "\n"


BLOCK_TIMEOUT_S = 400


def run_block(script: str, work: Path, env: dict, what: str) -> subprocess.CompletedProcess:
    """One block in a session of its own: past its time the whole session is stopped (a run gets SIGTERM and tears
    down), not only the shell, whose children would outlive the test."""
    with subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.communicate(timeout=wait)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
            pytest.fail(f"{what} ran past {BLOCK_TIMEOUT_S} s: a command that takes minutes says so with "
                        f"'(takes minutes)' in its comment")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.net
@pytest.mark.timeout(900)  # the README's first experiment (about 40 s) and a dozen commands, on a busy machine
def test_the_docs_commands_run_as_written(tmp_path, state_dir):
    work = working_dir(tmp_path)
    # Each block runs in a shell of its own, as a reader who activated the environment once (the README's first
    # experiment does) would type it.
    env = os.environ | {"COLUMNS": "100", "PYTHONPATH": str(ROOT),
                        "PATH": f"{work / '.venv' / 'bin'}:{os.environ['PATH']}"}
    ran = 0
    for page in PAGES:
        for n, block in enumerate(sh_blocks(page)):
            if "./install.sh" in block:
                continue  # the install and the test suite itself: what CI runs
            script = runnable(block)
            proc = run_block(script, work, env, f"{page.name}, sh block {n + 1}")
            assert proc.returncode == 0, (f"{page.name}, sh block {n + 1} exited {proc.returncode}:\n{block}\n"
                                          f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
            ran += 1
            if page.name == "README.md" and "vnetbench run first.yaml" in block:
                assert "kernel-vxlan" in proc.stdout and "flat" in proc.stdout, proc.stdout
    assert ran >= 5
    # What the README's first experiment promised: a campaign of 2 scenarios x 6 trials, the report and the export.
    with sqlite3.connect(work / "vnetbench.db") as db:
        statuses = dict(db.execute("SELECT status, count(*) FROM trials GROUP BY status").fetchall())
    assert statuses.get("ok", 0) == 12, statuses
    assert (work / "first.html").stat().st_size > 10_000
    header, *rows = (work / "first.csv").read_text().splitlines()
    assert header.startswith("campaign,") and any(",throughput_bps," in r for r in rows)
    assert json.loads((work / "doctor.json").read_text())["tools"]["iperf3"]["ok"]


def test_the_code_layout_names_every_module_and_benchmark():
    page = (ROOT / "docs" / "code-layout.md").read_text()
    files = [*(ROOT / "vnetbench").glob("*.py"), *(ROOT / "bench").glob("*.py")]
    missing = sorted(f.name for f in files if f.stem not in ("__init__", "__main__") and f.name not in page)
    assert not missing, f"not in docs/code-layout.md: {missing}"


def test_the_documented_mistakes_are_what_the_code_prints(tmp_path):
    """docs/experiment-file.md shows the lines a file with three mistakes gets; they had gone stale (iperf3's
    parameters gained `profile`)."""
    shown = next(text for info, text in blocks(ROOT / "docs" / "experiment-file.md") if text.startswith("bad.yaml:"))
    (tmp_path / "bad.yaml").write_text("name: bad\nrepetitions: 0\nfactors:\n  overlay: [none, vxlna]\n"
                                       "workloads:\n  - type: iperf3\n    duraton: 2\n")
    proc = subprocess.run([sys.executable, "-m", "vnetbench", "plan", "bad.yaml"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stderr == shown, proc.stderr


def test_statistics_page_says_what_the_code_does():
    """docs/statistics.md: the test past the exact splits is seeded random splits (Welch's t-test only past
    RANDOM_MAX trials), best-per-metric uses that test, and the coverage table has the n the card and full profiles
    run, with the ratio of sums' delta-method interval (bench/coverage.py measures every cell)."""
    from vnetbench.results import stats
    text = (ROOT / "docs" / "statistics.md").read_text()
    said = " ".join(text.split())
    assert "Past 8 a side it is Welch's t-test" not in said and "(Welch, Holm" not in said
    assert f"{stats.RANDOM_SPLITS} seeded random splits" in said
    assert f"only past {stats.RANDOM_MAX} trials in all" in said
    rows = {int(m[1]) for m in re.finditer(r"^\| (\d+) \| 0\.\d{3} / 0\.\d{3} \|", text, re.M)}
    assert {2, 3, 4, 5, 6, 8, 10, 11, 12, 15, 24, 30} <= rows, rows
    assert "| ratio of sums, delta method |" in text and "bench/coverage.py" in text
    suites = " ".join((ROOT / "docs" / "suites.md").read_text().split())  # the scorecard's rules, as it decides
    assert "the deciding interval is of median(a) / median(b)" in suites and "left out of the cell" in suites
