"""S3 — IPsec AH and ESP performance: stream throughput and request/response rate per IPsec variant x message size
x IP version (x router hops x other CPU load), each relative to no IPsec; what happened to every requested IPsec
variant; the video-like stream; the effect of IPv6, routers and CPU load; the study's findings checked."""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from ...core.units import human
from ...results import guards, stats
from ...results.dataset import Trial, load
from ...results.stats import compare, holm
from ...results.store import Store
from ...workloads.netperf import DEFAULT_SIZE
from . import register
from ._cells import DASH, figure, mean_cell, mean_ci, median, noted, pct, relative, saw, scale, spread, style
from .base import Analysis, AnalysisResult, FigureData, TableData

NONE = "no IPsec"
# test -> (title, metric, unit, how the per-trial value is made)
TESTS = {
    "TCP_STREAM": ("TCP stream throughput (netperf TCP_STREAM, at the receiver)", "throughput_bps", "bit/s"),
    "UDP_STREAM": ("UDP stream throughput (iperf3 UDP at a bounded rate, at the receiver)", "throughput_bps", "bit/s"),
    "TCP_RR": ("TCP request/response rate (netperf TCP_RR)", "transactions_per_s", "1/s"),
    "UDP_RR": ("UDP request/response rate (netperf UDP_RR)", "transactions_per_s", "1/s"),
}
VIDEO = "video"
RR = ("TCP_RR", "UDP_RR")
# The slides number experiments, not tables: 1 two hosts on one link (TCP throughput, DBS), 2 through routers (netperf
# STREAM and REQUEST/RESPONSE tests, IPv4/IPv6, AH/ESP/AH+ESP), 3 digital video over the wide area. Each table says
# which one it stands for.
SLIDES = {"TCP_STREAM": "the slides' experiment 2, STREAM test (0 routers: experiment 1's one link)",
          "UDP_STREAM": "the slides' experiment 2, STREAM test",
          "TCP_RR": "the slides' experiment 2, REQUEST/RESPONSE test", "UDP_RR": "the slides' experiment 2, "
          "REQUEST/RESPONSE test", VIDEO: "the slides' experiment 3, digital video (here on one machine, not the wide area)"}
KEY_COLUMNS = ["message size (B)", "IP", "routers", "other load"]
MIN_TRIALS = 3   # trials a cell needs for the AH/ESP verdict and the per-cell comparisons
CHANGE_THRESHOLD = 0.10  # "about equal": the median relative difference is within +-10 %
SHORT = "trials offered less than their rate"
OFFERED_NOTE = (f"'k of n {SHORT}': in k of the n trials behind the number, a rate-bounded sender (or a background "
                f"flood) offered less than {100 * guards.OFFERED_SHORT:.0f} % of the rate asked. They are kept (what "
                f"the receiver counted is still what the datapath carried), but the number is not at the load asked.")


def variant_name(level) -> str:
    """'AH (HMAC-SHA1)', 'ESP (3DES-CBC, HMAC-SHA1)', 'no IPsec' from an encryption level as written."""
    if not isinstance(level, dict):
        return NONE if level == "none" else str(level)
    if level.get("type") != "ipsec":
        return str(level.get("type"))
    proto = str(level.get("protocol", "esp")).upper()
    algos = [str(level[k]).upper() for k in ("cipher", "integrity") if level.get(k) and level[k] != "none"]
    if proto == "AH":
        algos = [a for a in algos if a.startswith("HMAC")]
    extra = [f"{level[k]}" for k in ("mode", "keying") if k in level]
    return f"{proto} ({', '.join(algos)})" + (f" {'/'.join(extra)}" if extra else "") if algos else proto


def test_of(t: Trial) -> str | None:
    p = t.params
    if t.kind == "netperf":
        return p.get("test")
    if t.kind == "iperf3" and p.get("protocol") == "udp":
        video = t.labels.get("traffic") == VIDEO or (p.get("message_size") == 500 and p.get("udp_rate", 0) <= 50e6)
        return VIDEO if video else "UDP_STREAM"
    return None


def size_of(t: Trial) -> int | None:
    size = t.params.get("message_size")
    if size is None and t.kind == "netperf":
        return DEFAULT_SIZE["RR" if str(t.params.get("test", "")).endswith("_RR") else "STREAM"]
    return size


def conditions(t: Trial) -> tuple[str, str, str]:
    """(IP version, routers, other load) of a trial's scenario."""
    return (t.labels.get("ip_version", "4"), t.labels.get("hops", "0"), t.labels.get("other_load", "none"))


@register
class S3(Analysis):
    name = "s3"
    title = "S3 — IPsec AH and ESP performance"

    def run(self, store: Store, campaign: int) -> AnalysisResult:
        data = load(store, campaign)
        scenarios, trials = data.scenario_list, data.ok
        env = (data.campaign.environment or {})
        self.kernel = {s["idx"]: ran_in(s, env) for s in scenarios}
        self.impl = {s["idx"]: (s.get("implementation") or {}).get("encryption", "") for s in scenarios}
        self.where: dict[tuple, set[tuple[str, str, str]]] = defaultdict(set)  # row -> (variant, impl, kernel)
        self.skipped = skipped_variants(scenarios)
        modes = list(dict.fromkeys(variant_name(s["levels"].get("encryption", "none")) for s in scenarios))
        if NONE in modes:
            modes.remove(NONE)
            modes.insert(0, NONE)
        cells: dict[tuple, list[float]] = defaultdict(list)  # (test, size, ip, hops, load, mode) -> per-trial values
        video: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        floors: dict[tuple, list[float]] = defaultdict(list)  # RR cells as `cells` -> per-trial fastest round trip
        self.members: dict[tuple, list[Trial]] = defaultdict(list)  # cell or video key -> its trials
        for t in trials:
            test = test_of(t)
            mode = variant_name(t.levels.get("encryption", "none"))
            if test in TESTS:
                value = t.total(TESTS[test][1])
                if value is not None:
                    cells[(test, size_of(t), *conditions(t), mode)].append(value)
                    self.members[(test, size_of(t), *conditions(t), mode)].append(t)
                    if test in RR and (floor := t.mean("latency_min_s")) is not None:
                        floors[(test, size_of(t), *conditions(t), mode)].append(floor)
                    self.where[(test, size_of(t), *conditions(t))].add(
                        (mode, self.impl.get(t.scenario, ""), self.kernel.get(t.scenario, "")))
            elif test == VIDEO:
                self.members[(*conditions(t), mode)].append(t)
                for metric, fn in (("throughput_bps", t.total), ("udp_loss_ratio", t.mean), ("jitter_s", t.mean)):
                    if (v := fn(metric)) is not None:
                        video[(*conditions(t), mode)][metric].append(v)
        ran = [m for m in modes if any(k[-1] == m for k in cells) or any(k[-1] == m for k in video)]
        result = AnalysisResult()
        result.tables.append(self._variants(scenarios))
        for test in TESTS:
            if any(k[0] == test for k in cells):
                result.tables.append(self._table(test, cells, ran))
        if video:
            result.tables.append(self._video(video, ran))
        versus = self._versus_table(cells, ran)
        if versus.rows:
            result.tables.append(versus)
        effects = self._effects(cells, ran)
        if effects.rows:
            result.tables.append(effects)
        if cells:
            result.figures.append(self._figure(cells, ran))
        result.findings = self._findings(scenarios, cells, video, ran)
        if (rr := rr_floor_finding(cells, floors, ran, self._short(floors))):
            result.findings.append(rr)
        return result

    # ---- tables ------------------------------------------------------------------------------------------
    def _variants(self, scenarios: list[dict]) -> TableData:
        by: dict[str, list[dict]] = defaultdict(list)
        for s in scenarios:
            by[variant_name(s["levels"].get("encryption", "none"))].append(s)
        rows = []
        for name, group in by.items():
            level = group[0]["levels"].get("encryption", "none")
            opts = level if isinstance(level, dict) else {"type": level}
            done = [s for s in group if s["status"] == "done"]
            outcome = []
            if done:
                impl = sorted({s["implementation"].get("encryption", "") for s in done} - {"", "none"})
                kernels = sorted({self.kernel.get(s["idx"], "") for s in done} - {""})
                outcome.append(f"ran in {len(done)} scenario(s)" + (f" with {', '.join(impl)}" if impl else "")
                               + (f" in the {', '.join(kernels)}" if kernels else ""))
            for status in ("skipped", "failed", "pending", "running"):
                reasons = sorted({s["reason"] or "" for s in group if s["status"] == status})
                n = sum(s["status"] == status for s in group)
                if n:
                    outcome.append(f"{status} in {n} scenario(s): " + " | ".join(r for r in reasons if r) if any(reasons)
                                   else f"{status} in {n} scenario(s)")
            rows.append([name, str(opts.get("protocol", DASH if name == NONE else "esp")).upper(),
                         str(opts.get("cipher", DASH)), str(opts.get("integrity", DASH)), str(opts.get("mode", DASH)),
                         str(opts.get("keying", DASH)), "; ".join(outcome)])
        return TableData("S3 — IPsec variants requested and what happened",
                         ["variant", "protocol", "cipher", "integrity", "mode", "keying", "outcome"], rows,
                         "Every encryption level of the campaign, with the scenarios that ran, and the reason given for "
                         "those skipped (the implementation decides: AH, transport mode and manual keys need the "
                         "kernel's xfrm AH/ESP transforms).")

    @noted
    def _table(self, test: str, cells: dict, modes: list[str]) -> TableData:
        title, metric, unit = TESTS[test]
        keys = sorted({k[1:5] for k in cells if k[0] == test}, key=_order)
        present = [m for m in modes if any(k[0] == test and k[-1] == m for k in cells)]
        cols = list(KEY_COLUMNS) + ["ran in", "IPsec implementation"]
        for m in present:
            cols += [m] if m == NONE else [m, f"{m} vs {NONE}"]
        rows, marks = [], []
        for size, ip, hops, load_ in keys:
            where = self.where.get((test, size, ip, hops, load_), set())
            impls = sorted({f"{m}: {i}" for m, i, _ in where if m != NONE and i and i != "none"})
            row = [str(size), f"IPv{ip}", hops, load_, ", ".join(sorted({k for *_, k in where if k})) or DASH,
                   "; ".join(impls) or DASH]
            base = cells.get((test, size, ip, hops, load_, NONE), [])
            for m in present:
                vals = cells.get((test, size, ip, hops, load_, m), [])
                row.append(mean_ci(vals, unit) + self._short([(test, size, ip, hops, load_, m)]))
                if m != NONE:
                    row.append(_versus(vals, base))
                    if len(vals) >= 2 and len(base) >= 2:
                        marks.append((row, len(row) - 1, compare(base, vals)))
            rows.append(row)
        for (row, col, c), p in zip(marks, holm([c.p for _, _, c in marks])):
            if p < 0.05:
                row[col] += "*"
        note = (f"In the study: {SLIDES[test]}. Mean over repetitions ± the half-width of its 95 % confidence interval (Student t); {metric}. "
                f"'vs {NONE}' is mean / mean(no IPsec) - 1, marked * when the two differ significantly: the permutation test of Welch's t (exact up to 8 trials a side) on "
                f"the per-trial values, Holm-corrected over the {len(marks)} comparisons of this table (alpha 0.05); "
                f"fewer than 2 trials a side: no test. Columns appear only for variants that ran. 'ran in': the kernel that carried the "
                f"row's packets; 'IPsec implementation': what ran each variant.")
        gone = [f"{m} ({why})" for m, why in self.skipped.items() if m not in present]
        if gone:
            note += " Not in this table, skipped: " + "; ".join(gone) + "."
        note += offered_text(rows)
        if test == "UDP_STREAM":
            note += (" netperf UDP_STREAM cannot be rate-bounded, so iperf3 offers the datagrams at a bounded rate "
                     "and the receiver counts what arrived.")
        return TableData(f"S3 — {title}", cols, rows, note)

    @noted
    def _video(self, video: dict, modes: list[str]) -> TableData:
        keys = sorted({k[:3] for k in video}, key=lambda k: _order((0, *k)))
        present = [m for m in modes if any(k[-1] == m for k in video)]
        cols = KEY_COLUMNS[1:] + [f"{m}: {what}" for m in present for what in ("throughput", "loss", "jitter")]
        rows = []
        for ip, hops, load_ in keys:
            row = [f"IPv{ip}", hops, load_]
            for m in present:
                got = video.get((ip, hops, load_, m), {})
                row += [mean_ci(got.get("throughput_bps", []), "bit/s") + self._short([(ip, hops, load_, m)]),
                        mean_cell(got.get("udp_loss_ratio", []), "ratio"),
                        mean_cell(got.get("jitter_s", []), "s")]
            rows.append(row)
        return TableData("S3 — video-like UDP stream (iperf3, 500-byte payloads at 30 Mbit/s, at the receiver)", cols,
                         rows, f"In the study: {SLIDES[VIDEO]}. Throughput, datagram loss and RFC 3550 jitter as the receiver counted them; mean over "
                               "repetitions." + offered_text(rows))

    def _effects(self, cells: dict, modes: list[str]) -> TableData:
        """Relative change of each test's result with IPv6, with routers and with CPU load, per variant: the
        median over cells that match in every other factor, with the range."""
        hops_levels = sorted({k[3] for k in cells}, key=_num)
        ips = {k[2] for k in cells}
        loads = {k[4] for k in cells}
        cols = ["variant", "test"] + (["IPv6 vs IPv4"] if {"4", "6"} <= ips else [])
        cols += [f"{h} router(s) vs {hops_levels[0]}" for h in hops_levels[1:]]
        cols += ["CPU load vs none"] if {"none", "cpu"} <= loads else []
        rows = []
        for m in modes:
            for test in TESTS:
                mine = {k[1:5]: v for k, v in cells.items() if k[0] == test and k[-1] == m}
                if not mine:
                    continue
                row = [m, test + self._short((test, *k, m) for k in mine)]
                if {"4", "6"} <= ips:
                    row.append(spread(_matched(mine, 1, "6", "4")))
                row += [spread(_matched(mine, 2, h, hops_levels[0])) for h in hops_levels[1:]]
                if {"none", "cpu"} <= loads:
                    row.append(spread(_matched(mine, 3, "cpu", "none")))
                rows.append(row)
        return TableData("S3 — effect of IPv6, routers and CPU load", cols, rows if len(cols) > 2 else [],
                         "Each cell: the median over message sizes and the other factors of mean(with) / mean(without) "
                         "- 1, with the smallest and largest change and how many matched cells there were."
                         + offered_text(rows))

    # ---- figure ------------------------------------------------------------------------------------------
    def _figure(self, cells: dict, modes: list[str]) -> FigureData:
        tests = [t for t in TESTS if any(k[0] == t for k in cells)]
        hops0 = min((k[3] for k in cells), key=_num)
        fig, axes = figure(len(tests), height=3.8)
        for ax, test in zip(axes, tests):
            title, _, unit = TESTS[test]
            mine = {k: v for k, v in cells.items() if k[0] == test and k[3] == hops0 and k[4] == "none"} or \
                {k: v for k, v in cells.items() if k[0] == test and k[3] == hops0}
            div, ulabel = scale(unit, [x for v in mine.values() for x in v])
            lines = sorted({(k[-1], k[2], k[4]) for k in mine}, key=lambda x: (modes.index(x[0]) if x[0] in modes else 99, x[1:]))
            for i, (m, ip, load_) in enumerate(lines):
                pts = sorted((k[1], sum(v) / len(v)) for k, v in mine.items() if (k[-1], k[2], k[4]) == (m, ip, load_))
                ax.plot([p[0] for p in pts], [p[1] / div for p in pts], marker="o",
                        label=f"{m}, IPv{ip}" + ("" if load_ == "none" else f", load {load_}"), **style(i))
            ax.set_xscale("log")
            ax.set_ylim(bottom=0)
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(ulabel)
            ax.set_title(test, fontsize=9)
            ax.legend(fontsize=7)
        fig.suptitle("S3 — throughput and transaction rate against message size", fontsize=11)
        return FigureData("s3-message-size", "S3 — throughput and transaction rate against message size", fig,
                          f"Mean over repetitions with {hops0} router(s) between the hosts and no other load where "
                          f"measured; one line per IPsec variant that ran and IP version.")

    @noted
    def _versus_table(self, cells: dict, modes: list[str]) -> TableData:
        """AH against each ESP cipher, and 3DES against Blowfish, per test, message size and condition: the ratio of
        means with Fieller's 95 % CI and Welch's p, Holm over the table; a cell needs MIN_TRIALS trials a side."""
        ah = [m for m in modes if m.startswith("AH ")]
        esp = [m for m in modes if m.startswith("ESP ")]
        pairs = [(a, e) for a in ah for e in esp] + [(b, d) for d in esp if "3DES" in d for b in esp if "BLOWFISH" in b]
        rows, comps = [], []
        for k in sorted({k[:-1] for k in cells}, key=lambda k: (k[0], _order(k[1:5]))):
            for num, den in pairs:
                a, b = cells.get((*k, num)), cells.get((*k, den))
                if not a or not b:
                    continue
                c = compare(b, a)
                enough = min(len(a), len(b)) >= MIN_TRIALS
                rows.append([k[0], str(k[1]), f"IPv{k[2]}", k[3], k[4], f"{num} / {den}",
                             f"{len(a)} / {len(b)}" + self._short([(*k, num), (*k, den)]), _ratio_text(c)])
                comps.append(c if enough else None)
        adjusted = holm([c.p if c is not None else math.nan for c in comps])
        for row, c, p in zip(rows, comps, adjusted):
            row.append(f"too few trials (needs {MIN_TRIALS} a side)" if c is None else
                       ("not significant" if not p < 0.05 else ("higher" if c.ratio > 1 else "lower"))
                       + (f" (Holm p = {p:.2g})" if math.isfinite(p) else ""))
        return TableData("S3 — AH vs ESP per cipher, and 3DES vs Blowfish, per test and message size",
                         ["test", "message size (B)", "IP", "routers", "other load", "variants (a / b)",
                          "trials (a / b)", "a / b [95 % CI]", "verdict"], rows,
                         "The ratio of the mean per-trial values with Fieller's 95 % CI; verdict: the permutation test of Welch's t, Holm "
                         f"over the table's cells with at least {MIN_TRIALS} trials a side. The study's AH/ESP "
                         "comparison is against ESP 3DES-CBC; Blowfish appears in the study only in the wide-area video."
                         + offered_text(rows))

    # ---- findings ----------------------------------------------------------------------------------------
    def _findings(self, scenarios: list[dict], cells: dict, video: dict, ran: list[str]) -> list[str]:
        out = []
        ipsec = [m for m in ran if m != NONE]
        requested = [r for r in dict.fromkeys(variant_name(s["levels"].get("encryption", "none")) for s in scenarios)
                     if r != NONE]
        skipped = sorted({s["reason"] for s in scenarios if s["status"] == "skipped"
                          and variant_name(s["levels"].get("encryption", "none")) != NONE and s["reason"]})
        why = (" Reasons: " + " | ".join(skipped[:4])) if skipped else ""
        if not ipsec:
            cannot = (f"cannot be checked on this machine: none of the {len(requested)} IPsec variant(s) ran, so only "
                      f"the no-IPsec baselines were measured.{why}")
            out.append(f"'IPsec lowers throughput': {cannot}")
            out.append("'AH gives about twice ESP's throughput': cannot be checked on this machine (no AH or ESP ran).")
            out.append("'For small request/response messages IPsec is not the bottleneck': cannot be checked on this "
                       "machine (no IPsec variant ran).")
        else:
            out += self._ipsec_findings(cells, ipsec)
        out.append(self._ip_finding(cells))
        out += self._extra_findings(cells)  # descriptive spreads, no verdict
        if video:
            base = [v for k, v in video.items() if k[-1] == NONE]
            short = self._short(k for k in video if k[-1] == NONE)
            if base:
                tput = median(x for v in base for x in v.get("throughput_bps", []))
                loss = median(x for v in base for x in v.get("udp_loss_ratio", []))
                jit = median(x for v in base for x in v.get("jitter_s", []))
                out.append(f"Video-like stream (500 B at 30 Mbit/s) without IPsec: the receiver got a median "
                           f"{human(tput, 'bit/s')} with {human(loss, 'ratio')} loss and {human(jit, 's')} jitter"
                           + short + ("" if ipsec else "; its behaviour under IPsec cannot be checked here") + ".")
        return resolve(out)

    def _short(self, keys) -> str:
        """' (2 of 6 trials offered less than their rate)' beside a number built on these cells' trials."""
        return offered_note([t for k in dict.fromkeys(keys) for t in self.members.get(k, [])])

    def _ipsec_findings(self, cells: dict, ipsec: list[str]) -> list[Claim]:
        out = []
        keys = [k for k in cells
                if k[0] in ("TCP_STREAM", "UDP_STREAM") and k[-1] in ipsec and (*k[:-1], NONE) in cells]
        stream = [(cells[(*k[:-1], NONE)], cells[k]) for k in keys]
        if stream:
            out.append(Claim("'IPsec lowers throughput'", stream, "lower",
                             f"stream throughput with / without IPsec over {len(stream)} cells"
                             + self._short(_with_base(keys))))
        ah = [m for m in ipsec if m.startswith("AH ")]
        esp = [m for m in ipsec if m.startswith("ESP ")]
        des = [m for m in esp if "3DES" in m]   # the study's ESP is 3DES-CBC: Blowfish is not pooled in
        if ah and des:
            both = [((*k[:-1], e), k) for k in cells
                    if k[0] in ("TCP_STREAM", "UDP_STREAM") and k[-1] in ah for e in des if (*k[:-1], e) in cells]
            pairs = [(e, a) for e, a in both if min(len(cells[e]), len(cells[a])) >= MIN_TRIALS]
            if pairs:
                out.append(Claim("'AH gives about twice ESP (3DES-CBC)'s throughput'",
                                 [(cells[e], cells[a]) for e, a in pairs], "higher",
                                 f"AH / ESP 3DES-CBC stream throughput over {len(pairs)} cells with at least "
                                 f"{MIN_TRIALS} trials each" + self._short(k for p in pairs for k in p),
                                 band=(1.5, 2.7)))
            elif both:
                out.append(f"'AH gives about twice ESP (3DES-CBC)'s throughput': cannot tell: none of the {len(both)} "
                           f"matched cells has {MIN_TRIALS} trials a side (the 'AH vs ESP per cipher' table shows them).")
        elif ah and esp:
            out.append("'AH gives about twice ESP (3DES-CBC)'s throughput': cannot be checked: no ESP 3DES-CBC ran "
                       "(the study's ESP; other ciphers are not pooled in).")
        else:
            out.append("'AH gives about twice ESP's throughput': cannot be checked: "
                       + ("no AH variant ran." if not ah else "no ESP variant ran."))
        small = [k for k in cells if k[0] in ("TCP_RR", "UDP_RR") and k[-1] in ipsec and (*k[:-1], NONE) in cells]
        if small:
            smallest = min(k[1] for k in small)
            keys = [k for k in small if k[1] == smallest]
            rr = [(cells[(*k[:-1], NONE)], cells[k]) for k in keys]
            out.append(Claim("'For small request/response messages IPsec is not the bottleneck'", rr, "equal",
                             f"transaction rate with / without IPsec at {smallest} bytes over {len(rr)} cells"
                             + self._short(_with_base(keys))))
        return out

    def _ip_finding(self, cells: dict) -> str | Claim:
        pairs = [((k[0], k[1], "4", *k[3:]), k) for k in cells if k[2] == "6" and (k[0], k[1], "4", *k[3:]) in cells]
        if not pairs:
            return "'IPv4 and IPv6 about equal': cannot be checked: the campaign did not measure both."
        return Claim("'IPv4 and IPv6 about equal'", [(cells[a], cells[b]) for a, b in pairs], "equal",
                     f"IPv6 / IPv4 over {len(pairs)} cells" + self._short(k for p in pairs for k in p))

    def _extra_findings(self, cells: dict) -> list[str]:
        out = []
        hops = sorted({k[3] for k in cells}, key=_num)
        for h in hops[1:]:
            pairs = [(k, b) for k in cells if k[3] == h and (b := (*k[:3], hops[0], *k[4:])) in cells]
            ch = [c for a, b in pairs if (c := relative(_mean(cells[a]), _mean(cells[b]))) is not None]
            if ch:
                out.append(f"Routers (not a finding of the study): {h} router(s) vs {hops[0]} change the results by "
                           f"{spread(ch)}{self._short(k for p in pairs for k in p)}.")
        pairs = [(k, b) for k in cells if k[4] == "cpu" and (b := (*k[:4], "none", k[5])) in cells]
        ch = [c for a, b in pairs if (c := relative(_mean(cells[a]), _mean(cells[b]))) is not None]
        if ch:
            out.append(f"Other CPU load (stress-ng on both hosts) changes the results by {spread(ch)}"
                       f"{self._short(k for p in pairs for k in p)}: the emulated hosts share this machine's CPUs, so "
                       f"the load competes with the traffic directly.")
        return out


def rr_floor_finding(cells: dict, floors: dict, modes: list[str], short: str = "") -> str | None:
    """Why a request/response rate can put IPsec above no IPsec, and IPsec's own cost on the round trip.
    netperf keeps one transaction in flight, so its rate is 1 / the mean round trip; in a guest that mean is mostly
    time the guest waited for this machine's CPUs, which other work changes from trial to trial (docs/suites.md has
    the measurement). The fastest round trip (MIN_LATENCY) is what that wait does not lengthen; its lowest over the
    cell's trials, as a whole trial can wait (descriptive: no verdict rests on it)."""
    keys = sorted({k[:-1] for k in floors if k[-1] == NONE}, key=lambda k: (k[0], _order(k[1:5])))
    if not keys or len(modes) < 2:
        return None
    above = [(k, m) for k in keys for m in modes if m != NONE and (*k, m) in cells
             and _mean(cells[(*k, m)]) > _mean(cells[(*k, NONE)])]
    parts = []
    for k in keys:
        base = min(floors[(*k, NONE)])
        got = [f"{m} {human(min(floors[(*k, m)]), 's')}" + ("" if m == NONE else
                                                              f" ({pct(relative(min(floors[(*k, m)]), base))})")
               for m in modes if floors.get((*k, m))]
        parts.append(f"{k[0]} {k[1]} B" + (f" IPv{k[2]}, {k[3]} router(s), load {k[4]}" if k[2:] != ("4", "0", "none")
                                          else "") + ": " + ", ".join(got))
    odd = (f"Here the mean rate puts an IPsec variant above no IPsec in {len(above)} of "
           f"{sum((*k, m) in cells for k in keys for m in modes if m != NONE)} request/response cells "
           f"(e.g. {above[0][1]}, {above[0][0][0]} {above[0][0][1]} B). ") if above else ""
    return ("Request/response (not a finding of the study): netperf keeps one transaction in flight, so the rate is 1 / "
            "the mean round trip, and in a guest that mean is mostly time the guest waited for this machine's CPUs, "
            "which other work changes from trial to trial; a rate from one or a few trials can therefore put IPsec "
            f"above no IPsec by chance. {odd}The fastest round trip (netperf MIN_LATENCY, the lowest over the cell's "
            "trials), which that wait does not lengthen, shows IPsec's own cost: " + "; ".join(parts) + short + ".")


def offered_note(trials: list[Trial]) -> str:
    n = sum(guards.not_offered(t.metadata) for t in trials)
    return f" ({n} of {len(trials)} {SHORT})" if n else ""


def offered_text(rows: list[list]) -> str:
    """The table note's word on trials not offered, when a cell of the table says so."""
    return f" {OFFERED_NOTE}" if any(SHORT in str(c) for r in rows for c in r) else ""


def _with_base(keys: list[tuple]) -> list[tuple]:
    """The cells and the no-IPsec cells they are compared with."""
    return keys + [(*k[:-1], NONE) for k in keys]


def ran_in(scenario: dict, env: dict) -> str:
    """The kernel a scenario's packets crossed: a guest's when the scenario ran in guests, else this host's."""
    impl = scenario.get("implementation") or {}
    for key in ("kernel", "guest"):
        if impl.get(key) and impl[key] != "none":
            return str(impl[key])
    release = str(env.get("kernel", "")).split()
    return f"host kernel {release[1] if len(release) > 1 else release[0]}" if release else "host kernel"


def skipped_variants(scenarios: list[dict]) -> dict[str, str]:
    """Variant -> why it did not run, for the variants none of whose scenarios ran."""
    out: dict[str, str] = {}
    for s in scenarios:
        name = variant_name(s["levels"].get("encryption", "none"))
        if any(x["status"] == "done" and variant_name(x["levels"].get("encryption", "none")) == name
               for x in scenarios):
            continue
        if s["status"] in ("skipped", "failed") and name not in out:
            out[name] = f"{s['status']}: {s['reason'] or 'no reason recorded'}"
    return out


@dataclass
class Claim:
    """A finding that compares estimates: ONE test over its matched cells (stats.cells_p); the findings list is one
    family, Holm-corrected together (resolve)."""
    name: str
    cells: list                          # [(without, with) per-trial values of each matched cell]
    expect: str                          # "lower" | "higher" | "equal": what the study claims
    what: str
    band: tuple[float, float] | None = None   # the claimed size of the ratio, when the study gives one


def resolve(items: list, alpha: float = 0.05) -> list[str]:
    """Findings as text: each Claim tested, the Claims' p-values Holm-corrected together."""
    claims = [c for c in items if isinstance(c, Claim)]
    tests = {id(c): stats.cells_p(c.cells) for c in claims}
    adjusted = dict(zip([id(c) for c in claims], stats.holm([tests[id(c)][0] for c in claims])))
    out = []
    for item in items:
        if not isinstance(item, Claim):
            out.append(item)
            continue
        p, ratio, why = tests[id(item)]
        adj = adjusted[id(item)]
        words = stats.finding_words(adj, ratio, why, alpha)
        sig = not why and adj < alpha
        if item.expect == "equal":
            verdict = ("not confirmed here: they differ" if sig else
                       "cannot tell: no significant difference, which does not show they are equal")
        elif not sig:
            verdict = "cannot tell"
        elif (ratio < 1) == (item.expect == "lower"):
            verdict = "confirmed" if item.band is None or item.band[0] <= ratio <= item.band[1] else \
                f"partly: {item.expect} but not by the claimed {item.band[0]}-{item.band[1]}x"
        else:
            verdict = "not confirmed here: the opposite"
        ratio_txt = f"{ratio:.2f}x" if math.isfinite(ratio) else "n/a"
        pooled = len(stats.units(item.cells))
        if 0 < pooled < len(item.cells):
            ratio_txt += f" over {pooled} independent unit{'s' if pooled > 1 else ''} (cells on one baseline pooled)"
        out.append(f"{item.name}: {verdict}: {item.what}, geometric mean {ratio_txt}; {words}; one test per "
                   f"finding, Holm over the {len(claims)} findings.")
    return out


def _ratio_text(c) -> str:
    lo, hi = c.ratio_ci
    if not math.isfinite(c.ratio):
        return DASH
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{c.ratio:.2f}x (no CI)"
    saw(min(c.a.n, c.b.n))
    return f"{c.ratio:.2f}x [{lo:.2f} .. {hi:.2f}]"


def _mean(vals: list[float]) -> float | None:
    return sum(vals) / len(vals) if vals else None


def _versus(vals: list[float], base: list[float]) -> str:
    r = relative(_mean(vals), _mean(base))
    return DASH if r is None else pct(r)


def _matched(mine: dict, pos: int, with_: str, without: str) -> list[float]:
    """Relative changes between cells that differ only in key position pos (with_ vs without)."""
    out = []
    for k, v in mine.items():
        if k[pos] == with_:
            other = (*k[:pos], without, *k[pos + 1:])
            if other in mine:
                out.append(relative(_mean(v), _mean(mine[other])))
    return [r for r in out if r is not None]


def _num(s) -> float:
    try:
        return float(s)
    except (TypeError, ValueError):
        return math.inf


def _order(key: tuple) -> tuple:
    size, ip, hops, load_ = key
    return (_num(size), _num(ip), _num(hops), load_ != "none", str(load_))

