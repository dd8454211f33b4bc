"""The tool's own time: what a trial's seconds went to (stored, adding up), and the fixed costs a run or `show` no
longer pays (a sleep before each trial, scipy for a table of medians, a charon for a spec without IPsec, the
top-of-rack bridge's second of lost carrier). Bounds are generous: other work shares this machine."""
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, vnetbench

ONE = """\
name: phases
repetitions: 3
order: sequential
workloads: [{type: iperf3, duration: 1}]
"""


@pytest.mark.net
def test_each_trial_stores_its_phases_adding_up_to_its_time_and_show_prints_them(tmp_path, state_dir):
    spec, db = tmp_path / "p.yaml", tmp_path / "p.db"
    spec.write_text(ONE)
    vnetbench("run", spec, "--db", db)
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT started, finished, metadata, status FROM trials ORDER BY id").fetchall()
        env = json.loads(c.execute("SELECT environment FROM campaigns").fetchone()[0])
    assert [r[3] for r in rows] == ["ok"] * 3
    for started, finished, meta, _ in rows:
        meta = json.loads(meta)
        ph = meta["phases"]
        assert list(ph) == ["before", "setup", "measure", "finish", "after", "judge"]
        assert all(v >= 0 for v in ph.values())
        assert abs(sum(ph.values()) - (finished - started)) < 0.01, (ph, finished - started)
        assert 0.9 < ph["measure"] < 1.3  # iperf3's own window of 1 s
        assert meta["build"]["n"] == 1 and 0 < meta["build"]["s"] < 60  # one build for all three (sequential)
    # No trial sleeps before it starts any more (the load before it is watched): 0.2 s was slept in each
    assert min(json.loads(r[2])["phases"]["before"] for r in rows) < 0.2
    assert 0 <= env["cpu_steal_ratio_at_start"] <= 1
    # a spec without IPsec starts no charon to list its plugins
    assert env["strongswan_plugins"] == []
    out = vnetbench("show", "--db", db).stdout
    assert "tool time: 1 build" in out and "measure 1.0" in out


@pytest.mark.net
@pytest.mark.parametrize("workload,server,client", [("{type: iperf3, duration: 1}", ["iperf3", "-s"], ["iperf3", "-c"]),
                                                    ("{type: netperf, test: TCP_RR, duration: 1}", ["netserver", "-D"],
                                                     ["netperf", "-H"])])
def test_servers_stay_up_between_the_trials_of_a_topology(tmp_path, state_dir, workload, server, client):
    """A campaign starts each pair's server once per standing topology, not once per trial (in a busy guest a
    server's start and the wait for its socket took 0.5-1.3 s of every trial); each later trial waits for the
    server's (next) listening socket and measures exactly as the first (its own 1-s window)."""
    from vnetbench.system import rawlog
    spec, db = tmp_path / "k.yaml", tmp_path / "k.db"
    spec.write_text(ONE.replace("repetitions: 3", "repetitions: 4").replace("{type: iperf3, duration: 1}", workload))
    vnetbench("run", spec, "--db", db)
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT t.status, t.metadata, r.data FROM trials t JOIN trial_raw r ON r.trial = t.id "
                         "ORDER BY t.id").fetchall()
    assert [r[0] for r in rows] == ["ok"] * 4
    spawned = [[c["argv"][:2] for c in rawlog.unpack(r[2])["commands"]] for r in rows]
    servers = [sum(argv == server for argv in s) for s in spawned]
    clients = [sum(argv == client for argv in s) for s in spawned]
    assert servers == [1, 0, 0, 0] and clients == [1, 1, 1, 1], spawned
    for _, meta, _ in rows:
        assert 0.9 < json.loads(meta)["phases"].get("measure", 1.0) < 1.3


@pytest.mark.net
def test_a_kept_server_never_holds_the_port_of_the_next_scenarios_servers(tmp_path, state_dir):
    """Two scenarios on one topology: one iperf3 process on port 5201, then a pair split over two processes (5201,
    5202). The first scenario's kept server is stopped before the second's trials: its socket on 5201 would have
    passed the split server's listening check (a namespace's sockets, not a process's) while that server could not
    bind, and the split pair's trial would fail (S4 quick's gen4 and streams512 cells did)."""
    spec, db = tmp_path / "s.yaml", tmp_path / "s.db"
    spec.write_text("name: share\nrepetitions: 2\norder: sequential\nfactors: {measure: [one, split]}\nworkloads:\n"
                    "  - {type: iperf3, duration: 1, when: {measure: one}}\n"
                    "  - {type: iperf3, duration: 1, streams: 2, processes: 2, when: {measure: split}}\n")
    vnetbench("run", spec, "--db", db)
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT scenario, status, error, metadata FROM trials ORDER BY id").fetchall()
    assert [(r[0], r[1]) for r in rows] == [(1, "ok"), (1, "ok"), (2, "ok"), (2, "ok")], rows
    assert len({json.loads(r[3])["build"]["n"] for r in rows}) == 1  # one topology for both


def test_show_does_not_import_scipy(tmp_path, state_dir):
    """A table of medians needs the binomial's exact sums, not scipy (75 % of `show`'s time was its import)."""
    from vnetbench.results.store import Store
    db = tmp_path / "s.db"
    store = Store(db)
    cid = store.new_campaign("x", "x.yaml", "name: x\nworkloads: [{type: ping}]\n", "0" * 64, {})
    store.put_scenario(cid, 1, "k", {"switch": "linuxbridge"}, {"switch": "linuxbridge"}, "done", None, {}, [])
    for rep in range(1, 8):
        store.save_trial(cid, 1, rep, 0, "ping", {}, "ok", None, 1.0 * rep, 1.0 * rep + 0.5,
                         [_sample(0.001 * rep)], {})
    store.close()
    code = ("import sys; from vnetbench.cli import main; sys.argv = ['vnetbench', 'show', '--db', sys.argv[1]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "assert 'scipy' not in sys.modules, 'scipy imported'; print('NO-SCIPY')")
    proc = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, cwd=ROOT,
                          env=os.environ | {"COLUMNS": "100"})
    assert "NO-SCIPY" in proc.stdout, proc.stdout + proc.stderr
    assert "4 [1 .. 7] ms" in proc.stdout  # the table was printed: median of 1..7 ms, its exact interval at n = 7


def _sample(v):
    from vnetbench.core.sample import Sample
    return Sample.of("rtt_s", v, pair=1)


def test_the_exact_median_interval_matches_the_binomial():
    from scipy import stats as sps
    from vnetbench.results.stats import median_ci_rank
    for n in (2, 5, 6, 9, 20, 47, 200):
        k, coverage = median_ci_rank(n)
        want = [1 - 2 * sps.binom.cdf(j, n, 0.5) for j in range(n // 2)]
        ok = [j for j, c in enumerate(want) if c >= 0.95]
        assert k == (ok[-1] if ok else -1)
        assert coverage == pytest.approx(want[k] if ok else want[0], abs=1e-12)


def test_the_median_interval_of_a_large_trial_takes_no_time_and_stays_exact():
    """256 pairs x 150 pings is one trial of 38,400 samples: summing the binomial in integers took minutes there
    (n^2.7). Past EXACT_MEDIAN_CI_N it is summed in floats, and gives the same rank and coverage."""
    import time
    from scipy import stats as sps
    from vnetbench.results import stats
    began = time.process_time()
    for n in (stats.EXACT_MEDIAN_CI_N + 1, 8000, 38400):
        stats.median_ci_rank.cache_clear()
        k, coverage = stats.median_ci_rank(n)
        assert coverage == pytest.approx(1 - 2 * sps.binom.cdf(k, n, 0.5), abs=1e-10)
        assert coverage >= 0.95 > 1 - 2 * sps.binom.cdf(k + 1, n, 0.5)  # the narrowest interval with its coverage
    assert time.process_time() - began < 2  # (minutes before)


def test_the_load_watch_answers_at_once_and_leaves_our_own_cpu_out():
    """The busy share before a trial comes from readings already taken (no wait), and what this process burned
    itself is not counted as someone else's load."""
    from vnetbench.probes.procstat import LoadWatch
    watch = LoadWatch().start()
    try:
        # burn until this process has used 0.3 s of CPU (not for a fixed wall time: at load 16 a thread got 0.14 s
        # of CPU in 0.8 s), within the watch's 5-s memory
        r0 = os.times()
        began = time.monotonic()

        def burn():
            while time.monotonic() - began < 4 and sum(os.times()[:2]) - (r0.user + r0.system) < 0.3:
                pass
        t = threading.Thread(target=burn)
        t.start()
        t.join()
        own = (os.times().user + os.times().system) - (r0.user + r0.system)
        window = time.monotonic() - began + 0.05
        t0 = time.monotonic()
        foreign = watch.foreign(window)
        assert time.monotonic() - t0 < 0.1
        a, b = watch._since(window)
        from vnetbench.probes.procstat import busy, cpu_shares
        machine = busy(cpu_shares(a[1], b[1]))
        assert own > 0.2  # we did burn CPU in the window
        # our own share of all CPUs is taken out of the machine's busy share
        assert foreign <= machine - 0.5 * own / (window * os.cpu_count()) + 0.05, (foreign, machine, own, window)
    finally:
        watch.stop()


@pytest.mark.net
def test_the_top_of_rack_ports_forward_at_once(state_dir):
    """With 3 hosts each port of the ToR bridge has an ifindex of its own, not its peer's (such a veth's carrier
    waited up to 1 s for the kernel's linkwatch, and the first ping of every build was lost to it)."""
    from vnetbench.capabilities import detect
    from vnetbench.system.ledger import Ledger
    from vnetbench.experiment.matrix import expand
    from vnetbench.experiment.spec import loads
    from vnetbench.build.topology import Topology
    (sc,) = expand(loads("name: t\nhosts: 3\nworkloads: [{type: ping, count: 1}]\n").experiment, detect())
    led = Ledger.create()
    topo = Topology(sc, led)
    try:
        topo.emit()
        topo._built = True
        topo._execute()
        links = json.loads(subprocess.run(["ip", "-n", topo.ns("tor"), "-j", "link"], capture_output=True,
                                          text=True, check=True).stdout)
        ports = [ln for ln in links if ln.get("link_index")]
        assert len(ports) == 3
        assert all(p["ifindex"] != p["link_index"] for p in ports), ports
        t0 = time.monotonic()
        topo.verify()
        assert time.monotonic() - t0 < 0.9  # the lost first ping took 1.0-1.1 s
    finally:
        topo.teardown()
        led.remove_all()


@pytest.mark.net
def test_a_namespace_counters_are_read_without_a_process_and_match_ip(state_dir):
    """The interface probe's readings at each end of a trial's window on the shared kernel: rtnetlink from a thread
    in the namespace (no `ip -s -j link` process), the same counters as ip prints, and a namespace gone is the
    CommandError the probe expects."""
    from vnetbench.system.executor import CommandError, NetnsExecutor
    from vnetbench.system.ledger import Ledger
    led = Ledger.create()
    ns = f"{led.prefix}-lc"
    led.record("netns", ns)
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "netns", "exec", ns, "ping", "-c", "3", "-i", "0.01", "127.0.0.1"], capture_output=True)
        ex = NetnsExecutor(ns)
        got = ex.link_counters()
        assert got is not None  # None: the probe would start `ip -s -j link`
        ip = {link["ifname"]: link["stats64"] for link in json.loads(ex.run_ip(["-s", "-j", "link", "show"]).stdout)}
        lo = next(d for d in got if d["ifname"] == "lo")
        assert lo["rx_packets"] == ip["lo"]["rx"]["packets"] >= 6 and lo["tx_dropped"] == ip["lo"]["tx"]["dropped"]
    finally:
        led.remove_all()
    with pytest.raises(CommandError):
        NetnsExecutor(ns).link_counters()


@pytest.mark.net
def test_a_kept_server_on_a_port_no_trial_needs_stays_up_through_other_scenarios(tmp_path, state_dir):
    """Control and attack rounds on one topology (as S5): the flood's servers (port 5301) start once, in its first
    round, and stay up idle through the control rounds between, which listen on no port of theirs (S5's ten servers
    in a one-CPU guest took 1.2-1.5 s to start again after each control round)."""
    from vnetbench.system import rawlog
    spec, db = tmp_path / "a.yaml", tmp_path / "a.db"
    spec.write_text("name: rounds\nrepetitions: 3\norder: random\nseed: 3\nfactors: {attack: ['off', 'on']}\n"
                    "workloads:\n  - {type: iperf3, duration: 1}\n"
                    "  - {type: iperf3, protocol: udp, udp_rate: 1M, duration: 20, port: 5301, background: true,"
                    " when: {attack: 'on'}}\n")
    vnetbench("run", spec, "--db", db)
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT t.scenario, t.status, r.data FROM trials t JOIN trial_raw r ON r.trial = t.id "
                         "ORDER BY t.id").fetchall()
    order = [sc for sc, *_ in rows]
    assert [r[1] for r in rows] == ["ok"] * 6
    assert any(a == b == 2 and 1 in order[i + 1:j] for i, a in enumerate(order) for j, b in enumerate(order) if j > i), \
        f"the seed must put a control round between two attack rounds: {order}"
    spawned = [c["argv"] for r in rows for c in rawlog.unpack(r[2])["commands"]]
    flood_servers = [argv for argv in spawned if argv[:2] == ["iperf3", "-s"] and "5301" in argv]
    assert len(flood_servers) == 1, order
