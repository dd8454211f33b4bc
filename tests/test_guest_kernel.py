"""`kernel: guest`: the scenario runs in a User-Mode Linux guest whose kernel has what this machine's may lack.
Kernel xfrm IPsec with manual keys in transport mode (AH, ESP with 3DES / Blowfish / AES-256-CBC + HMAC-SHA2-512,
AH+ESP) is on the wire as AH and ESP headers; ESP never carries the payload in clear (AH, which only authenticates,
carries it inside AH)."""
from __future__ import annotations

import json
import signal
import struct
import time
from datetime import datetime, timezone

import pytest

from test_encryption import MARKER, read_pcap
from vnetbench.capabilities import detect
from vnetbench.guests import probe as guest_probe
from vnetbench.hosts.guest import GuestPlacement
from vnetbench.system.ledger import Ledger
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import loads
from vnetbench.build.topology import Topology

pytestmark = [pytest.mark.net, pytest.mark.skipif(not guest_probe.support().ok, reason="User-Mode Linux not installed")]

SHA1 = {"type": "ipsec", "mode": "transport", "keying": "manual", "integrity": "hmac-sha1"}
IPSEC = [("none", set()),
         (SHA1 | {"protocol": "ah"}, {51}),
         (SHA1 | {"protocol": "esp", "cipher": "3des-cbc"}, {50}),
         (SHA1 | {"protocol": "esp", "cipher": "blowfish-cbc"}, {50}),
         ({"type": "ipsec", "mode": "transport", "keying": "manual", "protocol": "esp", "cipher": "aes-256-cbc",
           "integrity": "hmac-sha512"}, {50}),
         (SHA1 | {"protocol": "ah+esp", "cipher": "3des-cbc"}, {51})]  # AH outermost, ESP inside it


def scenario(factors: dict):
    text = (f"name: g\nrepetitions: 1\nfactors: {json.dumps({'kernel': 'guest'} | factors)}\n"
            f"workloads: [{{type: ping, count: 3}}]\n")
    (sc,) = expand(loads(text).experiment, detect())
    assert sc.skip is None, sc.skip
    assert sc.implementation["kernel"].startswith("uml-")
    return sc


def protocols(frames: list[bytes]) -> list[int]:
    """IP protocol (IPv4) of every frame that is not ARP."""
    out = []
    for f in frames:
        if struct.unpack("!H", f[12:14])[0] == 0x0800:
            out.append(f[14 + 9])
    return out


def capture(topo: Topology, pcap) -> object:
    h1 = topo.nodes["h1"].exec
    proc = h1.spawn(["tcpdump", "-Z", "root", "-i", topo.nic("h1"), "-n", "-U", "--immediate-mode", "-s", "0", "-w", str(pcap)],
                    label="test tcpdump")
    deadline = time.monotonic() + 15
    line = ""
    while time.monotonic() < deadline and "listening on" not in line:
        line = proc.stderr.readline()
    assert "listening on" in line, line
    return proc


def test_kernel_ipsec_in_a_guest_is_ah_and_esp_on_the_wire_never_clear_text(state_dir):
    ledger = Ledger.create()
    guest = guest_probe.SharedGuest(ledger)
    try:
        ex = guest.executor()
        for enc, want in IPSEC:
            sc = scenario({"attach": "host", "encryption": enc, "encryption_scope": "host-to-host"})
            topo = Topology(sc, ledger, placement=GuestPlacement(ledger, ex))
            pcap = ledger.work / f"wire-{len(want)}-{time.monotonic_ns()}.pcap"
            try:
                topo.build()
                dump = capture(topo, pcap)
                pair = topo.pairs[0]
                ping = pair.client.node.run(["ping", "-c", "3", "-i", "0.1", "-W", "2", "-s", "200", "-p",
                                             MARKER.hex(), pair.server.addr], check=False)
                assert ping.returncode == 0, (enc, ping.stdout, ping.stderr)
                time.sleep(0.3)
                dump.send_signal(signal.SIGINT)
                dump.communicate(timeout=15)
            finally:
                topo.teardown()
            ex.run(["sync"])  # the guest's page cache holds what it wrote to the shared directory
            frames = read_pcap(pcap)
            protos = protocols(frames)
            clear = sum(MARKER in f for f in frames)
            if not want:  # the control: the same capture sees the marker when nothing encrypts
                assert clear >= 3 and protos.count(1) >= 6, (len(frames), protos, frames[-1][:80] if frames else None)
                continue
            if enc["protocol"] == "ah":  # AH authenticates, it does not encrypt: the marker is there, inside AH
                assert clear >= 6 and all(f[23] == 51 for f in frames if MARKER in f), enc
            else:
                assert clear == 0, f"{enc}: {clear} frames carry the marker in clear"
            assert len([p for p in protos if p in want]) >= 6, (enc, protos)
            assert 1 not in protos, f"{enc}: ICMP in clear on the wire"
            if enc.get("protocol") == "ah+esp":  # AH's next header is ESP (50)
                ah = [f for f in frames if struct.unpack("!H", f[12:14])[0] == 0x0800 and f[23] == 51]
                assert all(f[14 + (f[14] & 0x0F) * 4] == 50 for f in ah)
    finally:
        guest.close()
        ledger.remove_all()


def test_kill_9_during_traffic_in_a_guest_then_clean_leaves_nothing(state_dir, tmp_path):
    import os
    import subprocess
    import sys

    from conftest import ROOT, netns_names
    from vnetbench.system import ledger as ledgermod
    spec = tmp_path / "g.yaml"
    spec.write_text("name: g\nrepetitions: 1\nfactors: {kernel: guest, overlay: gre}\n"
                    "workloads: [{type: iperf3, duration: 30}]\n")
    # the commands go to the guest over its agent (no local process per command): the command log says when the
    # iperf3 client was started there
    log = tmp_path / "commands.log"
    run = subprocess.Popen([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(tmp_path / "r.db"),
                            "--no-progress"], cwd=ROOT, env=os.environ | {"VNETBENCH_COMMAND_LOG": str(log)},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    prefix = None
    while time.monotonic() < deadline:
        runs = [p.name for p in state_dir.iterdir()] if state_dir.exists() else []
        started = [ln for ln in (log.read_text().splitlines() if log.exists() else []) if "iperf3 -c" in ln]
        for p in runs:  # the run's own ledger (the capability probe's guest has one of its own, removed after)
            if any(f"{p}-" in ln for ln in started):
                prefix = p
        if prefix:
            break
        time.sleep(0.5)
    assert prefix, "the run never reached its traffic"
    time.sleep(2)
    run.kill()
    run.wait()
    removed, running = ledgermod.clean()
    assert not running
    time.sleep(0.5)
    assert not subprocess.run(["pgrep", "-f", f"umid={prefix}-"], capture_output=True).stdout
    assert not [n for n in netns_names() if n.startswith(prefix)]
    assert not list(state_dir.iterdir())
    assert not [p for p in os.listdir("/tmp") + os.listdir("/dev/shm") if prefix in p]
    from vnetbench.system import cgroup
    assert not cgroup.path_for(prefix).exists()


WIRE = {"vxlan": ("udp port 4789", "vni 101"), "gre": ("ip proto 47", "key=0x65"),
        "geneve": ("udp port 6081", "vni 0x65")}
OVS_KERNEL = "ovs"  # datapath auto: the kernel's where the guest's probe saw OVS forward through it
# the Linux bridge first: its builds take the time a young guest's first ovs-vswitchd would wait (datapaths/ovs.py)
SWITCHED = ([("linuxbridge", o, f"kernel-{o}") for o in WIRE]
            + [(OVS_KERNEL, o, f"ovs-{o}") for o in ("vxlan", "gre")])  # OVS's Geneve port: built as its VXLAN one


def test_overlays_in_a_guest_have_their_overhead_and_keep_tenants_apart(state_dir):
    """The Linux bridge with kernel GRE (keyed gretap), VXLAN and Geneve, and Open vSwitch's kernel datapath with its
    tunnel ports and with kernel VXLAN devices as ports, which this machine's kernel may lack: on the underlay each
    carries the tenant's key and exactly its overhead (GRE 42, VXLAN/Geneve 50); a VM that takes an address in tenant
    2's subnet reaches none of tenant 2's VMs; OVS forwards in the kernel (flows there, no upcall lost)."""
    import re
    ledger = Ledger.create()
    guest = guest_probe.SharedGuest(ledger)
    try:
        ex = guest.executor()
        for switch, overlay, impl in SWITCHED:
            expr, key = WIRE[overlay]
            factors = {"kernel": "guest", "switch": switch, "overlay": overlay, "pairs": 2}
            text = (f"name: g\nrepetitions: 1\ntenants: 2\nfactors: {json.dumps(factors)}\n"
                    f"workloads: [{{type: ping, count: 3}}]\n")
            (sc,) = expand(loads(text).experiment, detect())
            assert sc.skip is None and sc.implementation["overlay"] == impl, (sc.skip, sc.implementation)
            ovs = switch != "linuxbridge"
            assert not ovs or sc.implementation["switch"] == "ovs-system", sc.implementation
            topo = Topology(sc, ledger, placement=GuestPlacement(ledger, ex))
            try:
                topo.build()
                p1, p2 = topo.pairs
                h1 = topo.nodes["h1"].exec
                dump = h1.spawn(["tcpdump", "-i", topo.nic("h1"), "-c", "2", "-e", "-nn", "-v", "-l",
                                 f"{expr} and greater 1000"], label="test tcpdump")
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and "listening on" not in dump.stderr.readline():
                    pass
                p1.client.node.run(["ping", "-c", "2", "-i", "0.2", "-s", "1000", p1.server.addr])
                out, _ = dump.communicate(timeout=20)
                assert key in out, (impl, out)
                outer, inner = map(int, re.findall(r"length (\d+):", out)[:2])
                assert outer - inner == sc.overheads["overlay"], (impl, out)
                prober, e0 = p1.client.node, topo.ifname("e0")
                prober.run(["ip", "addr", "add", "10.102.0.201/24", "dev", e0])
                for vm in (p2.client, p2.server):
                    got = prober.run(["ping", "-c", "2", "-i", "0.3", "-W", "1", "-I", "10.102.0.201", vm.addr],
                                     check=False)
                    assert got.returncode != 0, f"{impl}: tenant 1's VM reached tenant 2's {vm.label}"
                for p in (p1, p2):  # within each tenant traffic still flows
                    p.client.node.run(["ping", "-c", "1", "-W", "2", p.server.addr])
                if ovs:  # through the kernel's flow table, every missed packet handed to ovs-vswitchd
                    for h in ("h1", "h2"):
                        show = topo.nodes[h].exec.run(["ovs-dpctl", "show"]).stdout
                        hit, missed, lost = map(int, re.search(r"hit:(\d+) missed:(\d+) lost:(\d+)", show).groups())
                        assert missed > 0 and lost == 0, (impl, h, show)
                        assert re.search(r"flows: [1-9]", show), (impl, h, show)
            finally:
                topo.teardown()
    finally:
        guest.close()
        ledger.remove_all()


def test_ike_kernel_esp_between_vms_in_a_guest(state_dir):
    """S1's IPsec: IKEv2 by strongSwan's charon with the guest kernel's ESP (AES-256-CBC + HMAC-SHA2-512) between
    two VMs, where this machine's kernel would need strongSwan's userspace ESP."""
    ledger = Ledger.create()
    guest = guest_probe.SharedGuest(ledger)
    try:
        sc = scenario({"encryption": {"type": "ipsec", "cipher": "aes-256-cbc", "integrity": "hmac-sha512"}})
        assert sc.implementation["encryption"].startswith("kernel-xfrm + strongswan")
        topo = Topology(sc, ledger, placement=GuestPlacement(ledger, guest.executor()))
        try:
            topo.build()
            pair = topo.pairs[0]
            states = pair.client.node.run(["ip", "xfrm", "state"]).stdout
            algos = {ln.split()[0] + " " + ln.split()[1] for ln in states.splitlines() if ln.startswith("\t")
                     and ln.split()[0] in ("enc", "auth-trunc")}
            assert algos == {"enc cbc(aes)", "auth-trunc hmac(sha512)"}, algos
            assert pair.client.node.run(["ping", "-c", "2", "-W", "2", pair.server.addr], check=False).returncode == 0
        finally:
            topo.teardown()
    finally:
        guest.close()
        ledger.remove_all()


def test_esp_tunnel_carries_ipv6_and_the_largest_datagram_is_as_computed(state_dir):
    """Manual-key ESP in tunnel mode between the VMs: the IPv4 tunnel carries IPv6 too (its SAs are af-unspec), and
    the largest ping payload that still fits in one IPv4 packet once encrypted is the one the matrix computes
    (one byte more gets no echo: the receiver cannot reassemble a datagram past 65535 bytes)."""
    enc = {"type": "ipsec", "mode": "tunnel", "keying": "manual", "protocol": "esp", "cipher": "aes-256-cbc",
           "integrity": "hmac-sha512"}
    ledger = Ledger.create()
    guest = guest_probe.SharedGuest(ledger)
    try:
        for v in (6, 4):
            text = (f"name: g\nrepetitions: 1\nfactors: {json.dumps({'kernel': 'guest', 'encryption': enc, 'ip_version': v})}\n"
                    f"workloads: [{{type: ping, count: 3}}, {{type: ping, ping_size: 65507}}]\n")
            (sc,) = expand(loads(text).experiment, detect())
            assert sc.skip is None and len(sc.workloads) == 1, sc.skip
            fit = int(next(n for n in sc.notes if " left out: " in n).split("at most ")[1].split("-byte")[0])
            topo = Topology(sc, ledger, placement=GuestPlacement(ledger, guest.executor()))
            try:
                topo.build()  # its ping check crosses the tunnel, over IPv6 too
                (p,) = topo.pairs
                if v == 4:
                    ping = ["ping", "-n", "-q", "-c", "2", "-i", "0.3", "-W", "2", p.server.addr, "-s"]
                    assert p.client.node.run(ping + [str(fit)], check=False).returncode == 0
                    assert p.client.node.run(ping + [str(fit + 1)], check=False).returncode != 0
            finally:
                topo.teardown()
    finally:
        guest.close()
        ledger.remove_all()


def test_underlay_delay_and_loss_run_in_a_guests_kernel(state_dir):
    """`underlay: {delay, loss}` puts netem on each host NIC in the guest's kernel (this machine's may have none):
    an echo crosses two NICs, so every round trip takes at least twice the delay, and little more on an idle link;
    with 10 % dropped on each NIC about 19 % of the echoes go unanswered."""
    import re
    text = ("name: g\nrepetitions: 1\nunderlay: {delay: 20ms, loss: 10%}\nfactors: {kernel: guest, attach: host}\n"
            "workloads: [{type: ping, count: 3}]\n")
    (sc,) = expand(loads(text).experiment, detect())
    assert sc.skip is None, sc.skip
    ledger = Ledger.create()
    guest = guest_probe.SharedGuest(ledger)
    try:
        topo = Topology(sc, ledger, placement=GuestPlacement(ledger, guest.executor()))
        try:
            topo.build()
            (pair,) = topo.pairs
            out = pair.client.node.run(["ping", "-n", "-q", "-c", "200", "-i", "0.01", "-W", "1", pair.server.addr],
                                       check=False).stdout
        finally:
            topo.teardown()
    finally:
        guest.close()
        ledger.remove_all()
    sent, got = map(int, re.search(r"(\d+) packets transmitted, (\d+) received", out).groups())
    rtt_min, rtt_avg = map(float, re.search(r"= ([\d.]+)/([\d.]+)/", out).groups())
    assert 40.0 <= rtt_min and rtt_avg < 40.0 + 30.0, out
    assert 0.05 <= 1 - got / sent <= 0.40, out  # expected 0.19; 200 echoes: +-0.03 (one standard deviation)


def test_a_young_guests_ovs_build_waits_only_for_ovs_vswitchd(state_dir):
    """Open vSwitch 3.1.0 must not start before the guest kernel's 10.5th second (it would lose every upcall), and
    only ovs-vswitchd waits for it: in a guest booted just now, the bridges go into the database before ovs-vswitchd
    is asked for, ovs-vswitchd's first log line is past the 10.5th second, and the pairs pass traffic."""
    from vnetbench.datapaths.ovs import YOUNG_KERNEL_S, YOUNG_KERNEL_WAIT
    sc = scenario({"switch": "ovs", "overlay": "vxlan", "placement": "cross-host"})
    if not any(n.startswith(YOUNG_KERNEL_WAIT) for n in sc.notes):
        pytest.skip("this Open vSwitch counts its CPUs at any age of the kernel: nothing waits")
    ledger = Ledger.create()
    guest = guest_probe.SharedGuest(ledger)
    try:
        topo = Topology(sc, ledger, placement=GuestPlacement(ledger, guest.executor()))
        try:
            topo.build()  # its ping check: every pair passes traffic
            ran = [" ".join(s.argv or []) if s.tool != "call" else s.name for s in topo.executed]
            configured = max(i for i, s in enumerate(ran) if "ovs-vsctl" in s and "--no-wait" in s)
            asked = min(i for i, s in enumerate(ran) if s.startswith("wait for ovs-vswitchd"))
            assert configured < asked, ran
            ex = topo.nodes["h1"].exec
            for h in ("h1", "h2"):
                # the guest's wall clock at its boot, and ovs-vswitchd's first log line on the same clock
                now, up = ex.run(["sh", "-c", "date +%s.%N; cut -d' ' -f1 /proc/uptime"]).stdout.split()
                first = ex.run(["head", "-n", "1", f"{topo.workdir(h)}/ovs-vswitchd.log"]).stdout.split("|")[0]
                fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if "." in first else "%Y-%m-%dT%H:%M:%SZ"
                started = datetime.strptime(first, fmt).replace(tzinfo=timezone.utc).timestamp()
                assert started - (float(now) - float(up)) >= YOUNG_KERNEL_S - 0.05, (h, first, now, up)
        finally:
            topo.teardown()
    finally:
        guest.close()
        ledger.remove_all()
