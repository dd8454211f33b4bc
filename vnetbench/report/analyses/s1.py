"""S1 — IPsec combined with SR-IOV: the study's Tables I..V, a figure, and its findings checked on this campaign.

Scenarios are recognised by their levels, not their order: CS = attach host; Reference = attach switch without
encryption; IPsec = attach switch with encryption; SR-IOV = attach direct without encryption; IPsec+SR-IOV = attach
direct with encryption. Workload entries are recognised by size: of the ping entries the smallest payload gives TR
and the largest TRS; of the iperf3 entries the smallest message gives TT and the largest TTS.

Per-mechanism processing rate (the study's derivation): for a mechanism M added on top of scenario B,
diff = mean(B+M) - mean(B) over the trials (each trial's value is its median echo), the one-way cost t = diff / 2 and
the processing rate TP = 1 / t packets per ms. The test of a difference is Welch's t-test on those per-trial values,
and the CI of t is Welch's interval of the same difference (the statistic the test is about); Holm over each table.
The findings are one Holm family; a finding that compares two mechanisms' costs tests the contrast of their
differences (stats.contrast), never two estimates by eye.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from ...results.dataset import Dataset, load  # noqa: E402
from ...results.stats import NO_TEST, Summary, compare, contrast, holm, summarize, t_note  # noqa: E402
from ...results.store import Store  # noqa: E402
from . import register  # noqa: E402
from ._cells import Family  # noqa: E402
from .base import Analysis, AnalysisResult, FigureData, TableData  # noqa: E402

# role, attach level, encrypted?, what it is, what it adds over which scenario
ROLES = (
    ("CS", "host", False, "host A to host B directly, no virtualization (the 'simple connection')", "—"),
    ("Reference", "switch", False, "VM1 and VM3 joined through the virtual switch ({switch}) on each host, no security",
     "the virtual switch, over CS"),
    ("IPsec", "switch", True, "Reference plus an IPsec security association VM1<->VM3 ({encryption})",
     "IPsec, over Reference"),
    ("SR-IOV", "direct", False, "each VM on a direct NIC path, no virtual switch (macvlan: the SR-IOV VF stand-in)",
     "a direct NIC path instead of the switch, over CS"),
    ("IPsec+SR-IOV", "direct", True, "SR-IOV plus the IPsec security association VM1<->VM3 ({encryption})",
     "IPsec, over SR-IOV"),
)
# mechanism, scenario with it, scenario without it
MECHANISMS = (
    ("OvS (virtual switch)", "Reference", "CS"),
    ("SR-IOV (direct NIC path)", "SR-IOV", "CS"),
    ("IPsec", "IPsec", "Reference"),
    ("IPsec on SR-IOV", "IPsec+SR-IOV", "SR-IOV"),
)
# the paper's Tables II-IV: one per mechanism's processing rate
MECH_TABLES = (("II", "IPsec's processing rate", ("IPsec", "IPsec on SR-IOV")),
               ("III", "Open vSwitch's processing rate", ("OvS (virtual switch)",)),
               ("IV", "SR-IOV's processing rate", ("SR-IOV (direct NIC path)",)))
CV_LIMIT = 0.02  # the study: the standard deviation was over 2 % of the mean everywhere


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def rate(x: float) -> str:
    """Three significant digits without exponent: 10.0, 1.23, 456, 12345."""
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def _dedupe(row: list[str]) -> list[str]:
    """A reason repeated along a row is written once; the later cells just say n/a."""
    seen, out = set(), []
    for cell in row:
        out.append("n/a" if cell.startswith("n/a (") and cell in seen else cell)
        seen.add(cell)
    return out


def pps(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else rate(x)


@dataclass
class Measure:
    """One study metric (TR, TRS, TT or TTS) of one scenario: one value per trial."""
    values: list[float]          # SI: seconds (each trial's median echo) for TR/TRS, packets/s for TT/TTS
    summary: Summary | None
    missing: str = ""            # "n/a (...)" when there are no values
    pooled: list[float] = field(default_factory=list)  # every echo of every trial: the study's IQR only

    @property
    def ok(self) -> bool:
        return self.summary is not None

    @property
    def ci(self) -> tuple[float, float]:
        """The median's exact order-statistic CI over trials (95 % when n allows, else min..max); nan at n = 1."""
        return self.summary.ci_median if self.summary and len(self.values) > 1 else (math.nan, math.nan)

    @property
    def ci_label(self) -> str:
        """'' for a true 95 % interval; ' (75 % CI)' when n is too small and the interval is min..max."""
        s = self.summary
        if s is None or s.n < 2 or s.ci_median_exact:
            return ""
        return f" ({s.ci_median_coverage:.0%} CI: min–max)"


def _measure(values: list[float], missing: str, pooled: list[float] | None = None) -> Measure:
    return Measure(values, summarize(values), pooled=pooled or []) if values else Measure([], None, missing)


def _tp_ci(t_ci: tuple[float, float]) -> tuple[float, float]:
    """TP = 1 / t (t in s -> packets per ms) over the CI of t; (lo, inf) when t's CI reaches zero."""
    lo, hi = t_ci
    if math.isnan(lo) or hi <= 0:
        return (math.nan, math.nan)
    return (1 / (hi * 1e3), 1 / (lo * 1e3) if lo > 0 else math.inf)


@dataclass
class Entries:
    tr: int | None
    trs: int | None
    tt: int | None
    tts: int | None
    tr_size: int = 0             # payload bytes (ping -s / iperf3 -l)
    trs_size: int = 0
    tt_size: int = 0
    tts_size: int = 0
    trc: int | None = None       # TRS at the largest echo every scenario carries (kernel ESP cannot carry 65515 B)
    trc_size: int = 0
    tt_proto: str = "udp"
    tts_proto: str = "tcp"
    pkt: int | None = None       # TT as a packet rate: the ndrpdr entry (PDR of its smallest frame size)
    pkt_size: str = ""


def _entries(data: Dataset) -> Entries:
    pings = sorted(data.entries("ping").items(), key=lambda kv: kv[1].get("ping_size", 56))
    perfs = sorted(data.entries("iperf3").items(), key=lambda kv: kv[1].get("message_size") or 131072)
    e = Entries(None, None, None, None)
    if pings:
        small, large = pings[0], pings[-1]
        if len(pings) > 1 or small[1].get("ping_size", 56) < 1472:
            e.tr, e.tr_size = small[0], small[1].get("ping_size", 56)
        if len(pings) > 1 or large[1].get("ping_size", 56) >= 1472:
            e.trs, e.trs_size = large[0], large[1].get("ping_size", 56)
        if len(pings) >= 3:
            e.trc, e.trc_size = pings[-2][0], pings[-2][1].get("ping_size", 56)
    if perfs:
        small, large = perfs[0], perfs[-1]
        if len(perfs) > 1 or (small[1].get("message_size") or 131072) < 1472:
            e.tt, e.tt_size, e.tt_proto = small[0], small[1].get("message_size") or 0, small[1].get("protocol", "tcp")
        if len(perfs) > 1 or (large[1].get("message_size") or 131072) >= 1472:
            e.tts, e.tts_size, e.tts_proto = large[0], large[1].get("message_size") or 0, large[1].get("protocol", "tcp")
    for idx, params in sorted(data.entries("ndrpdr").items())[:1]:
        e.pkt, e.pkt_size = idx, str(min(params.get("frame_sizes") or [64], key=lambda f: 10 ** 6 if f == "imix" else f))
    return e


def _find(data: Dataset, attach: str, encrypted: bool) -> dict | None:
    for sc in data.scenarios.values():
        labels = sc["labels"]
        if labels.get("attach") == attach and (labels.get("encryption", "none") != "none") == encrypted:
            return sc
    return None


UNTESTED = f"cannot tell ({NO_TEST})"


def _mark(x: dict) -> str:
    """A mechanism cell's mark: none when significant, '(n.s.)' when its test ran, else that no test could."""
    return "" if x["significant"] else " (n.s.)" if math.isfinite(x["p"]) else f" ({NO_TEST})"


@register
class S1(Analysis):
    name = "s1"
    title = "S1 — IPsec combined with SR-IOV: response times, transfer rates, per-mechanism processing rates"

    def run(self, store: Store, campaign: int) -> AnalysisResult:
        data = load(store, campaign)
        e = _entries(data)
        scen = {role: _find(data, attach, enc) for role, attach, enc, *_ in ROLES}
        m: dict[tuple[str, str], Measure] = {}
        for role, sc in scen.items():
            for key, entry, metric, size in (("TR", e.tr, "rtt_s", 0), ("TRS", e.trs, "rtt_s", 0),
                                             ("TRSc", e.trc, "rtt_s", 0),
                                             ("TT", e.tt, "throughput_bps", e.tt_size),
                                             ("TTS", e.tts, "throughput_bps", e.tts_size)):
                if entry is None:
                    m[(role, key)] = Measure([], None, f"n/a (the campaign has no {key} workload)")
                    continue
                if metric == "throughput_bps" and not size:
                    m[(role, key)] = Measure([], None, f"n/a (the {key} workload sets no message_size: no packet size)")
                    continue
                vals = data.values(sc["idx"], entry, metric) if sc else []   # one per trial
                pooled = data.pooled(metric, scenario=sc["idx"], workload=entry).get(sc["idx"], []) \
                    if sc and not size else []
                if size:
                    vals = [v / (8 * size) for v in vals]  # goodput bit/s -> messages (packets) per second
                m[(role, key)] = _measure(vals, data.missing_text(sc, entry), pooled)
        loss = {role: (data.values(sc["idx"], e.tt, "udp_loss_ratio") if sc and e.tt is not None else [])
                for role, sc in scen.items()}
        sent = {role: (data.values(sc["idx"], e.tt, "sender_throughput_bps") if sc and e.tt is not None else [])
                for role, sc in scen.items()}
        bandwidth = {role: (data.values(sc["idx"], e.tts, "throughput_bps") if sc and e.tts is not None else [])
                     for role, sc in scen.items()}
        packets = {role: self._packet_rate(data, sc, e) for role, sc in scen.items()} if e.pkt is not None else {}
        mech = {(name, key): self._mechanism(m[(with_, key)], m[(base, key)], with_, base)
                for name, with_, base in MECHANISMS for key in self._rt_keys(e)}
        tested = [k for k, x in mech.items() if x["ok"] and math.isfinite(x["p"])]
        for k, p in zip(tested, holm([mech[k]["p"] for k in tested])):
            mech[k]["p_holm"], mech[k]["significant"] = p, p < 0.05
        offered = data.entries("iperf3").get(e.tt, {}).get("udp_rate") if e.tt is not None else None
        result = AnalysisResult()
        result.tables = [self._table1(data, scen), self._table2(m, e),
                         *(self._mech_table(number, title, names, mech, e, len(tested))
                           for number, title, names in MECH_TABLES),
                         self._table5(m, loss, sent, bandwidth, e, offered, packets)]
        result.figures = [self._figure_rt(m, e), self._figure_tt(m, e)]
        result.findings = self._findings(m, mech, scen, loss, "TRSc" if e.trc is not None else "TRS",
                                         (e.trc_size if e.trc is not None else e.trs_size) + 8)
        return result

    @staticmethod
    def _rt_keys(e: Entries) -> tuple[str, ...]:
        return ("TR", "TRS", "TRSc") if e.trc is not None else ("TR", "TRS")

    # ---- mechanisms --------------------------------------------------------------------------------------
    @staticmethod
    def _mechanism(with_: Measure, base: Measure, with_name: str, base_name: str) -> dict:
        if not with_.ok or not base.ok:
            which = [(n, x) for n, x in ((with_name, with_), (base_name, base)) if not x.ok]
            name, x = which[0]
            return {"ok": False, "missing": f"n/a ({name}: {x.missing.removeprefix('n/a (').removesuffix(')')})"}
        c = compare(base.values, with_.values)
        diff = c.diff
        t = diff / 2
        p = c.p
        t_ci = (c.diff_ci[0] / 2, c.diff_ci[1] / 2)
        return {"ok": True, "diff": diff, "t": t, "t_ci": t_ci, "tp": 1 / (t * 1e3) if t > 0 else math.inf,
                "tp_ci": _tp_ci(t_ci), "p": p, "p_holm": math.nan, "significant": False,
                "n": min(len(with_.values), len(base.values))}

    # ---- tables ------------------------------------------------------------------------------------------
    def _table1(self, data: Dataset, scen: dict) -> TableData:
        rows, userspace = [], []
        for role, attach, enc, what, adds in ROLES:
            sc = scen[role]
            labels = sc["labels"] if sc else {}
            text = what.format(switch=labels.get("switch", "ovs"), encryption=labels.get("encryption", "ipsec"))
            impl = " + ".join(v for v in (sc or {}).get("implementation", {}).values() if v and v != "none") \
                if sc else ""
            if "libipsec" in impl or "userspace" in impl or "netdev" in impl:
                userspace.append(role)
            if sc and sc["status"] == "done":
                reps = data.repetitions(sc["idx"])
                status = f"measured ({reps} repetition{'s' if reps != 1 else ''})"
            else:
                status = data.missing_text(sc)
            rows.append([role, text, adds, impl or "-", status])
        note = ("Every scenario runs between VM1 on host A and VM3 on host B (placement cross-host). The SR-IOV virtual "
                "function is emulated by a macvlan of the host NIC: like a VF it bypasses the host's virtual switch.")
        if userspace:
            note += (" Userspace datapaths in this campaign (" + ", ".join(userspace) + "): their costs include the "
                     "trips between kernel and user space, so absolute numbers are not the kernel datapaths' costs.")
        return TableData("Scenarios and what each adds (the paper's section III)", ["scenario", "what it is", "adds", "implementation",
                                                                   "status"], rows, note)

    @staticmethod
    def _with_ci(x: Measure, fmt) -> str:
        lo, hi = x.ci
        return fmt(x.summary.median) + ("" if math.isnan(lo) else f" [{fmt(lo)} – {fmt(hi)}]{x.ci_label}")

    def _table2(self, m: dict, e: Entries) -> TableData:
        rows = []
        for role, *_ in ROLES:
            tr, trs = m[(role, "TR")], m[(role, "TRS")]
            cells = []
            for x in (tr, trs, *((m[(role, "TRSc")],) if e.trc is not None else ())):
                iqr = summarize(x.pooled).iqr if x.pooled else math.nan
                cells += [self._with_ci(x, ms), ms(iqr) if math.isfinite(iqr) else "n/a"] if x.ok else [x.missing, "n/a"]
            n = f"{len(tr.values)} / {len(trs.values)}"
            cv = " / ".join(f"{summarize(x.pooled).cv * 100:.1f} %" if x.ok and len(x.pooled) > 1 else "-"
                            for x in (tr, trs))
            rows.append(_dedupe([role, *cells, n, cv]))
        return TableData(
            "Table I — Response times TR and TRS (ms): median over trials [95 % CI], IQR of the echoes",
            ["scenario", f"TR median [95% CI] ({e.tr_size + 8} B)", "TR IQR (echoes)",
             f"TRS median [95% CI] ({e.trs_size + 8} B)", "TRS IQR (echoes)",
             *([f"TRS median [95% CI] ({e.trc_size + 8} B, the largest echo all five carry)", "its IQR (echoes)"]
               if e.trc is not None else []), "trials (TR / TRS)", "CV of the echoes (TR / TRS)"], rows,
            f"TR: ping with a {e.tr_size}-byte payload ({e.tr_size + 8}-byte ICMP message), unsaturated; TRS: "
            f"{e.trs_size}-byte payload ({e.trs_size + 8}-byte ICMP message, the largest ping allows), saturated. "
            "Each trial's value is the median of its echoes; the table gives the median of those over the trials "
            "with its exact order-statistic CI (the trial, not the echo, is the replication): 95 % from 6 trials "
            "on; below that the interval is min–max and says its own coverage (75 % at 3 trials). The IQR and "
            "CV are over the pooled echoes of all trials, the study's dispersion (its standard deviation was over "
            "2 % of the mean everywhere, and more samples did not reduce it)."
            + (f" Kernel ESP encrypts an echo whole before fragmenting it, so the {e.trs_size + 8}-byte echo does not "
               f"fit through IPsec (n/a there); TRS is also measured at {e.trc_size + 8} B, the largest echo all five "
               "scenarios carry, and the saturated findings are tested on it." if e.trc is not None else ""))

    @staticmethod
    def _mech_cells(x: dict) -> list[str]:
        if not x["ok"]:
            return [x["missing"], "n/a"]
        ns = _mark(x)
        lo, hi = x["t_ci"]
        ci = "" if math.isnan(lo) else f" [{ms(lo)} – {ms(hi)}]"
        return [ms(x["diff"]) + ns, ms(x["t"]) + ci + ns]

    def _mech_table(self, number: str, title: str, names: tuple[str, ...], mech: dict, e: Entries,
                    tests: int) -> TableData:
        """One of the paper's Tables II-IV: a mechanism's cost diff, t = diff / 2 and TP = 1 / t, unsaturated and
        saturated (and saturated at the size every scenario carries)."""
        sizes = {"TR": e.tr_size, "TRS": e.trs_size, "TRSc": e.trc_size}
        cols, rows = ["mechanism", "measured as"], []
        for key in self._rt_keys(e):
            cols += [f"diff {key} ({sizes[key] + 8} B)", f"t {key} [95% CI]", f"TP {key} [95% CI] (packets/ms)"]
        least = min((x["n"] for (name, _), x in mech.items() if name in names and x["ok"]), default=0)
        for name, with_, base in MECHANISMS:
            if name in names:
                cells = []
                for key in self._rt_keys(e):
                    cells += [*self._mech_cells(mech[(name, key)]), self._tp_cell(mech[(name, key)])]
                rows.append(_dedupe([name, f"{with_} − {base}", *cells]))
        return TableData(
            f"Table {number} — {title}: diff of response times, one-way cost t = diff / 2 (ms), TP = 1 / t", cols, rows,
            "diff = TR (TRS) of the scenario with the mechanism minus that of the scenario without it, each the "
            "mean over trials of the trial's median echo; a round trip crosses the mechanism twice, so its one-way "
            "cost is t = diff / 2, and TP = 1 / t (t in ms) the packets per millisecond the mechanism alone could "
            "process. The CI of t is Welch's 95 % interval of diff, halved; TP's is 1 / that ('≥ x' when it reaches "
            "zero). " + (f"'(n.s.)': the permutation test of Welch's t (exact up to 8 trials a side) on the per-trial "
                         f"medians gives p >= 0.05 after Holm's correction over the {tests} comparisons of Tables "
                         f"II-IV; '({NO_TEST})': " if tests else f"No comparison of Tables II-IV was tested: '({NO_TEST})': ")
            + f"the exact test cannot reach p < 0.05 at those trials. TRS: the {sizes['TRS'] + 8}-byte echo"
            + (f"; TRSc: the {sizes['TRSc'] + 8}-byte echo every scenario carries." if e.trc is not None else ".")
            + (f" {t_note(least)}" if t_note(least) else ""))

    @staticmethod
    def _tp_cell(x: dict) -> str:
        if not x["ok"]:
            return x["missing"]
        ns = _mark(x)
        if x["t"] <= 0:
            return "no cost measured (t ≤ 0)" + ns
        lo, hi = x["tp_ci"]
        ci = "" if math.isnan(lo) else (f" [{rate(lo)} – {rate(hi)}]" if math.isfinite(hi) else f" [≥ {rate(lo)}]")
        return rate(x["tp"]) + ci + ns

    @staticmethod
    def _packet_rate(data: Dataset, sc: dict | None, e: Entries) -> str:
        """A scenario's PDR of the ndrpdr entry's smallest frame: median over trials [order-statistic CI], and
        "generator-bound" when the search flagged a trial's rate so (workloads/ndrpdr.py: within 10 % of the
        generator's own ceiling, or no load it offered was too much for the path)."""
        frame = {"frame_size": e.pkt_size}
        pdr = data.values(sc["idx"], e.pkt, "pdr_pps", **frame) if sc else []
        if not pdr:
            return data.missing_text(sc, e.pkt)
        bound = any(s["metadata"].get("generator_bound")
                    for _, s in data.select("pdr_pps", scenario=sc["idx"], workload=e.pkt, **frame))
        return S1._with_ci(_measure(pdr, "", []), pps) + (" (generator-bound)" if bound else "")

    def _table5(self, m: dict, loss: dict, sent: dict, bandwidth: dict, e: Entries,
                offered: float | None, packets: dict | None = None) -> TableData:
        rows = []
        achieved = []
        for role, *_ in ROLES:
            tt, tts, bw = m[(role, "TT")], m[(role, "TTS")], bandwidth[role]
            if bw:
                b = summarize(bw).median
                study = [f"{b / 1e6:,.1f}", pps(b / (8 * 64)), pps(b / (8 * 65515))]
            else:
                study = [tts.missing or "n/a", "n/a", "n/a"]
            lost = f"{summarize(loss[role]).median * 100:.1f} %" if loss[role] and tt.ok else "n/a"
            if sent[role]:
                s_med = summarize(sent[role]).median
                achieved.append(s_med / offered if offered else math.nan)
                sent_cell = f"{s_med / 1e6:,.1f}" + (f" of {offered / 1e6:,.0f}" if offered else "")
            else:
                sent_cell = "n/a"
            own = [self._with_ci(tt, pps) if tt.ok else tt.missing, sent_cell, lost,
                   self._with_ci(tts, pps) if tts.ok else tts.missing]
            rows.append(_dedupe([role, *study, *own, *([packets[role]] if packets else [])]))
        return TableData(
            "Table V — Transfer rates: the study's conversion of one bandwidth, beside vnetbench's two transfers",
            ["scenario", "as the study: bandwidth (Mbit/s)", "as the study: TT (64 B packets/s)",
             "as the study: TTS (65515 B packets/s)",
             f"measured: TT [95% CI] ({e.tt_size + 8} B datagrams/s at the receiver)" if e.tt is not None
             else "measured: TT [95% CI]",
             "measured: TT sender achieved (Mbit/s)", "measured: TT datagram loss",
             f"measured: TTS [95% CI] ({e.tts_size + 8} B packets/s)",
             *([f"measured: TT as a packet rate: PDR [95% CI] ({e.pkt_size} B frames/s)"] if packets else [])], rows,
            "As the study: one bandwidth measured with iperf (here the TTS transfer's "
            f"{e.tts_proto.upper()} goodput at the receiver, median over trials), converted to packets per second at "
            "64 bytes (TT = bandwidth / (64 x 8)) and at 65515 bytes (TTS = bandwidth / (65515 x 8)): the same "
            "bandwidth, so the two columns differ only by the packet size. Measured by vnetbench: two transfers. "
            + self._tt_note(e, offered, achieved) + " " + self._tts_note(e) + self._pkt_note(e, packets)
            + " Medians over trials with their exact order-statistic CI (95 % from 6 trials on; below that min–max, "
              "labelled with its coverage).")

    @staticmethod
    def _tt_note(e: Entries, offered: float | None, achieved: list[float]) -> str:
        if e.tt is None:
            return "TT: no transfer of small packets in this campaign."
        if e.tt_proto != "udp":
            return f"TT: {e.tt_proto.upper()} goodput at the receiver / ({e.tt_size} bytes x 8)."
        text = (f"TT: UDP datagrams of {e.tt_size + 8} bytes ({e.tt_size}-byte payload + 8-byte header, IP packet "
                f"{e.tt_size + 28} bytes), counted at the receiver: TT = receiver goodput / ({e.tt_size} bytes x 8)")
        ok = [a for a in achieved if math.isfinite(a)]
        if not offered or not ok:
            return text + "."
        text += f", offered at {offered / 1e6:,.0f} Mbit/s of payload. "
        if max(ok) < 0.9:
            return text + (f"The sender never reached that rate (it sent {min(ok):.0%} to {max(ok):.0%} of it): "
                           "iperf3's sender, writing one small datagram per system call, was the limit, so TT measures "
                           "the sender and the path together, not the path alone.")
        if min(ok) >= 0.9:
            return text + ("The sender reached the offered rate in every scenario, so what the receiver lacks was lost "
                           "on the path (the loss column).")
        return text + (f"The sender reached {min(ok):.0%} to {max(ok):.0%} of it: where it fell short, the sender, not "
                       "the path, was the limit.")

    @staticmethod
    def _pkt_note(e: Entries, packets: dict | None) -> str:
        if not packets:
            return ""
        return (f" TT as a packet rate: the highest rate of {e.pkt_size}-byte frames the path forwards with at most "
                "0.5 % loss (PDR, RFC 9971, searched by MLRsearch; frames counted at the receiver's interface, what "
                "the generator did not send never counted as loss), one search a trial; 'generator-bound': within "
                "10 % of the generator's own ceiling over a bare veth pair on the same kernel, so the rate may be the "
                "generator's, not the path's.")

    @staticmethod
    def _tts_note(e: Entries) -> str:
        return (f"TTS: {e.tts_proto.upper()} goodput at the receiver, written in {e.tts_size}-byte messages, expressed "
                f"in {e.tts_size + 8}-byte packets: TTS = goodput / ({e.tts_size} bytes x 8)."
                + (" TCP rather than UDP because a datagram of that size leaves as dozens of IP fragments and, above "
                   "the path's capacity, one lost fragment loses it: the UDP receiver count collapses with the "
                   "offered rate instead of measuring the path." if e.tts_proto == "tcp" else ""))

    # ---- figures -----------------------------------------------------------------------------------------
    @staticmethod
    def _bars(ax, m: dict, key: str, scale: float, ylabel: str, title: str) -> None:
        names = [role for role, *_ in ROLES]
        for i, role in enumerate(names):
            x = m[(role, key)]
            if x.ok:
                med = x.summary.median
                ax.bar(i, med * scale, color=f"C{i}", alpha=0.85)
                lo, hi = x.ci
                if not math.isnan(lo):  # the CI of a non-negative median: never below zero
                    ax.errorbar(i, med * scale, yerr=[[(med - max(lo, 0.0)) * scale], [(hi - med) * scale]],
                                color="black", capsize=4, lw=1)
            else:
                ax.text(i, 0, "n/a", ha="center", va="bottom", color="grey", fontsize=9)
        ax.set_xticks(range(len(names)), names, rotation=20)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_axisbelow(True)

    def _figure_rt(self, m: dict, e: Entries) -> FigureData:
        fig = Figure(figsize=(11, 4), layout="constrained")
        a, b = fig.subplots(1, 2)
        self._bars(a, m, "TR", 1e3, "ms", f"TR: {e.tr_size + 8}-byte echoes (unsaturated)")
        self._bars(b, m, "TRS", 1e3, "ms", f"TRS: {e.trs_size + 8}-byte echoes (saturated)")
        return FigureData("s1-response-times", "Response times TR and TRS per scenario", fig,
                          "Bars: median over trials of each trial's median echo; whiskers: its exact order-statistic "
                          "CI (95 % from 6 trials on, min–max below: 75 % at 3). n/a: scenario skipped or without data (Table I says why).")

    def _figure_tt(self, m: dict, e: Entries) -> FigureData:
        fig = Figure(figsize=(11, 4), layout="constrained")
        a, b = fig.subplots(1, 2)
        self._bars(a, m, "TT", 1, "packets/s", f"TT: {e.tt_size + 8}-byte packets")
        self._bars(b, m, "TTS", 1, "packets/s", f"TTS: {e.tts_size + 8}-byte packets")
        return FigureData("s1-transfer-rates", "Transfer rates TT and TTS per scenario, in packets per second", fig,
                          "Bars: median over the transfer tests (one value per trial); whiskers: its exact "
                          "order-statistic CI (95 % from 6 trials on, min–max below: 75 % at 3). Table V says how each was measured.")

    # ---- findings ----------------------------------------------------------------------------------------
    def _findings(self, m: dict, mech: dict, scen: dict, loss: dict, sat: str = "TRS", sat_bytes: int = 0) -> list[str]:
        """The findings are one Holm family (built twice, see Family). `sat`: the saturated response time the
        saturated findings use (TRSc, the echo every scenario carries, when the campaign has it)."""
        family = Family()
        out = family.build(lambda: self._findings_once(m, mech, family, sat, sat_bytes))
        return out + [f"Findings: the permutation test of Welch's t (exact up to 8 trials a side), or Welch's test of a contrast where two costs are compared, on "
                      f"per-trial values; Holm over the {family.size} tests of these findings (alpha 0.05)."]

    def _findings_once(self, m: dict, mech: dict, family: Family, sat: str = "TRS", sat_bytes: int = 0) -> list[str]:
        out = []
        at = f" (TRS at {sat_bytes} B, the largest echo all five scenarios carry)" if sat == "TRSc" else ""
        roles = {name: (with_, base) for name, with_, base in MECHANISMS}

        def t_of(name, key):
            x = mech[(name, key)]
            return x["t"] if x["ok"] else None

        def why(*keys) -> str:
            gone = [mech[k]["missing"] for k in keys if not mech[k]["ok"]]
            return gone[0] if gone else "n/a"

        def tdesc(name, key):
            x = mech[(name, key)]
            tp = rate(x["tp"]) + " packets/ms" if x["t"] > 0 else "no cost measured"
            return f"{name} t = {ms(x['t'])} ms (TP {tp})"

        def larger(first: str, second: str, key: str) -> str:
            """Is first's cost larger than second's? A contrast test, one member of the family:
            'yes' / 'no, smaller' / 'cannot tell'."""
            (w1, b1), (w2, b2) = roles[first], roles[second]
            c = contrast([(1, m[(w1, key)].values), (-1, m[(b1, key)].values),
                          (-1, m[(w2, key)].values), (1, m[(b2, key)].values)])
            p = family.adjusted_p(c.p)
            if c.why or not math.isfinite(p):
                return UNTESTED
            if not p < 0.05:
                return "cannot tell"
            return "yes" if c.estimate > 0 else "no, smaller"

        def overall(answers: list[str]) -> str:
            if answers and all(a == "yes" for a in answers):
                return "yes"
            if any(a.startswith("no") for a in answers):
                return "no"
            if answers and all(a == UNTESTED for a in answers):
                return UNTESTED
            return "cannot tell (the costs do not differ significantly)"

        # 1. IPsec is the bottleneck when saturated: its cost larger than every other mechanism's
        others = [n for n, *_ in MECHANISMS if n not in ("IPsec", "IPsec on SR-IOV")]
        ti = t_of("IPsec", sat)
        to = {n: t_of(n, sat) for n in others if t_of(n, sat) is not None}
        if ti is None or not to:
            out.append(f"IPsec is the bottleneck when saturated: cannot be checked: {why(('IPsec', sat), ('OvS (virtual switch)', sat))}")
        else:
            answers = {n: larger("IPsec", n, sat) for n in to}
            out.append(f"IPsec is the bottleneck when saturated{at}: {overall(list(answers.values()))} — "
                       + "; ".join(tdesc(n, sat) for n in ["IPsec", *to])
                       + "; IPsec's cost larger than " + ", ".join(f"{n}'s: {a}" for n, a in answers.items()) + ".")
        # 2. the virtual switch is the bottleneck when not saturated
        tv, ti = t_of("OvS (virtual switch)", "TR"), t_of("IPsec", "TR")
        if tv is None or ti is None:
            out.append("The virtual switch is the bottleneck when not saturated: cannot be checked: "
                       + why(("OvS (virtual switch)", "TR"), ("IPsec", "TR")))
        else:
            answer = overall([larger("OvS (virtual switch)", "IPsec", "TR")])
            out.append(f"The virtual switch is the bottleneck when not saturated: {answer} — "
                       f"{tdesc('OvS (virtual switch)', 'TR')}; {tdesc('IPsec', 'TR')}.")
        # 3. SR-IOV improves both response time and transfer rate (against the switched Reference)
        parts, verdicts, gone = [], [], []
        for key, lower in (("TR", True), ("TRS", True), ("TT", False), ("TTS", False)):
            s, r = m[("SR-IOV", key)], m[("Reference", key)]
            if not s.ok or not r.ok:
                gone.append((s if not s.ok else r).missing)
                continue
            better = s.summary.mean < r.summary.mean if lower else s.summary.mean > r.summary.mean
            sig = family.significant(s.values, r.values)
            verdicts.append("yes" if better and sig else "no" if sig else "?")
            fmt = (lambda v: f"{ms(v)} ms") if lower else (lambda v: f"{pps(v)} packets/s")
            parts.append(f"{key} {fmt(s.summary.median)} vs {fmt(r.summary.median)}"
                         f"{'' if sig else ' (n.s.)'}")
        if not verdicts:
            out.append(f"SR-IOV improves both response time and transfer rate: cannot be checked: {gone[0]}")
        else:
            verdict = ("yes" if all(v == "yes" for v in verdicts) and not gone else
                       "partly" if "yes" in verdicts else "no" if "no" in verdicts else
                       "cannot tell (no difference is significant)")
            out.append(f"SR-IOV improves both response time and transfer rate (SR-IOV vs Reference): {verdict} — "
                       + "; ".join(parts) + (f"; not measured: {gone[0]}" if gone else "") + ".")
        # 4. SR-IOV cannot hide IPsec's cost when saturated
        both, sriov = m[("IPsec+SR-IOV", sat)], m[("SR-IOV", sat)]
        x = mech[("IPsec on SR-IOV", sat)]
        tv = t_of("OvS (virtual switch)", sat)
        if not x["ok"]:
            out.append(f"SR-IOV cannot hide IPsec's cost when saturated: cannot be checked: {x['missing']}")
        else:
            costs = family.significant(sriov.values, both.values) and x["t"] > 0
            above = larger("IPsec on SR-IOV", "OvS (virtual switch)", sat) if tv is not None else "yes"
            answer = "yes" if costs and above == "yes" else "no" if above.startswith("no") else \
                "cannot tell (not significant)"
            text = (f"SR-IOV cannot hide IPsec's cost when saturated{at}: {answer} — TRS IPsec+SR-IOV "
                    f"{ms(both.summary.median)} ms vs SR-IOV {ms(sriov.summary.median)} ms; {tdesc('IPsec on SR-IOV', sat)}")
            if tv is not None:
                text += f", against {tdesc('OvS (virtual switch)', sat)}"
            out.append(text + ".")
        # 5. the dispersion that made the study use medians
        groups = [(role, key) for role, *_ in ROLES for key in ("TR", "TRS") if m[(role, key)].ok
                  and len(m[(role, key)].pooled) > 1]
        over = [g for g in groups if summarize(m[g].pooled).cv > CV_LIMIT]
        if groups:
            out.append(f"Dispersion: the standard deviation exceeds {CV_LIMIT:.0%} of the mean in {len(over)} of "
                       f"{len(groups)} response-time groups, over the pooled echoes (the study saw it everywhere, hence "
                       f"medians and IQRs).")
        return out
