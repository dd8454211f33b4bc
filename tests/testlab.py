"""An emulated lab of "remote machines" on this one machine, for tests and benchmarks of the SSH testbed (a test
fixture: it is not part of the package).

Each machine is a network namespace with its own mount namespace (private /run and /tmp, so its namespaces and
vnetbench ledger are invisible from here) running its own sshd, started with host keys generated for the lab, never
as a system service. The machines' underlay NIC (`eth1`, with the machine's address, configured by the lab) is a
veth into a bridge in a switch namespace; the local machine reaches the switch through one management veth
(`<lab>-m`, the only object in the root namespace). vnetbench itself reaches the machines only over SSH.

Everything is recorded in `<dir>/objects.jsonl` before it is created; `Lab.destroy()` (or `python
tests/testlab.py clean DIR`) removes it, and `stop_sshd()` lets a test take one machine off the network.
"""
from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vnetbench.system.ledger import delete_namespaces, process_start_time

SSHD = "/usr/sbin/sshd"
MACHINE_DIR = "/run/lab"  # a lab machine's own files, as it sees them


@dataclass
class LabHost:
    name: str          # node1
    netns: str         # <lab>-n1
    address: str       # 10.77.K.1 on eth1
    nic: str = "eth1"
    pid: int | None = None      # its sshd
    keeper: int | None = None   # the process holding its mount namespace

    @property
    def fqdn(self) -> str:
        return f"{self.name}.lab"


class Lab:
    def __init__(self, directory: Path, hosts: int = 3):
        self.dir = Path(directory)
        self.prefix = "vl" + secrets.token_hex(2)
        self.subnet = _free_subnet()
        self.hosts = [LabHost(f"node{i}", f"{self.prefix}-n{i}", f"{self.subnet}.{i}") for i in range(1, hosts + 1)]
        self.switch = f"{self.prefix}-sw"
        self.mgmt = f"{self.prefix}-m"

    # ---- records -----------------------------------------------------------------------------------------------
    def _record(self, **entry) -> None:
        with open(self.dir / "objects.jsonl", "a") as fh:
            fh.write(json.dumps(entry) + "\n")

    # ---- build -------------------------------------------------------------------------------------------------
    def create(self) -> "Lab":
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "lab.json").write_text(json.dumps({"prefix": self.prefix, "subnet": self.subnet}))
        for ns in [self.switch, *(h.netns for h in self.hosts)]:
            self._record(kind="netns", name=ns)
        self._record(kind="link", name=self.mgmt)
        lines = [f"netns add {ns}" for ns in [self.switch, *(h.netns for h in self.hosts)]]
        lines += [f"link add {self.mgmt} type veth peer name {self.prefix}-pm netns {self.switch}",
                  f"addr add {self.subnet}.254/24 dev {self.mgmt}", f"link set {self.mgmt} up"]
        for i, h in enumerate(self.hosts, 1):
            lines.append(f"link add {h.nic} netns {h.netns} type veth peer name {self.prefix}-p{i} netns {self.switch}")
        _ip_batch(None, lines)
        br = f"{self.prefix}-br"
        sw = ["link set lo up", f"link add {br} type bridge forward_delay 0", f"link set {br} up",
              f"link set {self.prefix}-pm master {br} up"]
        sw += [f"link set {self.prefix}-p{i} master {br} up" for i in range(1, len(self.hosts) + 1)]
        _ip_batch(self.switch, sw)
        for h in self.hosts:
            _ip_batch(h.netns, ["link set lo up", f"link set {h.nic} up", f"addr add {h.address}/24 dev {h.nic}"])
        self._keys()
        for h in self.hosts:
            self.start_sshd(h)
        self._write_client_files()
        return self

    def _keys(self) -> None:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vnetbench-lab", "-f",
                        str(self.dir / "id_ed25519")], check=True)
        for h in self.hosts:
            d = self.dir / h.name
            d.mkdir(exist_ok=True)
            (d / "authorized_keys").write_text((self.dir / "id_ed25519.pub").read_text())
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", h.fqdn, "-f",
                            str(d / "ssh_host_ed25519_key")], check=True)
            (d / "sshd_config").write_text(
                f"ListenAddress {h.address}\nPort 22\nHostKey {MACHINE_DIR}/ssh_host_ed25519_key\nPidFile /run/sshd.pid\n"
                f"AuthorizedKeysFile {MACHINE_DIR}/authorized_keys\nPermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                "MaxSessions 200\nMaxStartups 100:30:200\nUseDNS no\nPrintMotd no\nSubsystem sftp internal-sftp\n")

    def _start_keeper(self, h: LabHost) -> None:
        """The machine's "init": holds its mount namespace (private /run, /tmp and root's home) whether or not sshd runs."""
        # Its own files (sshd config, host key, authorized_keys) are bound on /run/lab before /tmp is hidden.
        inner = (f"mount -t tmpfs -o mode=755 tmpfs /run && mkdir -p /run/sshd {MACHINE_DIR} && "
                 f"mount --bind {shlex.quote(str(self.dir / h.name))} {MACHINE_DIR} && "
                 "mount -t tmpfs -o mode=1777 tmpfs /tmp && mount -t tmpfs -o mode=700 tmpfs /root && "
                 "exec sleep infinity")
        proc = subprocess.Popen(["ip", "netns", "exec", h.netns, "unshare", "--mount", "--propagation", "private",
                                 "sh", "-c", inner], stdin=subprocess.DEVNULL, start_new_session=True)
        self._record(kind="process", name=f"keeper@{h.name}", pid=proc.pid, start=process_start_time(proc.pid),
                     mntns=True)
        deadline = time.monotonic() + 10
        while _comm(proc.pid) != "sleep":
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the mount namespace of {h.name} could not be set up")
            time.sleep(0.01)
        h.keeper = proc.pid

    def start_sshd(self, h: LabHost) -> None:
        if h.keeper is None:
            self._start_keeper(h)
        d = self.dir / h.name
        log = open(d / "sshd.log", "ab")
        proc = subprocess.Popen(["nsenter", "-t", str(h.keeper), "-n", "-m", SSHD, "-D", "-e", "-f",
                                 f"{MACHINE_DIR}/sshd_config"], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        h.pid = proc.pid
        self._record(kind="process", name=f"sshd@{h.name}", pid=proc.pid, start=process_start_time(proc.pid))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ss = subprocess.run(["ip", "netns", "exec", h.netns, "ss", "-Hlnt", "sport = :22"], capture_output=True,
                                text=True).stdout
            if ss.strip():
                return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"sshd of {h.name} did not start: {(d / 'sshd.log').read_text()[-500:]}")

    def stop_sshd(self, h: LabHost) -> None:
        """Stop a machine's sshd and every SSH session on it, as when its sshd dies: what the sessions started
        keeps running, and `start_sshd` brings the same machine (same /run, same namespaces) back."""
        for pid in _pids_in_mntns(h.keeper):
            if _comm(pid) == "sshd":
                _kill(pid)
        h.pid = None

    def _write_client_files(self) -> None:
        keys = []
        for h in self.hosts:
            pub = (self.dir / h.name / "ssh_host_ed25519_key.pub").read_text().split()[:2]
            keys.append(f"{h.fqdn},{h.address} {' '.join(pub)}")
        (self.dir / "known_hosts").write_text("\n".join(keys) + "\n")
        cfg = "".join(f"Host {h.fqdn}\n  HostName {h.address}\n  User root\n" for h in self.hosts)
        cfg += (f"Host *.lab\n  IdentityFile {self.dir / 'id_ed25519'}\n  IdentitiesOnly yes\n"
                f"  UserKnownHostsFile {self.dir / 'known_hosts'}\n  GlobalKnownHostsFile /dev/null\n")
        (self.dir / "ssh_config").write_text(cfg)
        self.testbed_file()

    def testbed_file(self, path: Path | None = None, hosts: list[LabHost] | None = None) -> Path:
        """A vnetbench testbed file for this lab (an ssh_config of its own, since ~/.ssh is the user's)."""
        path = path or self.dir / "testbed.yaml"
        # the run's own endpoints (host-to-host encryption): a subnet nothing on the lab's link uses
        run_subnet = self.subnet.replace("10.77.", "10.78.", 1) + ".0/24"
        lines = [f"ssh_config: {self.dir / 'ssh_config'}", f"run_subnet: {run_subnet}", "hosts:"]
        for h in hosts or self.hosts:
            lines += [f"  {h.name}:", f"    ssh: root@{h.fqdn}", f"    nic: {h.nic}", f"    address: {h.address}"]
        path.write_text("\n".join(lines) + "\n")
        return path

    # ---- inspection (the lab's own view, not vnetbench's: used by tests to check what is left) -------------------
    def on(self, h: LabHost, *argv: str) -> str:
        """Run a command on a lab machine as its own administrator would (in its network and mount namespace)."""
        return subprocess.run(["nsenter", "-t", str(h.keeper), "-n", "-m", *argv], capture_output=True, text=True,
                              check=True).stdout

    def objects(self, h: LabHost, prefix: str = "vb") -> dict[str, list[str]]:
        """What runs of vnetbench left on a machine: namespaces, links, processes and ledger directories."""
        netns = [ln.split()[0] for ln in self.on(h, "ip", "netns", "list").splitlines() if ln.startswith(prefix)]
        links = [ln.split(":")[1].strip().split("@")[0] for ln in self.on(h, "ip", "-o", "link").splitlines()]
        dirs = self.on(h, "sh", "-c", "ls /run/vnetbench 2>/dev/null || true").split()
        return {"netns": netns, "links": [n for n in links if n.startswith(prefix)],
                "dirs": [d for d in dirs if d.startswith(prefix)]}

    # ---- teardown ----------------------------------------------------------------------------------------------
    def destroy(self) -> None:
        destroy(self.dir)


def destroy(directory: Path) -> None:
    """Remove every object a lab recorded: every process living in a machine's mount namespace (sshd, what its
    sessions left), the namespaces, the management veth."""
    path = Path(directory) / "objects.jsonl"
    if not path.exists():
        return
    objs = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    alive = [o for o in objs if o["kind"] == "process" and o.get("start") and process_start_time(o["pid"]) == o["start"]]
    for o in alive:
        if o.get("mntns"):
            # Processes a test left in the machine's own namespaces live in mount namespaces of their own
            # (ip netns exec makes one): ask the machine which pids its namespaces hold.
            inside = subprocess.run(["nsenter", "-t", str(o["pid"]), "-m", "-n", "sh", "-c",
                                     "for n in $(ip netns list | cut -d' ' -f1); do ip netns pids $n; done"],
                                    capture_output=True, text=True).stdout.split()
            for pid in [*map(int, inside), *_pids_in_mntns(o["pid"])]:
                if pid != o["pid"]:
                    _kill(pid)
    for o in alive:
        _kill(o["pid"])
    delete_namespaces([o["name"] for o in objs if o["kind"] == "netns"])
    _ip_batch(None, [f"link del {o['name']}" for o in objs if o["kind"] == "link"], force=True)
    path.rename(path.with_suffix(".removed"))


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _pids_in_mntns(pid: int | None) -> list[int]:
    """Every process sharing the mount namespace of pid (a lab machine's processes, whatever their netns)."""
    if pid is None:
        return []
    try:
        ino = os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return []
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.stat(f"/proc/{entry.name}/ns/mnt").st_ino == ino:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _ip_batch(netns: str | None, lines: list[str], force: bool = False) -> None:
    if not lines:
        return
    argv = ["ip", *(["-n", netns] if netns else []), *(["-force"] if force else []), "-batch", "-"]
    proc = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if proc.returncode and not force:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")


def _free_subnet() -> str:
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    while True:
        subnet = f"10.77.{secrets.randbelow(250) + 1}"
        if f" {subnet}." not in used and f" {subnet.replace('10.77.', '10.78.', 1)}." not in used:
            return subnet


if __name__ == "__main__":  # python tests/testlab.py up DIR [N] | clean DIR
    if sys.argv[1] == "up":
        lab = Lab(Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 3).create()
        print(lab.dir / "testbed.yaml")
    else:
        destroy(Path(sys.argv[2]))
