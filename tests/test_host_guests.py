"""kernel: guest-per-host: each emulated host a guest of its own (guests.hostsite). A VM pair across two host guests
passes its traffic between two guest kernels over the underlay segment, IPsec and OVS's kernel datapath run in the
guests' kernels, and kill -9 + clean leaves nothing."""
import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import clean_after_kill, guest_pids, netns_names
from vnetbench.system import ledger
from vnetbench.capabilities import detect
from vnetbench.guests import kind_class
from vnetbench.guests.hostsite import GuestHostSite
from vnetbench.hosts.guest_per_host import HostGuestsPlacement
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import loads
from vnetbench.build.topology import Topology

pytestmark = [pytest.mark.net,
              pytest.mark.skipif(not kind_class("uml").support().ok, reason="User-Mode Linux not installed")]

SPEC = """name: per-host
repetitions: 1
factors: {{kernel: guest-per-host, switch: linuxbridge, overlay: vxlan, duration: {duration}}}
workloads: [{{type: iperf3}}]
"""



def test_kill_9_while_traffic_runs_then_clean_leaves_nothing(tmp_path, state_dir):
    spec = tmp_path / "ph.yaml"
    spec.write_text(SPEC.format(duration=30))
    db = tmp_path / "ph.db"
    run = subprocess.Popen([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(db), "--no-progress"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    try:
        prefix = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and run.poll() is None:
            if prefix is None and db.exists():
                try:
                    with sqlite3.connect(db) as c:
                        row = c.execute("SELECT prefix FROM campaigns WHERE id = 1").fetchone()
                except sqlite3.OperationalError:  # the file is there before its tables are (a busy machine saw it)
                    row = None
                prefix = row[0] if row and row[0] else None
            if prefix and _segment_bytes(prefix) > 20e6:  # the VMs' traffic is on the underlay segment
                break
            time.sleep(0.5)
        assert prefix and _segment_bytes(prefix) > 20e6, run.stderr.read() if run.poll() is not None else prefix
        assert len({json.loads(line).get("name") for line in (state_dir / prefix / "objects.jsonl").read_text()
                    .splitlines() if "guest:" in line}) == 2
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    clean_after_kill(prefix, state_dir)


def _segment_bytes(prefix: str) -> int:
    """Bytes through the guests' data taps (their underlay NICs) in the run's guest namespace (0 until it exists);
    a bridge's own counters do not count what it forwards."""
    out = subprocess.run(["ip", "-n", f"{prefix}-gn", "-s", "-j", "link", "show"], capture_output=True, text=True)
    if out.returncode:
        return 0
    return sum(link["stats64"]["rx"]["bytes"] for link in json.loads(out.stdout)
               if re.fullmatch(rf"{prefix}-\d+d\d+", link["ifname"]))


DATAPATHS = """name: per-host-datapaths
repetitions: 1
factors:
  kernel: guest-per-host
  duration: 1
  switch: [linuxbridge, ovs]
  overlay: [vxlan, gre]
  encryption: [{type: ipsec, protocol: esp, cipher: aes-256-cbc, integrity: hmac-sha256, mode: transport, keying: manual}]
  encryption_scope: [vm-to-vm, host-to-host]
include:
  - {switch: linuxbridge, overlay: vxlan, encryption_scope: vm-to-vm}
  - {switch: ovs, overlay: gre, encryption_scope: host-to-host}
exclude:
  - {switch: linuxbridge, overlay: gre}
  - {switch: ovs, overlay: vxlan}
  - {switch: linuxbridge, encryption_scope: host-to-host}
  - {switch: ovs, encryption_scope: vm-to-vm}
workloads: [{type: iperf3}]
"""
MARK = "VNBMARK!"  # a ping's payload (ping -p repeats it): never to be seen in clear on the underlay


def test_ipsec_and_ovs_run_in_per_host_guests(state_dir):
    """Manual-key ESP (transport) between two VMs over a Linux bridge + VXLAN, and between the two host guests under
    OVS's kernel datapath + GRE: each runs in the guests' own kernels, passes a TCP stream, and the underlay between
    the guests carries ESP only, never the ping's payload in clear (which the VM's port on the host does show when the
    hosts encrypt)."""
    scenarios = expand(loads(DATAPATHS).experiment, detect())
    assert [sc.skip for sc in scenarios] == [None, None], [sc.skip for sc in scenarios]
    kernel = kind_class("uml").support().kernel
    led = ledger.Ledger.create()
    site = GuestHostSite(led, 2)
    try:
        for sc in scenarios:
            impl = sc.implementation
            assert impl["kernel"] == f"{kernel} per host" and impl["encryption"] == "kernel-xfrm manual keys", impl
            h2h = sc.levels["encryption_scope"] == "host-to-host"
            if h2h:
                assert (impl["switch"], impl["overlay"]) == ("ovs-system", "ovs-gre"), impl
            topo = Topology(sc, led, placement=HostGuestsPlacement(site))
            topo.build()
            try:
                seen = _captured(site, topo, ["u", "t1"])
                nic, port = seen["u"], seen["t1"]
                assert "ESP(spi=" in nic["text"] and nic["marks"] == 0, (sc.labels, nic)
                assert " GRE" not in nic["text"] and "ICMP echo" not in nic["text"], nic
                # the VM's port on its host: encrypted by the VM itself, or in clear when the hosts encrypt
                assert (port["marks"] > 0 and "ICMP echo" in port["text"]) if h2h else \
                    (port["marks"] == 0 and "ESP(spi=" in port["text"]), (sc.labels, port)
                if not h2h:
                    _two_kernels(site, topo)
                before = site.nic_counters()
                wl = sc.workloads[0]
                got = next(s for s in wl.run(wl.select(topo.pairs))
                           if s.metric == "throughput_bps" and s.metadata.get("direction") == "forward")
                after = site.nic_counters()
                payload = got.value / 8 * (got.metadata["window"][1] - got.metadata["window"][0])
                sent = after["h1"]["tx_bytes"] - before["h1"]["tx_bytes"]
                received = after["h2"]["rx_bytes"] - before["h2"]["rx_bytes"]
                # every payload byte left guest h1's underlay NIC and entered guest h2's, in ESP, VXLAN or GRE, IP and
                # Ethernet headers (about 8 % more at MTU 1500) with the TCP handshake and the tail around the window
                assert payload > 1e6, got
                assert 1.0 < received / payload < 1.5 and 1.0 < sent / payload < 1.5, (payload, sent, received)
            finally:
                topo.teardown()
    finally:
        site.close()
    assert not guest_pids(led.prefix)
    assert not [n for n in netns_names() if n.startswith(led.prefix)]
    led.remove_all()


def _two_kernels(site, topo) -> None:
    """The pair's VMs are namespaces in two guests, each with a kernel of its own."""
    g1, g2 = site.executor("h1"), site.executor("h2")
    assert [g.run(["hostname"]).stdout.strip() for g in (g1, g2)] == ["h1", "h2"]
    vm1, vm2 = (topo.nodes[topo.pairs[0].meta[k]].netns for k in ("client", "server"))
    assert vm1 in g1.run(["ip", "netns", "list"]).stdout and vm1 not in g2.run(["ip", "netns", "list"]).stdout
    assert vm2 in g2.run(["ip", "netns", "list"]).stdout


def _captured(site, topo, devs: list[str]) -> dict[str, dict]:
    """While VM 1 pings VM 2 with MARK as its payload: what tcpdump saw on devices of host 1's namespace (in guest h1),
    as tcpdump's text and the number of packets with MARK in clear."""
    q, g1 = shlex.quote, site.executor("h1")
    ns, vm1 = topo.nodes["h1"].netns, topo.nodes[topo.pairs[0].meta["client"]].netns
    caps = {d: f"/tmp/{topo.prefix}-{d}.pcap" for d in devs}
    start = "".join(f"ip netns exec {q(ns)} timeout 20 tcpdump -i {q(topo.ifname(d))} -nn -U --immediate-mode -Z root -w {q(f)} "
                    f"</dev/null >/dev/null 2>{q(f)}.log &\n" for d, f in caps.items())
    logs = " ".join(q(f + ".log") for f in caps.values())
    script = (f"{start}i=0; until [ $i -ge 200 ] || (for f in {logs}; do grep -q listening $f || exit 1; done); "
              f"do sleep 0.05; i=$((i+1)); done\n"
              f"ip netns exec {q(vm1)} ping -n -q -c 3 -i 0.2 -p {MARK.encode().hex()} {q(topo.pairs[0].server.addr)}"
              f" >/dev/null\nsleep 0.3; kill %1 %2 2>/dev/null; wait\n")
    script += "".join(f"echo @@{d}; grep -c -a {q(MARK)} {q(f)} || true; tcpdump -nn -r {q(f)} 2>/dev/null | head -n 20"
                      f"; echo ==log; ls -la {q(f)}; cat {q(f)}.log; rm -f {q(f)} {q(f)}.log\n" for d, f in caps.items())
    out = g1.run_script(script, timeout=60).stdout
    seen = {}
    for chunk in out.split("@@")[1:]:
        dev, marks, *text = chunk.split("\n")
        seen[dev] = {"marks": int(marks), "text": "\n".join(text).split("==log")[0]}
    return seen
