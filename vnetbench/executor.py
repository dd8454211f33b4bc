"""Where commands run. Everything outside this module talks to a host or VM through `Executor` only,
so a later host kind (a VM over a serial console, a remote machine over SSH) is one new subclass.

Commands are argv lists, never shell strings: nothing from a spec ever reaches a shell.
"""
from __future__ import annotations

import shlex
import subprocess
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Sequence

from .ledger import Ledger


class CommandError(RuntimeError):
    def __init__(self, where: str, argv: Sequence[str], returncode: int, stderr: str):
        self.where, self.argv, self.returncode, self.stderr = where, list(argv), returncode, stderr.strip()
        last = self.stderr.splitlines()[-3:] if self.stderr else []
        super().__init__(f"[{where}] `{shlex.join(argv)}` exited {returncode}: {' | '.join(last)}")


class Executor(ABC):
    """A place where commands run: the machine itself, or one network namespace on it."""

    name: str

    def __init__(self, ledger: Ledger | None = None):
        self.ledger = ledger

    @abstractmethod
    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The full command line that runs argv in this place."""

    @abstractmethod
    def ip(self) -> list[str]:
        """The `ip` command line that acts on this place's network stack."""

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float = 60.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        full = self.wrap(argv)
        try:
            proc = subprocess.run(full, input=input, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise CommandError(self.name, argv, -1, f"timed out after {timeout:.0f} s") from exc
        if check and proc.returncode != 0:
            raise CommandError(self.name, argv, proc.returncode, proc.stderr)
        return proc

    def spawn(self, argv: Sequence[str], *, label: str | None = None, env: dict | None = None,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> subprocess.Popen:
        """Start a process in this place; it is recorded in the run's ledger so `clean` can stop it."""
        proc = subprocess.Popen(self.wrap(argv), stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                                text=True, env=env, start_new_session=True)
        if self.ledger is not None:
            self.ledger.record_process(proc.pid, label or f"{self.name}:{argv[0]}")
        return proc

    def ip_batch(self, lines: Sequence[str], timeout: float = 60.0) -> None:
        """Apply iproute2 commands in one process; stops at the first failing line and names it."""
        if not lines:
            return
        argv = [*self.ip(), "-batch", "-"]
        try:
            subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True,
                           timeout=timeout, check=True)
        except subprocess.CalledProcessError as exc:
            raise CommandError(self.name, argv, exc.returncode, _batch_error(exc.stderr, lines)) from exc

    def read_text(self, path: str) -> str:
        """A file as this place sees it (/proc/stat, /sys/class/net/...)."""
        return self.run(["cat", path]).stdout


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

    def read_text(self, path: str) -> str:
        # /proc/stat and friends are machine-wide; only per-namespace views (/sys/class/net) need the namespace.
        if path.startswith("/sys/class/net") or path.startswith("/proc/net") or path.startswith("/proc/sys/net"):
            return super().read_text(path)
        return Path(path).read_text()
