"""Where commands run. Everything outside this module talks to a host or VM through `Executor` only:
the machine itself, one of its network namespaces, or a remote machine (or guest) over SSH.

Commands are argv lists, never shell strings: nothing from a spec ever reaches a local shell, and what goes to a
remote shell over SSH is quoted here, in one place (`shlex.join`).
"""
from __future__ import annotations

import ctypes
import functools
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from . import agent as agent_mod
from . import rawlog
from .ledger import Ledger

COMMAND_LOG = "VNETBENCH_COMMAND_LOG"


def log_command(argv: Sequence[str]) -> None:
    """With VNETBENCH_COMMAND_LOG=FILE, every command line an executor starts is appended to FILE (one JSON
    list a line): how the tests prove that a testbed run reached its hosts only through ssh."""
    path = os.environ.get(COMMAND_LOG)
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(list(argv)) + "\n")


class CommandError(RuntimeError):
    def __init__(self, where: str, argv: Sequence[str], returncode: int, stderr: str):
        self.where, self.argv, self.returncode, self.stderr = where, list(argv), returncode, stderr.strip()
        last = self.stderr.splitlines()[-3:] if self.stderr else []
        super().__init__(f"[{where}] `{shlex.join(argv)}` exited {returncode}: {' | '.join(last)}")


class Executor(ABC):
    """A place where commands run: the machine itself, or one network namespace on it."""

    name: str
    # cpu_pinning (build/pinning.py): the CPUs (taskset -c form) every process spawned here runs on (None: not pinned),
    # and (the topology's pinning.Watch, this place's node label) that is told of each one
    cpus: str | None = None
    watch: tuple | None = None

    def __init__(self, ledger: Ledger | None = None):
        self.ledger = ledger

    def pinned(self, argv: Sequence[str]) -> list[str]:
        """argv under `taskset -c CPUS` when this place is pinned: taskset sets the affinity, then execs the tool,
        whose threads and children inherit it."""
        return ["taskset", "-c", self.cpus, *argv] if self.cpus else list(argv)

    def watched(self, label: str | None, argv: Sequence[str], proc) -> None:
        if self.watch is not None:
            watch, node = self.watch
            watch.add(node, label or argv[0], self, proc.pid)

    @abstractmethod
    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The full command line that runs argv in this place."""

    @abstractmethod
    def ip(self) -> list[str]:
        """The `ip` command line that acts on this place's network stack."""

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float = 60.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        full = self.wrap(argv)
        log_command(full)
        try:
            proc = subprocess.run(full, input=input, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise CommandError(self.name, argv, -1, f"timed out after {timeout:.0f} s") from exc
        if check and proc.returncode != 0:
            raise CommandError(self.name, argv, proc.returncode, proc.stderr)
        return proc

    def spawn(self, argv: Sequence[str], *, label: str | None = None, env: dict | None = None,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> subprocess.Popen:
        """Start a process in this place (pinned to its CPUs if it has some); it is recorded in the run's ledger so
        `clean` can stop it."""
        tool, argv = argv[0], self.pinned(argv)
        log_command(self.wrap(argv))
        proc = subprocess.Popen(self.wrap(argv), stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                                text=True, env=env, start_new_session=True)
        rawlog.spawned(self.name, argv, proc.args, label, proc)
        if self.ledger is not None:
            self.ledger.record_process(proc.pid, label or f"{self.name}:{tool}")
        self.watched(label, [tool], proc)
        return proc

    def run_ip(self, args: Sequence[str], timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`ip args` on this place's network stack: one process (`ip -n NS`), not `ip netns exec NS ip`."""
        argv = [*self.ip(), *args]
        log_command(argv)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise CommandError(self.name, ["ip", *args], -1, f"timed out after {timeout:.0f} s") from exc
        if check and proc.returncode != 0:
            raise CommandError(self.name, ["ip", *args], proc.returncode, proc.stderr)
        return proc

    def batch_argv(self, tool: str = "ip", *options: str) -> list[str]:
        """The full command line that runs `tool [options] -batch -` (ip, tc, bridge) on this place's network
        stack, reading the batch from stdin."""
        argv = [tool, *self.ip()[1:], *options, "-batch", "-"]
        log_command(argv)
        return argv

    def batch(self, tool: str, lines: Sequence[str], timeout: float = 60.0) -> None:
        """`tool -batch -` (ip, tc, bridge) with these lines; CommandError names the failing line."""
        if tool == "ip":
            return self.ip_batch(lines, timeout)
        argv = self.batch_argv(tool)
        try:
            full, how = dying_with_parent(argv)
            proc = subprocess.run(full, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=timeout,
                                  **how)
        except subprocess.TimeoutExpired:
            raise CommandError(self.name, [tool, "-batch", "-"], -1, f"timed out after {timeout:.0f} s") from None
        if proc.returncode:
            raise CommandError(self.name, [tool, "-batch", "-"], proc.returncode, _batch_error(proc.stderr, lines))

    def ip_batch(self, lines: Sequence[str], timeout: float = 60.0) -> None:
        """Apply iproute2 commands in one process; stops at the first failing line and names it."""
        if not lines:
            return
        argv = self.batch_argv("ip")
        try:
            full, how = dying_with_parent(argv)
            subprocess.run(full, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=timeout,
                           check=True, **how)
        except subprocess.CalledProcessError as exc:
            raise CommandError(self.name, argv, exc.returncode, _batch_error(exc.stderr, lines)) from exc
        except subprocess.TimeoutExpired:
            raise CommandError(self.name, argv, -1, f"timed out after {timeout:.0f} s") from None

    def read_text(self, path: str) -> str:
        """A file as this place sees it (/proc/stat, /sys/class/net/...)."""
        return self.run(["cat", path]).stdout

    def link_counters(self) -> list[dict] | None:
        """Each interface's ifname, ifindex and 64-bit counters (rx_packets, tx_packets, rx_dropped, tx_dropped...)
        when this place can read them without starting a process (a machine's agent); None: ask `ip -s -j link`."""
        return None

    # ---- the run's files where this place runs (configs, keys, sockets, pid files, logs of its daemons) ----------
    def files_dir(self) -> str | None:
        """Where this place keeps the run's files, if not in the local ledger's work directory (None: it sees
        this machine's filesystem)."""
        return None

    def write_file(self, path: str, text: str, mode: int = 0o600) -> None:
        """Create or replace a file with `mode`, never for a moment more open (the text may be a secret: it is
        never put in an argv)."""
        write_private(path, text, mode)

    def make_dirs(self, paths: Sequence[str], mode: int = 0o700) -> None:
        for p in paths:
            os.makedirs(p, mode=mode, exist_ok=True)

    def remove_dirs(self, paths: Sequence[str]) -> None:
        for p in paths:
            shutil.rmtree(p, ignore_errors=True)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def appears(self, path: str, within: float) -> bool:
        """Whether a path exists, allowed to wait up to `within` seconds for it where a look costs more than the
        wait (a machine's agent waits for it there); here it looks once, and the caller polls."""
        return self.exists(path)

    def answers(self, path: str) -> bool:
        """Whether a unix socket accepts a connection."""
        return socket_answers(path)

    def tail(self, path: str, lines: int = 5) -> str:
        """The last lines of a log, joined with ' | ' ('' if there is none)."""
        try:
            with open(path, errors="replace") as fh:
                return " | ".join(ln.strip() for ln in fh.read().splitlines()[-lines:])
        except OSError:
            return ""

    def python(self, module: str) -> list[str]:
        """The argv that runs one of vnetbench's standalone (standard library only) modules here (`module`: its
        dotted name under the package, e.g. "workloads.httpclient")."""
        return [sys.executable, "-m", f"vnetbench.{module}"]

    def privrun(self, directory: str, argv: Sequence[str]) -> list[str]:
        """argv run with `directory` as its /run (fixed pid-file and socket paths stay private)."""
        return [sys.executable, "-m", "vnetbench.system.privrun", directory, "--", *argv]


def write_private(path: str | os.PathLike, text: str, mode: int = 0o600) -> None:
    """Create or replace a file with `mode`, without a moment of wider permissions."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    os.fchmod(fd, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


socket_answers = agent_mod.socket_answers  # (one copy: the agent's, standard library only)


def _batch_error(stderr: str, lines: Sequence[str]) -> str:
    """iproute2 says `Command failed -:N`: name the failing line itself."""
    for token in stderr.split():
        if token.startswith("-:") and token[2:].isdigit():
            n = int(token[2:])
            if 0 < n <= len(lines):
                return f"{stderr.strip()} (line {n}: `{lines[n - 1]}`)"
    return stderr


class LocalExecutor(Executor):
    """The machine vnetbench runs on, in its root network namespace (used only to add/remove namespaces)."""

    name = "local"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def ip(self) -> list[str]:
        return ["ip"]

    def read_text(self, path: str) -> str:
        return Path(path).read_text()


class NetnsExecutor(Executor):
    """One network namespace on the local machine: an emulated host or VM."""

    def __init__(self, netns: str, ledger: Ledger | None = None):
        super().__init__(ledger)
        self.name = netns
        self.netns = netns

    def wrap(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def ip(self) -> list[str]:
        return ["ip", "-n", self.netns]

    def link_counters(self) -> list[dict] | None:
        # read over rtnetlink by a thread that joins the namespace (agent.link_stats): no `ip -s -j link` process
        # at each end of every trial's window
        try:
            return agent_mod.link_stats(self.netns)
        except OSError as exc:  # the namespace is gone
            raise CommandError(self.name, ["ip", "-s", "link"], 1, str(exc)) from None

    def read_text(self, path: str) -> str:
        # /proc/stat and friends are machine-wide; only per-namespace views (/sys/class/net) need the namespace.
        if path.startswith("/sys/class/net") or path.startswith("/proc/net") or path.startswith("/proc/sys/net"):
            return super().read_text(path)
        return Path(path).read_text()


# ---- remote machines over SSH --------------------------------------------------------------------------------------

REMOTE_STATE_DIR = "/run/vnetbench"


def remote_ledger_append(prefix: str, lines: Sequence[str], make: bool = False) -> str:
    """A shell command appending ledger lines (JSON) to a run's ledger on another machine (`make`: its directory may
    not exist yet): written there before the objects they name are made, so `clean` finds them after a crash."""
    d = shlex.quote(f"{REMOTE_STATE_DIR}/{prefix}")
    append = f"printf '%s\\n' {' '.join(map(shlex.quote, lines))} >> {d}/objects.jsonl"
    return f"mkdir -p {d} && {append}" if make else append


SSH_UNREACHABLE = 255  # ssh's own exit status: it could not connect, authenticate or verify the host key


class HostUnreachable(CommandError):
    """ssh itself failed (connection refused, timeout, refused key, changed host key): not the remote command."""


@dataclass(frozen=True)
class SshTarget:
    """How to reach one machine with the OpenSSH client. Everything else (jump hosts, agent, ciphers) comes from
    the user's ~/.ssh/config, or from `config` when given. There is deliberately no password option."""
    destination: str                       # "root@node1.lab", "node1" (a Host of the ssh config)
    port: int | None = None
    user: str | None = None
    identity: str | None = None            # a per-run or per-lab private key file
    known_hosts: str | None = None         # a known_hosts file of the testbed's own
    config: str | None = None              # an ssh_config file instead of ~/.ssh/config
    strict_host_keys: str = "yes"          # host keys are checked; "accept-new" only if a testbed file says so
    options: tuple[str, ...] = ()          # extra `-o Key=Value`
    connect_timeout: int = 5
    persist: int = 60                      # seconds the shared connection outlives its last use

    @property
    def name(self) -> str:
        return self.destination.rsplit("@", 1)[-1]

    def argv(self, control_dir: str) -> list[str]:
        """`ssh ... destination --`: the remote command follows as ONE already-quoted string."""
        argv = ["ssh"] + (["-F", self.config] if self.config else [])
        opts = {"BatchMode": "yes", "StrictHostKeyChecking": self.strict_host_keys, "ControlMaster": "auto",
                "ControlPath": f"{control_dir}/%C", "ControlPersist": str(self.persist),
                "ConnectTimeout": str(self.connect_timeout), "ServerAliveInterval": "5",
                "ServerAliveCountMax": "3", "LogLevel": "ERROR"}
        if self.identity:
            opts["IdentitiesOnly"] = "yes"
        if self.known_hosts:
            opts["UserKnownHostsFile"] = self.known_hosts
            opts["GlobalKnownHostsFile"] = "/dev/null"
        for key, value in opts.items():
            argv += ["-o", f"{key}={value}"]
        for opt in self.options:
            argv += ["-o", opt]
        argv += ["-p", str(self.port)] if self.port else []
        argv += ["-l", self.user] if self.user else []
        argv += ["-i", self.identity] if self.identity else []
        return argv + ["-T", "-x", self.destination, "--"]


def control_dir(base: str | os.PathLike | None, sub: str = "ssh", ledger: Ledger | None = None) -> str:
    """A directory for the shared connections' sockets: under the run's directory when its path is short enough
    for a unix socket (108 bytes; %C adds 40, ssh a temporary suffix of 17), else a private directory under /tmp
    (named with the run's prefix and recorded in its ledger before it is made, so `clean` finds it)."""
    if base is not None:
        path = os.path.join(os.fspath(base), sub)
        if len(path) + 60 < 108:
            os.makedirs(path, mode=0o700, exist_ok=True)
            return path
    if ledger is None:
        return tempfile.mkdtemp(prefix="vb-ssh-")
    while True:
        path = os.path.join(tempfile.gettempdir(), f"vb-ssh-{ledger.prefix}-{secrets.token_hex(4)}")
        ledger.record("dir", path)
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue


def control_dir_ok(path: str) -> bool:
    """The directory exists (made now if need be: a recorded one may have been removed since) and is ours alone."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        return os.stat(path).st_uid == os.geteuid()
    except OSError:
        return False


class SshExecutor(Executor):
    """A remote machine over SSH, optionally one of its network namespaces (a VM of a remote host).

    One ssh client per command over one shared connection per machine (ControlMaster), so a command costs a
    channel, not a handshake. Processes started with `spawn` are recorded in the remote machine's own ledger
    (/run/vnetbench/<prefix>/objects.jsonl, with pid and kernel start time) before they exec, and `terminate`/
    `kill` signal the remote process itself (killing the local ssh client would leave it running).

    With `agent`, commands and processes go through one agent on the machine (vnetbench.system.agent), started once over
    the same connection and shared by every executor of that machine (its namespaces too): a command then costs a
    message, not an SSH session, and independent commands sent from several threads run there at once. Should the
    agent fail to start, the executor goes on with one SSH session per command."""

    def __init__(self, target: SshTarget, ledger: Ledger | None = None, *, netns: str | None = None,
                 name: str | None = None, control: str | None = None, prefix: str | None = None,
                 log: list[list[str]] | None = None, connect: bool = True, own_files: bool = False,
                 agent: bool = False):
        super().__init__(ledger)
        self.target = target
        self.agent = agent
        # own_files: a machine with a filesystem of its own (a testbed host): the run's files are written there,
        # under its run directory. Otherwise (a guest that sees this machine's files) they are written here.
        self.own_files = own_files
        self.netns = netns
        self.name = name or (f"{target.name}:{netns}" if netns else target.name)
        # A given directory is used as it is (its owner made it); else one under the run's directory, or /tmp.
        # Only shown (connect=False: plan), the given one is shown and nothing is made.
        self.control = control if control and (len(control) + 60 < 108 or not connect) else \
            control_dir(ledger.dir if ledger else None, ledger=ledger)
        self.connect = connect
        if connect and not control_dir_ok(self.control):  # connect=False: only shown (plan), never run
            self.control = control_dir(None)
        self.prefix = prefix or (ledger.prefix if ledger else "adhoc")
        self.remote_dir = f"{REMOTE_STATE_DIR}/{self.prefix}"
        self.log = log  # every local argv this executor starts, when a caller wants to prove where things ran

    def in_netns(self, netns: str, name: str | None = None) -> "SshExecutor":
        """The same machine and connection, inside one of its network namespaces."""
        return SshExecutor(self.target, self.ledger, netns=netns, name=name, control=self.control,
                           prefix=self.prefix, log=self.log, connect=self.connect, own_files=self.own_files,
                           agent=self.agent)

    # ---- the machine's agent ------------------------------------------------------------------------------------
    def channel(self) -> "agent_mod.Channel | None":
        """The machine's agent, started at first use; None when off, or when it could not start or was lost (then
        one SSH session per command, as without it)."""
        if not (self.agent and self.connect):
            return None
        key = (self.target, self.control)
        with _AGENTS_LOCK:
            ch = _AGENTS.get(key)
            if ch is None:
                try:
                    ch = self._start_agent()
                except (agent_mod.ChannelLost, OSError):
                    ch = False
                _AGENTS[key] = ch
        return ch if ch and ch.alive() else None

    def _start_agent(self) -> "agent_mod.Channel":
        # Recorded in the run's directory only if the run made it already: on a testbed host the run's first
        # command starts the agent before the run's directory exists with its owner (a directory without an owner
        # is not the run's for `clean --testbed`). The agent needs no record to go: it ends with its connection.
        token, script = self._spawn_script(["python3", "-u", "-c", agent_mod.source()], f"{self.target.name}:agent",
                                           None, netns=False, only_if_dir=True)
        proc = subprocess.Popen(self.remote(script), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        if self.ledger is not None:
            self.ledger.record_process(proc.pid, f"ssh client for {self.target.name}:agent#{token}")
        return agent_mod.Channel(proc, self.target.name)

    def _agent_run(self, ch: "agent_mod.Channel", inner: list[str], shown: Sequence[str], input: str | None,
                   timeout: float, check: bool) -> subprocess.CompletedProcess[str]:
        log_command([*self.target.argv(self.control), shlex.join(inner)])  # what it stands for: a command there
        try:
            r = ch.run(inner, input, timeout)
        except agent_mod.ChannelLost as exc:
            raise HostUnreachable(self.name, shown, SSH_UNREACHABLE, f"ssh: {exc}") from None
        if r.get("timeout"):
            raise CommandError(self.name, shown, -1, f"timed out after {timeout:.0f} s")
        proc = subprocess.CompletedProcess(list(shown), r["rc"], r["out"], r["err"])
        if check and proc.returncode != 0:
            raise CommandError(self.name, shown, proc.returncode, proc.stderr)
        return proc

    def _inner(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else list(argv)

    def remote(self, script: str) -> list[str]:
        """The local argv that runs a remote shell script (the caller has quoted every value in it)."""
        full = [*self.target.argv(self.control), script]
        log_command(full)
        if self.log is not None:
            self.log.append(full)
        return full

    def wrap(self, argv: Sequence[str]) -> list[str]:
        return self.remote(shlex.join(self._inner(argv)))

    def ip(self) -> list[str]:
        # ssh joins its arguments with spaces for the remote shell: every element here is quoted already, and a
        # caller may append only literal options (e.g. "-batch", "-"). batch_argv/run quote everything.
        inner = ["ip", "-n", self.netns] if self.netns else ["ip"]
        return [*self.target.argv(self.control), *map(shlex.quote, inner)]

    def run_ip(self, args: Sequence[str], timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        inner = ["ip", *(["-n", self.netns] if self.netns else []), *args]
        if ch := self.channel():
            return self._agent_run(ch, inner, ["ip", *args], None, timeout, check)
        return self.run_script(shlex.join(inner), timeout=timeout, check=check, shown=["ip", *args])

    def batch_cmd(self, tool: str = "ip", *options: str) -> list[str]:
        """The remote argv of `tool [-n NS] [options] -batch -`."""
        return [tool, *(["-n", self.netns] if self.netns else []), *options, "-batch", "-"]

    def batch_argv(self, tool: str = "ip", *options: str) -> list[str]:
        return self.remote(shlex.join(self.batch_cmd(tool, *options)))

    def batch(self, tool: str, lines: Sequence[str], timeout: float = 60.0) -> None:
        ch = self.channel()
        if ch is None:
            if tool == "ip":
                return self.ip_batch(lines, timeout)
            return super().batch(tool, lines, timeout)
        proc = self._agent_run(ch, self.batch_cmd(tool), [tool, "-batch", "-"], "\n".join(lines) + "\n", timeout,
                               False)
        if proc.returncode:
            raise CommandError(self.name, [tool, "-batch", "-"], proc.returncode, _batch_error(proc.stderr, lines))

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float = 60.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        if ch := self.channel():
            return self._agent_run(ch, self._inner(argv), argv, input, timeout, check)
        return self.run_script(shlex.join(self._inner(argv)), input=input, timeout=timeout, check=check,
                               shown=argv)

    def run_script(self, script: str, *, input: str | None = None, timeout: float = 60.0, check: bool = True,
                   shown: Sequence[str] | None = None) -> subprocess.CompletedProcess[str]:
        shown = list(shown) if shown is not None else ["sh", "-c", script]
        if ch := self.channel():
            return self._agent_run(ch, ["sh", "-c", script], shown, input, timeout, check)
        try:
            proc = subprocess.run(self.remote(script), input=input, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise CommandError(self.name, shown, -1, f"timed out after {timeout:.0f} s") from exc
        if proc.returncode == SSH_UNREACHABLE and _ssh_failed(proc.stderr):
            raise HostUnreachable(self.name, shown, proc.returncode, proc.stderr)
        if check and proc.returncode != 0:
            raise CommandError(self.name, shown, proc.returncode, proc.stderr)
        return proc

    def ip_batch(self, lines: Sequence[str], timeout: float = 60.0) -> None:
        if lines and self.channel():
            return self.batch("ip", lines, timeout)
        if not lines:
            return
        argv = self.batch_argv("ip")
        proc = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=timeout)
        if proc.returncode:
            cls = HostUnreachable if proc.returncode == SSH_UNREACHABLE and _ssh_failed(proc.stderr) else CommandError
            raise cls(self.name, ["ip", "-batch", "-"], proc.returncode, _batch_error(proc.stderr, lines))

    def read_text(self, path: str) -> str:
        per_netns = path.startswith(("/sys/class/net", "/proc/net", "/proc/sys/net"))
        if (ch := self.channel()) and not (self.netns and per_netns):  # read by the agent: no `cat` started
            try:
                r = ch.call("read", 30, path=path)
            except agent_mod.ChannelLost as exc:
                raise HostUnreachable(self.name, ["cat", path], SSH_UNREACHABLE, f"ssh: {exc}") from None
            if r["rc"]:
                raise CommandError(self.name, ["cat", path], r["rc"], r.get("err", ""))
            return r["out"]
        return self.run(["cat", path]).stdout

    def link_counters(self) -> list[dict] | None:
        if (ch := self.channel()) is None:
            return None
        try:
            r = ch.call("links", 30, netns=self.netns)
        except agent_mod.ChannelLost as exc:
            raise HostUnreachable(self.name, ["ip", "-s", "link"], SSH_UNREACHABLE, f"ssh: {exc}") from None
        if r["rc"]:
            raise CommandError(self.name, ["ip", "-s", "link"], r["rc"], r.get("err", ""))
        return r["links"]

    def drop_namespaces(self, names: Sequence[str], timeout: float = 60.0) -> bool:
        """Kill every process in these namespaces and delete them, by the machine's agent with no process started
        there (agent.drop_netns); False when there is no agent (the caller runs `ip netns pids/del` instead)."""
        if (ch := self.channel()) is None:
            return False
        try:
            r = ch.call("drop_netns", timeout, names=list(names))
        except agent_mod.ChannelLost as exc:
            raise HostUnreachable(self.name, ["ip", "netns", "del"], SSH_UNREACHABLE, f"ssh: {exc}") from None
        if r["rc"]:
            raise CommandError(self.name, ["ip", "netns", "del"], r["rc"], r.get("err", ""))
        return True

    # ---- the run's files on the remote machine (own_files) ----------------------------------------------------
    def files_dir(self) -> str | None:
        return f"{self.remote_dir}/work" if self.own_files else None

    def write_file(self, path: str, text: str, mode: int = 0o600) -> None:
        """The text goes on stdin (`cat > file`), never in an argv: a key or pre-shared key stays out of every
        process list and of `plan`; the file is created with umask 077, so it is never more open than `mode`."""
        if not self.own_files:
            return super().write_file(path, text, mode)
        q = shlex.quote(path)
        self.run_script(f"umask 077 && mkdir -p {shlex.quote(os.path.dirname(path))} && rm -f {q} && cat > {q} && "
                        f"chmod {mode:o} {q}", input=text, shown=["write", path], timeout=30)

    def make_dirs(self, paths: Sequence[str], mode: int = 0o700) -> None:
        if not self.own_files:
            return super().make_dirs(paths, mode)
        self.run(["mkdir", "-p", "-m", f"{mode:o}", "--", *paths])

    def remove_dirs(self, paths: Sequence[str]) -> None:
        if not self.own_files:
            return super().remove_dirs(paths)
        if paths:
            self.run(["rm", "-rf", "--", *paths], check=False)

    def exists(self, path: str) -> bool:
        if not self.own_files:
            return super().exists(path)
        there = self.exists_there(path)
        return there if there is not None else self.run(["test", "-e", path], check=False).returncode == 0

    def exists_there(self, path: str) -> bool | None:
        """Whether a path exists on the machine, asked by its agent with no process started: a daemon's readiness
        is polled with it every 5 ms (`ip netns exec ... test -e` per look, 147 of them in S2's smoke run, cost a
        UML guest 50 ms each). None when there is no agent, or for a path `ip netns exec` would show otherwise
        (it mounts the namespace's own /sys and /etc/netns files)."""
        if self.netns and path.startswith(("/sys/", "/etc/")) or (ch := self.channel()) is None:
            return None
        try:
            return ch.call("exists", 30, path=path)["rc"] == 0
        except agent_mod.ChannelLost as exc:
            raise HostUnreachable(self.name, ["test", "-e", path], SSH_UNREACHABLE, f"ssh: {exc}") from None

    def appears(self, path: str, within: float) -> bool:
        """The agent looks every 5 ms on the machine itself, and answers once the path is there or `within` has
        passed: a daemon's start polled from here cost a round trip through a guest's agent every 5 ms (1,571 of
        them in S1's smoke run)."""
        if not self.own_files or self.netns and path.startswith(("/sys/", "/etc/")) or (ch := self.channel()) is None:
            return super().appears(path, within)
        try:
            return ch.call("appears", within + 30, path=path, within=within)["rc"] == 0
        except agent_mod.ChannelLost as exc:
            raise HostUnreachable(self.name, ["test", "-e", path], SSH_UNREACHABLE, f"ssh: {exc}") from None

    def answers(self, path: str) -> bool:
        if not self.own_files:
            return super().answers(path)
        there = self.answers_there(path)
        return there if there is not None else self.run(["test", "-S", path], check=False).returncode == 0

    def answers_there(self, path: str, within: float = 0.0) -> bool | None:
        """Whether a unix socket on the machine accepts a connection, asked by its agent with no process started
        (a `python3 -c` per look cost a busy UML guest 0.1-0.7 s); None when there is no agent. `within`: the agent
        may wait that long for it to answer, looking every 5 ms there (a round trip per look cost a UML guest 0.1
        CPU-s a second)."""
        if (ch := self.channel()) is None:
            return None
        try:
            if within > 0:
                return ch.call("appears", within + 30, path=path, within=within, answers=True)["rc"] == 0
            return ch.call("answers", 30, path=path)["rc"] == 0
        except agent_mod.ChannelLost as exc:
            raise HostUnreachable(self.name, ["test", "-S", path], SSH_UNREACHABLE, f"ssh: {exc}") from None

    def privrun(self, directory: str, argv: Sequence[str]) -> list[str]:
        """The same private /run as vnetbench.system.privrun, with util-linux's unshare: a private mount namespace,
        `directory` bound on /run, then exec (the pid stays the daemon's). On a testbed host vnetbench is not
        installed; in a guest, which has it, a python start with its imports took 0.6-1.9 s of a busy UML guest
        per command (charon, each swanctl), unshare 0.1-0.3 s."""
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", 'mount --bind "$0" /run && exec "$@"',
                directory, *argv]

    def tail(self, path: str, lines: int = 5) -> str:
        if not self.own_files:
            return super().tail(path, lines)
        try:
            out = self.run_script(f"tail -n {int(lines)} {shlex.quote(path)} 2>/dev/null", check=False).stdout
        except CommandError:
            return ""
        return " | ".join(ln.strip() for ln in out.splitlines())

    def python(self, module: str) -> list[str]:
        """A standalone module is copied once into the run's directory on the machine and run by its python3."""
        if not self.own_files:
            return super().python(module)
        path = f"{self.remote_dir}/lib/{module.rsplit('.', 1)[-1]}.py"
        key = (self.target, path)
        if key not in _COPIED and self.connect:  # (not connect: only shown by `plan`)
            source = (Path(__file__).parents[1] / f"{module.replace('.', '/')}.py").read_text()
            self.write_file(path, source, 0o600)
            _COPIED.add(key)
        return ["python3", path]

    def spawn(self, argv: Sequence[str], *, label: str | None = None, env: dict | None = None,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> subprocess.Popen:
        ch = self.channel() if {stdout, stderr} <= {subprocess.PIPE, subprocess.DEVNULL} else None
        # A traffic tool needs only the namespace's network stack: the agent enters it for the process, which spares
        # `ip netns exec` (an exec and a remount of /sys: 40-80 ms of a UML guest per process). Others (daemons,
        # capture tools) get `ip netns exec`'s full view, /sys of the namespace included.
        direct = ch is not None and self.netns is not None and argv[0] in NETNS_ONLY_TOOLS
        label, argv = label or f"{self.name}:{argv[0]}", self.pinned(argv)
        token, script = self._spawn_script(argv, label, env, netns=not direct)
        if ch is not None:
            log_command([*self.target.argv(self.control), script])
            try:
                proc = ch.spawn(["sh", "-c", script], stdout == subprocess.PIPE, stderr == subprocess.PIPE,
                                self.netns if direct else None)
                rawlog.spawned(self.name, argv, [*self.target.argv(self.control), script], label, proc)
                self.watched(label, argv, proc)
                return proc
            except agent_mod.ChannelLost:
                pass  # the agent is gone: an SSH session of its own, as without it
        if direct:  # (the agent is gone: as without it)
            token, script = self._spawn_script(argv, label, env)
        proc = RemoteProcess(self, token, self.remote(script), stdout=stdout, stderr=stderr,
                             stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        rawlog.spawned(self.name, argv, [*self.target.argv(self.control), script], label, proc)
        if self.ledger is not None:
            self.ledger.record_process(proc.pid, f"ssh client for {label}#{token}")
        self.watched(label, argv, proc)
        return proc

    def _spawn_script(self, argv: Sequence[str], label: str | None, env: dict | None,
                      netns: bool = True, only_if_dir: bool = False) -> tuple[str, str]:
        """A token and the remote script that records the process there (pid and kernel start time), then becomes
        argv (in this executor's namespace unless netns=False; recorded only if the run's directory is there
        already with only_if_dir)."""
        token = secrets.token_hex(4)
        label = f"{label or f'{self.name}:{argv[0]}'}#{token}"
        extra = {k: v for k, v in (env or {}).items() if os.environ.get(k) != v}
        inner = ["env", *(f"{k}={v}" for k, v in extra.items()), *argv] if extra else list(argv)
        inner = self._inner(inner) if netns else inner
        d = shlex.quote(self.remote_dir)
        record = '{"op": "add", "kind": "process", "name": %s, "pid": %s, "start": %s}\n'
        # The remote shell is a session leader (sshd calls setsid): its pid, kept by exec, is the process group
        # that terminate() signals. It records itself (pid + kernel start time) before it becomes the tool.
        # Only shell builtins before the exec (a process start costs a UML guest tens of ms): the kernel start
        # time is field 22 of /proc/$$/stat, the 20th after the command name's closing parenthesis.
        script = (f"{{ [ -d {d}/pids ] || (umask 077 && mkdir -p {d}/pids); }} && read -r s < /proc/$$/stat && "
                  f"s=${{s##*') '}} && "
                  f"set -- $s && printf {shlex.quote(record)} {shlex.quote(json.dumps(label))} \"$$\" \"${{20}}\" "
                  f">> {d}/objects.jsonl && echo $$ > {d}/pids/{token}")
        if only_if_dir:
            return token, f"if [ -d {d} ]; then {script}; fi; exec {shlex.join(inner)}"
        return token, f"{script} && exec {shlex.join(inner)}"

    def signal_remote(self, token: str, sig: int) -> bool:
        """Signal the remote process group of one spawned process; False if the host did not answer."""
        f = shlex.quote(f"{self.remote_dir}/pids/{token}")
        name = signal.Signals(sig).name.removeprefix("SIG")
        # The pid file is written just before exec: a process signalled at once may not have written it yet.
        script = (f"i=0; while [ ! -s {f} ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; "
                  f"p=$(cat {f}) && {{ kill -s {name} -- -$p 2>/dev/null || kill -s {name} $p 2>/dev/null; }}; true")
        try:
            self.run_script(script, timeout=10, check=False)
            return True
        except (HostUnreachable, CommandError):
            return False

    def close(self) -> None:
        """End the agent and the shared connection (the master process would otherwise linger for `persist` s)."""
        with _AGENTS_LOCK:
            ch = _AGENTS.pop((self.target, self.control), None)
        if ch:
            ch.close()
        close_master(self.target, self.control)
        if os.path.basename(self.control).startswith("vb-ssh-"):
            shutil.rmtree(self.control, ignore_errors=True)


NETNS_ONLY_TOOLS = frozenset({"iperf3", "ping", "sockperf", "netperf", "netserver", "stress-ng"})
_AGENTS: dict = {}  # (target, control dir) -> the machine's agent.Channel, or False: it could not start
_AGENTS_LOCK = threading.Lock()
_COPIED: set = set()  # (target, remote path) of the standalone modules already copied to a machine


def close_master(target: SshTarget, control: str) -> None:
    subprocess.run([*target.argv(control)[:-3], "-O", "exit", target.destination], capture_output=True,
                   text=True, timeout=10)


def _ssh_failed(stderr: str) -> bool:
    """ssh's own failures, as opposed to a remote command that happened to exit 255."""
    markers = ("ssh:", "Host key verification failed", "Permission denied", "Connection closed",
               "Connection refused", "Could not resolve", "kex_exchange_identification", "REMOTE HOST IDENTIFICATION",
               "Connection timed out", "No route to host", "Control socket", "mux_client")
    return any(m in stderr for m in markers)


class RemoteProcess(subprocess.Popen):
    """The local ssh client of a remote process; signals go to the remote process itself."""

    def __init__(self, executor: SshExecutor, token: str, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.executor, self.token = executor, token

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        if not self.executor.signal_remote(self.token, sig):
            super().send_signal(sig)  # the host is gone: at least end the local client

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill_group(self) -> None:
        """SIGKILL the remote process and its group (e.g. nginx's workers), as os.killpg does for a local one."""
        self.kill()

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        try:
            self.wait(timeout=2)
        except subprocess.TimeoutExpired:
            super().send_signal(signal.SIGKILL)


PR_SET_PDEATHSIG = 1


@functools.cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


def dying_with_parent(argv: list[str]) -> tuple[list[str], dict]:
    """subprocess.run's first argument and keywords for a child the kernel kills when vnetbench dies (see
    die_with_parent): through util-linux's setpriv --pdeathsig, which lets subprocess start it with vfork. A
    preexec_fn forks the whole process and runs Python in the child: 5 ms of each `ip -batch` of a build
    (12.4 against 7.0 ms for the same root batch by hand). Without setpriv, the preexec_fn. Unlike it, setpriv does
    not look whether vnetbench died in the microseconds before its prctl; a batch started then runs to its end (an
    sh wrapper to look would cost another exec per batch)."""
    if tool := _setpriv():
        return [tool, "--pdeathsig", "KILL", "--", *argv], {}
    return argv, {"preexec_fn": die_with_parent()}


def die_with_parent() -> Callable[[], None]:
    """A preexec_fn: the kernel kills the child when vnetbench dies. A kill -9 in the middle of a build must not leave
    an `ip -batch` adding namespaces after `clean` has removed the recorded ones (found with 256 pairs: clean ran
    while the orphaned root batch still had hundreds of `netns add` to go)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    parent = os.getpid()  # (the signal comes when the forking thread ends: each batch is waited for by its own)

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the line above: nobody would kill us
            os._exit(1)
    return arm
