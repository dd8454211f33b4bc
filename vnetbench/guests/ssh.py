"""Commands inside a guest over SSH, from the run's guest namespace (where the management bridge is), with the
run's own key and the guest's own host key (checked), sharing one connection per guest."""
from __future__ import annotations

import shlex
import subprocess
from typing import Sequence

from ..executor import Executor


class GuestSsh(Executor):
    def __init__(self, fleet, guest):
        super().__init__(fleet.ledger)
        self.fleet, self.guest = fleet, guest
        self.name = guest.label
        self.control = fleet.dir / f"cm-{guest.index}"

    def ssh(self) -> list[str]:
        f = self.fleet
        return ["ip", "netns", "exec", f.netns, "ssh", "-F", "/dev/null", "-i", str(f.identity),
                "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={f.known_hosts}", "-o", "LogLevel=ERROR",
                "-o", "ControlMaster=no", "-o", f"ControlPath={self.control}", "-o", "ConnectTimeout=3",
                f"root@{self.guest.address}"]

    def wrap(self, argv: Sequence[str]) -> list[str]:
        return [*self.ssh(), "--", shlex.join(argv)]

    def ip(self) -> list[str]:
        return self.wrap(["ip"])

    def read_text(self, path: str) -> str:
        return self.run(["cat", path]).stdout

    def connect(self, timeout: float = 3.0) -> bool:
        """Open the shared connection (a master that stays in the background); False if sshd does not answer yet.
        The master gets no pipes: a pipe it inherited would keep every later caller waiting for its end."""
        argv = [*self.ssh()[:-1], "-o", "ControlMaster=yes", "-o", "ControlPersist=yes", "-N", "-f",
                f"root@{self.guest.address}"]
        with open(self.fleet.dir / f"ssh-{self.guest.index}.log", "ab") as log:
            try:
                return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                      timeout=timeout + 2).returncode == 0
            except subprocess.TimeoutExpired:
                return False

    def close(self) -> None:
        subprocess.run([*self.ssh()[:-1], "-O", "exit", f"root@{self.guest.address}"], capture_output=True,
                       timeout=10)
