"""The agent (vnetbench/system/agent.py) run as a real process, here through a plain pipe (over SSH in test_ssh.py and in
guests): framed answers, commands at once, processes streamed and signalled, servers awaited on their socket, and
nothing it started outliving its channel."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from vnetbench.system import agent


@pytest.fixture
def channel():
    proc = subprocess.Popen([sys.executable, "-u", "-c", agent.source()], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    ch = agent.Channel(proc, "test")
    yield ch
    ch.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ")[1][0] != "Z"


def test_answers_are_framed_by_request_with_exit_status_output_and_input(channel):
    evil = ["$(touch /tmp/pwned)", "; touch /tmp/pwned2", "a\ntouch x", "'\"", "*", "\u00e9\u4e2d"]
    r = channel.run(["printf", "%s\\0", *evil])
    assert r["rc"] == 0 and r["out"].split("\0")[:-1] == evil
    r = channel.run(["sh", "-c", "cat; echo oops >&2; exit 3"], input="line 1\nline 2\n")
    assert (r["rc"], r["out"], r["err"]) == (3, "line 1\nline 2\n", "oops\n")
    assert channel.run(["/nonexistent/tool"])["rc"] == 127
    r = channel.run(["sleep", "30"], timeout=0.5)
    assert r["timeout"] and r["rc"] != 0


def test_commands_sent_from_several_threads_run_at_once(channel):
    """Eight commands of 0.5 s each, sent at once: together well under their 4 s one after another."""
    results = []
    t0 = time.monotonic()
    threads = [threading.Thread(target=lambda k=k: results.append(channel.run(["sh", "-c", f"sleep 0.5; echo {k}"])))
               for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    assert sorted(r["out"] for r in results) == [f"{k}\n" for k in range(8)]
    assert took < 2.5, took  # 4 s if they had run one after another


def test_a_spawned_process_streams_its_output_and_stops_on_a_signal(channel):
    p = channel.spawn(["sh", "-c", "echo first; echo to-err >&2; exec sleep 60"], out=True, err=True)
    assert p.stdout.readline() == "first\n"  # read as it comes, before the process ends
    assert p.poll() is None and p.pid and alive(p.pid)
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(0.2)
    p.terminate()
    out, err = p.communicate(timeout=10)
    assert p.returncode == -signal.SIGTERM and err == "to-err\n" and out == ""
    assert not alive(p.pid)


def test_a_large_output_nobody_reads_yet_blocks_nothing(channel):
    """3 MB on stdout before anyone reads it: other requests are answered meanwhile, and all of it arrives."""
    p = channel.spawn(["python3", "-c", "import sys; sys.stdout.write('x' * 3_000_000)"], out=True, err=False)
    assert p.wait(30) == 0
    assert channel.run(["echo", "still here"])["out"] == "still here\n"
    out, err = p.communicate()
    assert len(out) == 3_000_000 and err is None


def test_a_server_is_awaited_on_its_socket_and_an_exited_one_is_not(channel):
    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = f"import socket, time; time.sleep(0.3); s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(30)"
    server = channel.spawn(["python3", "-c", code], out=False, err=True)
    t0 = time.monotonic()
    assert server.listening(port, "tcp", 10)
    assert 0.25 < time.monotonic() - t0 < 5  # it waited for the bind, and no longer
    server.kill()
    gone = channel.spawn(["sh", "-c", "exit 1"], out=False, err=False)
    t0 = time.monotonic()
    assert not gone.listening(port, "tcp", 10)
    assert time.monotonic() - t0 < 5  # its exit ends the wait, not the timeout


def test_files_and_interface_counters_are_read_without_a_process(channel):
    assert channel.call("read", 10, path="/proc/loadavg")["out"].count(" ") == 4
    links = channel.call("links", 10, netns=None)["links"]
    lo = next(d for d in links if d["ifname"] == "lo")
    ip = subprocess.run(["ip", "-s", "-j", "link", "show", "lo"], capture_output=True, text=True).stdout
    import json
    (want,) = json.loads(ip)
    assert lo["ifindex"] == want["ifindex"] == 1
    assert 0 <= lo["rx_packets"] - want["stats64"]["rx"]["packets"] < 10_000  # read a moment apart


def test_nothing_the_agent_started_outlives_its_channel(channel):
    p = channel.spawn(["sleep", "60"], out=False, err=False)
    deadline = time.monotonic() + 10
    while not p.pid and time.monotonic() < deadline:
        time.sleep(0.01)
    assert alive(p.pid)
    channel.close()  # its stdin ends, as when vnetbench is killed and the SSH connection goes
    deadline = time.monotonic() + 10
    while alive(p.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(p.pid)
    assert p.wait(10) != 0  # the local end says the process ended


@pytest.mark.net
def test_a_process_spawned_into_a_namespace_sees_that_namespace_only(channel, state_dir):
    """The agent enters the namespace for the process itself (no `ip netns exec`): its network is the namespace's."""
    from vnetbench.system.ledger import Ledger
    led = Ledger.create()
    ns = f"{led.prefix}-a"
    led.record("netns", ns)
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(["ip", "-n", ns, "link", "add", f"{led.prefix}-d", "type", "bridge"], check=True)
        p = channel.spawn(["cat", "/proc/self/net/dev"], out=True, err=True, netns=ns)
        out, err = p.communicate(timeout=10)
        names = {ln.split(":")[0].strip() for ln in out.splitlines()[2:]}
        assert names == {"lo", f"{led.prefix}-d"}, (out, err)
        bad = channel.spawn(["true"], out=False, err=True, netns=f"{led.prefix}-nosuch")
        assert bad.wait(10) != 0 and "nosuch" in bad.stderr.read()
    finally:
        led.remove_all()


@pytest.mark.net
def test_namespaces_are_dropped_with_their_processes_and_nothing_else(channel, state_dir):
    """drop_netns kills what runs in the named namespaces (by their inode, no `ip netns pids`) and deletes them;
    a process of the same run outside them, and a namespace not named, are left alone."""
    from vnetbench.system.ledger import Ledger
    led = Ledger.create()
    names = [f"{led.prefix}-d{k}" for k in range(3)]
    for ns in names:
        led.record("netns", ns)
    inside, outside = [], None
    try:
        for ns in names:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        inside = [subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "60"]) for ns in names[:2]]
        outside = subprocess.Popen(["sleep", "60"])
        time.sleep(0.3)  # `ip netns exec` has entered the namespace and exec'd sleep
        r = channel.call("drop_netns", 30, names=names[:2] + [f"{led.prefix}-nosuch"])
        assert r["rc"] == 0, r
        for p in inside:
            assert p.wait(5) == -signal.SIGKILL
        assert outside.poll() is None
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert names[0] not in left and names[1] not in left and names[2] in left
    finally:
        for p in inside + [outside]:
            if p is not None and p.poll() is None:
                p.kill()
        led.remove_all()


def test_a_daemons_control_socket_is_asked_by_the_agent(channel, tmp_path):
    """A daemon's control socket accepts a connection, asked by the agent itself (a `python3 -c` per look cost a busy
    guest 0.1-0.7 s); a socket file nobody listens on and a missing path do not answer."""
    d = tmp_path / ("x" * 90)  # a path longer than a socket address may be: reached through /proc/self/fd
    d.mkdir()
    live = socket.socket(socket.AF_UNIX)
    live.bind(f"/proc/self/fd/{os.open(d, os.O_PATH)}/live.sock")
    live.listen(1)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(f"/proc/self/fd/{os.open(d, os.O_PATH)}/dead.sock")  # bound, never listening
    try:
        assert channel.call("answers", 10, path=str(d / "live.sock"))["rc"] == 0
        assert channel.call("answers", 10, path=str(d / "dead.sock"))["rc"] == 1
        assert channel.call("answers", 10, path=str(d / "none.sock"))["rc"] == 1
    finally:
        live.close()
        dead.close()


def test_whether_a_path_exists_is_asked_by_the_agent(channel, tmp_path):
    """A daemon's socket or pid file is looked for by the agent itself, as `test -e` would answer (a `test -e`
    started per look, every 5 ms, cost a UML guest 50 ms each): a file, a directory and a symlink to one exist; a
    missing path and a dangling symlink do not."""
    (tmp_path / "f").write_text("x")
    (tmp_path / "to-f").symlink_to(tmp_path / "f")
    (tmp_path / "dangling").symlink_to(tmp_path / "none")
    for name, rc in (("f", 0), (".", 0), ("to-f", 0), ("none", 1), ("dangling", 1)):
        path = str(tmp_path / name)
        assert channel.call("exists", 10, path=path)["rc"] == rc == subprocess.run(["test", "-e", path]).returncode


def test_the_agent_waits_for_a_path_to_appear(channel, tmp_path):
    """A daemon's socket is waited for by the agent itself (no round trip per look from the controller): it answers
    as soon as the path is there, or no once the wait has passed."""
    path = tmp_path / "sock"
    t0 = time.monotonic()
    assert channel.call("appears", 10, path=str(path), within=0.2)["rc"] == 1
    assert time.monotonic() - t0 >= 0.2
    threading.Timer(0.3, path.write_text, args=("x",)).start()
    assert channel.call("appears", 30, path=str(path), within=20)["rc"] == 0
    assert channel.call("appears", 10, path=str(tmp_path), within=0)["rc"] == 0


def test_the_agent_waits_for_a_socket_to_answer(channel, tmp_path):
    """A daemon's control socket is waited for by the agent itself until it accepts a connection: a socket file that
    nobody listens on yet is no, until someone does."""
    path = tmp_path / "ctl.sock"
    sk = socket.socket(socket.AF_UNIX)
    sk.bind(str(path))  # there, not listening
    try:
        assert channel.call("appears", 10, path=str(path), within=0.1, answers=True)["rc"] == 1
        threading.Timer(0.3, sk.listen, args=(1,)).start()
        assert channel.call("appears", 30, path=str(path), within=20, answers=True)["rc"] == 0
    finally:
        sk.close()
