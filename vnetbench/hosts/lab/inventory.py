"""Ansible inventories as a testbed: each host's variables, as Ansible merges them.

Every form Ansible reads (INI, YAML, `group_vars/` and `host_vars/` beside it, a directory, a dynamic inventory
script) goes through `ansible-inventory -i FILE --list` where Ansible is installed: bounded in time, memory and
output, and a YAML file (with its group_vars/host_vars files) first passes vnetbench's own bounded reader, since
Ansible's YAML loader expands a "billion laughs" without limit. Without Ansible a YAML inventory alone is read by
that reader; any other form is one line saying that ansible-inventory is needed.

Problems are lines `file:line: field: what, fix`; testbed.py turns the variables into hosts."""
from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core import yamlread

GROUP_KEYS = ("hosts", "vars", "children")
TIMEOUT_S = 120                  # a dynamic inventory may ask a cloud API; `--list` of a file takes about 1 s
MEMORY_BYTES = 2 * 1024 ** 3     # address space of ansible-inventory (about 300 MB for a lab) and its script
OUTPUT_BYTES = 64 * 1024 ** 2    # what it may print: a large lab's --list is a few MB
VARS_FILES = 1000                # group_vars/ and host_vars/ files checked before Ansible reads them
NEEDS_ANSIBLE = "ansible-inventory reads it: install Ansible (Debian package ansible-core), or write the testbed " \
                "file in YAML (docs/testbeds.md)"


@dataclass
class InventoryHost:
    name: str
    vars: dict[str, Any]     # as Ansible merges them: all's vars, then each group's, then the host's own
    line: int | None         # where the YAML file first names it; None from ansible-inventory


class InventoryError(Exception):
    def __init__(self, lines: list[str]):
        self.lines = lines
        super().__init__("\n".join(lines))


def where(source: str, loc: tuple, lines: dict[tuple, int]) -> str:
    """`file:line: field` for a key path, with the line of the nearest key written in the file."""
    line = next((lines[loc[:cut]] for cut in range(len(loc), 0, -1) if loc[:cut] in lines), None)
    return f"{source}:{line}" + (f": {yamlread.dotted(loc)}" if loc else "") if line else \
        source + (f": {yamlread.dotted(loc)}" if loc else "")


def looks_like_inventory(data: dict) -> bool:
    """A YAML inventory: `all:`, or only groups (mappings of hosts, vars and children) at the top."""
    if "all" in data:
        return True
    return "hosts" not in data and bool(data) and all(
        isinstance(v, dict) and v and set(v) <= set(GROUP_KEYS) for v in data.values())


# ---- a YAML inventory, by vnetbench's own reader -----------------------------------------------------------------

def check_shape(data: dict, source: str, lines: dict[tuple, int]) -> list[str]:
    """One line per part of a YAML inventory that has not the shape Ansible reads (Ansible would warn, skip the
    file and go on with no hosts, or stop with a traceback)."""
    problems: list[str] = []

    def bad(loc: tuple, msg: str) -> None:
        problems.append(f"{where(source, loc, lines)}: {msg}")

    def mapping(loc: tuple, value: Any, what: str) -> bool:
        if value is None or isinstance(value, dict):
            return True
        bad(loc, f"{what}, not {_kind(value)}")
        return False

    def group(loc: tuple, g: Any) -> None:
        if not mapping(loc, g, "a group is a mapping with hosts, vars and children (or empty)"):
            return
        for key in g or {}:
            if key not in GROUP_KEYS:
                bad(loc + (key,), f"unknown key in a group; allowed: {', '.join(GROUP_KEYS)}")
        g = g or {}
        if mapping(loc + ("hosts",), g.get("hosts"), "hosts is a mapping of host names to their vars, "
                                                      "e.g. `hosts: {node1: {ansible_host: 192.0.2.1}}`"):
            for name, hv in (g.get("hosts") or {}).items():
                if not isinstance(name, (str, int)):
                    bad(loc + ("hosts",), f"a host name is text, not {_kind(name)}")
                elif mapping(loc + ("hosts", name), hv, "a host's value is a mapping of its vars (or empty)"):
                    names(loc + ("hosts", name), hv)
        if mapping(loc + ("vars",), g.get("vars"), "vars is a mapping of variable names to values"):
            names(loc + ("vars",), g.get("vars"))
        if mapping(loc + ("children",), g.get("children"), "children is a mapping of group names to groups, "
                                                            "e.g. `children: {lab: {hosts: {node1: }}}`"):
            for name, child in (g.get("children") or {}).items():
                group(loc + ("children", name), child)

    def names(loc: tuple, vars_: dict | None) -> None:
        for key in vars_ or {}:
            if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                bad(loc + (key,), "a variable name is letters, digits and '_', not starting with a digit")

    for name, g in data.items():
        group((name,), g)
    return problems


def walk(data: dict, lines: dict[tuple, int]) -> list[InventoryHost]:
    """Every host of a well-shaped YAML inventory in the order the file names them, with its group vars under its
    own (a host in several groups: the later group's vars win, as Ansible's do for groups of one depth)."""
    group_vars: dict[str, dict] = {}
    own: dict[str, dict] = {}
    first: dict[str, int | None] = {}

    def visit(loc: tuple, g: dict | None, inherited: dict) -> None:
        g = g or {}
        scope = inherited | (g.get("vars") or {})
        for name, hv in (g.get("hosts") or {}).items():
            name = str(name)
            first.setdefault(name, lines.get(loc + ("hosts", name)))
            group_vars[name] = group_vars.get(name, {}) | scope
            own[name] = own.get(name, {}) | (hv or {})
        for name, child in (g.get("children") or {}).items():
            visit(loc + ("children", name), child, scope)

    top = (data.get("all") or {}).get("vars") or {} if isinstance(data.get("all"), dict) else {}
    for name, g in data.items():
        visit((name,), g, top if name != "all" else {})
    return [InventoryHost(n, group_vars[n] | own[n], first[n]) for n in first]


def read_yaml(data: dict, source: str, lines: dict[tuple, int], path: Path) -> list[InventoryHost]:
    """A YAML inventory already read by yamlread: its shape checked, then its hosts (through ansible-inventory
    when installed, so that group_vars/ and host_vars/ apply; else by `walk`)."""
    problems = check_shape(data, source, lines)
    if problems:
        raise InventoryError(problems)
    if ansible_inventory():
        return ansible_list(path, source)
    beside = [d for d in ("group_vars", "host_vars") if (path.parent / d).is_dir()]
    if beside:
        raise InventoryError([f"{source}: {' and '.join(d + '/' for d in beside)} beside the inventory: "
                              + NEEDS_ANSIBLE])
    return walk(data, lines)


# ---- any inventory, by ansible-inventory -------------------------------------------------------------------------

def check_vars_files(path: Path) -> list[str]:
    """The group_vars/ and host_vars/ files Ansible would read for this inventory, through the bounded reader
    first: a billion laughs there must not reach Ansible's loader."""
    base = path if path.is_dir() else path.parent
    problems: list[str] = []
    files = [f for d in ("group_vars", "host_vars") if (base / d).is_dir()
             for f in sorted((base / d).rglob("*")) if f.is_file() and not f.name.startswith(".")]
    if len(files) > VARS_FILES:
        return [f"{base}: more than {VARS_FILES} files in group_vars/ and host_vars/; a testbed needs far fewer"]
    for f in files:
        try:
            with f.open("rb") as fh:
                raw = fh.read(yamlread.MAX_BYTES + 1)
            yamlread.read(yamlread.decode(raw), "a vars file")
        except OSError as exc:
            problems.append(f"{f}: cannot read the file: {exc.strerror or exc}")
        except yamlread.YamlProblem as exc:
            problems.append(f"{f}{f':{exc.line}' if exc.line else ''}: {exc.message}")
        except yamlread.DuplicateKeys as exc:
            problems += [f"{f}:{p.line}: {p.message}" for p in exc.problems]
    return problems


def _limits() -> None:
    """In the child, before it execs: bounded memory and output, whatever the inventory or its script does."""
    for kind, most in ((resource.RLIMIT_AS, MEMORY_BYTES), (resource.RLIMIT_FSIZE, OUTPUT_BYTES)):
        hard = resource.getrlimit(kind)[1]  # never above a limit vnetbench itself runs under
        limit = most if hard == resource.RLIM_INFINITY else min(most, hard)
        resource.setrlimit(kind, (limit, limit))


def ansible_inventory() -> str | None:
    return shutil.which("ansible-inventory")


def ansible_list(path: Path, source: str, form: str = "") -> list[InventoryHost]:
    """`ansible-inventory -i PATH --list`, bounded: TIMEOUT_S, MEMORY_BYTES, OUTPUT_BYTES; its script's children
    die with it (a session of their own). group_vars/ and host_vars/ are those beside the inventory (the playbook
    directory is the inventory's, not wherever vnetbench runs). `form` (ini, yaml, script): whose parser's
    complaint to show first when Ansible cannot read it."""
    exe = ansible_inventory()
    if exe is None:
        raise InventoryError([f"{source}: an inventory in this form: {NEEDS_ANSIBLE}"])
    problems = check_vars_files(path)
    if problems:
        raise InventoryError(problems)
    env = os.environ | {"ANSIBLE_INVENTORY_UNPARSED_FAILED": "True", "ANSIBLE_NOCOLOR": "1",
                        "ANSIBLE_DEPRECATION_WARNINGS": "False", "ANSIBLE_LOCALHOST_WARNING": "False",
                        "COLUMNS": "100000"}  # Ansible wraps its messages at the terminal's width
    base = path if path.is_dir() else path.parent
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as tmp:
        env["ANSIBLE_LOCAL_TEMP"] = tmp
        proc = subprocess.Popen([exe, "-i", str(path), "--playbook-dir", str(base), "--list"],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, start_new_session=True,
                                preexec_fn=_limits)
        try:
            rc = proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise InventoryError([f"{source}: ansible-inventory took more than {TIMEOUT_S} s to list it; "
                                  "check the inventory (or its script) by hand with "
                                  f"`ansible-inventory -i {path} --list`"]) from None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        text, errors = out.read(OUTPUT_BYTES + 1), err.read(OUTPUT_BYTES).decode(errors="replace")
    if rc != 0:
        raise InventoryError([f"{source}: ansible-inventory cannot read it: {_why(errors, rc, form)}"])
    try:
        listed = json.loads(text)
        return hosts_of(listed)
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError):
        raise InventoryError([f"{source}: ansible-inventory printed something that is not an inventory listing; "
                              f"check it with `ansible-inventory -i {path} --list`"]) from None


def _why(stderr: str, rc: int, form: str = "") -> str:
    """Ansible's own reason, as one line: the parser that fits best ("Failed to parse X with ini plugin: why"),
    else its ERROR line, else how it ended."""
    messages: list[str] = []
    for line in stderr.splitlines():  # a message goes on until the next one starts
        if re.match(r"^\s*(\[WARNING\]|\[ERROR\]|ERROR!|\[DEPRECATION)", line) or not messages:
            messages.append(line.strip())
        else:
            messages[-1] += " " + line.strip()
    parsed = [m for m in messages if "Failed to parse" in m and " plugin: " in m
              and not re.search(r"with (auto|host_list) plugin", m)]
    parsed.sort(key=lambda m: f"with {form} plugin:" not in m)  # the parser of the file's own form first
    parsed = [m.split(" plugin: ", 1)[1] for m in parsed]
    errors = [m.removeprefix("ERROR!").strip() for m in messages if m.startswith("ERROR!")]
    why = (parsed or errors or [f"it ended with status {rc}" + (" (memory limit)" if rc in (-9, -6, 1) else "")])[0]
    return why[:500]


def hosts_of(listed: dict) -> list[InventoryHost]:
    """The hosts of `ansible-inventory --list` output in the inventory's order (its mappings come sorted, but the
    lists of children and hosts keep the order of the file)."""
    hostvars = listed.get("_meta", {}).get("hostvars", {})
    order: dict[str, None] = {}
    seen: set[str] = set()

    def visit(group: str) -> None:
        if group in seen or not isinstance(listed.get(group), dict):
            return
        seen.add(group)
        for h in listed[group].get("hosts", []):
            order.setdefault(str(h))
        for child in listed[group].get("children", []):
            visit(child)

    visit("all")
    for h in hostvars:  # a host in no group reachable from all (not written by ansible-inventory, but cheap)
        order.setdefault(str(h))
    return [InventoryHost(h, dict(hostvars.get(h) or {}), None) for h in order]


def _kind(value: Any) -> str:
    return {list: "a list", str: "text", int: "a number", float: "a number", bool: "true/false"}.get(
        type(value), "a value")
