"""Real testbeds: the hosts of an experiment are real machines reached over SSH.

The testbed file is separate from the experiment (`vnetbench run spec.yaml --testbed lab.yaml`):

    ssh_config: ~/.ssh/config        # optional; default: the user's own
    hosts:
      node1: {ssh: root@node1.lab, nic: eth1, address: 192.168.50.1}
      node2: {ssh: root@node2.lab, port: 2222, identity: ~/.ssh/lab, nic: eth1, address: 192.168.50.2}

An Ansible inventory works too, in any form Ansible reads (inventory.py): `ansible_host`, `ansible_user`,
`ansible_port`, `ansible_ssh_private_key_file`, and `vnetbench_nic` / `vnetbench_address` (or `nic` / `address`),
`vnetbench_allow_mtu`, `vnetbench_known_hosts` as host or group vars; the testbed-wide `vnetbench_ssh_config`,
`vnetbench_run_subnet`, `vnetbench_flat_vlan`, `vnetbench_strict_host_keys` in the vars of `all`.

Before anything is built every host is reached, probed (tools, kernel features in a scratch namespace, the NIC and
its address) and its clock offset taken; one that cannot be reached stops the run with one line naming it.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, StrictBool, ValidationError, field_validator

from . import inventory, yamlread
from .capabilities import (CHARON_PATHS, INSTALLED_SCRIPT, STRONGSWAN_PLUGINS, TOOLS, Capabilities, Feature,
                           Strongswan, parse_features, parse_list_algs, probe_kernel)
from .executor import REMOTE_STATE_DIR, CommandError, HostUnreachable, SshExecutor, SshTarget, control_dir
from .ledger import REMOTE_CLEANERS, Ledger, Obj, identity, owner_state
from .strict import Strict, one_line, pydantic_message

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
FLAT_VLAN = 3999


class TestbedError(Exception):
    """Problems with a testbed file or its hosts: one line each, `file:line: what, fix`."""

    def __init__(self, lines: list[str]):
        self.lines = [one_line(line) for line in lines]  # a newline in a host's name must not split its line
        super().__init__("\n".join(lines))


@dataclass
class Host:
    name: str            # node1: as the testbed file names it
    target: SshTarget
    nic: str             # the underlay NIC (its addresses, MTU and routes are never changed)
    address: str         # the host's underlay address on that NIC (already configured)
    allow_mtu: bool = False
    # filled by preflight
    caps: Capabilities | None = None
    facts: dict = field(default_factory=dict)


@dataclass
class Testbed:
    source: str
    hosts: list[Host]
    flat_vlan: int = FLAT_VLAN
    # An IPv4 subnet nothing on the hosts' link uses: the run's own endpoints (a macvlan of each host's NIC in the
    # run's host namespace) take their addresses from it, for what must not touch the hosts' own stacks.
    run_subnet: str | None = None

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def run_address(self, index: int) -> tuple[str, int]:
        """The run's own address of host number `index` (1-based) and the subnet's prefix length."""
        net = ipaddress.ip_network(self.run_subnet)
        return str(net.network_address + index), net.prefixlen

    def run_address6(self, index: int) -> str:
        """The run's own IPv6 address of host number `index`: in a unique-local /64 named after run_subnet (fd00:
        and its four bytes), so a lab that keeps that subnet free keeps this one free too."""
        a, b, c, d = ipaddress.ip_network(self.run_subnet).network_address.packed
        return f"fd00:{a:02x}{b:02x}:{c:02x}{d:02x}::{index}"


# ---- loading -------------------------------------------------------------------------------------------------------
# Through the same bounded reader as specs (yamlread) and strict models: one line per problem, `file:line: field:
# what, fix`. An Ansible inventory (any form) gives each host's variables (inventory.py); they fill the same models.

FIX = {
    "ssh": "user@host or a Host of your ssh config, e.g. root@node1.lab",
    "port": "a TCP port 1..65535",
    "identity": "the path of a private key file",
    "known_hosts": "the path of a known_hosts file",
    "nic": "the underlay NIC's name on that host, e.g. eth1 (required)",
    "address": "the host's IPv4 address on its underlay NIC, already configured (required)",
    "user": "a user name",
    "allow_mtu": "true or false, without quotes: may vnetbench set this NIC's MTU for a scenario",
    "ssh_config": "the path of an ssh_config file",
    "hosts": "give at least one host: `hosts: {node1: {ssh: root@node1, nic: eth1, address: 192.0.2.1}}`",
    "host": "a host is a mapping: {ssh: root@NAME, nic: NIC, address: IP}",
    "flat_vlan": "a VLAN id 1..4094",
    "strict_host_keys": "yes (the default) or accept-new; vnetbench never turns host key checking off",
    "run_subnet": "an IPv4 subnet that nothing on the hosts' link uses, e.g. 10.99.0.0/24",
}


class HostFields(Strict):
    """One host of a testbed file."""
    ssh: str | None = None
    port: int | None = Field(None, ge=1, le=65535)
    identity: str | None = None
    known_hosts: str | None = None
    nic: str
    address: str
    user: str | None = None
    allow_mtu: StrictBool = False

    @field_validator("ssh")
    @classmethod
    def _ssh(cls, v: str | None) -> str | None:
        if v is not None and (not re.match(r"^([A-Za-z0-9_.-]+@)?[A-Za-z0-9_.:%-]+$", v) or v.startswith("-")):
            raise ValueError(FIX["ssh"])
        return v

    @field_validator("nic")
    @classmethod
    def _nic(cls, v: str) -> str:
        if not IFNAME_RE.match(v):
            raise ValueError(FIX["nic"])
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        try:
            return str(ipaddress.IPv4Address(v))
        except ValueError:
            raise ValueError(FIX["address"]) from None

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z0-9_.-]+$", v):
            raise ValueError(FIX["user"])
        return v


class TestbedFields(Strict):
    """A testbed file."""
    ssh_config: str | None = None
    known_hosts: str | None = None
    identity: str | None = None
    hosts: dict[str, HostFields] = Field(min_length=1)
    flat_vlan: int = Field(FLAT_VLAN, ge=1, le=4094)
    strict_host_keys: Literal["yes", "accept-new"] = "yes"
    run_subnet: str | None = None

    @field_validator("strict_host_keys", mode="before")
    @classmethod
    def _strict(cls, v: Any) -> Any:
        if v is True:  # YAML reads an unquoted yes as true
            return "yes"
        if not isinstance(v, str) or v not in ("yes", "accept-new"):
            raise ValueError(FIX["strict_host_keys"])
        return v


# An inventory's variables for each field; the first one set wins.
ANSIBLE_VARS = {
    "ssh": ("ansible_host", "ansible_ssh_host"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "identity": ("ansible_ssh_private_key_file", "ansible_private_key_file"),
    "known_hosts": ("vnetbench_known_hosts",),
    "nic": ("vnetbench_nic", "nic"),
    "address": ("vnetbench_address", "address"),
    "allow_mtu": ("vnetbench_allow_mtu",),
}
# Variables for the whole testbed: every host must have the same value (the vars of `all`).
ANSIBLE_TOP = {"ssh_config": "vnetbench_ssh_config", "flat_vlan": "vnetbench_flat_vlan",
               "strict_host_keys": "vnetbench_strict_host_keys", "run_subnet": "vnetbench_run_subnet"}
VNETBENCH_VARS = {v for names in ANSIBLE_VARS.values() for v in names if v.startswith("vnetbench_")} | \
    set(ANSIBLE_TOP.values())
ANSIBLE_TRUE = {"y", "yes", "on", "1", "true", "t"}     # Ansible's own reading of a boolean given as text (INI)
ANSIBLE_FALSE = {"n", "no", "off", "0", "false", "f"}


def load(path: str | Path) -> Testbed:
    """A testbed file or an Ansible inventory; raises TestbedError with every problem found, one line each."""
    try:
        return _load(str(path), Path(path))
    except inventory.InventoryError as exc:
        raise TestbedError(exc.lines) from None


def _load(source: str, path: Path) -> Testbed:
    if path.is_dir() or _is_script(path):
        return _from_inventory(inventory.ansible_list(path, source, "script"), source, path, {})
    try:
        with path.open("rb") as fh:
            raw = fh.read(yamlread.MAX_BYTES + 1)  # bounded: /dev/zero or a huge file must not eat the memory
        text = yamlread.decode(raw)
    except OSError as exc:
        raise TestbedError([f"{source}: cannot read the testbed file: {exc.strerror or exc}"]) from None
    except yamlread.YamlProblem as exc:
        raise TestbedError([_at(source, exc.line) + f": {exc.message}"]) from None
    if len(raw) > yamlread.MAX_BYTES:  # in any form: a testbed is a few KB written by hand
        raise TestbedError([f"{source}: the file has more than {yamlread.MAX_BYTES} bytes; a testbed file has at "
                            "most that"])
    try:
        doc = yamlread.read(text, "a testbed file")
    except yamlread.YamlProblem as exc:
        if _is_ini(path, text):
            return _from_inventory(inventory.ansible_list(path, source, "ini"), source, path, {})
        raise TestbedError([_at(source, exc.line) + f": {exc.message}"]) from None
    except yamlread.DuplicateKeys as exc:
        raise TestbedError([_at(source, p.line) + f": {p.message}" for p in exc.problems]) from None
    data, lines = doc.data, doc.lines
    if not isinstance(data, dict):
        if _is_ini(path, text) or isinstance(data, str):  # a list of host names is an INI inventory too
            return _from_inventory(inventory.ansible_list(path, source, "ini"), source, path, {})
        raise TestbedError([f"{source}:1: a testbed file is a mapping with `hosts:` (or an Ansible inventory)"])
    if inventory.looks_like_inventory(data):
        hosts = inventory.read_yaml(data, source, lines, path)
        return _from_inventory(hosts, source, path, {h.name: h.line for h in inventory.walk(data, lines)})
    data = _keys_as_text(data)
    return _build(data, source, path, lambda loc: inventory.where(source, loc, lines))


def _is_script(path: Path) -> bool:
    """A dynamic inventory: an executable file that starts with #! (Ansible runs it with --list)."""
    try:
        if not (path.is_file() and os.access(path, os.X_OK)):
            return False
        with path.open("rb") as fh:
            return fh.read(2) == b"#!"
    except OSError:
        return False


def _is_ini(path: Path, text: str) -> bool:
    return path.suffix in (".ini", ".cfg") or bool(re.search(r"^\s*\[[^\]\s]+\]\s*$", text, re.M))


def _at(source: str, line: int | None) -> str:
    return f"{source}:{line}" if line else source


def _keys_as_text(data: dict) -> dict:
    """Host names as YAML gives them (`1:` is a number) are names: text."""
    hosts = data.get("hosts")
    if isinstance(hosts, dict):
        data = data | {"hosts": {str(k) if isinstance(k, (int, float)) else k: v for k, v in hosts.items()}}
    return data


def _build(data: dict, source: str, base: Path, where) -> Testbed:
    """The testbed from a testbed file's mapping (or one made from an inventory); `where(loc)` renders a key path
    as `file:line: field`."""
    problems: list[str] = []
    hosts_in = data.get("hosts") if isinstance(data.get("hosts"), dict) else {}
    for name in hosts_in:
        if not isinstance(name, str) or not NAME_RE.match(name):
            problems.append(f"{where(('hosts', name))}: a host name is letters, digits, '.', '_' or '-'")
    try:
        model = TestbedFields.model_validate(data)
    except ValidationError as exc:
        problems += [f"{where(tuple(e['loc']))}: {_message(e)}" for e in exc.errors()]
        model = None
    if model is None or problems:
        raise TestbedError(problems)
    folder = base.resolve().parent
    hosts = [_host(name, h, model, folder) for name, h in model.hosts.items()]
    if model.run_subnet is not None:
        subnet = _run_subnet(model.run_subnet, hosts, lambda msg: problems.append(f"{where(('run_subnet',))}: {msg}"))
    else:
        subnet = None
    seen: dict[str, str] = {}
    for h in hosts:
        if h.address in seen:
            problems.append(f"{where(('hosts', h.name, 'address'))}: address {h.address} is also {seen[h.address]}'s")
        seen[h.address] = h.name
    if problems:
        raise TestbedError(problems)
    return Testbed(source, hosts, model.flat_vlan, subnet)


def _message(err: dict) -> str:
    loc = tuple(err["loc"])
    field = "host" if len(loc) == 2 and loc[0] == "hosts" else next(
        (p for p in reversed(loc) if isinstance(p, str) and p in FIX), None)
    fix = FIX.get(field, "")
    if err["type"] == "extra_forbidden":
        model = HostFields if len(loc) == 3 and loc[0] == "hosts" else TestbedFields
        return f"unknown key; allowed: {', '.join(model.model_fields)}"
    if err["type"] == "missing":
        return fix if "(required)" in fix else f"required; {fix}" if fix else "required"
    if err["type"] == "value_error" and pydantic_message(err) in FIX.values():
        return pydantic_message(err)
    if err["type"] in ("dict_type", "model_type") and field == "host":
        return fix
    msg = pydantic_message(err)
    return f"{msg}; {fix}" if fix and fix != msg else msg


def _run_subnet(value: str, hosts: list[Host], bad) -> str | None:
    try:
        net = ipaddress.ip_network(str(value), strict=True)
        if net.version != 4:
            raise ValueError
    except ValueError:
        bad(FIX["run_subnet"])
        return None
    if net.num_addresses - 2 < len(hosts):
        bad(f"{net} has too few addresses for {len(hosts)} hosts")
    inside = [h.name for h in hosts if ipaddress.ip_address(h.address) in net]
    if inside:
        bad(f"{net} holds the address of {', '.join(inside)}: give a subnet nothing on the link uses")
    return str(net)


def _path(value: str, base: Path) -> str:
    p = Path(os.path.expanduser(value))
    return str(p if p.is_absolute() else base / p)


def _host(name: str, h: HostFields, top: TestbedFields, base: Path) -> Host:
    ident = h.identity or top.identity
    known = h.known_hosts or top.known_hosts
    target = SshTarget(h.ssh or name, port=h.port, user=h.user, identity=_path(ident, base) if ident else None,
                       known_hosts=_path(known, base) if known else None,
                       config=_path(top.ssh_config, base) if top.ssh_config else None,
                       strict_host_keys=top.strict_host_keys)
    return Host(name, target, h.nic, h.address, h.allow_mtu)


# ---- an inventory's variables into the testbed's fields ------------------------------------------------------------

def _from_inventory(found: list[inventory.InventoryHost], source: str, path: Path,
                    lines: dict[str, int | None]) -> Testbed:
    """Each host's Ansible variables as a testbed file's host; a problem names the host and the variable."""
    if not found:
        raise TestbedError([f"{source}: the inventory has no hosts; vnetbench needs at least one"])
    problems: list[str] = []
    hosts: dict[str, dict] = {}
    origin: dict[tuple, str] = {}   # (host, field) -> the variable that gave it
    for h in found:
        line = lines.get(h.name)
        for var in sorted(set(h.vars) - VNETBENCH_VARS):
            if var.startswith("vnetbench_"):
                problems.append(f"{_at(source, line)}: host {h.name}: {var}: unknown variable; allowed: "
                                f"{', '.join(sorted(VNETBENCH_VARS))}")
        fields: dict[str, Any] = {}
        for field_, names in ANSIBLE_VARS.items():
            var = next((n for n in names if h.vars.get(n) is not None), None)
            if var is not None:
                fields[field_], origin[(h.name, field_)] = _ansible_value(field_, h.vars[var]), var
        if "address" not in fields:  # the address Ansible reaches it at, if that is one
            fields["address"] = str(fields.get("ssh", h.name))
            origin[(h.name, "address")] = "vnetbench_address"
        hosts[h.name] = fields
    top: dict[str, Any] = {}
    for field_, var in ANSIBLE_TOP.items():
        values = {json.dumps(h.vars.get(var), sort_keys=True, default=str) for h in found}
        if len(values) > 1:
            problems.append(f"{source}: {var}: hosts have different values; set it once, in the vars of `all`")
        elif found[0].vars.get(var) is not None:
            top[field_] = _ansible_value(field_, found[0].vars[var])
    if problems:
        raise TestbedError(problems)

    def where(loc: tuple) -> str:
        if len(loc) >= 2 and loc[0] == "hosts":
            name = loc[1]
            var = origin.get((name, loc[2]), ANSIBLE_VARS.get(loc[2], ("",))[0]) if len(loc) > 2 else ""
            return f"{_at(source, lines.get(name))}: host {name}" + (f": {var}" if var else "")
        return f"{source}: {ANSIBLE_TOP.get(loc[0], loc[0]) if loc else '(top level)'}"

    # relative paths (a key file, an ssh_config) are the inventory's folder's, like those of a testbed file
    bed = _build({"hosts": hosts} | top, source, path / "inventory" if path.is_dir() else path, where)
    for h in bed.hosts:  # Ansible's user goes into the destination, as `ssh: user@host` would
        if h.target.user and "@" not in h.target.destination:
            h.target = replace(h.target, destination=f"{h.target.user}@{h.target.destination}", user=None)
    return bed


def _ansible_value(field_: str, value: Any) -> Any:
    """A variable as Ansible reads it: INI gives text, so `yes`/`false` are booleans and `2222` a number there."""
    if field_ == "allow_mtu" and isinstance(value, str) and value.lower() in ANSIBLE_TRUE | ANSIBLE_FALSE:
        return value.lower() in ANSIBLE_TRUE
    if field_ in ("port", "flat_vlan") and isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


# ---- reaching the hosts -------------------------------------------------------------------------------------------

PLAN_CONTROL = f"{REMOTE_STATE_DIR}/vb0000/ssh"  # shown by `plan`, never used


def executor(host: Host, ledger: Ledger | None = None, log=None, control: str | None = None) -> SshExecutor:
    return SshExecutor(host.target, ledger, name=host.name, log=log, control=control,
                       connect=control != PLAN_CONTROL, own_files=True)


FACTS_SCRIPT = r"""
n={nic}
echo "uid=$(id -u)"
echo "kernel=$(uname -sr)"
echo "machine=$(uname -m)"
echo "cpus=$(nproc)"
echo "cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "nic_exists=$(test -d /sys/class/net/$n && echo 1 || echo 0)"
echo "nic_mtu=$(cat /sys/class/net/$n/mtu 2>/dev/null)"
echo "nic_addrs=$(ip -4 -o addr show dev $n 2>/dev/null | awk '{{print $4}}' | tr '\n' ' ')"
echo "nic_driver=$(ethtool -i $n 2>/dev/null | sed -n 's/^driver: //p')"
echo "nic_firmware=$(ethtool -i $n 2>/dev/null | sed -n 's/^firmware-version: //p')"
echo "nic_offloads=$(ethtool -k $n 2>/dev/null | grep -E '^(tcp-segmentation-offload|generic-receive-offload|generic-segmentation-offload|rx-checksumming|tx-checksumming):' | tr -d ' ' | tr '\n' ' ')"
echo "sriov_totalvfs=$(cat /sys/class/net/$n/device/sriov_totalvfs 2>/dev/null)"
echo "sriov_numvfs=$(cat /sys/class/net/$n/device/sriov_numvfs 2>/dev/null)"
echo "sriov_vfs=$(for v in /sys/class/net/$n/device/virtfn*; do [ -e "$v" ] || continue; i=${{v##*/virtfn}}; \
  d=$(ls "$v/net" 2>/dev/null | head -1); if [ -z "$d" ]; then printf '%s:-:0:0:0:0 ' "$i"; else \
  printf '%s:%s:%s:%s:%s:%s ' "$i" "$d" "$(( $(cat /sys/class/net/$d/flags) & 1 ))" \
  "$(test -e /sys/class/net/$d/master && echo 1 || echo 0)" "$(ip -o addr show dev $d scope global | wc -l)" \
  "$(cat /sys/class/net/$d/mtu)"; fi; done)"
echo "maxsessions=$(sshd -T 2>/dev/null | sed -n 's/^maxsessions //p')"
"""


@dataclass(frozen=True)
class VirtualFunction:
    """An SR-IOV virtual function of a host's NIC, as sysfs shows it (facts: sriov_vfs)."""
    index: int
    dev: str | None      # its network device; None: bound to another driver (vfio: a VM has it)
    up: bool
    enslaved: bool
    addresses: int       # global addresses on it
    mtu: int

    @property
    def free(self) -> bool:
        """Nobody uses it: a network device of its own that is down, in no bridge or bond, without an address."""
        return self.dev is not None and not self.up and not self.enslaved and not self.addresses


def virtual_functions(f: dict) -> list[VirtualFunction]:
    out = []
    for item in f.get("sriov_vfs", "").split():
        parts = item.split(":")
        if len(parts) == 6 and parts[0].isdigit() and all(p.isdigit() for p in parts[2:]):
            dev = None if parts[1] == "-" or not IFNAME_RE.match(parts[1]) else parts[1]
            out.append(VirtualFunction(int(parts[0]), dev, parts[2] == "1", parts[3] == "1", int(parts[4]),
                                       int(parts[5])))
    return sorted(out, key=lambda v: v.index)


def sriov(f: dict, nic: str) -> Feature:
    """Whether the NIC offers free virtual functions (vnetbench never enables VFs: sriov_numvfs is the host's)."""
    total, num = f.get("sriov_totalvfs", ""), f.get("sriov_numvfs", "")
    if not total.isdigit() or int(total) == 0:
        return Feature(False, f"{nic} offers no SR-IOV virtual functions (no sriov_totalvfs)")
    if not num.isdigit() or int(num) == 0:
        return Feature(False, f"{nic} has SR-IOV ({total} virtual functions) but none enabled (sriov_numvfs 0; "
                              f"vnetbench does not change it)")
    free = [v.dev for v in virtual_functions(f) if v.free]
    if not free:
        return Feature(False, f"all {num} enabled virtual functions of {nic} are in use (up, enslaved, addressed "
                              f"or bound to another driver)")
    return Feature(True, f"{len(free)} free virtual functions of {nic}: {' '.join(free)}")


def facts(host: Host, ex: SshExecutor) -> dict:
    out = ex.run_script(FACTS_SCRIPT.format(nic=shlex.quote(host.nic)), timeout=20).stdout
    f = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    f.update(clock_offset(ex))
    return f


def clock_offset(ex: SshExecutor, rounds: int = 5) -> dict:
    """The host's clock minus ours, from the quickest of a few round trips over the shared connection (its
    error is at most half that round trip)."""
    best = None
    for _ in range(rounds):
        t0 = time.time()
        remote = float(ex.run(["date", "+%s.%N"], timeout=10).stdout.strip())
        t1 = time.time()
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, remote - (t0 + t1) / 2)
    return {"clock_offset_s": round(best[1], 6), "round_trip_s": round(best[0], 6)}


MISSING = "-vnetbench-missing-"
# swanctl loads every plugin it has before it prints its version (with its usage): the af-alg plugin then binds a
# socket per algorithm, each loading a crypto module, 4-5 s of a guest booted just now (measured). One plugin does.
VERSION_SETUP = {"swanctl": 'f=$(mktemp) && printf "swanctl {\\n  load = random\\n}\\n" > "$f" && '
                             'export STRONGSWAN_CONF="$f"'}


def installed(ex: SshExecutor) -> dict[str, Feature]:
    """What the host's packages offer (capabilities.INSTALLED_SCRIPT, as this machine probes itself)."""
    return parse_features(ex.run_script(INSTALLED_SCRIPT, timeout=30, check=False).stdout)


def tools(ex: SshExecutor) -> dict[str, Feature]:
    """Tool versions on the host, as capabilities.TOOLS asks for them: one round trip for all."""
    def find(name: str, argv0: str) -> str:  # charon: wherever the host's distribution puts it
        paths = CHARON_PATHS if name == "charon" else (argv0,)
        return (f"c=$(for p in {' '.join(map(shlex.quote, paths))}; do q=$(command -v \"$p\") && [ -x \"$q\" ] && "
                f"{{ echo \"$q\"; break; }}; done)")
    def ask(name: str, argv: list[str]) -> str:
        setup = VERSION_SETUP.get(name)
        line = f"\"$c\" {shlex.join(argv[1:])} 2>&1 </dev/null | head -c 2000"
        return f"( {setup}; {line}; rm -f \"$f\" )" if setup else line  # asked all the same if the setup fails
    script = "; ".join(f"echo '@@{name}'; {find(name, argv[0])}; if [ -n \"$c\" ]; then {ask(name, argv)}; "
                       f"else echo '{MISSING}'; fi" for name, (_, argv, _) in TOOLS.items())
    out = ex.run_script(script, timeout=30, check=False).stdout
    found: dict[str, Feature] = {}
    for chunk in out.split("@@")[1:]:
        name, _, text = chunk.partition("\n")
        if name not in TOOLS:
            continue
        pkg, _, pattern = TOOLS[name]
        if text.startswith(MISSING):
            found[name] = Feature(False, f"not installed (Debian package {pkg})")
        else:
            m = re.search(pattern, text)
            found[name] = Feature(True, m.group(1) if m else "unknown version")
    return {name: found.get(name, Feature(False, f"not installed (Debian package {TOOLS[name][0]})"))
            for name in TOOLS}


def kernel(ex: SshExecutor, prefix: str) -> dict[str, Feature]:
    """Kernel features probed by creating each device in a scratch namespace of the run's on the host (the one
    probe script, capabilities.kernel_script)."""
    return probe_kernel(ex, f"{prefix}-probe")


SWAN_SCRIPT = r"""
ns={ns}; d=$(mktemp -d /tmp/vnetbench-swan.XXXXXX) || exit 9; pid=
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; ip netns del $ns 2>/dev/null; rm -rf "$d"' EXIT
ip netns add $ns || exit 9
printf '%s' {conf} > "$d/strongswan.conf"
P='mount --bind "$0" /run && exec "$@"'
ip netns exec $ns unshare --mount --propagation private -- sh -c "$P" "$d" env STRONGSWAN_CONF=/run/strongswan.conf   {charon} >/dev/null 2>"$d/err" &
pid=$!
i=0; while [ ! -S "$d/charon.vici" ]; do
  kill -0 $pid 2>/dev/null || {{ echo "@@error charon exited at start: $(tail -c 300 "$d/err")"; exit 0; }}
  [ $i -ge 500 ] && {{ echo "@@error charon did not open its socket in 10 s"; exit 0; }}
  sleep 0.02; i=$((i+1)); done
sw() {{ ip netns exec $ns unshare --mount --propagation private -- sh -c "$P" "$d" swanctl "$@" --uri {vici}; }}
i=0; until out=$(sw --list-algs 2>&1); do [ $i -ge 50 ] && break; sleep 0.05; i=$((i+1)); done
echo @@algs; echo "$out"; echo @@stats; sw --stats 2>&1
"""


def strongswan(ex: SshExecutor, prefix: str, charon: str = TOOLS["charon"][1][0]) -> Strongswan:
    """capabilities.probe_strongswan on a host: a charon started as a run starts it (same plugins, private /run,
    scratch namespace), and the algorithms it really loaded. One round trip."""
    vici = "unix:///run/charon.vici"
    conf = (f"charon {{\n  load_modular = no\n  load = {STRONGSWAN_PLUGINS.format(kernel='kernel-netlink')}\n"
            f"  plugins {{\n    vici {{\n      socket = {vici}\n    }}\n  }}\n}}\n")
    script = SWAN_SCRIPT.format(ns=shlex.quote(f"{prefix}-swan"), conf=shlex.quote(conf),
                                charon=shlex.quote(charon), vici=shlex.quote(vici))
    out = ex.run_script(script, timeout=40, check=False).stdout
    if "@@error " in out:
        return Strongswan(error=out.split("@@error ", 1)[1].strip()[:300])
    if "@@algs" not in out:
        return Strongswan(error="the strongSwan probe did not run")
    algs, _, stats = out.split("@@algs", 1)[1].partition("@@stats")
    m = re.search(r"^loaded plugins: (.*)$", stats, re.M)
    plugins = tuple(p for p in (m.group(1).split() if m else ()) if p != "charon")
    return Strongswan(plugins, parse_list_algs(algs))


def merge_swan(hosts: list[Host]) -> Strongswan:
    """The algorithms every host's charon loaded (one host's error makes them unreadable, with its name)."""
    for h in hosts:
        if h.caps.swan is not None and h.caps.swan.error:
            return Strongswan(error=f"on {h.name}: {h.caps.swan.error}")
    swans = [h.caps.swan for h in hosts if h.caps.swan is not None]
    if not swans:
        return Strongswan(error="charon or swanctl is not installed on the hosts (Debian packages strongswan-charon, "
                                "strongswan-swanctl)")
    kinds = set.intersection(*(set(s.algorithms) for s in swans))
    algorithms = {k: tuple(a for a in swans[0].algorithms[k] if all(a in s.algorithms[k] for s in swans)) for k in kinds}
    plugins = tuple(p for p in swans[0].plugins if all(p in s.plugins for s in swans))
    return Strongswan(plugins, algorithms)


def merge(hosts: list[Host]) -> Capabilities:
    """What every host offers: a feature one host lacks is unavailable, with that host's reason."""
    caps = Capabilities()
    caps.installed = {}
    for kind in ("tools", "kernel", "installed"):
        names = {n for h in hosts for n in getattr(h.caps, kind) or {}}
        merged = {}
        for n in sorted(names):
            missing = [(h.name, (getattr(h.caps, kind) or {}).get(n, Feature(False, "not probed"))) for h in hosts
                       if not (getattr(h.caps, kind) or {}).get(n, Feature(False)).ok]
            if missing:
                merged[n] = Feature(False, "; ".join(f"on {name}: {f.detail or 'unavailable'}" for name, f in missing))
            else:
                merged[n] = Feature(True, getattr(hosts[0].caps, kind)[n].detail)
        setattr(caps, kind, merged)
    if caps.kernel.get("sriov-vf", Feature(False)).ok:  # as many per host as the host with the fewest has
        fewest = min(int(h.caps.kernel["sriov-vf"].detail.split()[0]) for h in hosts)
        caps.kernel["sriov-vf"] = Feature(True, f"{fewest} free virtual functions per host")
    if any(h.caps.swan is not None for h in hosts):
        caps.swan = merge_swan(hosts)
    return caps


def preflight(bed: Testbed, prefix: str | None = None, probe_kernel: bool = True) -> Capabilities:
    """Reach every host at once; raise TestbedError with one line per host that cannot take part. Its local files
    (the shared connections' sockets) belong to a scratch ledger of its own, so a kill -9 leaves nothing `clean`
    does not know of."""
    scratch = Ledger.create()
    prefix = prefix or scratch.prefix  # the scratch namespace's name, unlike any other run's
    try:
        return _preflight(bed, prefix, probe_kernel, scratch)
    finally:
        scratch.remove_all()


def _preflight(bed: Testbed, prefix: str, probe_kernel: bool, scratch: Ledger) -> Capabilities:
    controls = {h.name: control_dir(scratch.dir, f"ssh{i}", scratch) for i, h in enumerate(bed.hosts)}

    def one(h: Host) -> str | None:
        ex = executor(h, log=None, control=controls[h.name])
        ex.prefix, ex.remote_dir = prefix, f"{REMOTE_STATE_DIR}/{prefix}"
        try:
            h.facts = facts(h, ex)
            if h.facts.get("uid") != "0":
                return f"{bed.source}: host {h.name} ({h.target.destination}): vnetbench needs root there " \
                       f"(uid {h.facts.get('uid')}); use ssh: root@..."
            if h.facts.get("nic_exists") != "1":
                return f"{bed.source}: host {h.name}: no NIC {h.nic} (see `ip link` on that host)"
            if h.address not in [a.split("/")[0] for a in h.facts.get("nic_addrs", "").split()]:
                return f"{bed.source}: host {h.name}: {h.nic} does not have the address {h.address} " \
                       f"(it has: {h.facts.get('nic_addrs') or 'none'}); vnetbench does not configure it"
            h.caps = Capabilities(tools(ex), kernel(ex, prefix) if probe_kernel else {}, installed=installed(ex))
            h.caps.kernel["sriov-vf"] = sriov(h.facts, h.nic)
            if probe_kernel and h.caps.tool("charon") and h.caps.tool("swanctl"):
                h.caps.swan = strongswan(ex, prefix, h.caps.offer("charon").detail)
            return None
        except HostUnreachable as exc:
            return f"{bed.source}: host {h.name} ({h.target.destination}) cannot be reached over SSH: " \
                   f"{_last(exc.stderr)}"
        except CommandError as exc:
            return f"{bed.source}: host {h.name}: probing failed: {exc}"
        finally:
            ex.close()
    with ThreadPoolExecutor(max_workers=max(1, len(bed.hosts))) as pool:
        problems = [p for p in pool.map(one, bed.hosts) if p]
    if problems:
        raise TestbedError(problems)
    return merge(bed.hosts)


def _last(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith("@@@")]
    useful = [ln for ln in lines if "verification failed" in ln or "Permission denied" in ln]
    return (useful or lines or ["ssh failed"])[-1]


# ---- the remote ledgers ---------------------------------------------------------------------------------------------

def host_record(host: Host, control: str) -> dict:
    t = host.target
    return {"kind": "host", "name": host.name, "destination": t.destination, "port": t.port, "user": t.user,
            "identity": t.identity, "known_hosts": t.known_hosts, "config": t.config,
            "strict_host_keys": t.strict_host_keys, "control": control}


def target_of(entry: dict) -> SshTarget:
    return SshTarget(entry["destination"], port=entry.get("port"), user=entry.get("user"),
                     identity=entry.get("identity"), known_hosts=entry.get("known_hosts"), config=entry.get("config"),
                     strict_host_keys=entry.get("strict_host_keys", "yes"))


def owner_script(prefix: str) -> str:
    """Create the run's directory on a host with who owns it: this kernel's boot and pid namespace, this process
    (the hostname is only for people: clones and containers share it)."""
    owner = json.dumps({"controller": socket.gethostname()} | identity())
    d = shlex.quote(f"{REMOTE_STATE_DIR}/{prefix}")
    return f"mkdir -p -m 700 {d} && printf '%s\\n' {shlex.quote(owner)} > {d}/owner.json"


def parse_objects(text: str) -> list[Obj]:
    live: dict[tuple[str, str], Obj] = {}
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(e, dict) or not isinstance(e.get("kind"), str) or not isinstance(e.get("name"), str):
            continue  # not a record of ours
        key = (e.get("kind"), e.get("name"))
        if e.get("op") == "add":
            extra = {k: e[k] for k in ("mtu", "ns", "dev") if k in e} if e.get("kind") in ("mtu", "vf") else None
            live[key] = Obj(e["kind"], e["name"], e.get("pid"), e.get("start"), extra)
        else:
            live.pop(key, None)
    return list(live.values())


def clean_script(prefix: str, objs: list[Obj], remove_dir: bool = True) -> str:
    """Remove exactly what the run recorded on this host: its processes (pid and start time must match), the
    processes in its namespaces, its namespaces, its links (newest first), then its directory. Three execs of
    `ip` at most, whatever the number of objects."""
    q = shlex.quote
    parts = ["set +e"]
    for o in reversed(objs):
        if o.kind == "process" and o.pid and o.start:
            parts.append(f"[ \"$(sed 's/.*) //' /proc/{int(o.pid)}/stat 2>/dev/null | cut -d' ' -f20)\" = {int(o.start)} ]"
                         f" && {{ kill -9 -- -{int(o.pid)} 2>/dev/null || kill -9 {int(o.pid)} 2>/dev/null; }}")
    # a virtual function the run moved into a VM goes back to the host under its own name and MTU, before the VM's
    # namespace goes (which would return it under the VM's name); if the namespace is gone already, it is renamed
    for o in objs:
        if o.kind == "vf" and o.extra and {"ns", "dev", "mtu"} <= set(o.extra):
            ns, dev, mtu, name = q(o.extra["ns"]), q(o.extra["dev"]), int(o.extra["mtu"]), q(o.name)
            parts.append(f"{{ ip -n {ns} link set dev {dev} down && ip -n {ns} link set dev {dev} mtu {mtu} && "
                         f"ip -n {ns} link set dev {dev} netns $$ name {name}; }} 2>/dev/null || "
                         f"{{ ip link set dev {dev} down && ip link set dev {dev} mtu {mtu} && "
                         f"ip link set dev {dev} name {name}; }} 2>/dev/null")
    spaces = [o.name for o in reversed(objs) if o.kind == "netns" and o.name.startswith(prefix)]
    links = [o.name for o in reversed(objs) if o.kind == "link" and o.name.startswith(prefix)]
    # One ip: the pids in the namespaces are listed before the names go (the processes are killed right after;
    # a namespace lives on, nameless, until its last process is gone), then the links.
    lines = [f"netns pids {n}" for n in spaces] + [f"netns del {n}" for n in spaces] + [f"link del {n}" for n in links]
    if lines:
        parts.append(f"pids=$(printf '%s\\n' {' '.join(map(q, lines))} | ip -force -batch - 2>/dev/null); "
                     f"[ -z \"$pids\" ] || kill -9 $pids 2>/dev/null")
    # a NIC's MTU changed by the run (allow_mtu) goes back to what it was, once the run's devices on it are gone
    parts += [f"ip link set dev {q(o.name)} mtu {int(o.extra['mtu'])}" for o in objs if o.kind == "mtu" and o.extra]
    if remove_dir:
        parts.append(f"rm -rf {q(REMOTE_STATE_DIR + '/' + prefix)}")
    return "; ".join(parts + ["true"])


SURVEY = "cat {d}/objects.jsonl 2>/dev/null; echo @@netns; ip netns list; echo @@links; ip -o link show; echo @@pids; " \
         "for p in /proc/[0-9]*; do echo \"${{p#/proc/}} $(sed 's/.*) //' $p/stat 2>/dev/null | cut -d' ' -f20)\"; done; true"


def clean_host(entry: dict, prefix: str, dry_run: bool = False) -> tuple[list[str], str | None]:
    """Visit one host a run touched. Returns (what was removed, None) or ([], why it is pending)."""
    ex = SshExecutor(target_of(entry), name=entry["name"], control=entry.get("control") or None, prefix=prefix)
    try:
        out = ex.run_script(SURVEY.format(d=shlex.quote(f"{REMOTE_STATE_DIR}/{prefix}")), timeout=30).stdout
        text, _, rest = out.partition("@@netns\n")
        spaces, _, rest = rest.partition("@@links\n")
        links, _, pids = rest.partition("@@pids\n")
        objs = parse_objects(text)
        present = {ln.split()[0] for ln in spaces.splitlines() if ln.strip()}
        present |= {ln.split(":")[1].strip().split("@")[0] for ln in links.splitlines() if ln.count(":") >= 2}
        running = {tuple(map(int, ln.split())) for ln in pids.splitlines() if len(ln.split()) == 2}
        what = [f"{entry['name']}: process {o.name} (pid {o.pid})" for o in objs
                if o.kind == "process" and o.pid and (o.pid, o.start) in running]
        what += [f"{entry['name']}: {o.kind} {o.name}" for o in objs if o.kind in ("netns", "link") and o.name in present]
        what += [f"{entry['name']}: MTU of {o.name} back to {o.extra['mtu']}" for o in objs if o.kind == "mtu" and o.extra]
        if not dry_run:
            ex.run_script(clean_script(prefix, objs), timeout=60, check=False)
        return what + [f"{entry['name']}: directory {REMOTE_STATE_DIR}/{prefix}"] * bool(text.strip()), None
    except HostUnreachable as exc:
        return [], _last(exc.stderr)
    except CommandError as exc:
        return [], str(exc)
    finally:
        ex.close()


REMOTE_CLEANERS["host"] = clean_host  # `clean` and a run's teardown reach a testbed host through the ledger


def remote_runs(host: Host) -> list[tuple[str, dict]]:
    """The vnetbench runs whose directory is on a host: (prefix, owner)."""
    ex = executor(host)
    try:
        out = ex.run_script(f"for d in {REMOTE_STATE_DIR}/vb*; do [ -d \"$d\" ] && echo \"@@$(basename $d)\" && "
                            f"cat \"$d/owner.json\" 2>/dev/null; done; true", timeout=20).stdout
    finally:
        ex.close()
    runs = []
    for chunk in out.split("@@")[1:]:
        prefix, _, owner = chunk.partition("\n")
        try:
            runs.append((prefix.strip(), json.loads(owner)))
        except json.JSONDecodeError:
            runs.append((prefix.strip(), {}))
    return runs


def clean_testbed(bed: Testbed, local_runs: set[str], dry_run: bool = False) -> tuple[list[str], list[str], list[str]]:
    """Visit every host of a testbed: remove the runs started there from this boot and pid namespace whose process
    is gone and whose local ledger is gone too (those with a local ledger are cleaned through it). Runs whose
    owner cannot be checked from here (another machine, container or boot) are left alone. Returns (removed, left alone (why), pending)."""
    removed: list[str] = []
    left: list[str] = []
    pending: list[str] = []
    for h in bed.hosts:
        try:
            found = remote_runs(h)
        except CommandError as exc:
            pending.append(f"host {h.name}: {_last(exc.stderr)}")
            continue
        for prefix, owner in found:
            if prefix in local_runs:
                continue
            state, why = owner_state(owner, remote=True)
            if state != "dead":
                left.append(f"run {prefix} on {h.name}: " + ("still running" if state == "alive"
                                                             else f"its owner cannot be checked: {why}"))
                continue
            got, why = clean_host(host_record(h, ""), prefix, dry_run)
            removed += [f"{prefix}: {line}" for line in got]
            if why:
                pending.append(f"{prefix}: host {h.name}: {why}")
    return removed, left, pending
