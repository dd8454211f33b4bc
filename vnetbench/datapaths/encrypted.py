"""What IPsec and WireGuard share: where the tunnel runs (the encryption_scope factor), which nodes peer, a private
directory per node for configs, keys, sockets and pid files, secret files, and the addresses a host-to-host
tunnel adds.

- vm-to-vm: a tunnel between the two VMs of every pair (the daemons run inside the VM namespaces).
- host-to-host: a site-to-site tunnel between every two emulated hosts; the overlay's tunnel endpoints become the
  hosts' tunnel addresses (`transport_ip`), so all VM traffic between hosts crosses the encrypted tunnel. With
  attach=host the workloads target those tunnel addresses.

Secrets (pre-shared keys, private keys) are generated at build time, written only to 0600 files in the node's
directory under the run's work dir (0700) on the node's machine (over SSH: on stdin, never in an argv), and the
directories are removed at teardown; `clean` removes the
whole run directory after a crash. They never appear in an argv, a batch line, a log or the results.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..system.executor import Executor, SshExecutor, socket_answers
from ..system.executor import write_private as _write_private
from .base import BuildError, Encryption

if TYPE_CHECKING:
    from ..core.scenario import Scenario
    from .base import Builder as Topology  # the builder interface, whatever site the topology is on

HOST_TUNNEL = ("10.251.0.", "fd00:251::")  # + host number: a host's address inside a host-to-host tunnel
VM_TUNNEL = ("10.252.", "fd00:252::")      # + VM number: a VM's address inside a vm-to-vm tunnel (WireGuard), a /16
READY_TIMEOUT_S = 10.0


def number(label: str) -> int:
    """h2 -> 2, h1v3 -> 3: the number that makes a node's addresses unique."""
    return int(label.rsplit("v", 1)[1]) if "v" in label else int(label[1:])


def write_private(path: str | Path, text: str) -> None:
    """Create or replace a file readable by its owner only, without a moment of wider permissions."""
    _write_private(path, text, 0o600)


def carries_ip_between_hosts(overlay: str) -> bool:
    """Whether an overlay puts VM traffic into IP packets between the hosts' addresses (a tunnel the hosts'
    own encryption can carry), as opposed to sharing the provider L2 network (none, vlan)."""
    return overlay not in ("none", "vlan")


class EncryptedTunnel(Encryption):
    """Base of the encrypting elements. Subclasses build the tunnel on `self.peers(topo)`."""

    # ---- scope -------------------------------------------------------------------------------------------
    @staticmethod
    def host_to_host(sc: "Scenario") -> bool:
        return sc.levels["encryption_scope"] == "host-to-host"

    def scope_problem(self, sc: "Scenario") -> str | None:
        """Why this scope cannot be built for this scenario, or None."""
        attach = sc.levels["attach"]
        if not self.host_to_host(sc):
            if attach == "host":
                return ("attach=host has no VMs: traffic between the hosts is encrypted under "
                        "encryption_scope host-to-host")
            return None
        if not sc.crosses_hosts:
            return ("both VMs of every pair are on the same host: a host-to-host tunnel would carry nothing; "
                    "host-to-host encryption is measured with placement cross-host")
        if attach == "direct":
            return ("a direct (SR-IOV-like) attachment bypasses the host's network stack, so a host-to-host tunnel "
                    "cannot carry the VMs' traffic; use encryption_scope vm-to-vm")
        if attach == "switch" and not carries_ip_between_hosts(sc.element("overlay")):
            return (f"with overlay {sc.labels['overlay']} the VMs share the provider network and reach each other "
                    f"without an IP hop through their hosts, so a host-to-host tunnel cannot carry their traffic; "
                    f"use an overlay that tunnels over IP (e.g. vxlan) or encryption_scope vm-to-vm")
        return None

    def peers(self, topo: "Topology") -> list[tuple[str, str]]:
        """(initiator, responder) node labels: every two hosts, or the two VMs of every pair."""
        if self.host_to_host(topo.sc):
            hosts = [h.label for h in topo.hosts]
            return [(a, b) for i, a in enumerate(hosts) for b in hosts[i + 1:]]
        links = [(p.meta["client"], p.meta["server"]) for p in topo.pairs]
        return list(dict.fromkeys(links))

    @staticmethod
    def members(links: list[tuple[str, str]]) -> list[str]:
        return list(dict.fromkeys(n for link in links for n in link))

    @staticmethod
    def tunnel_addrs(label: str) -> tuple[str, str]:
        """(IPv4, IPv6) of a node inside the tunnel: a host's for host-to-host, a VM's for vm-to-vm."""
        n = number(label)
        if "v" not in label:
            return HOST_TUNNEL[0] + str(n), HOST_TUNNEL[1] + str(n)
        return f"{VM_TUNNEL[0]}{n // 256}.{n % 256}", VM_TUNNEL[1] + str(n)  # up to 1000 VMs; the first 254 in .0.n

    def transport_ip(self, topo: "Topology", host: str) -> str | None:
        """Host-to-host: the overlay's tunnels run between the hosts' tunnel addresses."""
        return self.tunnel_addrs(host)[0] if self.host_to_host(topo.sc) else None

    def target_tunnel_addrs(self, topo: "Topology") -> None:
        """Make the workloads target the peers' tunnel addresses (hosts with attach=host; VMs for WireGuard)."""
        six = topo.sc["ip_version"] == 6
        for p in topo.pairs:
            for ep, label in ((p.client, p.meta["client"]), (p.server, p.meta["server"])):
                ep.addr = self.tunnel_addrs(label)[1 if six else 0]

    # ---- MTU ---------------------------------------------------------------------------------------------
    def tunnel_mtu(self, link_mtu: int) -> int:
        """MTU of the tunnel interface when its encrypted packets leave through a link of `link_mtu`."""
        raise NotImplementedError

    def outer_size(self, inner: int) -> int:
        """Size on the wire of an encrypted packet carrying `inner` bytes."""
        raise NotImplementedError

    def overhead_for(self, scenario: "Scenario") -> int:
        if not self.host_to_host(scenario):
            return 0  # inside the VMs: the tunnel interface gets a lower MTU, the VM's NIC keeps its own
        mtu = scenario.levels["mtu"]
        if scenario.levels["mtu_policy"] == "lower-vm":
            return mtu - self.tunnel_mtu(mtu)
        inner = mtu + scenario.overheads["overlay"]  # the largest packet entering the hosts' tunnel
        return self.outer_size(inner) - inner

    def link_mtu(self, sc: "Scenario") -> int:
        """MTU of the link the encrypted packets leave through: the underlay, or the VM's NIC."""
        return sc.underlay_mtu if self.host_to_host(sc) else sc.vm_mtu

    # ---- private directories and daemons --------------------------------------------------------------------
    @staticmethod
    def privrun(topo: "Topology", label: str, argv: list[str]) -> list[str]:
        """argv run with the node's directory as its /run (fixed pid-file and socket paths stay private); the
        node's executor knows how, where it runs."""
        return topo.executor(label).privrun(topo.workdir(label), argv)

    def make_dirs(self, topo: "Topology", labels: list[str]) -> None:
        topo.make_dirs(labels)

    def teardown(self, topo: "Topology") -> None:
        labels = self.members(self.peers(topo))
        if labels:
            topo.remove_dirs(labels)

    @staticmethod
    def wait_socket(topo: "Topology", name: str, path: str, log: str | None = None, label: str | None = None):
        """A ready check: the daemon's control socket accepts a connection (and the daemon still runs), asked
        where the node runs."""
        def ready() -> None:
            ex = topo.executor(label) if label else None
            deadline = time.monotonic() + READY_TIMEOUT_S
            while time.monotonic() < deadline:
                proc = topo.daemons.get(name)
                if proc is not None and proc.poll() is not None:
                    err = proc.stderr.read() if proc.stderr else ""
                    raise BuildError(f"{name} exited {proc.returncode} at start: {err.strip()[-500:]}"
                                     f"{_tail(ex, log)}")
                guest = _guest(ex)
                if guest is not None:  # a guest's socket, reached from inside the guest (kernel or vm_kernel guest)
                    # by its agent, which looks there for up to 0.25 s: no python3 started, no round trip per look
                    there = guest.answers_there(path, within=min(0.25, max(deadline - time.monotonic(), 0.0)))
                    if there if there is not None else guest.run(["python3", "-c", _ANSWERS_PY, path],
                                                                 check=False).returncode == 0:
                        return
                elif ex.answers(path) if ex else _answers(path):
                    return
                time.sleep(0.01)
            raise BuildError(f"{name}: its control socket {path} did not answer within {READY_TIMEOUT_S:.0f} s"
                             f"{_tail(ex, log)}")
        return ready


_ANSWERS_PY = ("import os, socket, sys; p = sys.argv[1]; fd = os.open(os.path.dirname(p), os.O_PATH); "
               "socket.socket(socket.AF_UNIX).connect(f'/proc/self/fd/{fd}/{os.path.basename(p)}')")
_answers = socket_answers


def _guest(ex) -> "Executor | None":
    """A guest's executor (SSH to a kernel that sees this machine's files through hostfs): a socket its daemon
    made there answers only inside the guest."""
    return ex if isinstance(ex, SshExecutor) and ex.files_dir() is None else None


def _tail(ex, log: str | None, lines: int = 5) -> str:
    if not log:
        return ""
    text = ex.tail(log, lines) if ex else Executor.tail(None, log, lines)
    return f"; last lines of {log}: {text}" if text else ""


def run_quiet(argv: list[str], stdin: str | None = None) -> str:
    """A short local command whose output is a secret or a public key: never echoed, only returned."""
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=10)
    if proc.returncode != 0:
        raise subprocess.SubprocessError(f"{argv[0]} {argv[1] if len(argv) > 1 else ''} exited {proc.returncode}: "
                                         f"{proc.stderr.strip()[-200:]}")
    return proc.stdout.strip()
