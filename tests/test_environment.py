"""The environment a figure was measured in: vnetbench's version and commit, the strongSwan plugins, and each
interface's MTU, qdiscs and offloads (the machine's NICs at campaign start, every node's once a scenario is built)."""
import json
import sqlite3
import subprocess

import pytest

from conftest import ROOT, vnetbench
from vnetbench.environment import parse_ethtool_k

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
        from vnetbench import environment
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
