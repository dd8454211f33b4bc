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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, StrictBool, ValidationError, field_validator

from ...capabilities import Capabilities
from ...core import yamlread
from ...core.strict import Strict, one_line, pydantic_message
from ...system.executor import REMOTE_STATE_DIR, SshExecutor, SshTarget
from ...system.ledger import Ledger
from . import inventory

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
    qemu_kernel: str | None = None  # the kernel image its qemu guest VMs boot (default: its cache's cloud kernel)
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
    "qemu_kernel": "the absolute path of a kernel image on that host named vmlinuz-VERSION, its modules in "
                   "../lib/modules/VERSION beside its folder or in /lib/modules/VERSION, e.g. "
                   "/var/cache/vnetbench/qemu/linux-image-6.1.0-56-cloud-amd64/boot/vmlinuz-6.1.0-56-cloud-amd64",
}
KERNEL_RE = re.compile(r"^/[A-Za-z0-9_.+/-]*/vmlinuz-[A-Za-z0-9_.+-]+$")


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
    qemu_kernel: str | None = None

    @field_validator("qemu_kernel")
    @classmethod
    def _qemu_kernel(cls, v: str | None) -> str | None:
        if v is not None and (not KERNEL_RE.match(v) or "/../" in v or "/./" in v):
            raise ValueError(FIX["qemu_kernel"])
        return v

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
    "qemu_kernel": ("vnetbench_qemu_kernel",),
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
    return Host(name, target, h.nic, h.address, h.allow_mtu, h.qemu_kernel)


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
