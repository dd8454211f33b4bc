"""A guest is reached like any other host: the SSH executor, with the run's own key and the guest's own host key
(checked), over the management bridge in the run's guest namespace (a ProxyCommand relays from there)."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from ..system.executor import SshExecutor, SshTarget

PKG_ROOT = str(Path(__file__).resolve().parents[2])


def target(fleet, guest) -> SshTarget:
    proxy = shlex.join(["ip", "netns", "exec", fleet.netns, "env", f"PYTHONPATH={PKG_ROOT}", sys.executable,
                        "-m", "vnetbench.guests.relay"]) + " %h %p"
    return SshTarget(f"root@{guest.address}", identity=str(fleet.identity), known_hosts=str(fleet.known_hosts),
                     config="/dev/null", options=(f"ProxyCommand={proxy}",), connect_timeout=3, persist=3600)


def executor(fleet, guest) -> SshExecutor:
    return SshExecutor(target(fleet, guest), fleet.ledger, name=guest.label, control=str(fleet.control_dir),
                       prefix=fleet.prefix, agent=True)


def connect(ex: SshExecutor, log: Path, timeout: float = 3.0) -> bool:
    """Open the shared connection now (a master that stays in the background), so that a guest counts as up only
    when its sshd has answered; False if it does not answer yet. The master gets no pipes: one it inherited would
    keep a later caller waiting for its end."""
    argv = [*ex.target.argv(ex.control)[:-3], "-o", "ControlMaster=yes", "-N", "-f", ex.target.destination]
    with open(log, "ab") as fh:
        try:
            return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fh,
                                  timeout=timeout + 2).returncode == 0
        except subprocess.TimeoutExpired:
            return False


def plan_executor(fleet, guest) -> SshExecutor:
    """The executor `plan` shows for a guest not booted (nothing is connected or run)."""
    return SshExecutor(target(fleet, guest), None, name=guest.label, control=str(fleet.control_dir),
                       prefix=fleet.prefix, connect=False)
