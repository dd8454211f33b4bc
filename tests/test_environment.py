"""The environment a figure was measured in: vnetbench's version and commit, the strongSwan plugins, and each
interface's MTU, qdiscs and offloads (the machine's NICs at campaign start, every node's once a scenario is built)."""
import json
import sqlite3
import subprocess

import pytest

from conftest import ROOT, vnetbench
from vnetbench.run.environment import parse_ethtool_k

SPEC = """\
name: env
repetitions: 1
underlay: {rate: 1gbit}
factors: {overlay: vxlan, placement: cross-host}
workloads: [{type: ping, count: 2, interval: 0.05}]
"""


def test_parse_ethtool_k():
    text = ("@@ v1\nFeatures for v1:\nrx-checksumming: on\ntx-checksumming: off [requested on]\n"
            "\ttx-checksum-ipv4: off [fixed]\n@@ lo\nFeatures for lo:\nlarge-receive-offload: off [fixed]\n")
    got = parse_ethtool_k(text)
    assert got["v1"]["rx-checksumming"] == "on" and got["v1"]["tx-checksumming"].startswith("off")
    assert got["lo"] == {"large-receive-offload": "off fixed"}


@pytest.mark.net
def test_campaign_and_scenario_environment(tmp_path, state_dir):
    spec = tmp_path / "env.yaml"
    spec.write_text(SPEC)
    db = tmp_path / "r.db"
    vnetbench("run", spec, "--db", db, "--no-progress")
    with sqlite3.connect(db) as c:
        env = json.loads(c.execute("SELECT environment FROM campaigns").fetchone()[0])
        (scenario,) = [json.loads(r[0]) for r in c.execute("SELECT environment FROM scenarios")]
    assert env["vnetbench"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    if head.strip():
        assert env["vnetbench_git"].startswith(head.strip())
    if env["tools"].get("charon"):
        assert env["strongswan_plugins"] == []  # no IPsec in this spec: no charon started to list them
        from vnetbench.run import environment
        from vnetbench.capabilities import detect
        with_ipsec = environment.capture(detect(), steal=0.0, swan=True)  # a campaign that runs one
        assert {"aes", "vici"} <= set(with_ipsec["strongswan_plugins"])
    assert isinstance(env["nics"], dict)
    assert {"h1", "h2", "h1v1", "h2v2"} <= set(scenario)
    h1 = scenario["h1"]
    vxlan = [i for i in h1.values() if i["kind"] == "vxlan"]
    assert vxlan and vxlan[0]["mtu"] == 1450  # 1500 minus VXLAN's 50 bytes, as the VMs (mtu_policy lower-vm)
    shaped = [i for i in h1.values() if any(q["kind"] == "tbf" for q in i["qdiscs"])]
    assert len(shaped) == 1 and shaped[0]["kind"] == "veth"  # the underlay NIC, rate-limited to 1 Gbit/s
    vm_nics = [i for name, i in scenario["h1v1"].items() if name != "lo"]
    assert vm_nics and all(i["mtu"] == 1450 for i in vm_nics), vm_nics
    assert all("tcp-segmentation-offload" in i["offloads"] for i in vm_nics)


@pytest.mark.net
def test_the_sysctls_that_decide_results_are_recorded_and_reported(tmp_path, state_dir):
    """Congestion control (here bbr), socket buffer limits, backlog, busy polling, GRO batching and forwarding: the
    machine's at the start, and each namespace's own as built (a new namespace starts from defaults for many), then
    shown in the report's environment section."""
    spec = tmp_path / "env.yaml"
    spec.write_text("name: env\nrepetitions: 1\nfactors: {attach: host, hops: 1}\n"
                    "workloads: [{type: ping, count: 2, interval: 0.05}]\n")
    db = tmp_path / "r.db"
    vnetbench("run", spec, "--db", db, "--no-progress")
    with sqlite3.connect(db) as c:
        env = json.loads(c.execute("SELECT environment FROM campaigns").fetchone()[0])
        (scenario,) = [json.loads(r[0]) for r in c.execute("SELECT environment FROM scenarios")]
    machine = env["sysctls"]
    proc = {name: " ".join(open("/proc/sys/" + name.replace(".", "/")).read().split())
            for name in ("net.ipv4.tcp_congestion_control", "net.core.rmem_max", "net.ipv4.tcp_wmem")}
    assert {k: machine[k] for k in proc} == proc
    assert machine["net.ipv4.tcp_congestion_control"] in machine["net.ipv4.tcp_available_congestion_control"].split()
    for name in ("net.core.wmem_max", "net.ipv4.tcp_rmem", "net.core.netdev_max_backlog", "net.core.somaxconn",
                 "net.core.busy_poll", "net.core.gro_normal_batch", "net.ipv4.ip_forward"):
        assert name in machine, name
    nodes = scenario["sysctls"]
    assert {"h1", "h2", "r1"} <= set(nodes)
    assert nodes["r1"]["net.ipv4.ip_forward"] == "1" and nodes["h1"]["net.ipv4.tcp_congestion_control"]
    assert all(len(n["net.ipv4.tcp_rmem"].split()) == 3 for n in nodes.values())
    page = tmp_path / "r.html"
    vnetbench("report", "1", "--db", db, "-o", page)
    text = page.read_text()
    assert "Network sysctls" in text and "net.ipv4.tcp_congestion_control" in text
    assert machine["net.ipv4.tcp_available_congestion_control"] in text


@pytest.mark.net
def test_a_namespaces_sysctls_are_read_by_one_process_and_are_its_own(tmp_path):
    """A 256-pair run records 524 namespaces: two processes per sysctl (`$(cat ...)`, 17 sysctls) made most of the
    33 s that took at load 13 (5 s with one `grep` for all). The values are still the namespace's own."""
    import os
    from vnetbench.run import environment
    from vnetbench.system.executor import NetnsExecutor
    ns = f"vbt{os.getpid() % 10000:04d}-env"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)
        _, sysctls = environment._place(NetnsExecutor(ns))
        want = {n: " ".join(subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/sys/" + n.replace(".", "/")],
                                           capture_output=True, text=True).stdout.split())
                for n in environment.NETNS_SYSCTLS}
        assert sysctls == {n: v for n, v in want.items() if v} and sysctls["net.ipv4.ip_forward"] == "1"
        assert len(sysctls["net.ipv4.tcp_rmem"].split()) == 3
        trace = subprocess.run(["sh", "-xc", environment._sysctl_script(environment.NETNS_SYSCTLS)],
                               capture_output=True, text=True).stderr
        commands = [ln.split()[1] for ln in trace.splitlines() if ln.startswith("+ ") and len(ln.split()) > 1]
        assert commands == ["grep"], commands
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.net
def test_a_namespace_is_described_in_a_few_processes_with_its_own_sysctls(state_dir):
    """Describing a namespace starts a handful of processes, not one per sysctl (`$(cat f)`: in a busy one-CPU guest
    a topology's 6 namespaces took 10-13 s to describe, ~2 s now); the sysctls read are the namespace's own."""
    from vnetbench.run import environment
    from vnetbench.system.executor import NetnsExecutor
    from vnetbench.system.ledger import Ledger
    led = Ledger.create()
    ns = f"{led.prefix}-env"
    led.record("netns", ns)
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1",
                        "net.ipv4.tcp_ecn=1"], check=True)
        ifs, sysctls = environment._place(NetnsExecutor(ns))
        assert "lo" in ifs and sysctls["net.ipv4.ip_forward"] == "1" and sysctls["net.ipv4.tcp_ecn"] == "1"
        assert len(sysctls["net.ipv4.tcp_rmem"].split()) == 3
        # in a new PID namespace the last pid is how many processes the script started (lo only: one ethtool)
        last = subprocess.run(["ip", "netns", "exec", ns, "unshare", "--fork", "--pid", "sh", "-c",
                               environment._INTERFACES_SCRIPT.rstrip("; ") + "; sh -c 'echo @@PID $$'"],
                              capture_output=True, text=True, check=True).stdout
        started = int(last.rsplit("@@PID", 1)[1])
        assert started <= 8, started  # sh, ip, tc, ethtool, grep, the last sh (23 with a `$(cat f)` per sysctl)
    finally:
        led.remove_all()
