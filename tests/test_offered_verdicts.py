"""S3, S4 and S5 beside a trial whose rate-bounded load was not offered (guards.not_offered): S3 and S4 say so with
the count on the cells and findings built on it, S5 leaves an attack round whose flood fell short out of the attack
group and says how many. Campaigns built in memory."""
from __future__ import annotations

import pytest

from vnetbench.report.analyses import s3, s4, s5
from vnetbench.results.dataset import Dataset, Trial
from vnetbench.core.sample import Sample
from vnetbench.results.store import Campaign

SHORT_UDP = "offered 412 of 1e+03 Mbit/s (pair 1, direction forward): the sender did not reach its rate"
SHORT_FLOOD = "background offered 0.12 of 0.25 Mbit/s (pair 3): the sender did not reach its rate"
SHORT_WEB = "offered 31 of 60 requests/s (pair 1): the clients did not start the requests asked"
ESP = {"type": "ipsec", "protocol": "esp", "cipher": "3des-cbc", "integrity": "hmac-sha1", "mode": "transport",
       "keying": "manual"}
AH = {"type": "ipsec", "protocol": "ah", "integrity": "hmac-sha1", "mode": "transport", "keying": "manual"}


def dataset(trials: list[tuple]) -> Dataset:
    """trials: (labels, levels, kind, params, samples, flags) each; one scenario per distinct labels."""
    camp = Campaign(1, "t", 0.0, 1.0, "done", "test", "name: t\n", "0" * 64, {"cpu_count": 2}, "vb0001")
    scenarios, rows, ok, samples = {}, {}, [], []
    for tid, (labels, levels, kind, params, got, flags) in enumerate(trials, 1):
        idx = next((i for i, s in scenarios.items() if s["labels"] == labels), len(scenarios) + 1)
        scenarios[idx] = {"idx": idx, "labels": labels, "levels": levels, "status": "done", "reason": None,
                          "implementation": {}, "notes": []}
        meta = {"flags": flags, "prefix": "vb0001", "pairs": [{"server": "h2v2"}, {"server": "h2v4"}]}
        rows[tid] = {"id": tid, "scenario": idx, "repetition": tid, "workload": 0, "kind": kind, "params": params,
                     "status": "ok", "started": float(tid), "metadata": meta}
        trial = Trial(tid, idx, tid, kind, params, labels, levels, meta, name=kind)
        for s in got:
            d = {"metric": s.metric, "value": s.value, "unit": s.unit, "t": s.t, "metadata": s.metadata,
                 "trial": tid, "started": float(tid), "scenario": idx, "labels": labels, "implementation": {}}
            trial.samples.append(d)
            samples.append(d)
        ok.append(trial)
    return Dataset(camp, scenarios, rows, ok, samples)


def run(module, analysis, trials, monkeypatch):
    data = dataset(trials)
    monkeypatch.setattr(module, "load", lambda store, cid: data)
    return analysis().run(None, 1)


def said(result) -> list[str]:
    """Every cell, table note and finding with the words of a load not offered."""
    texts = [str(c) for t in result.tables for r in t.rows for c in r] + [t.note for t in result.tables]
    return [x for x in texts + result.findings if "offered less than" in x]


# ---- S3: the cells and findings built on such trials say how many ------------------------------------------------
def s3_trials(flagged: bool) -> list[tuple]:
    """UDP stream (iperf3 at a bounded rate) without IPsec, with ESP 3DES and with AH, 3 trials each; the second ESP
    trial's sender short of its rate when `flagged`; a video stream, its first trial short when `flagged`."""
    udp = {"type": "iperf3", "protocol": "udp", "message_size": 1024, "udp_rate": 1_000_000_000}
    out = []
    for enc, label, values in (("none", "none", (900e6, 910e6, 905e6)), (ESP, "esp", (500e6, 420e6, 510e6)),
                               (AH, "ah", (800e6, 790e6, 805e6))):
        labels = {"encryption": label, "attach": "host", "ip_version": "4", "hops": "0", "other_load": "none",
                  "traffic": "udp", "message_size": "1024"}
        for i, v in enumerate(values):
            flags = [SHORT_UDP] if flagged and label == "esp" and i == 1 else []
            out.append((labels, {"encryption": enc}, "iperf3", udp,
                        [Sample.of("throughput_bps", v, pair=1, direction="forward")], flags))
    video = {"encryption": "none", "attach": "host", "ip_version": "4", "hops": "0", "other_load": "none",
             "traffic": "video", "message_size": "500"}
    for i, v in enumerate((29e6, 30e6)):
        out.append((video, {"encryption": "none"}, "iperf3",
                    {"type": "iperf3", "protocol": "udp", "message_size": 500, "udp_rate": 30_000_000},
                    [Sample.of("throughput_bps", v, pair=1, direction="forward"),
                     Sample.of("udp_loss_ratio", 0.0, pair=1, direction="forward"),
                     Sample.of("jitter_s", 1e-5, pair=1, direction="forward")],
                    [SHORT_UDP] if flagged and i == 0 else []))
    return out


def test_s3_says_how_many_trials_behind_a_cell_or_finding_did_not_offer_their_rate(monkeypatch):
    r = run(s3, s3.S3, s3_trials(True), monkeypatch)
    tables = {t.title: t for t in r.tables}
    udp = tables["S3 — UDP stream throughput (iperf3 UDP at a bounded rate, at the receiver)"]
    row = dict(zip(udp.columns, udp.rows[0]))
    assert row["ESP (3DES-CBC, HMAC-SHA1) transport/manual"].endswith(" (1 of 3 trials offered less than their rate)")
    assert "offered less" not in row["no IPsec"] and "offered less" not in row["AH (HMAC-SHA1) transport/manual"]
    assert s3.OFFERED_NOTE in udp.note
    versus = tables["S3 — AH vs ESP per cipher, and 3DES vs Blowfish, per test and message size"]
    (ah_esp,) = [x for x in versus.rows if x[5].startswith("AH") and "3DES" in x[5]]
    assert ah_esp[6] == "3 / 3 (1 of 6 trials offered less than their rate)"
    video = tables["S3 — video-like UDP stream (iperf3, 500-byte payloads at 30 Mbit/s, at the receiver)"]
    assert video.rows[0][3].endswith(" (1 of 2 trials offered less than their rate)")
    findings = {f.split(":")[0]: f for f in r.findings}
    # ESP's 3 + AH's 3 trials against no IPsec's 3 (shared): one of 9 fell short
    assert "(1 of 9 trials offered less than their rate)" in findings["'IPsec lowers throughput'"]
    assert "(1 of 6 trials offered less than their rate)" in findings["'AH gives about twice ESP (3DES-CBC)'s throughput'"]
    assert "(1 of 2 trials offered less than their rate)" in findings["Video-like stream (500 B at 30 Mbit/s) without IPsec"]


def test_s3_says_nothing_when_every_load_was_offered(monkeypatch):
    assert said(run(s3, s3.S3, s3_trials(False), monkeypatch)) == []


# ---- S4: the rows and findings built on such trials say how many -------------------------------------------------
def s4_trials(flagged: bool) -> list[tuple]:
    """One TCP stream natively and through VXLAN, 3 runs each; the last VXLAN run beside a flood that fell short."""
    out = []
    for overlay, attach, values in (("none", "host", (9.0e9, 9.1e9, 8.9e9)), ("vxlan", "switch", (3.0e9, 3.1e9, 2.9e9))):
        labels = {"attach": attach, "encryption": "none", "switch": "linuxbridge", "overlay": overlay, "mtu": "1500",
                  "encryption_scope": "host-to-host", "measure": "tcp1"}
        for i, v in enumerate(values):
            flags = [SHORT_FLOOD] if flagged and overlay == "vxlan" and i == 2 else []
            out.append((labels, {}, "iperf3", {"type": "iperf3", "streams": 1},
                        [Sample.of("throughput_bps", v, pair=1, direction="forward"),
                         Sample.of("cpu_busy_ratio", 0.5, scope="machine")], flags))
    return out


def test_s4_says_how_many_trials_behind_a_row_or_finding_did_not_offer_their_rate(monkeypatch):
    r = run(s4, s4.S4, s4_trials(True), monkeypatch)
    table = r.tables[0]
    rows = {row[0]: dict(zip(table.columns, row)) for row in table.rows}
    assert rows["VXLAN"]["runs"] == "3 (1 of 3 trials offered less than their rate)"
    assert rows["native"]["runs"] == "3"
    assert s3.OFFERED_NOTE in table.note
    (tunnels,) = [f for f in r.findings if f.startswith("'Tunnels lose vs native")]
    assert "(1 of 6 trials offered less than their rate)." in tunnels


def test_s4_says_nothing_when_every_load_was_offered(monkeypatch):
    assert said(run(s4, s4.S4, s4_trials(False), monkeypatch)) == []


# ---- S5: an attack round whose flood fell short is not an attack round -------------------------------------------
def s5_trials(flood_short: bool, web_short: bool = False) -> list[tuple]:
    """4 control rounds (the first one's web clients short when `web_short`) and 5 attack rounds; the fifth attack
    round, whose flood fell short when `flood_short`, looks like a control round (1000 interrupts/s)."""
    out = []
    for level, intr in (("off", (1000, 1010, 990, 1005)), ("on", (3000, 3100, 2900, 3050, 1000))):
        for i, v in enumerate(intr):
            flags = [SHORT_FLOOD] if flood_short and level == "on" and i == 4 else []
            flags += [SHORT_WEB] if web_short and level == "off" and i == 0 else []
            out.append(({"attack": level}, {"attack": level}, "http", {},
                        [Sample.of("interrupts_per_s", v, scope="machine"),
                         Sample.of("context_switches_per_s", v / 2, scope="machine"),
                         Sample.of("http_response_time_s", 0.001, pair=1, client=1)], flags))
    return out


def test_s5_leaves_out_an_attack_round_whose_flood_fell_short_and_says_so(monkeypatch):
    r = run(s5, s5.S5, s5_trials(True), monkeypatch)
    control, attack = r.tables[0].rows[:2]
    assert (control[1], attack[1]) == ("4", "4")
    assert attack[2].startswith("3012 (")   # (3000 + 3100 + 2900 + 3050) / 4: the round at 1000/s is out
    excluded = "1 of 5 attack rounds excluded: the flood offered less than 95 % of its rate."
    assert all(excluded in t.note for t in r.tables)
    assert excluded in r.findings


def test_s5_counts_every_attack_round_whose_flood_ran_at_its_rate(monkeypatch):
    r = run(s5, s5.S5, s5_trials(False), monkeypatch)
    assert r.tables[0].rows[1][1] == "5"
    assert said(r) == []


def test_s5_keeps_a_round_whose_web_clients_fell_short_and_says_so(monkeypatch):
    """The web clients' own shortfall is no reason to drop a round (the attack slows the clients it targets):
    the round stays, and every table and the findings say how many."""
    r = run(s5, s5.S5, s5_trials(False, web_short=True), monkeypatch)
    assert [row[1] for row in r.tables[0].rows[:2]] == ["4", "5"]
    words = "less than 95 % of the requests asked in 1 of 9 rounds (control 1, attack 0)"
    assert all(words in t.note for t in r.tables) and any(words in f for f in r.findings)
    assert not any("excluded" in x for x in said(r))


@pytest.mark.parametrize("flags, flood, web", [([SHORT_FLOOD], True, False), ([SHORT_WEB], False, True),
                                               ([SHORT_FLOOD, SHORT_WEB], True, True), ([], False, False)])
def test_s5_tells_the_floods_shortfall_from_the_web_clients(flags, flood, web):
    assert s5._short({"flags": flags}) == {"flood_short": flood, "web_short": web}
