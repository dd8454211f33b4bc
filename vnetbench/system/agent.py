"""One persistent channel to a machine reached over SSH (a guest, a testbed host): a small agent runs there for the
machine's life, started once over the machine's shared SSH connection, and runs every command it is sent at once,
each in its own thread, answering each with its exit status and output, framed (one JSON object a line, by request
id). A command then costs a message and one process start there, not an SSH session: in a UML guest a session costs
~95 ms (sshd forks a session process and a shell), a message through the agent well under a millisecond.

The agent also runs long-lived processes (`spawn`: their output streams back as it comes, signals go to their
process group there), and waits on events there instead of being polled from here (`listening`: a spawned server's
socket, read from its /proc/<pid>/net every few ms, no process started per look).

This module is standard-library Python on both ends: the agent is sent as the `-c` argument of the machine's
python3 (nothing is copied or installed). It ends when its stdin closes (the channel closed, or vnetbench killed:
the SSH connection then ends) and kills, first, every process it started that still runs.
"""
from __future__ import annotations

import codecs
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

LISTEN_STEP_S = 0.005  # how often the agent looks for a server's socket


# ---- the agent (runs on the machine) ---------------------------------------------------------------------------
def serve() -> None:
    lock = threading.Lock()
    procs: dict[int, subprocess.Popen] = {}
    ended: set[int] = set()

    def send(msg: dict) -> None:
        line = json.dumps(msg) + "\n"
        with lock:
            sys.stdout.write(line)
            sys.stdout.flush()

    def run(req: dict) -> None:
        i, data = req["id"], req.get("input")
        try:
            p = subprocess.Popen(req["argv"], stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
                                 errors="replace", start_new_session=True)
        except OSError as exc:
            return send({"id": i, "rc": 127, "out": "", "err": f"{req['argv'][0]}: {exc.strerror}"})
        procs[i] = p
        try:
            out, err = p.communicate(data, timeout=req.get("timeout"))
            late = False
        except subprocess.TimeoutExpired:
            _killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            late = True
        procs.pop(i, None)
        send({"id": i, "rc": p.returncode, "out": out, "err": err, "timeout": late})

    def pump(i: int, fd: int, stream) -> None:
        decode = codecs.getincrementaldecoder("utf-8")("replace")
        while chunk := os.read(stream.fileno(), 65536):
            send({"id": i, "fd": fd, "data": decode.decode(chunk)})
        if rest := decode.decode(b"", final=True):
            send({"id": i, "fd": fd, "data": rest})

    def spawn(req: dict) -> None:
        i = req["id"]
        pipe = {True: subprocess.PIPE, False: subprocess.DEVNULL}
        try:
            if req.get("netns"):  # this thread joins it, and the process inherits it: no `ip netns exec`
                enter_netns(req["netns"])
            p = subprocess.Popen(req["argv"], stdin=subprocess.DEVNULL, stdout=pipe[req["out"]],
                                 stderr=pipe[req["err"]], start_new_session=True)
        except OSError as exc:
            send({"id": i, "pid": 0})
            ended.add(i)
            if req["err"]:
                send({"id": i, "fd": 2, "data": f"{req['argv'][0]}: {exc}\n"})
            return send({"id": i, "rc": 127})
        procs[i] = p
        send({"id": i, "pid": p.pid})
        pumps = [threading.Thread(target=pump, args=(i, fd, s), daemon=True)
                 for fd, s in ((1, p.stdout), (2, p.stderr)) if s is not None]
        for t in pumps:
            t.start()
        for t in pumps:
            t.join()
        send({"id": i, "rc": p.wait()})
        ended.add(i)
        procs.pop(i, None)

    def kill(req: dict) -> None:
        p = procs.get(req["target"])
        if p is not None and p.poll() is None:
            _killpg(p.pid, req["sig"])
        send({"id": req["id"], "rc": 0})

    def listening(req: dict) -> None:
        deadline = time.monotonic() + req["timeout"]
        rc, inode = 1, None
        while req["target"] not in ended and time.monotonic() < deadline:
            p = procs.get(req["target"])  # (its spawn may still be on its way: requests run in threads)
            if p is not None and (inode := listener(p.pid, req["port"], req["proto"])) is not None \
                    and inode != req.get("other_than"):
                rc = 0
                break
            if p is not None and p.poll() is not None:
                break
            time.sleep(LISTEN_STEP_S)
        send({"id": req["id"], "rc": rc, "inode": inode})

    def read(req: dict) -> None:
        try:
            with open(req["path"], errors="replace") as fh:
                send({"id": req["id"], "rc": 0, "out": fh.read()})
        except OSError as exc:
            send({"id": req["id"], "rc": 1, "out": "", "err": f"{req['path']}: {exc.strerror}"})

    def links(req: dict) -> None:
        try:
            send({"id": req["id"], "rc": 0, "links": link_stats(req.get("netns"))})
        except OSError as exc:
            send({"id": req["id"], "rc": 1, "links": [], "err": f"links of {req.get('netns')}: {exc}"})

    def echo(req: dict) -> None:  # the channel's own round trip (bench/, tests)
        send({"id": req["id"], "rc": 0})

    def answers(req: dict) -> None:  # a daemon's control socket accepts a connection (no python3 -c per look)
        send({"id": req["id"], "rc": 0 if socket_answers(req["path"]) else 1})

    def exists(req: dict) -> None:  # a daemon's socket or pid file is there yet (no `test -e` started per look)
        send({"id": req["id"], "rc": 0 if os.path.exists(req["path"]) else 1})

    def appears(req: dict) -> None:  # waits up to `within` s for a path (or a socket that answers), looking here
        deadline, look = time.monotonic() + req["within"], socket_answers if req.get("answers") else os.path.exists
        while not (found := look(req["path"])) and time.monotonic() < deadline:
            time.sleep(LISTEN_STEP_S)
        send({"id": req["id"], "rc": 0 if found else 1})

    def drop(req: dict) -> None:
        errors = drop_netns(req["names"])
        send({"id": req["id"], "rc": 1 if errors else 0, "err": "; ".join(errors)})

    ops = {"run": run, "spawn": spawn, "kill": kill, "listening": listening, "read": read, "links": links,
           "echo": echo, "drop_netns": drop, "answers": answers, "exists": exists,
           "appears": appears}
    # answered by the reading loop itself: they never wait (a thread started per request costs a UML guest more than
    # the request: its echo took 4-10 ms at load 10)
    inline = {"echo", "kill", "read", "answers", "exists"}
    send({"id": 0, "ready": os.getpid()})
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] in inline:
            ops[req["op"]](req)
        else:
            threading.Thread(target=ops[req["op"]], args=(req,), daemon=True).start()
    for p in list(procs.values()):  # the channel is gone: nothing it started outlives it
        _killpg(p.pid, signal.SIGKILL)


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def listens(pid: int, port: int, proto: str) -> bool:
    """Whether the process's network namespace has a socket listening on `port` (TCP: state LISTEN; UDP: bound)."""
    return listener(pid, port, proto) is not None


def listener(pid: int, port: int, proto: str) -> int | None:
    """The inode of the socket listening on `port` in the process's network namespace (None: none). A server that
    stays up between tests (iperf3 -s) opens a new listening socket after each: a new inode says it is ready."""
    state = "0A" if proto == "tcp" else "07"
    want = f":{port:04X}"
    for name in (proto, proto + "6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as fh:
                next(fh, None)
                for line in fh:
                    f = line.split()
                    if len(f) > 9 and f[1].endswith(want) and f[3] == state:
                        return int(f[9])
        except OSError:
            pass
    return None


def socket_answers(path: str) -> bool:
    """Whether a unix socket accepts a connection, reached through /proc/self/fd so that a long state directory
    cannot exceed the 108-byte limit of a socket address."""
    import socket
    try:
        fd = os.open(os.path.dirname(path), os.O_PATH)
    except OSError:
        return False
    try:
        with socket.socket(socket.AF_UNIX) as sk:
            sk.settimeout(1.0)
            sk.connect(f"/proc/self/fd/{fd}/{os.path.basename(path)}")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def enter_netns(netns: str) -> None:
    """Move the calling thread (only: setns acts on one thread) into a named network namespace."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            err = ctypes.get_errno()
            raise OSError(err, f"setns {netns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def drop_netns(names: list[str]) -> list[str]:
    """What `ip netns pids NS | xargs kill -9; ip netns del NS` does for each of `names`, without starting a
    process: every process whose network namespace is one of them is killed (found by the namespace's inode in
    /proc/<pid>/ns/net), then each name is detached (umount2 MNT_DETACH) and unlinked from /run/netns. In a UML
    guest each `ip` start costs ~0.1-0.4 s: the two loops over a topology's namespaces took 3-7 s of every
    teardown. Returns one line per name that could not be removed (a name already gone is not an error)."""
    import ctypes
    wanted, errors = {}, []
    for name in names:
        try:
            st = os.stat(f"/run/netns/{name}")
            wanted[(st.st_dev, st.st_ino)] = name
        except FileNotFoundError:
            pass
        except OSError as exc:
            errors.append(f"{name}: {exc.strerror}")
    me = os.getpid()
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            st = os.stat(f"/proc/{pid}/ns/net")
        except OSError:
            continue  # gone meanwhile, or a kernel thread
        if (st.st_dev, st.st_ino) in wanted and pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    libc = ctypes.CDLL(None, use_errno=True)
    for name in wanted.values():
        path = f"/run/netns/{name}"
        libc.umount2(path.encode(), 2)  # MNT_DETACH; its failure ignored, as `ip netns del` does
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            errors.append(f"{name}: {exc.strerror}")
    return errors


def link_stats(netns: str | None) -> list[dict]:
    """Every interface of a network namespace with its 64-bit packet and drop counters, as `ip -s link show` reads
    them (an RTM_GETLINK dump over rtnetlink), without starting a process: the request runs in a thread of its own
    that first joins the namespace (setns acts on the calling thread only). The netlink messages are read here with
    struct, by hand: this agent runs on machines where nothing but Python's standard library can be assumed."""
    out: list = []
    error: list = []

    def dump() -> None:
        try:
            if netns:
                enter_netns(netns)
            out.extend(_rtnl_links())
        except OSError as exc:
            error.append(exc)
    t = threading.Thread(target=dump, daemon=True)
    t.start()
    t.join()
    if error:
        raise error[0]
    return out


def _rtnl_links() -> list[dict]:
    import socket
    import struct
    names = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped", "tx_dropped")
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sk:
        # nlmsghdr (len, RTM_GETLINK=18, NLM_F_REQUEST|NLM_F_DUMP, seq, pid) + ifinfomsg (AF_UNSPEC)
        sk.send(struct.pack("=IHHII", 32, 18, 0x301, 1, 0) + struct.pack("=BxHiII", 0, 0, 0, 0, 0))
        found = []
        while True:
            data, pos = sk.recv(1 << 20), 0
            while pos + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, pos)
                if kind == 3:  # NLMSG_DONE
                    return found
                if kind == 2:  # NLMSG_ERROR
                    raise OSError(-struct.unpack_from("=i", data, pos + 16)[0], "RTM_GETLINK")
                if kind == 16:  # RTM_NEWLINK
                    link = {"ifindex": struct.unpack_from("=i", data, pos + 20)[0]}
                    a = pos + 32
                    while a + 4 <= pos + length:
                        alen, atype = struct.unpack_from("=HH", data, a)
                        if alen < 4:
                            break
                        if atype == 3:  # IFLA_IFNAME
                            link["ifname"] = data[a + 4:a + alen].split(b"\0")[0].decode()
                        elif atype == 23 and alen >= 4 + 8 * len(names):  # IFLA_STATS64
                            link.update(zip(names, struct.unpack_from(f"={len(names)}Q", data, a + 4)))
                        a += (alen + 3) & ~3
                    if "ifname" in link and "rx_packets" in link:
                        found.append(link)
                pos += (length + 3) & ~3


# ---- the channel (runs here) -----------------------------------------------------------------------------------
class ChannelLost(RuntimeError):
    """The agent or the connection to it ended."""


class Channel:
    """This end of one agent: send requests from any thread, each answered on its own."""

    def __init__(self, proc: subprocess.Popen, name: str, ready_timeout: float = 30.0):
        self.proc, self.name = proc, name
        self._lock = threading.Lock()   # the calls and processes waiting for answers
        self._wlock = threading.Lock()  # one request written at a time (never held while waiting for the reader)
        self._next = 0
        self._calls: dict[int, dict] = {}
        self._procs: dict[int, AgentProcess] = {}
        self._ready = threading.Event()
        self.lost: str | None = None
        self._reader = threading.Thread(target=self._read, name=f"vnetbench-agent-{name}", daemon=True)
        self._reader.start()
        if not self._ready.wait(ready_timeout) or self.lost:
            self.close()
            raise ChannelLost(f"agent on {name} did not start: {self.lost or 'no answer'}")

    def alive(self) -> bool:
        return self.lost is None and self._reader.is_alive()

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue  # a line not ours (a login banner): not an answer
                self._dispatch(msg)
        finally:
            err = ""
            try:
                err = (self.proc.stderr.read() or b"").decode(errors="replace").strip()[-300:] if self.proc.stderr else ""
            except (OSError, ValueError):
                pass
            self.lost = err or "the agent's connection ended"
            self._ready.set()
            with self._lock:
                calls, procs = list(self._calls.values()), list(self._procs.values())
                self._calls.clear()
                self._procs.clear()
            for call in calls:
                call["reply"] = None
                call["done"].set()
            for p in procs:
                p._ended(255, f"connection to {self.name} lost: {self.lost}")

    def _dispatch(self, msg: dict) -> None:
        i = msg["id"]
        if i == 0:
            self._ready.set()
            return
        with self._lock:
            call, p = self._calls.get(i), self._procs.get(i)
        if p is not None:
            if "fd" in msg:
                p._data(msg["fd"], msg["data"])
            elif "pid" in msg:
                p.pid = msg["pid"]
                p._started.set()
            elif "rc" in msg:
                with self._lock:
                    self._procs.pop(i, None)
                p._ended(msg["rc"])
        elif call is not None:
            call["reply"] = msg
            call["done"].set()

    def _send(self, msg: dict) -> None:
        data = (json.dumps(msg) + "\n").encode()
        with self._wlock:
            if self.lost is not None:
                raise ChannelLost(self.lost)
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (OSError, ValueError) as exc:
                raise ChannelLost(str(exc)) from None

    def _id(self) -> int:
        with self._lock:
            self._next += 1
            return self._next

    def call(self, op: str, wait: float, **fields) -> dict:
        """Send one request and wait for its answer; ChannelLost if the agent went away or did not answer."""
        i = self._id()
        call = {"done": threading.Event(), "reply": None}
        with self._lock:
            self._calls[i] = call
        try:
            self._send({"op": op, "id": i, **fields})
            if not call["done"].wait(wait):
                raise ChannelLost(f"no answer from the agent on {self.name} within {wait:.0f} s")
        finally:
            with self._lock:
                self._calls.pop(i, None)
        if call["reply"] is None:
            raise ChannelLost(self.lost or "the agent's connection ended")
        return call["reply"]

    def run(self, argv: list[str], input: str | None = None, timeout: float = 60.0) -> dict:
        """{"rc", "out", "err", "timeout"} of one command run to its end there (killed after `timeout` s)."""
        return self.call("run", timeout + 10, argv=list(argv), input=input, timeout=timeout)

    def spawn(self, argv: list[str], out: bool, err: bool, netns: str | None = None) -> "AgentProcess":
        """Start a process there (in `netns`, entered by the agent itself, when given)."""
        i = self._id()
        p = AgentProcess(self, i, list(argv), out, err)
        with self._lock:
            self._procs[i] = p
        try:
            self._send({"op": "spawn", "id": i, "argv": list(argv), "out": out, "err": err, "netns": netns})
        except ChannelLost:
            with self._lock:
                self._procs.pop(i, None)
            raise
        return p

    def close(self) -> None:
        """End the agent (it kills what it started) and its connection."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)


class _Pipe:
    """A local pipe fed from the channel by a thread of its own (the channel's reader never waits for a slow
    consumer): the process's stdout or stderr as a real file, for readline, iteration and os.read alike."""

    def __init__(self):
        r, self._w = os.pipe()
        self.file = os.fdopen(r, "r", encoding="utf-8", errors="replace")
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._write, daemon=True).start()

    def _write(self) -> None:
        with os.fdopen(self._w, "wb") as w:
            while (data := self._q.get()) is not None:
                try:
                    w.write(data.encode())
                    w.flush()
                except OSError:  # the reader closed its end: drop the rest
                    while self._q.get() is not None:
                        pass
                    return

    def put(self, text: str) -> None:
        self._q.put(text)

    def end(self) -> None:
        self._q.put(None)


class AgentProcess:
    """A process the agent runs, as much like subprocess.Popen (text mode) as vnetbench uses it: pid (its pid there),
    stdout/stderr files, poll, wait, communicate, send_signal, terminate, kill, kill_group."""

    def __init__(self, channel: Channel, i: int, argv: list[str], out: bool, err: bool):
        self.channel, self.id, self.args = channel, i, argv
        self.pid: int | None = None
        self.returncode: int | None = None
        self._started, self._done = threading.Event(), threading.Event()
        self._pipes = {1: _Pipe() if out else None, 2: _Pipe() if err else None}
        self.stdout = self._pipes[1].file if out else None
        self.stderr = self._pipes[2].file if err else None
        self.stdin = None

    def _data(self, fd: int, text: str) -> None:
        if self._pipes.get(fd):
            self._pipes[fd].put(text)

    def _ended(self, rc: int, why: str = "") -> None:
        if why and self._pipes[2]:
            self._pipes[2].put(why + "\n")
        for pipe in self._pipes.values():
            if pipe:
                pipe.end()
        self.returncode = rc
        self._started.set()
        self._done.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, input=None, timeout: float | None = None) -> tuple[str | None, str | None]:
        self.wait(timeout)
        out = [f.read() if f is not None and not f.closed else ("" if f is not None else None)
               for f in (self.stdout, self.stderr)]
        for f in (self.stdout, self.stderr):
            if f is not None and not f.closed:
                f.close()
        return out[0], out[1]

    def listening(self, port: int, proto: str, timeout: float) -> bool:
        """Wait there until this process's namespace has a socket on `port` (False: it exited or time ran out)."""
        return self.listener(port, proto, timeout) is not None

    def listener(self, port: int, proto: str, timeout: float, other_than: int | None = None) -> int | None:
        """Wait there until this process's namespace has a socket on `port` other than the socket `other_than` (an
        inode); its inode, or None if the process exited or time ran out."""
        try:
            r = self.channel.call("listening", timeout + 10, target=self.id, port=port, proto=proto,
                                  timeout=timeout, other_than=other_than)
        except ChannelLost:
            return None
        return r.get("inode", -1) if r["rc"] == 0 else None

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None:
            return
        try:
            self.channel.call("kill", 10, target=self.id, sig=int(sig))
        except ChannelLost:
            pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        try:
            self.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass

    def kill_group(self) -> None:
        self.kill()


def source() -> str:
    """The agent as a `python3 -c` program."""
    with open(__file__) as fh:
        return fh.read()


if __name__ == "__main__":
    serve()
