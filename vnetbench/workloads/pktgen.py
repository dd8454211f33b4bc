"""Frames at a set rate between two endpoints, with loss counted at the receiver's interface.

A `Path` is where frames go: the sending interface (in the client's place) and the receiving one (in the server's).
A generator offers `count` frames of one size (or IMIX) at a rate; what it offered and what arrived are read from the
two interfaces' counters over netlink (tx packets plus tx drops at the sender, rx packets at the receiver), never
from the generator's own report. What the generator did not send within its time is `unsent`, never loss.

trafgen (netsniff-ng) writes whole frames to an AF_PACKET socket; its own shaper sends a second's frames back to back
and then sleeps, so the rate comes from an HTB class on the sending interface that only the generator's frames
(UDP to `port`) enter: the socket blocks while the class's queue is full, and other traffic (a latency stream)
passes beside it unshaped. iperf3 UDP is the labelled fallback: it paces itself, one datagram per frame.
"""
from __future__ import annotations

import json
import math
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Sequence

from ..system import rawlog
from ..system.executor import CommandError, Executor, LocalExecutor, NetnsExecutor, remote_ledger_append
from ..system.ledger import delete_namespaces
from .base import WorkloadError, _signal_group, stop, wait_listening

FCS = 4                 # Ethernet frame check sequence: counted in a frame's size, not written by the generator
L1_EXTRA = 20           # preamble (7) + start delimiter (1) + inter-frame gap (12) of every frame on a wire
ETH, IPV4, UDP = 14, 20, 8
# RFC 6985's IMIX as FD.io CSIT runs it (IMIX_v4_1): 64, 570 and 1518-byte frames 7:4:1, interleaved in this order
IMIX = (64, 570, 64, 64, 570, 64, 1518, 64, 570, 64, 64, 570)
START_S = 0.3           # a generator's start-up that a trial's deadline allows for
LATE = 0.05             # ... and the share of its duration it may run late before it is stopped
SHAPER_BURST_S = 0.01   # the HTB class's bucket: a generator woken late catches up by this much (a burst of it at most)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc/stat's unit (100 a second on Linux everywhere)
SHAPER_QUEUE = 4_000_000  # bytes the shaped class may hold: more than any socket's send buffer, so it never drops


@dataclass(frozen=True)
class Frames:
    """One frame size, or a mix that repeats in order; sizes are whole Ethernet frames with their FCS."""
    name: str
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, size: int | str) -> "Frames":
        return cls("imix", IMIX) if str(size).lower() == "imix" else cls(str(int(size)), (int(size),))

    @property
    def label(self) -> str:
        return "IMIX" if self.name == "imix" else f"{self.name} B"

    @property
    def mean(self) -> float:
        return sum(self.sizes) / len(self.sizes)

    def l2_bps(self, pps: float) -> float:
        """Bit/s of whole frames (header to FCS), as RFC 2544 counts a frame size."""
        return pps * self.mean * 8

    def l1_bps(self, pps: float) -> float:
        """Bit/s on a wire: each frame with its preamble, start delimiter and inter-frame gap."""
        return pps * (self.mean + L1_EXTRA) * 8

    def shaped_bps(self, pps: float) -> int:
        """The rate of the shaper, which counts each frame as the kernel holds it (no FCS)."""
        return max(8, round(pps * (self.mean - FCS) * 8))


@dataclass
class Side:
    node: Executor
    dev: str
    mac: str
    ip: str


@dataclass
class Path:
    sender: Side
    receiver: Side
    dst_mac: str        # the next hop's MAC address as the sender's neighbour table has it
    port: int = 9       # UDP destination port of the generated frames (discard): what the shaper selects

    def describe(self) -> str:
        return f"{self.sender.node.name}:{self.sender.dev} -> {self.receiver.node.name}:{self.receiver.dev}"

    def counters(self) -> tuple[dict, dict]:
        return counters(self.sender.node, self.sender.dev), counters(self.receiver.node, self.receiver.dev)


@dataclass
class Counts:
    """One trial: frames asked for, offered at the sender's interface, counted at the receiver's."""
    intended: int
    sent: int
    received: int
    seconds: float            # how long the generator sent
    intended_s: float
    load: float               # pps asked for
    said: str = ""            # the generator's own words, for the record
    cpu_s: float | None = None  # busy CPU seconds of the machine the generator ran on, over the trial
    window: tuple[float, float] | None = None  # time.time() from the generator's start to its end (a profile's)

    @property
    def loss(self) -> int:
        return max(0, self.sent - self.received)

    @property
    def extra(self) -> int:
        """Frames the receiver counted beyond those sent: other traffic on its interface (neighbour discovery)."""
        return max(0, self.received - self.sent)

    @property
    def unsent(self) -> int:
        return max(0, self.intended - self.sent)

    @property
    def loss_ratio(self) -> float:
        return self.loss / self.sent if self.sent else 0.0

    @property
    def offered_pps(self) -> float:
        """The rate offered over the trial: frames sent over the trial's duration, or over the time the generator
        took when that was longer."""
        return self.sent / max(self.seconds, self.intended_s)

    @property
    def shortfall(self) -> int:
        """Whole frames the trial's duration asked for that the generator did not offer within it (all 2500 sent in
        0.500191 s of 0.5 is 2499.05 frames' worth: a timer's slip, no frame short)."""
        return max(0, math.floor(self.intended - self.offered_pps * self.intended_s + 1e-9))


@dataclass
class Ceiling:
    sent_pps: float
    received_pps: float
    seconds: float


def counters(node: Executor, dev: str) -> dict[str, int]:
    """An interface's 64-bit packet counters over netlink (the run's agent or `ip -s -j link`)."""
    links = node.link_counters()
    if links is None:
        links = []
        for link in json.loads(node.run_ip(["-s", "-j", "link", "show", "dev", dev]).stdout):
            st = link.get("stats64") or link["stats"]
            links.append({"ifname": link["ifname"], "rx_packets": st["rx"]["packets"], "tx_packets": st["tx"]["packets"],
                          "tx_dropped": st["tx"]["dropped"]})
    for link in links:
        if link["ifname"] == dev:
            return {k: int(link[k]) for k in ("rx_packets", "tx_packets", "tx_dropped")}
    raise WorkloadError(f"{node.name}: no interface {dev} to count packets on")


def busy_seconds(node: Executor) -> float | None:
    """CPU seconds the machine has been busy, every CPU (user, nice, system, irq, softirq; not idle, iowait or
    steal), from /proc/stat's first line as the place where the generator runs sees it."""
    try:
        fields = node.read_text("/proc/stat").split("\n", 1)[0].split()
    except (OSError, CommandError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / CLOCK_TICKS


def offered(before: dict, after: dict) -> int:
    """Frames that left the sender's interface: those passed on plus those its peer refused (the path's loss)."""
    return after["tx_packets"] - before["tx_packets"] + after["tx_dropped"] - before["tx_dropped"]


def discover(client: Executor, client_addr: str, server: Executor, server_addr: str, port: int = 9) -> Path:
    """The path a pair's frames take: the client's outgoing interface and next hop, the server's interface."""
    route = json.loads(client.run_ip(["-j", "route", "get", server_addr]).stdout)[0]
    dev, hop = route["dev"], route.get("gateway", server_addr)
    mac = _neighbour(client, hop, dev)
    if mac is None:  # not resolved yet: one echo makes the kernel ask
        client.run(["ping", "-n", "-c", "1", "-W", "1", server_addr], check=False, timeout=5)
        mac = _neighbour(client, hop, dev)
    if mac is None:
        raise WorkloadError(f"{client.name}: no neighbour entry for {hop} on {dev}")
    sender = Side(client, dev, _link(client, dev)["address"], route.get("prefsrc", client_addr))
    rdev = _dev_with(server, server_addr)
    return Path(sender, Side(server, rdev, _link(server, rdev)["address"], server_addr), mac, port)


def mtu(side: Side) -> int:
    return int(_link(side.node, side.dev)["mtu"])


def _link(node: Executor, dev: str) -> dict:
    return json.loads(node.run_ip(["-j", "link", "show", "dev", dev]).stdout)[0]


def _neighbour(node: Executor, addr: str, dev: str) -> str | None:
    for n in json.loads(node.run_ip(["-j", "neigh", "show", "to", addr, "dev", dev]).stdout or "[]"):
        if n.get("lladdr") and "FAILED" not in n.get("state", []):
            return n["lladdr"]
    return None


def _dev_with(node: Executor, addr: str) -> str:
    for link in json.loads(node.run_ip(["-j", "addr", "show"]).stdout):
        if any(a.get("local") == addr for a in link.get("addr_info", [])):
            return link["ifname"]
    raise WorkloadError(f"{node.name}: no interface has {addr}")


class Generator:
    """Offers frames over one path: `trial` at a rate for a duration, `flat_out` as fast as it can."""
    name: str

    def __init__(self, path: Path, frames: Frames):
        self.path, self.frames = path, frames

    def setup(self) -> None:
        """Prepare the sender (a shaper); undone by `teardown`."""

    def teardown(self) -> None:
        """Undo `setup`."""

    def trial(self, pps: float, duration: float) -> Counts:
        raise NotImplementedError

    def flat_out(self, seconds: float) -> Ceiling:
        raise NotImplementedError

    def argv(self, count: int | str, pps: float | None) -> list[str]:
        raise NotImplementedError

    def _counted(self, run, count: int, pps: float, duration: float) -> Counts:
        """Counters around one run of the generator; the receiver is read once what was queued has arrived."""
        node = self.path.sender.node
        (s0, r0), busy0 = self.path.counters(), busy_seconds(node)
        began = time.time()
        seconds, said = run()
        window = (began, time.time())
        time.sleep(min(0.5, 0.05 + 500 / max(pps, 1.0)))  # the shaper's queue drains at the rate
        (s1, r1), busy1 = self.path.counters(), busy_seconds(node)
        cpu = busy1 - busy0 if None not in (busy0, busy1) else None
        return Counts(count, offered(s0, s1), r1["rx_packets"] - r0["rx_packets"], seconds, duration, pps, said, cpu,
                      window)


class Trafgen(Generator):
    name = "trafgen"

    def packets(self) -> str:
        """trafgen's packet configuration: one IPv4/UDP frame per size, in order (its checksums and lengths are
        filled in by trafgen's protocol functions)."""
        s, r = self.path.sender, self.path.receiver
        head = f"eth(da={self.path.dst_mac}, sa={s.mac}), ipv4(sa={s.ip}, da={r.ip}, ttl=64), " \
               f"udp(sp=1024, dp={self.path.port})"
        return " ".join(f"{{ {head}, fill(0x00, {size - FCS - ETH - IPV4 - UDP}) }}" for size in self.frames.sizes)

    def argv(self, count: int | str, pps: float | None) -> list[str]:
        # --gap 0: one send() per frame (the socket blocks while the shaper's queue is full); --no-sock-mem and
        # --notouch-irq: leave the machine's socket memory limits and interrupt affinities alone
        shaped = ["--qdisc-path"] if pps is not None else []
        return ["trafgen", "--dev", self.path.sender.dev, "--no-sock-mem", "--notouch-irq", *shaped, "--gap", "0",
                "--num", str(count), self.packets()]

    def shaper_lines(self) -> list[str]:
        """tc lines of an HTB root whose class 1:2, the shaped one, only the generator's frames enter."""
        dev = self.path.sender.dev
        return [f"qdisc replace dev {dev} root handle 1: htb default 1",
                f"class add dev {dev} parent 1: classid 1:1 htb rate 100gbit quantum 60000",
                self.rate_line(1000.0, "add"),
                f"qdisc add dev {dev} parent 1:2 handle 2: bfifo limit {SHAPER_QUEUE}",
                f"filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff "
                f"match ip dport {self.path.port} 0xffff flowid 1:2"]

    def rate_line(self, pps: float, verb: str = "change") -> str:
        rate = self.frames.shaped_bps(pps)
        burst = max(2 * max(self.frames.sizes), round(rate / 8 * SHAPER_BURST_S))
        return (f"class {verb} dev {self.path.sender.dev} parent 1: classid 1:2 htb rate {rate}bit ceil {rate}bit "
                f"burst {burst} cburst {burst} quantum 60000")

    def setup(self) -> None:
        self.path.sender.node.batch("tc", self.shaper_lines())

    def teardown(self) -> None:
        self.path.sender.node.run(["tc", "qdisc", "del", "dev", self.path.sender.dev, "root"], check=False)

    def trial(self, pps: float, duration: float) -> Counts:
        count = max(1, round(pps * duration))
        self.path.sender.node.batch("tc", [self.rate_line(pps)])
        return self._counted(lambda: self._send(count, pps, duration * (1 + LATE) + START_S), count, pps, duration)

    def _send(self, count: int, pps: float | None, deadline: float) -> tuple[float, str]:
        began = time.monotonic()
        proc = self.path.sender.node.spawn(self.argv(count, pps), label="trafgen")
        out = interrupted(proc, deadline, "trafgen")
        return _loop_seconds(out, time.monotonic() - began), out

    def flat_out(self, seconds: float) -> Ceiling:
        """As fast as trafgen sends one frame per send() (as in a trial, unshaped), for `seconds` past its start."""
        proc = self.path.sender.node.spawn(self.argv(int(seconds * 50e6), None), label="trafgen flat out")
        return _rates(self.path, proc, seconds, "trafgen")


class Iperf3(Generator):
    """iperf3 UDP: a datagram per frame, paced by iperf3 itself; a server in the receiver's place takes them."""
    name = "iperf3"
    PORT = 5299

    def payload(self) -> int:
        if len(set(self.frames.sizes)) > 1:
            raise WorkloadError("iperf3 sends one datagram size: IMIX needs trafgen")
        return self.frames.sizes[0] - FCS - ETH - IPV4 - UDP

    def argv(self, count: int | str, pps: float | None, seconds: float = 1.0) -> list[str]:
        rate = "0" if pps is None else str(round(pps * self.payload() * 8))
        return ["iperf3", "-u", "-c", self.path.receiver.ip, "-p", str(self.PORT), "-l", str(self.payload()),
                "-b", rate, "-t", f"{seconds:g}", "--pacing-timer", "100"]

    def setup(self) -> None:
        self.server = self.path.receiver.node.spawn(["iperf3", "-s", "-p", str(self.PORT)], label="iperf3 server")
        wait_listening(self.path.receiver.node, self.PORT, proc=self.server)

    def teardown(self) -> None:
        if getattr(self, "server", None) is not None:
            stop(self.server)

    def trial(self, pps: float, duration: float) -> Counts:
        count = max(1, round(pps * duration))

        def run() -> tuple[float, str]:
            began = time.monotonic()
            proc = self.path.sender.node.spawn(self.argv(count, pps, duration), label="iperf3 udp")
            out = interrupted(proc, duration * (1 + LATE) + START_S + 1.0, "iperf3")
            return time.monotonic() - began, out
        return self._counted(run, count, pps, duration)

    def flat_out(self, seconds: float) -> Ceiling:
        proc = self.path.sender.node.spawn(self.argv(0, None, seconds + 1), label="iperf3 udp flat out")
        return _rates(self.path, proc, seconds, "iperf3")


PKTGEN_DIR = "/proc/net/pktgen"
_RESULT = re.compile(r"Result: OK: (\d+)\(c")


class Pktgen(Generator):
    """The kernel's packet generator: a kernel thread of the sender's kernel (its namespace's own) builds the frames
    and hands them straight to the interface's driver (no socket, no qdisc), paced by itself (`ratep`). The module
    is loaded only where the kernel probe said so: a guest the run booted (capabilities.kernel_script)."""
    name = "pktgen"

    def _files(self) -> tuple[str, str]:
        return f"{PKTGEN_DIR}/kpktgend_0", f"{PKTGEN_DIR}/{self.path.sender.dev}"

    def setup(self) -> None:
        if len(set(self.frames.sizes)) > 1:
            raise WorkloadError("pktgen sends one frame size here: IMIX needs trafgen")
        s, r = self.path.sender, self.path.receiver
        thread, dev = self._files()
        conf = ["clone_skb 0", f"pkt_size {self.frames.sizes[0] - FCS}", f"dst_mac {self.path.dst_mac}", f"dst {r.ip}",
                f"src_min {s.ip}", f"src_max {s.ip}", f"udp_dst_min {self.path.port}", f"udp_dst_max {self.path.port}",
                "udp_src_min 1024", "udp_src_max 1024"]
        q = shlex.quote
        script = (f"[ -e {PKTGEN_DIR}/pgctrl ] || $(cat /proc/sys/kernel/modprobe) pktgen || exit 1; "
                  f"echo rem_device_all > {thread} && echo {q('add_device ' + s.dev)} > {thread} && " +
                  " && ".join(f"echo {q(c)} > {q(dev)}" for c in conf))
        try:
            s.node.run(["sh", "-c", script], timeout=30)
        except CommandError as e:
            raise WorkloadError(f"pktgen could not be set up on {s.node.name}:{s.dev}: {e}") from None

    def teardown(self) -> None:
        thread, _ = self._files()
        self.path.sender.node.run(["sh", "-c", f"echo stop > {PKTGEN_DIR}/pgctrl; echo rem_device_all > {thread}"],
                                  check=False, timeout=30)

    def argv(self, count: int | str, pps: float | None) -> list[str]:
        _, dev = self._files()
        rate = f"echo 'delay 0' > {dev}" if pps is None else f"echo 'ratep {max(1, round(pps))}' > {dev}"
        return ["sh", "-c", f"echo 'count {count}' > {dev} && {rate} && echo start > {PKTGEN_DIR}/pgctrl; "
                            f"grep '^Result' {dev}"]

    def trial(self, pps: float, duration: float) -> Counts:
        count = max(1, round(pps * duration))

        def run() -> tuple[float, str]:
            began = time.monotonic()
            proc = self.path.sender.node.spawn(self.argv(count, pps), label="pktgen")
            try:
                out = interrupted(proc, duration * (1 + LATE) + START_S, "pktgen")
            finally:
                self._stop()
            m = _RESULT.search(out)
            return (int(m[1]) / 1e6 if m else time.monotonic() - began), out
        return self._counted(run, count, pps, duration)

    def flat_out(self, seconds: float) -> Ceiling:
        """As fast as the kernel's thread sends (no pacing), for `seconds` past its start."""
        proc = self.path.sender.node.spawn(self.argv(0, None), label="pktgen flat out")
        try:
            return _rates(self.path, proc, seconds, "pktgen")
        finally:
            self._stop()

    def _stop(self) -> None:
        """A start that was interrupted may leave the thread sending: stop it (a stopped one ignores this)."""
        self.path.sender.node.run(["sh", "-c", f"echo stop > {PKTGEN_DIR}/pgctrl"], check=False, timeout=30)


GENERATORS = {"trafgen": Trafgen, "iperf3": Iperf3, "pktgen": Pktgen}


def interrupted(proc: subprocess.Popen, deadline: float, what: str) -> str:
    """What a generator printed; one still sending at the deadline is interrupted (SIGINT: it stops and reports)."""
    try:
        out, err = proc.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:  # trafgen's sending processes are its children: signal its whole group
        _signal_group(proc, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            out, err = stop(proc)
    rawlog.output(proc, out, err)
    if proc.returncode not in (0, -signal.SIGINT, 130) and not out.strip():
        raise WorkloadError(f"{what} exited {proc.returncode}: {(err or '').strip()[-300:]}")
    return out


_LOOP = re.compile(r"(\d+) sec, (\d+) usec on CPU")


def _loop_seconds(out: str, wall: float) -> float:
    """trafgen's own time spent sending (its start-up left out); the wall time if it did not say."""
    m = _LOOP.search(out)
    return int(m[1]) + int(m[2]) / 1e6 if m else wall


def _rates(path: Path, proc: subprocess.Popen, seconds: float, what: str, settle: float = 0.3) -> Ceiling:
    """Sent and received frames per second over `seconds`, read while the generator runs (past its start-up).
    Each side's rate is over its own read times: under load the two reads lie tens of ms apart."""
    try:
        time.sleep(settle)
        (ts0, s0), (tr0, r0) = _timed(path.sender), _timed(path.receiver)
        time.sleep(seconds)
        (ts1, s1), (tr1, r1) = _timed(path.sender), _timed(path.receiver)
        if proc.poll() is not None:
            raise WorkloadError(f"{what} ended before its ceiling was measured: {proc.communicate()[1][-300:]}")
    finally:
        _signal_group(proc, signal.SIGINT)
        interrupted(proc, 5, what)
    return Ceiling(offered(s0, s1) / (ts1 - ts0), (r1["rx_packets"] - r0["rx_packets"]) / (tr1 - tr0), ts1 - ts0)


def _timed(side: Side) -> tuple[float, dict]:
    """A side's counters and the middle of the time they were read in."""
    began = time.monotonic()
    read = counters(side.node, side.dev)
    return (began + time.monotonic()) / 2, read


@dataclass
class BareVeth:
    """Two namespaces of the run joined by one veth pair and nothing else, on the machine where `place` (the
    generator's node) runs: this machine, a guest kernel or a lab host. The generator's own ceiling."""
    prefix: str
    ledger: object = None
    place: Executor | None = None
    names: list[str] = field(default_factory=list)

    def __enter__(self) -> Path:
        self.names = [f"{self.prefix}-ng1", f"{self.prefix}-ng2"]
        dev = f"{self.prefix}-ng"
        create = [f"netns add {n}" for n in self.names] + \
                 [f"link add {dev} netns {self.names[0]} type veth peer name {dev} netns {self.names[1]}"]
        if self.remote:
            self._remote(create)
            nodes = [self.place.in_netns(n, name=n) for n in self.names]
        else:
            if self.ledger is not None:
                self.ledger.record_many([{"kind": "netns", "name": n} for n in self.names])
            LocalExecutor().batch("ip", create)
            nodes = [NetnsExecutor(n, self.ledger) for n in self.names]
        for k, node in enumerate(nodes, 1):
            node.batch("ip", ["link set lo up", f"link set {dev} up", f"addr add 198.18.0.{k}/30 dev {dev}"])
        s, r = (Side(n, dev, _link(n, dev)["address"], f"198.18.0.{k}") for k, n in enumerate(nodes, 1))
        return Path(s, r, r.mac)

    @property
    def remote(self) -> bool:
        """The generator runs on another kernel (a guest, a lab host): the pair is made there."""
        return self.place is not None and not isinstance(self.place, (LocalExecutor, NetnsExecutor))

    def _remote(self, create: list[str]) -> None:
        """Recorded in that machine's own ledger before it is made (as a lab's build records its objects), so that
        `clean` removes it there after a crash."""
        root = self.place.in_netns(None)
        root.run(["sh", "-c", remote_ledger_append(self.prefix, self._ledger_lines("add"), make=True)])
        root.batch("ip", create)

    def _ledger_lines(self, op: str) -> list[str]:
        return [json.dumps({"op": op, "kind": "netns", "name": n}) for n in self.names]

    def __exit__(self, *exc) -> None:
        if self.remote:
            root = self.place.in_netns(None)
            root.run(["sh", "-c", " ; ".join(f"ip netns del {shlex.quote(n)}" for n in self.names) + " ; " +
                      remote_ledger_append(self.prefix, self._ledger_lines("del"))], check=False)
            return
        delete_namespaces(self.names)
        if self.ledger is not None:
            self.ledger.forget_many([("netns", n) for n in self.names])


def frames_fit(frames: Frames, sides: Sequence[Side]) -> str | None:
    """Why a frame size cannot cross these interfaces whole (its IP packet above an MTU), or None."""
    largest = max(frames.sizes) - ETH - FCS
    for side in sides:
        if largest > (m := mtu(side)):
            return (f"{frames.label} frames carry {largest}-byte IP packets, above the MTU {m} of {side.dev} in "
                    f"{side.node.name} (a tunnel's VMs keep MTU 1500 with mtu_policy: raise-underlay)")
    return None
