"""Suite S5 (context switches under a DDoS): the smoke profile end to end through the CLI, the http workload for
real on loopback, `target_pair` (several clients, one server) with its validation, the client/stress-ng parsers,
and the S5 analysis on a store built by hand with exact expected cells."""
import json
import os
import socket
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import netns_names, vnetbench
from vnetbench.results import guards
from vnetbench.report.analyses import load_all as analyses
from vnetbench.system.executor import LocalExecutor
from vnetbench.experiment.matrix import expand
from vnetbench.catalog import METRICS
from vnetbench.core.sample import Sample
from vnetbench.experiment.spec import SpecError, loads
from vnetbench.results.store import Store
from vnetbench.workloads import load_all as workloads
from vnetbench.workloads.base import Endpoint, Pair, WorkloadError
from vnetbench.workloads.cpuload import parse_stress_ng
from vnetbench.workloads.http import parse_client

SMOKE_BUDGET_S = 150  # the smoke profile takes ~15-25 s here; generous for a machine shared with other tests


def workload(kind: str, only_pairs=None, target_pair=None, **params):
    cls = workloads()[kind]
    return cls(cls.Params.model_validate({"type": kind, **params}), only_pairs, False, target_pair)


def pair(index: int = 1, addr: str = "127.0.0.1") -> Pair:
    return Pair(index, Endpoint(LocalExecutor(), addr, f"c{index}"), Endpoint(LocalExecutor(), addr, f"s{index}"))


def own_pids(name: str) -> set[int]:
    """Processes called `name` in this test's own network namespace."""
    me = os.readlink("/proc/self/ns/net")
    out = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout
    found = set()
    for pid in out.split():
        try:
            if os.readlink(f"/proc/{pid}/ns/net") == me:
                found.add(int(pid))
        except OSError:
            pass
    return found


# ---- the smoke profile, for real ---------------------------------------------------------------------------------
@pytest.mark.net
def test_smoke_profile_end_to_end(tmp_path, state_dir):
    db = tmp_path / "s5.db"
    started = time.monotonic()
    run = vnetbench("run", "suite:s5", "--profile", "smoke", "--db", db, "--no-progress")
    took = time.monotonic() - started
    assert "campaign 1: done, 2 trials ok, 0 failed" in run.stdout, run.stdout + run.stderr
    assert took < SMOKE_BUDGET_S, f"smoke took {took:.0f} s"
    with sqlite3.connect(db) as c:
        (prefix,) = c.execute("SELECT prefix FROM campaigns WHERE id = 1").fetchone()
        rows = c.execute("SELECT sc.labels, s.metric, s.value, s.metadata, t.metadata FROM samples s "
                         "JOIN trials t ON s.trial = t.id JOIN scenarios sc ON sc.campaign = t.campaign "
                         "AND sc.idx = t.scenario").fetchall()
    assert not [n for n in netns_names() if n.startswith(prefix + "-")], "the run left namespaces behind"
    assert not any(state_dir.iterdir()), "the run left its ledger directory behind"
    samples = [(json.loads(lab)["attack"], m, v, json.loads(meta), json.loads(tmeta)) for lab, m, v, meta, tmeta in rows]

    def window(attack, metric):
        return [v for a, m, v, meta, _ in samples if a == attack and m == metric and meta.get("scope") == "machine"
                and not meta.get("series") and "cpu" not in meta]

    for attack in ("off", "on"):
        for metric in ("interrupts_per_s", "context_switches_per_s"):
            assert len(window(attack, metric)) == 1 and window(attack, metric)[0] > 0, (attack, metric)
            series = [v for a, m, v, meta, _ in samples if a == attack and m == metric and meta.get("series")]
            assert len(series) >= 2, (attack, metric, "1-s series")
        rts = [(v, meta["pair"]) for a, m, v, meta, _ in samples if a == attack and m == "http_response_time_s"]
        assert all(0 < v < 2 for v, _ in rts)
        assert {p for _, p in rts} == {1}  # as in the study, the clients ask VM1 only
        ok = [v for a, m, v, meta, _ in samples if a == attack and m == "http_requests_per_s"]
        started = [v for a, m, v, meta, _ in samples if a == attack and m == "http_started_per_s"]
        assert len(ok) == len(started) == 1 and len(rts) == round(sum(ok) * 3)  # one time per response, over 3 s
        # 6 clients x 10/s x 3 s = 180 asked: a busy machine may start fewer (209 of 360 with two pairs at load 16),
        # and the trial says so
        flags = {f for a, *_, t in samples if a == attack for f in t.get("flags", [])}
        short = {f for f in flags if "the clients did not start the requests asked" in f}
        assert bool(short) == any(v < 0.95 * 60 for v in started), (started, flags)
        # responses there are, and never more than the requests started; how many of them a flooded server answers
        # in 3 s is the machine's load (21 of 180 asked in one CI run beside other work), no property of the tool
        assert 0 < len(rts) <= round(sum(started) * 3), (len(rts), started)
        ops = [v for a, m, v, meta, _ in samples if a == attack and m == "cpuload_ops_per_s"]
        assert len(ops) == 2 and min(ops) > 0  # the constant load ran in both tenant VMs
    flood = [(a, v) for a, m, v, meta, _ in samples if m == "throughput_bps" and meta.get("role") == "background"]
    assert {a for a, _ in flood} == {"on"} and len(flood) == 10  # ten attackers, in attack rounds only
    sent = [v for a, m, v, meta, _ in samples if m == "sender_throughput_bps" and meta.get("role") == "background"]
    assert len(sent) == 10 and all(v <= 250e3 * 1.05 for v in sent)  # each bounded to its 250 kbit/s
    # the flood reached the victim, never more than was sent (a victim guest a busy machine starves drops part of
    # it: 90-130 of each 250 kbit/s arrived in one CI run beside the other worker); a starved attacker is flagged
    assert 0 < sum(v for _, v in flood) <= 1.05 * sum(sent), (flood, sent)
    assert all(v > 0 for _, v in flood), flood
    flagged = [f for a, *_, t in samples if a == "on" for f in t.get("flags", []) if f.startswith("background offered")]
    assert bool(flagged) == any(v < 0.95 * 250e3 for v in sent), (sent, flagged)

    # The victim's host NIC (h2's underlay veth) receives the flood: far more packets than the web traffic alone.
    def nic_rx(attack):
        return [v for a, m, v, meta, tmeta in samples if a == attack and m == "if_rx_packets_per_s"
                and meta.get("node") == f"{prefix}-h2" and meta["interface"] == f"{prefix}-u"]
    (off,), (on,) = nic_rx("off"), nic_rx("on")
    assert on > 5 * off and on > 3000, (off, on)  # ten attackers x ~490 datagrams/s

    # the flood and the tenants' loads covered each round's web window (servers start slowly in a guest VM)
    assert not [t for *_, t in samples if t.get("background_uncovered")]
    # VM1 and VM2 are guests with their own kernel (vm_kernel): each one's own counters, over the same windows
    pairs = samples[0][4]["pairs"]
    victim, neighbour = pairs[0]["server"], pairs[1]["server"]
    assert {meta["vm"] for *_, meta, _ in samples if meta.get("scope") == "vm"} == {victim, neighbour}

    def vm(attack, metric, label):
        return [v for a, m, v, meta, _ in samples if a == attack and m == metric and meta.get("scope") == "vm"
                and meta.get("vm") == label and not meta.get("series") and "cpu" not in meta]
    for attack in ("off", "on"):
        for label in (victim, neighbour):
            (intr,), (ctx,) = vm(attack, "interrupts_per_s", label), vm(attack, "context_switches_per_s", label)
            assert intr > 0 and 0 < ctx < window(attack, "context_switches_per_s")[0], (attack, label, intr, ctx)
            assert len([1 for a, m, v, meta, _ in samples if a == attack and meta.get("vm") == label
                        and m == "interrupts_per_s" and meta.get("series")]) >= 2
    # the flood reaches VM1's own NIC, and not VM2's
    (v_off,), (v_on,), (n_on,) = (vm("off", "if_rx_packets_per_s", victim), vm("on", "if_rx_packets_per_s", victim),
                                  vm("on", "if_rx_packets_per_s", neighbour))
    assert v_on > 3 * v_off and v_on > 3 * n_on, (v_off, v_on, n_on)
    # ... and VM1's own kernel takes more interrupts and makes more context switches under the attack
    for metric in ("interrupts_per_s", "context_switches_per_s"):
        assert vm("on", metric, victim)[0] > 2 * vm("off", metric, victim)[0], metric

    result = analyses()["s5"]().run(Store(db), 1)
    study = result.tables[0]
    assert [r[0] for r in study.rows] == ["control", "attack", "growth, attack vs control"]
    assert [r[1] for r in study.rows[:2]] == ["1", "1"]
    assert "not tested (1 + 1 rounds)" in study.rows[2][2]
    for row in study.rows[:2]:
        intr, ctx = float(row[2]), float(row[3])
        assert intr > 0 and ctx > 0
        # the cells are rounded to whole events/s: the ratio of the rounded cells may differ by that rounding
        slack = 100 * ctx / intr * (0.5 / intr + 0.5 / ctx) + 0.05
        assert abs(float(row[4].split()[0]) - 100 * ctx / intr) <= slack, (row, slack)
    tenants = next(t for t in result.tables if t.title == "S5 — the tenants during the attack")
    # VM1: response time median and p95, requests/s, errors, CPU work; VM2 (no clients): CPU work; the host's CPU
    assert len(tenants.rows) == 7 and len(result.figures) == 4
    assert any(f.startswith("Conversion rate") for f in result.findings)
    assert any(f.startswith("Neighbour degraded") for f in result.findings)
    inside = next(t for t in result.tables if t.title.startswith("S5 — inside the VMs"))
    by_row = {(r[0], r[1]): r for r in inside.rows}
    row = by_row[("VM1 (victim, pair 1)", "interrupts/s")]
    assert row[2:4] == [f"{vm('off', 'interrupts_per_s', victim)[0]:.0f}", f"{vm('on', 'interrupts_per_s', victim)[0]:.0f}"]
    assert {r[0] for r in inside.rows} == {"VM1 (victim, pair 1)", "VM2 (neighbour, pair 2)", "host (whole machine)"}
    assert any(f.startswith("Inside VM1 (its own kernel") for f in result.findings)
    md = vnetbench("report", "1", "--db", db, "-o", tmp_path / "s5.md").returncode == 0 and (tmp_path / "s5.md").read_text()
    assert "inside the VMs (our addition; the study measured the host)" in md and "| VM2 (neighbour, pair 2) |" in md
    assert "Reproduction scorecard" in md and "interrupts-growth" in md


@pytest.mark.net
def test_plan_shows_the_attackers_sending_to_the_victim(state_dir):
    out = vnetbench("plan", "suite:s5", "--profile", "smoke").stdout
    attack = out[out.index("attack=on"):]
    assert "# workload iperf3 (pairs 3,4,5,6,7,8,9,10,11,12; to the server of pair 1; background" in attack
    victim = "10.101.0.2"  # pair 1's server VM
    clients = [ln for ln in attack.splitlines() if "iperf3 -c" in ln]
    assert len(clients) == 10 and all(f"-c {victim} " in ln for ln in clients)
    assert len({ln.split()[3] for ln in clients}) == 10  # ten different attacker namespaces
    servers = [ln for ln in attack.splitlines() if "iperf3 -s" in ln]
    assert len(servers) == 10 and len({ln.split()[3] for ln in servers}) == 1  # all in the victim
    control = out[out.index("attack=off"):out.index("attack=on")]
    assert "iperf3" not in control and "nginx" in control and "stress-ng" in control


# ---- the http workload for real on loopback ------------------------------------------------------------------------
@pytest.mark.net
def test_http_workload_on_loopback_counts_every_request_and_leaves_nothing(tmp_path):
    before = own_pids("nginx")
    wl = workload("http", clients=3, rate=20, duration=2, port=18180)
    samples = wl.run([pair(1), pair(2, "::1")])
    for index in (1, 2):
        rts = [s for s in samples if s.metric == "http_response_time_s" and s.metadata["pair"] == index]
        # a response slower than the client's timeout is an error, not a response time (a busy machine can be slow)
        assert all(0 < s.value <= wl.params.timeout for s in rts) and {s.metadata["client"] for s in rts} == {1, 2, 3}
        # absolute times inside the client's window: none starts after the 2 s asked, even on a busy machine
        assert all(0 <= s.t - s.metadata["window"][0] < 2 for s in rts)
        [started] = [s.value for s in samples if s.metric == "http_started_per_s" and s.metadata["pair"] == index]
        assert len(rts) <= started * 2 <= 3 * 20 * 2 + 1  # never more than clients x rate x duration
        # a busy machine may start fewer requests than asked; the workload's offer check then says so
        short = guards.check_offered([s for s in samples if s.metadata["pair"] == index], wl.offer())
        assert bool(short) == (started < 0.95 * 60), (started, short)
        assert short or abs(len(rts) - 3 * 20 * 2) <= 6  # rate x clients x duration, within 5 %
        [rps] = [s.value for s in samples if s.metric == "http_requests_per_s" and s.metadata["pair"] == index]
        assert rps == pytest.approx(len(rts) / 2)
        # every request got its page but those a busy machine answered after the client's timeout: none was
        # refused, reset, cut short or answered with another status
        [errors] = [s for s in samples if s.metric == "http_errors" and s.metadata["pair"] == index]
        assert set(errors.metadata["outcomes"]) <= {"timeout"} and errors.value == sum(errors.metadata["outcomes"].values())
        assert started * 2 == len(rts) + errors.value  # each request started is a response or an error
    assert all(s.unit == METRICS[s.metric].unit for s in samples)
    time.sleep(0.2)
    assert own_pids("nginx") == before, "an nginx process was left running"
    assert not list(Path("/tmp").glob(f"vnetbench-http-{os.getpid()}-*")), "the server's directory was left behind"


def test_http_client_starts_no_request_after_its_duration_when_it_oversleeps(monkeypatch, capsys):
    """A busy machine wakes a client late from its wait for the last slot (seen on loopback beside four busy loops:
    a 0.5-s client started a request at 0.503 s): the request would start outside the window it is counted in.
    Every wait here oversleeps by 30 ms; the last slot (due at 0.25 s of 0.27 s) wakes after the window."""
    import http.server
    from vnetbench.workloads import httpclient
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    real = time.sleep
    monkeypatch.setattr(httpclient.time, "sleep", lambda s: real(s + 0.03))
    try:
        assert httpclient.main(["--host", "127.0.0.1", "--port", str(server.server_address[1]), "--size", "0",
                                "--rate", "20", "--duration", "0.27"]) == 0
    finally:
        server.shutdown()
    starts = [float(line.split()[0]) for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert starts and max(starts) < 0.27, starts


@pytest.mark.net
def test_http_server_that_cannot_start_raises_and_cleans_up():
    squatter = socket.create_server(("127.0.0.1", 18190))  # nginx cannot bind
    threading.Thread(target=lambda: _drain(squatter), daemon=True).start()
    before = own_pids("nginx")
    try:
        with pytest.raises(WorkloadError, match="nginx pair 1"):
            workload("http", clients=1, rate=5, duration=1, port=18190).run([pair(1)])
    finally:
        squatter.close()
    assert own_pids("nginx") == before


def _drain(sock):
    try:
        while True:
            sock.accept()[0].close()
    except OSError:
        pass


def test_http_client_output_parser():
    text = "0.000100 0.001500 200\n0.100200 2.000000 timeout\n0.200000 0.002500 200\n0.3 0.1 short\n# duration 0.31\n"
    samples, ok, failed, duration = parse_client(text, pair=1, client=2)
    assert (ok, dict(failed), duration) == (2, {"timeout": 1, "short": 1}, 0.31)
    assert [(s.value, s.t, s.metadata) for s in samples] == [(0.0015, 0.0001, {"pair": 1, "client": 2}),
                                                              (0.0025, 0.2, {"pair": 1, "client": 2})]
    with pytest.raises(WorkloadError, match="no duration"):
        parse_client("0.1 0.2 200\n")
    with pytest.raises(WorkloadError, match="unexpected line"):
        parse_client("Traceback (most recent call last):\n# duration 1\n")


def test_stress_ng_metrics_parser():
    err = ("stress-ng: info:  [15098] dispatching hogs: 2 cpu\n"
           "stress-ng: metrc: [15098] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s\n"
           "stress-ng: metrc: [15098]                           (secs)    (secs)    (secs)   (real time) (usr+sys time)\n"
           "stress-ng: metrc: [15098] cpu                 960      2.00      0.38      0.02       480.00        2400.00\n")
    ops, cpu = parse_stress_ng(err, 2, pair=1)
    assert (ops.metric, ops.value) == ("cpuload_ops_per_s", 480.0)
    assert (cpu.metric, cpu.value) == ("cpuload_cpu_ratio", pytest.approx(0.1))  # 0.4 s of CPU / 2 s / 2 workers
    with pytest.raises(WorkloadError, match="no cpu metrics"):
        parse_stress_ng("stress-ng: error: no stressors\n", 1)


# ---- target_pair ---------------------------------------------------------------------------------------------------
def test_target_pair_sends_every_selected_pair_to_one_server():
    pairs = [pair(k, f"127.0.0.{k}") for k in (1, 2, 3, 4)]
    wl = workload("iperf3", only_pairs=[3, 4], target_pair=1, protocol="udp", duration=1)
    chosen = wl.select(pairs)
    assert [p.index for p in chosen] == [3, 4]
    assert [p.client.addr for p in chosen] == ["127.0.0.3", "127.0.0.4"]  # own clients
    assert all(p.server is pairs[0].server for p in chosen)            # the target's server
    assert all(p.meta["target_pair"] == 1 for p in chosen)
    ports = [c.argv[c.argv.index("-p") + 1] for c in wl.commands(chosen) if "-c" in c.argv]
    assert ports == ["5203", "5204"]  # per-pair ports stay apart on the shared server
    assert workload("ping").select(pairs) == pairs  # without target_pair nothing changes


def test_target_pair_spreads_a_load_once_per_vm():
    pairs = [pair(k, f"127.0.0.{k}") for k in (1, 2, 3)]
    wl = workload("cpuload", target_pair=1, side="server", duration=1)
    assert len(wl.commands(wl.select(pairs))) == 1  # three pairs, one server VM: one load


SPEC = "name: t\nfactors: {pairs: 3}\nworkloads:\n  - {type: ping, pairs: [1]}\n  - {type: ping, %s}\n"


@pytest.mark.parametrize("value", ["0", "-1", "one", "true", "[1]", "1.5"])
def test_target_pair_must_be_one_pair_number(value):
    with pytest.raises(SpecError) as exc:
        loads(SPEC % f"target_pair: {value}")
    assert len(exc.value.lines) == 1
    assert "workloads[1].target_pair: write one pair number whose server every selected pair sends to, e.g. 1" \
        in exc.value.lines[0]


def test_target_pair_beyond_the_pairs_or_across_tenants_skips_with_the_reason():
    with pytest.raises(SpecError) as exc:  # no scenario has pair 4: a mistake, refused before anything runs
        loads(SPEC % "target_pair: 4")
    assert "pair 4 does not exist: this experiment has at most 3 pairs" in exc.value.lines[0]
    sc, _ = expand(loads(SPEC.replace("pairs: 3}", "pairs: [3, 4]}") % "target_pair: 4").experiment, None)
    assert sc.skip is None  # caps=None: availability is not checked, structure neither
    from vnetbench.experiment.matrix import _workload_fit
    assert _workload_fit(sc) == "workload ping targets pair 4 but the scenario has 3 pairs"
    (sc,) = expand(loads("tenants: 2\n" + SPEC % "pairs: [2, 3], target_pair: 1").experiment, None)
    assert _workload_fit(sc) == ("workload ping: pair 2 (tenant 2) cannot reach the server of pair 1 (tenant 1): "
                                 "tenants are separate networks")
    (sc,) = expand(loads("tenants: 2\n" + SPEC % "pairs: [3], target_pair: 1").experiment, None)
    assert _workload_fit(sc) is None  # pairs 1 and 3 share tenant 1
    params = sc.workloads[1].params.model_dump()
    assert "target_pair" not in params  # a placement key, not a tool parameter


# ---- the analysis on known inputs ----------------------------------------------------------------------------------
def _round(store, cid, scenario, rep, intr, ctx, rts, cpu_ops, series=()):
    samples = [Sample.of("interrupts_per_s", intr, scope="machine"),
               Sample.of("context_switches_per_s", ctx, scope="machine"),
               Sample.of("interrupts_per_s", 5 * intr, scope="machine", cpu=0),  # per CPU: not a round's value
               Sample.of("cpu_busy_ratio", 0.5, scope="machine")]
    samples += [Sample.of(m, v, t=t, scope="machine", series=True) for t, m, v in series]
    for p, values in rts.items():
        samples += [Sample.of("http_response_time_s", v, t=0.1 * k, pair=p, client=1) for k, v in enumerate(values)]
        samples += [Sample.of("http_requests_per_s", 60, pair=p), Sample.of("http_errors", 0, pair=p)]
    samples += [Sample(s.metric, s.value, s.unit, s.metadata | {"role": "background", "background_workload": "cpuload"})
                for s in (Sample.of("cpuload_ops_per_s", v, pair=p, side="server") for p, v in cpu_ops.items())]
    store.save_trial(cid, scenario, rep, 0, "http", {}, "ok", None, 0.0, 1.0, samples,
                     {"prefix": "vb0001", "pairs": [{"server": "h2v2"}, {"server": "h2v4"}]})


SPEC_S5 = ("name: s5\nanalysis: s5\nfactors: {attack: ['off', 'on'], pairs: 3}\nworkloads:\n"
           "  - {type: http, pairs: [1, 2]}\n"
           "  - {type: iperf3, pairs: [3], target_pair: 1, background: true, when: {attack: 'on'}}\n")


def test_s5_analysis_on_known_inputs(tmp_path):
    store = Store(tmp_path / "known.db")
    cid = store.new_campaign("s5", "s5.yaml", SPEC_S5, "ab" * 32, {})
    for idx, level in ((1, "off"), (2, "on")):
        store.put_scenario(cid, idx, f"attack={level}", {"attack": level}, {"attack": level}, "done", None, {}, [])
    # control: 1000/s and 530/s in both rounds -> 53 %; attack: 50 % and 60 % per round -> 55 % (mean of rounds),
    # while the ratio of the means is (500 + 1200) / (1000 + 2000) = 56.7 %.
    for rep in (1, 2):
        _round(store, cid, 1, rep, 1000, 530, {1: [0.001, 0.002, 0.003], 2: [0.001, 0.001, 0.001]}, {1: 600, 2: 600},
               series=[(1.0, "interrupts_per_s", 900), (1.0, "context_switches_per_s", 500)])
    _round(store, cid, 2, 1, 1000, 500, {1: [0.010, 0.020, 0.030], 2: [0.002, 0.002, 0.002]}, {1: 400, 2: 300},
           series=[(1.0, "interrupts_per_s", 1100), (1.0, "context_switches_per_s", 900)])
    _round(store, cid, 2, 2, 2000, 1200, {1: [0.010, 0.020, 0.030], 2: [0.004, 0.004, 0.004]}, {1: 400, 2: 500})
    store.save_trial(cid, 2, 3, 0, "http", {}, "failed", "boom", 0.0, 1.0, [Sample.of("interrupts_per_s", 1e9)], {})
    result = analyses()["s5"]().run(store, cid)
    study = result.tables[0]
    assert study.columns[:7] == ["round type", "rounds", "interrupts/s (95 % CI)", "context switches/s (95 % CI)",
                                 "conversion rate, mean of rounds (95 % CI)", "conversion rate, ratio of means",
                                 "study's conversion rate"]
    control, attack, growth = study.rows
    assert control[:7] == ["control", "2", "1000 (1000–1000)", "530 (530–530)", "53.0 % (53.0–53.0)", "53.0 %", "53 %"]
    # attack: CIs with t(0.975, 1) = 12.706: intr 1500 ± 12.706 * 707.1 / sqrt 2 = 1500 ± 6353
    # ... cut at 0, and said so: interrupts per second are not negative
    assert attack[:3] == ["attack", "2", "1500 (0–7853, clipped)"]
    assert attack[4].startswith("55.0 % (") and attack[5] == "56.7 %" and attack[6] == "68 %"
    assert control[8] == "-"  # no NIC samples in this hand-made store
    # the growth, both ways: 1000 -> 1500 interrupts/s is +50 % of control, and as the paper computes its 82.08 %
    # ((attack - control) / attack) +33.3 %; 530 -> 850 context switches/s +60 % and 320 / 850 = +37.6 %; 53 % -> 55 %
    assert growth[:7] == ["growth, attack vs control", "",
                          "ours +50 % of control; as the paper +33.3 % of attack, not tested (2 + 2 rounds)",
                          "ours +60 % of control; as the paper +37.6 % of attack, not tested (2 + 2 rounds)",
                          "+2.0 points, not tested (2 + 2 rounds)", "-",
                          "the paper: interrupts 82.08 %, context switches 85.84 % of attack; conversion +14.23 points "
                          "(53.39 % -> 67.63 %)"]
    tenants = {(r[0], r[1]): r[2:] for r in result.tables[1].rows}
    victim, neighbour = "VM1 (victim, pair 1)", "VM2 (neighbour, pair 2)"
    assert tenants[(victim, "response time, median")][:3] == ["2.00 ms", "20.00 ms", "+900 %"]
    assert tenants[(neighbour, "response time, median")][:3] == ["1.00 ms", "3.00 ms", "+200 %"]
    assert tenants[(neighbour, "CPU work done (stress-ng bogo ops/s)")][:3] == ["600", "400", "-33 %"]
    assert tenants[(victim, "web errors per round")][:2] == ["0.0", "0.0"]
    assert tenants[(neighbour, "response time, median")][3] == "too few rounds (2 + 2)"
    findings = " ".join(result.findings)
    assert "53.0 % without vs 55.0 % with the attack" in findings and "cannot tell from 2 + 2 rounds" in findings
    assert [f.name for f in result.figures] == ["s5-fig3", "s5-counts", "s5-series", "s5-response-times"]
    # the paper's Fig. 3: context switches against interrupts, control (1000, 530) -> attack (1500, 850) observed,
    # and 530 x 1500 / 1000 = 795 expected in proportion; the paper's own panel from its Table 1
    observed, expected = result.figures[0].figure.axes[0].get_lines()[:2]
    assert list(observed.get_xdata()) == [1000, 1500] and list(observed.get_ydata()) == [530, 850]
    assert list(expected.get_ydata()) == [530, 795]
    paper_line = result.figures[0].figure.axes[1].get_lines()[0]
    assert list(paper_line.get_xdata()) == [25295, 141157] and list(paper_line.get_ydata()) == [13504, 95369]
    fig3 = result.figures[1].figure
    bars = [p for p in fig3.axes[0].patches]
    assert [round(b.get_height(), 3) for b in bars] == [1.0, 0.53, 1.5, 0.85]  # k/s: control, then attack
    assert [t.get_text() for t in fig3.axes[0].texts] == ["+50 %", "+60 %"]
    assert fig3.axes[0].get_ylabel() == "per second (k/s)"


def test_s5_findings_answer_yes_with_enough_rounds(tmp_path):
    store = Store(tmp_path / "yes.db")
    cid = store.new_campaign("s5", "s5.yaml", SPEC_S5, "ab" * 32, {})
    for idx, level in ((1, "off"), (2, "on")):
        store.put_scenario(cid, idx, f"attack={level}", {"attack": level}, {"attack": level}, "done", None, {}, [])
    for rep in range(1, 6):
        _round(store, cid, 1, rep, 1000 + rep, 530 + rep, {1: [0.001], 2: [0.001 + rep * 1e-5]}, {2: 600 + rep})
        _round(store, cid, 2, rep, 1000 + rep, 680 + rep, {1: [0.010], 2: [0.003 + rep * 1e-5]}, {2: 300 + rep})
    findings = analyses()["s5"]().run(store, cid).findings
    assert findings[0].startswith("Conversion rate (context switches / interrupts) on the host, the study's vantage "
                                  "point, higher under attack: yes — 53.1 % without vs 68.1 % with")
    assert any(f.startswith("Neighbour degraded (seen in the authors' earlier experiment") and "): yes — " in f
               for f in findings)
    assert any(f.startswith("Interrupts per second on the host higher under attack: not significant: cannot tell")
               for f in findings)


def test_http_client_output_with_its_start_time_is_absolute():
    text = "0.000100 0.001500 200\n0.200000 0.002500 200\n# duration 0.31\n# t0 1795316400.5\n"
    samples, *_ = parse_client(text, pair=1, client=1)
    assert [s.t for s in samples] == pytest.approx([1795316400.5001, 1795316400.7])
    assert samples[0].metadata["window"] == pytest.approx([1795316400.5, 1795316400.81])


def test_neighbour_without_web_clients_as_in_the_study(tmp_path):
    """The study's clients reach VM1 only: VM2, the neighbour, is known by its constant load; it gets no response-time
    rows (nothing was asked of it) but its CPU work is compared."""
    spec = ("name: s5\nanalysis: s5\nfactors: {attack: ['off', 'on'], pairs: 3}\nworkloads:\n"
            "  - {type: http, pairs: [1]}\n  - {type: cpuload, pairs: [1, 2], side: server, background: true}\n"
            "  - {type: iperf3, pairs: [3], target_pair: 1, background: true, when: {attack: 'on'}}\n")
    store = Store(tmp_path / "study.db")
    cid = store.new_campaign("s5", "s5.yaml", spec, "ab" * 32, {})
    for idx, level in ((1, "off"), (2, "on")):
        store.put_scenario(cid, idx, f"attack={level}", {"attack": level}, {"attack": level}, "done", None, {}, [])
    for rep in (1, 2):
        _round(store, cid, 1, rep, 1000, 530, {1: [0.001, 0.002]}, {1: 600, 2: 600})
        _round(store, cid, 2, rep, 2000, 1400, {1: [0.010, 0.020]}, {1: 400, 2: 450})
    result = analyses()["s5"]().run(store, cid)
    tenants = {(r[0], r[1]): r[2:] for r in result.tables[1].rows}
    neighbour = "VM2 (neighbour, pair 2)"
    assert not any(k[0] == neighbour and k[1].startswith(("response", "web")) for k in tenants)
    assert tenants[(neighbour, "CPU work done (stress-ng bogo ops/s)")][:3] == ["600", "450", "-25 %"]
    assert len(result.figures[3].figure.axes) == 1        # response times: VM1's panel only


def test_a_guests_cpu_rows_are_not_labelled_the_whole_machines(tmp_path):
    """The generic statistics table of cpu_busy_ratio holds the machine's rows and each guest VM's own: its title says
    the VM rows are the guest kernel's account (a one-CPU guest's 100 % is its one CPU), not the machine's."""
    from vnetbench.report import document
    store = Store(tmp_path / "vm.db")
    cid = store.new_campaign("s5", "s5.yaml", SPEC_S5, "ab" * 32, {"cpu_count": 2})
    from vnetbench.core.scenario import DEFAULT_LEVELS
    labels = {**{k: str(v) for k, v in DEFAULT_LEVELS.items()}, "attack": "off", "pairs": "3"}
    store.put_scenario(cid, 1, "attack=off", labels, labels, "done", None, {}, [])
    for rep in (1, 2):
        store.save_trial(cid, 1, rep, 0, "http", {"type": "http"}, "ok", None, 0.0, 1.0,
                         [Sample.of("cpu_busy_ratio", 0.5, scope="machine"),
                          Sample.of("cpu_busy_ratio", 0.9, scope="vm", vm="h2v2"),
                          Sample.of("http_requests_per_s", 60, pair=1)], {})
    doc = document.build(store, cid)
    def titles(blocks):
        for b in blocks:
            yield getattr(b, "title", "") or ""
            yield from titles(getattr(b, "blocks", None) or [])
    titles = list(titles([b for s in doc.sections for b in s.blocks]))
    busy = next(t for t in titles if t.startswith("cpu_busy_ratio (ratio)"))
    assert "rows [VM ...]: that guest's own kernel's account, not the machine's" in busy
    assert "for a one-CPU guest 100 % = its one CPU" in busy
