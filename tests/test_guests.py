"""Guests with their own kernel (User-Mode Linux): boot in parallel, reach over SSH, data NICs between them, console
tail when a guest does not come up, and nothing left after teardown or after kill -9 + clean."""
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from vnetbench.system import ledger
from vnetbench.guests import kind_class
from vnetbench.guests.base import Fleet, GuestError
from conftest import clean_after_kill, guest_pids, netns_names

pytestmark = [pytest.mark.net,
              pytest.mark.skipif(not kind_class("uml").support().ok, reason="User-Mode Linux not installed")]



def test_two_guests_boot_talk_and_leave_nothing(state_dir):
    led = ledger.Ledger.create()
    fleet = Fleet(led, boot_timeout=60)
    for h in ("h1", "h2"):
        fleet.add(h, nics=[("eth1", "underlay")])
    try:
        fleet.boot()
        h1, h2 = fleet.guests["h1"].executor, fleet.guests["h2"].executor
        kernel = h1.run(["uname", "-r"]).stdout.strip()
        assert kernel == kind_class("uml").support().kernel.removeprefix("uml-") != os.uname().release
        h1.run(["ip", "addr", "add", "10.9.0.1/24", "dev", "eth1"])
        h2.run(["ip", "addr", "add", "10.9.0.2/24", "dev", "eth1"])
        assert h1.run(["ping", "-c", "2", "-i", "0.2", "-W", "3", "10.9.0.2"], check=False).returncode == 0
        # the guest's own kernel modules load (here: the GRE device this machine's kernel may lack)
        h1.run(["ip", "link", "add", "gt", "type", "gretap", "local", "10.9.0.1", "remote", "10.9.0.2", "key", "1"])
        for g in fleet.guests.values():
            assert 0 < g.boot_s < 60
            assert 10 < fleet.memory_mb(g) < 200  # a bound, not the benchmark figure (bench/guests.py)
    finally:
        fleet.teardown()
    assert not guest_pids(led.prefix)
    assert fleet.netns not in netns_names()
    led.remove_all()


def test_a_guest_that_does_not_come_up_fails_with_its_console(state_dir, monkeypatch):
    uml = kind_class("uml")
    monkeypatch.setattr(uml, "init_script", lambda self, g: "#!/bin/sh\necho BROKEN-INIT-MARK\nexit 1\n")
    led = ledger.Ledger.create()
    fleet = Fleet(led, boot_timeout=20)
    fleet.add("h1")
    try:
        with pytest.raises(GuestError, match="BROKEN-INIT-MARK"):
            fleet.boot()
    finally:
        fleet.teardown()
    assert not guest_pids(led.prefix)
    led.remove_all()


@pytest.mark.parametrize("when", ["booting", "up"])
def test_kill_9_then_clean_removes_every_guest_process_tap_and_file(state_dir, when):
    code = ("import sys, time; from vnetbench.system.ledger import Ledger; from vnetbench.guests.base import Fleet\n"
            "l = Ledger.create(); f = Fleet(l, boot_timeout=60); print(l.prefix, flush=True)\n"
            "[f.add(h, nics=[('eth1', 'ul')]) for h in ('h1', 'h2')]\n"
            "f.boot(); print('up', flush=True); time.sleep(120)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    prefix = child.stdout.readline().strip()
    if when == "up":
        assert child.stdout.readline().strip() == "up"
    else:
        deadline = time.monotonic() + 20
        while len(guest_pids(prefix)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert guest_pids(prefix)
    child.send_signal(signal.SIGKILL)
    child.wait()
    clean_after_kill(prefix, state_dir)


def test_a_guest_network_that_fails_half_built_is_removed(state_dir, monkeypatch):
    from vnetbench.guests import base
    monkeypatch.setattr(base, "TAP_MTU", 10 ** 6)  # the taps' MTU is refused after the namespace exists
    led = ledger.Ledger.create()
    fleet = Fleet(led)
    fleet.add("h1")
    with pytest.raises(GuestError, match="guest network"):
        fleet.boot()
    assert fleet.netns in netns_names()
    fleet.teardown()
    assert fleet.netns not in netns_names()
    led.remove_all()


def test_guest_probe_is_kept_only_for_the_same_key_and_a_day(tmp_path, monkeypatch):
    from vnetbench.capabilities import Capabilities, Feature
    from vnetbench.guests import probe as guest_probe
    monkeypatch.setattr(guest_probe, "PROBE_CACHE", tmp_path / "probe.json")
    caps = Capabilities(tools={"iperf3": Feature(True, "3.12")}, kernel={"gre": Feature(False, "no module")})
    guest_probe._keep_probe("k1", caps)
    back = guest_probe._cached_probe("k1")
    assert back.tools == caps.tools and back.kernel == caps.kernel
    assert guest_probe._cached_probe("k2") is None  # another kernel, package set or probing code: probed again
    data = json.loads((tmp_path / "probe.json").read_text())
    data["probes"]["k1"]["time"] -= guest_probe.PROBE_MAX_AGE_S + 1
    (tmp_path / "probe.json").write_text(json.dumps(data))
    assert guest_probe._cached_probe("k1") is None
    (tmp_path / "probe.json").unlink()
    guest_probe._keep_probe("k1", Capabilities(kernel={"ovs-kernel-datapath": Feature(False, "probe timed out")}))
    assert not (tmp_path / "probe.json").exists()  # an unsettled answer is asked again next time
    assert guest_probe._probe_key() == guest_probe._probe_key()


def test_guest_probe_cache_keeps_several_keys_drops_the_oldest_and_survives_a_bad_file(tmp_path, monkeypatch,
                                                                                      state_dir):
    """Two checkouts with different code on one machine each keep their answer (one key used to overwrite the
    other: each re-probed, ~25 s a suite); past PROBE_KEYS the oldest goes; a damaged file is probed again, then
    replaced by a good one."""
    from vnetbench.capabilities import Capabilities, Feature
    from vnetbench.guests import probe as guest_probe
    from vnetbench.guests.base import Support
    cache = tmp_path / "probe.json"
    monkeypatch.setattr(guest_probe, "PROBE_CACHE", cache)
    monkeypatch.setattr(guest_probe, "PROBE_KEYS", 2, raising=False)
    caps = {k: Capabilities(tools={"iperf3": Feature(True, k)}, kernel={"gre": Feature(True)}) for k in "abc"}
    guest_probe._keep_probe("a", caps["a"])
    guest_probe._keep_probe("b", caps["b"])
    assert guest_probe._cached_probe("a").tools == caps["a"].tools  # both kept
    assert guest_probe._cached_probe("b").tools == caps["b"].tools
    guest_probe._keep_probe("c", caps["c"])
    assert guest_probe._cached_probe("a") is None  # the oldest went
    assert [guest_probe._cached_probe(k).tools for k in "bc"] == [caps["b"].tools, caps["c"].tools]
    guest_probe._keep_probe("b", caps["b"])  # asked again: b is now the newest, c the oldest
    guest_probe._keep_probe("a", caps["a"])
    assert guest_probe._cached_probe("c") is None and guest_probe._cached_probe("b") is not None

    # a damaged file: the probe runs (here a stand-in for the guest's) and its answer replaces the file
    probed = []
    monkeypatch.setattr(guest_probe, "support", lambda kind="uml": Support(True, kernel="uml-test"))
    monkeypatch.setattr(guest_probe, "_probe_key", lambda kind="uml": "d")
    monkeypatch.setattr(guest_probe, "SharedGuest", _NoGuest)
    monkeypatch.setattr(guest_probe, "probe", lambda ex, prefix, kind="uml": probed.append(prefix) or
                        Capabilities(tools={"iperf3": Feature(True, "d")}, kernel={"gre": Feature(True)}))
    for damage in ('{"probes": {"d": {"time": "yesterday"', "[1, 2]", '{"probes": {"d": {"time": 1e18}}}'):
        cache.write_text(damage)
        guest_probe.capabilities.cache_clear()
        assert guest_probe.capabilities().tools["iperf3"] == Feature(True, "d")
        assert guest_probe._cached_probe("d").tools["iperf3"] == Feature(True, "d")
        guest_probe.capabilities.cache_clear()
        guest_probe.capabilities()  # kept: not probed again
    assert len(probed) == 3
    guest_probe.capabilities.cache_clear()


def test_guest_probe_cache_keeps_every_answer_of_runs_that_finish_together(tmp_path, monkeypatch):
    """Runs that keep their answers at the same moment (here 8 processes) each keep theirs, and the file stays
    readable: the read, add and replace are done under a lock."""
    cache = tmp_path / "probe.json"
    code = ("import sys; from pathlib import Path; from vnetbench.guests import probe as guest_probe\n"
            "from vnetbench.capabilities import Capabilities, Feature\n"
            f"guest_probe.PROBE_CACHE = Path({str(cache)!r})\n"
            "caps = Capabilities(tools={'iperf3': Feature(True, sys.argv[1])}, kernel={})\n"
            "for _ in range(10):\n    guest_probe._keep_probe(sys.argv[1], caps)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, f"k{i}"]) for i in range(8)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    from vnetbench.guests import probe as guest_probe
    monkeypatch.setattr(guest_probe, "PROBE_CACHE", cache)
    assert [guest_probe._cached_probe(f"k{i}").tools["iperf3"].detail if guest_probe._cached_probe(f"k{i}") else None
            for i in range(8)] == [f"k{i}" for i in range(8)]


class _NoGuest:
    """A guest machine that boots nothing (the probe itself is replaced)."""

    def __init__(self, ledger, kind="uml"):
        self.ledger = ledger
        self.fleet = SimpleNamespace(guests={"m1": SimpleNamespace(boot_s=0.0)}, memory_mb=lambda g: 0.0)

    def executor(self):
        return None

    def close(self) -> None:
        pass
