"""The testbed file and Ansible inventories, loading only (no host is reached): every problem is one line naming
the file, the field and the fix, exit 2, in bounded time and memory; inventories in the forms Ansible reads."""
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from vnetbench.hosts.lab import inventory
from vnetbench.hosts.lab import testbed as tb

HOSTS = "hosts:\n  node1: {ssh: root@node1, nic: eth1, address: 192.0.2.1}\n"
# A "billion laughs" made of mappings: 10^9 copies of {x: 1, y: 1} if expanded (the reader before walked them all:
# 1.7 GB in 30 s).
LAUGHS = "a: &a {x: 1, y: 1}\n" + "".join(
    f"{n}: &{n} {{" + ", ".join(f"k{i}: *{p}" for i in range(10)) + "}\n" for p, n in zip("abcdefgh", "bcdefghi"))
ANSIBLE = inventory.ansible_inventory() is not None
needs_ansible = pytest.mark.skipif(not ANSIBLE, reason="ansible-inventory is not installed (Debian package "
                                                       "ansible-core; ./install.sh installs it)")

# (file name, bytes, the line must start with, and contain)
CASES = [
    ("laughs.yaml", (LAUGHS + HOSTS).encode(), "laughs.yaml:", "aliases expand this value"),
    ("latin1.yaml", HOSTS.replace("eth1", "\u00e9th1").encode("latin-1"), "latin1.yaml:2: ", "not UTF-8"),
    ("dup.yaml", (HOSTS + "  node1: {ssh: root@node2, nic: eth1, address: 192.0.2.2}\n").encode(),
     "dup.yaml:3: hosts.node1: ", "given twice"),
    ("quoted.yaml", HOSTS.replace("}", ', allow_mtu: "false"}').encode(), "quoted.yaml:2: hosts.node1.allow_mtu: ",
     "true or false, without quotes"),
    ("port.yaml", HOSTS.replace("}", ", port: true}").encode(), "port.yaml:2: hosts.node1.port: ",
     "not true/false; a TCP port"),
    ("vlan.yaml", ("flat_vlan: true\n" + HOSTS).encode(), "vlan.yaml:1: flat_vlan: ", "not true/false"),
    ("misspelt.yaml", ("strict_host_key: accept-new\n" + HOSTS).encode(), "misspelt.yaml:1: strict_host_key: ",
     "unknown key; allowed: ssh_config, known_hosts, identity, hosts, flat_vlan, strict_host_keys"),
    ("misvalue.yaml", ("strict_host_keys: accept_new\n" + HOSTS).encode(), "misvalue.yaml:1: strict_host_keys: ",
     "yes (the default) or accept-new"),
    ("hostslist.yaml", b"all:\n  hosts: [node1, node2]\n", "hostslist.yaml:2: all.hosts: ",
     "hosts is a mapping of host names"),
    ("groupstr.yaml", b"all:\n  children:\n    lab: node1\n", "groupstr.yaml:3: all.children.lab: ",
     "a group is a mapping"),
    ("children.yaml", b"all:\n  children: [lab]\n", "children.yaml:2: all.children: ", "children is a mapping"),
    ("vars.yaml", b"all:\n  vars: [a, b]\n  hosts: {node1: }\n", "vars.yaml:2: all.vars: ", "vars is a mapping"),
    ("hostval.yaml", b"all:\n  hosts:\n    node1: 5\n", "hostval.yaml:3: all.hosts.node1: ",
     "a host's value is a mapping of its vars"),
    ("groupkey.yaml", b"all:\n  host:\n    node1:\n", "groupkey.yaml:2: all.host: ", "unknown key in a group"),
    ("invdup.yaml", b"all:\n  hosts:\n    node1: {ansible_host: 192.0.2.1}\n    node1: {ansible_host: 192.0.2.2}\n",
     "invdup.yaml:4: all.hosts.node1: ", "given twice"),
    ("invvar.yaml", b"all:\n  hosts:\n    node1: {ansible_host: 192.0.2.1, vnetbench_nci: eth1}\n",
     "invvar.yaml:3: host node1: vnetbench_nci: ", "unknown variable; allowed: vnetbench_address"),
]


def _bounded():
    resource.setrlimit(resource.RLIMIT_AS, (1536 * 1024 ** 2,) * 2)  # vnetbench and anything it starts


@pytest.mark.parametrize("name,raw,starts,has", CASES, ids=[c[0] for c in CASES])
def test_each_testbed_file_problem_is_one_line_exit_2_in_bounded_time_and_memory(tmp_path, name, raw, starts, has):
    (tmp_path / name).write_bytes(raw)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vnetbench", "doctor", "--testbed", name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, preexec_fn=_bounded,
                          env=os.environ | {"PYTHONPATH": str(ROOT)})
    took = time.monotonic() - t0
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(starts) and has in lines[0], lines[0]
    assert took < 60, took  # about 0.3 s on an idle machine (ansible-inventory, where it runs: about 1 s)


def test_what_the_strict_file_still_accepts(tmp_path):
    """yes for strict_host_keys (YAML reads it as true), an unquoted boolean, a host named by a number."""
    (tmp_path / "tb.yaml").write_text("strict_host_keys: yes\nflat_vlan: 100\nhosts:\n"
                                      "  1: {ssh: root@node1, nic: eth1, address: 192.0.2.1, allow_mtu: false}\n"
                                      "  node2: {nic: eth1, address: 192.0.2.2, allow_mtu: true, port: 2222}\n")
    bed = tb.load(tmp_path / "tb.yaml")
    assert [(h.name, h.allow_mtu, h.target.port, h.target.destination) for h in bed.hosts] == [
        ("1", False, None, "root@node1"), ("node2", True, 2222, "node2")]
    assert bed.flat_vlan == 100 and bed.hosts[0].target.strict_host_keys == "yes"


def test_dev_zero_a_directory_and_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.setattr(inventory, "ansible_inventory", lambda: None)
    for path, words in ((Path("/dev/zero"), "has more than"), (tmp_path / "nope.yaml", "No such file"),
                        (tmp_path, "ansible-inventory reads it")):
        with pytest.raises(tb.TestbedError) as err:
            tb.load(path)
        (line,) = err.value.lines
        assert line.startswith(str(path)) and words in line, line


def test_without_ansible_a_yaml_inventory_is_read_and_other_forms_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(inventory, "ansible_inventory", lambda: None)
    (tmp_path / "inv.yaml").write_text("all:\n  vars: {ansible_user: root, vnetbench_nic: eth1}\n  children:\n"
                                       "    lab:\n      vars: {vnetbench_allow_mtu: 'no'}\n      hosts:\n"
                                       "        node2: {ansible_host: 192.0.2.12, vnetbench_allow_mtu: 'yes'}\n"
                                       "        node1: {ansible_host: 192.0.2.11}\n")
    bed = tb.load(tmp_path / "inv.yaml")
    assert [(h.name, h.target.destination, h.nic, h.address, h.allow_mtu) for h in bed.hosts] == [
        ("node2", "root@192.0.2.12", "eth1", "192.0.2.12", True),
        ("node1", "root@192.0.2.11", "eth1", "192.0.2.11", False)]
    (tmp_path / "lab.ini").write_text("[lab]\nnode1 ansible_host=192.0.2.11\n")
    (tmp_path / "group_vars").mkdir()
    for path in (tmp_path / "lab.ini", tmp_path / "inv.yaml"):  # group_vars/ would be silently left out
        with pytest.raises(tb.TestbedError) as err:
            tb.load(path)
        (line,) = err.value.lines
        assert line.startswith(f"{path}: ") and "ansible-inventory" in line and "ansible-core" in line, line


def test_an_inventory_value_reads_as_ansible_reads_it(tmp_path, monkeypatch):
    """'false' in an inventory is false (INI gives every value as text), a word that is no boolean is an error."""
    monkeypatch.setattr(inventory, "ansible_inventory", lambda: None)
    inv = ("all:\n  hosts:\n    node1: {ansible_host: 192.0.2.1, vnetbench_nic: eth1, vnetbench_allow_mtu: %s, "
           "ansible_port: '2222'}\n")
    (tmp_path / "inv.yaml").write_text(inv % '"false"')
    (h,) = tb.load(tmp_path / "inv.yaml").hosts
    assert h.allow_mtu is False and h.target.port == 2222
    (tmp_path / "inv.yaml").write_text(inv % "maybe")
    with pytest.raises(tb.TestbedError) as err:
        tb.load(tmp_path / "inv.yaml")
    assert err.value.lines == [f"{tmp_path / 'inv.yaml'}:3: host node1: vnetbench_allow_mtu: Input should be a "
                               "valid boolean; true or false, without quotes: may vnetbench set this NIC's MTU for "
                               "a scenario"]


@needs_ansible
def test_ini_inventory_with_group_vars_and_host_vars(tmp_path):
    (tmp_path / "inventory.ini").write_text("[lab]\nnode2 ansible_host=192.0.2.12 ansible_port=2222\n"
                                            "node1 ansible_host=192.0.2.11\n[lab:vars]\nvnetbench_allow_mtu=yes\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("ansible_user: root\nvnetbench_nic: eth1\n"
                                                     "vnetbench_run_subnet: 10.99.0.0/24\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "node1.yml").write_text("vnetbench_allow_mtu: false\nvnetbench_address: 192.0.2.21\n")
    bed = tb.load(tmp_path / "inventory.ini")
    assert [(h.name, h.target.destination, h.target.port, h.nic, h.address, h.allow_mtu) for h in bed.hosts] == [
        ("node2", "root@192.0.2.12", 2222, "eth1", "192.0.2.12", True),
        ("node1", "root@192.0.2.11", None, "eth1", "192.0.2.21", False)]
    assert bed.run_subnet == "10.99.0.0/24"
    # a billion laughs in group_vars/ is refused before Ansible's own YAML loader sees it
    (tmp_path / "group_vars" / "lab.yml").write_text(LAUGHS)
    with pytest.raises(tb.TestbedError) as err:
        tb.load(tmp_path / "inventory.ini")
    (line,) = err.value.lines
    assert line.startswith(f"{tmp_path / 'group_vars' / 'lab.yml'}:") and "aliases expand" in line, line


@needs_ansible
def test_ini_syntax_error_and_dynamic_inventory_scripts(tmp_path, monkeypatch):
    (tmp_path / "hosts").write_text("[lab]\nnode1 ansible_host\n")  # no extension: Ansible's YAML parser tries too
    with pytest.raises(tb.TestbedError) as err:
        tb.load(tmp_path / "hosts")
    (line,) = err.value.lines
    assert "Expected key=value host variable assignment" in line, line
    (tmp_path / "bad.ini").write_text("[lab]\nnode1 ansible_host\n")
    with pytest.raises(tb.TestbedError) as err:
        tb.load(tmp_path / "bad.ini")
    (line,) = err.value.lines
    assert line.startswith(f"{tmp_path / 'bad.ini'}: ansible-inventory cannot read it: ") and ":2:" in line, line
    script = tmp_path / "dynamic.sh"
    script.write_text('#!/bin/sh\necho \'{"lab": {"hosts": ["n1"]}, "_meta": {"hostvars": {"n1": '
                      '{"ansible_host": "192.0.2.5", "vnetbench_nic": "eth2"}}}}\'\n')
    script.chmod(0o755)
    (h,) = tb.load(script).hosts
    assert (h.name, h.target.destination, h.nic) == ("n1", "192.0.2.5", "eth2")
    # a script that allocates without end, or never ends: one line, in bounded memory and time
    script.write_text('#!/bin/sh\nexec python3 -c "x = bytearray(3 * 1024 ** 3)"\n')
    with pytest.raises(tb.TestbedError) as err:
        tb.load(script)
    (line,) = err.value.lines
    assert "MemoryError" in line, line
    monkeypatch.setattr(inventory, "TIMEOUT_S", 3)
    marker = tmp_path / "still-running"
    script.write_text(f'#!/bin/sh\nsleep 8 && touch {marker}\n')
    t0 = time.monotonic()
    with pytest.raises(tb.TestbedError) as err:
        tb.load(script)
    assert time.monotonic() - t0 < 30
    (line,) = err.value.lines
    assert "took more than 3 s" in line, line
    time.sleep(6)
    assert not marker.exists()  # the script's own children were killed with it
