"""kernel: guest-per-host: each emulated host a guest of its own (guests.hostsite). A VM pair across two host guests
passes its traffic between two guest kernels over the underlay segment, and kill -9 + clean leaves nothing."""
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import clean_after_kill, uml_pids, netns_names
from vnetbench import ledger
from vnetbench.capabilities import detect
from vnetbench.guests import backend
from vnetbench.guests.hostsite import GuestHostSite
from vnetbench.matrix import expand
from vnetbench.spec import loads
from vnetbench.topology import Topology

pytestmark = [pytest.mark.net,
              pytest.mark.skipif(not backend("uml").support().ok, reason="User-Mode Linux not installed")]

SPEC = """name: per-host
repetitions: 1
factors: {{kernel: guest-per-host, switch: linuxbridge, overlay: vxlan, duration: {duration}}}
workloads: [{{type: iperf3}}]
"""



def test_a_vm_pair_crosses_between_two_guest_kernels(state_dir):
    (sc,) = expand(loads(SPEC.format(duration=1)).experiment, detect())
    assert sc.skip is None and sc.implementation["kernel"].endswith(" per host"), (sc.skip, sc.implementation)
    led = ledger.Ledger.create()
    site = GuestHostSite(led, 2)
    try:
        topo = Topology(sc, led, site=site)
        topo.build()
        g1, g2 = site.executor("h1"), site.executor("h2")
        assert [g.run(["hostname"]).stdout.strip() for g in (g1, g2)] == ["h1", "h2"]  # two kernels, two guests
        vm1, vm2 = (topo.nodes[topo.pairs[0].meta[k]].netns for k in ("client", "server"))
        assert vm1 in g1.run(["ip", "netns", "list"]).stdout and vm1 not in g2.run(["ip", "netns", "list"]).stdout
        assert vm2 in g2.run(["ip", "netns", "list"]).stdout
        before = site.nic_counters()
        wl = sc.workloads[0]
        samples = wl.run(wl.select(topo.pairs))
        after = site.nic_counters()
        got = next(s for s in samples if s.metric == "throughput_bps" and s.metadata.get("direction") == "forward")
        payload = got.value / 8 * (got.metadata["window"][1] - got.metadata["window"][0])
        sent = after["h1"]["tx_bytes"] - before["h1"]["tx_bytes"]
        received = after["h2"]["rx_bytes"] - before["h2"]["rx_bytes"]
        # every payload byte left guest h1's underlay NIC and entered guest h2's, in VXLAN/UDP/IP/Ethernet headers
        # (about 4 % more at MTU 1500) with the TCP handshake and the tail around iperf3's window
        assert payload > 1e6, got
        assert 1.0 < received / payload < 1.5 and 1.0 < sent / payload < 1.5, (payload, sent, received)
        topo.teardown()
    finally:
        site.close()
    assert not uml_pids(led.prefix)
    assert not [n for n in netns_names() if n.startswith(led.prefix)]
    led.remove_all()


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
                with sqlite3.connect(db) as c:
                    row = c.execute("SELECT prefix FROM campaigns WHERE id = 1").fetchone()
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
