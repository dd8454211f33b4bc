"""S4 — tunnel and encryption methods for multi-cloud: per interface (native, VXLAN, Geneve, OVS+VXLAN, OVS+Geneve,
WireGuard, IPsec) the single-stream throughput with its 1 s series and CPU, the request/response latency and its CDF,
the scaling over parallel streams, 4 parallel generators as a share of line rate, and MTU 1500 vs 9000; the study's
findings checked.

A row measured in a guest kernel (`kernel: guest`: User-Mode Linux, one CPU) is named so ("Geneve (guest kernel)")
and compared only with rows of its own kernel; the datapaths measured in both kernels give the guest/shared ratio a
reader needs to calibrate a guest-only row. A row whose hosts were qemu guests (`kernel: qemu`: Debian's cloud
kernel, with kernel WireGuard and OVS's kernel datapath) is named "(qemu guests)" and, likewise, compared only with
the qemu guests' own rows: under TCG it is an emulated CPU's timing."""
from __future__ import annotations

import math
from collections import defaultdict

from matplotlib.ticker import FuncFormatter

from ...core.units import human, parse_rate
from ...results.dataset import Trial, load
from ...results.stats import compare, holm
from ...results.store import Store
from .. import figures
from . import register
from ._cells import DASH, Family, figure, mean_cell, mean_ci, median, noted, pct, relative, saw, scale, style, summary
from .base import Analysis, AnalysisResult, FigureData, TableData
from .s3 import offered_note, offered_text

ORDER = ["native", "VXLAN", "Geneve", "GRE", "OVS+VXLAN", "OVS+Geneve", "OVS+GRE", "WireGuard", "IPsec"]
TUNNELS = {"VXLAN": "VXLAN", "Geneve": "Geneve", "OVS+VXLAN": "VXLAN", "OVS+Geneve": "Geneve", "GRE": "GRE",
           "OVS+GRE": "GRE"}
ENCRYPTED = ("WireGuard", "IPsec")
SINGLE, RR, GEN4 = "tcp1", "rr", "gen4"
LINE_RATE_NEAR = 0.9
LOSS = 1.10  # a tunnel "loses" when native carries at least 10 % more, and the difference is significant
NOT_TESTED = "not tested (one run: no significance test is possible)"
GUEST = " (guest kernel)"
QEMU = " (qemu guests)"
KERNELS = {"guest": GUEST, "qemu": QEMU}   # a kernel level -> the suffix its rows' names carry
GUEST_CAVEAT = ("a guest row is not comparable with a row of the machine's kernel: the guest (User-Mode Linux) has one "
                "CPU for both hosts, every system call and page fault of its processes goes through the host, and "
                "the probes' readings of its counters (commands over SSH) take part of that CPU")


def interface(labels: dict) -> str:
    """The study's name for a scenario's datapath."""
    labels = {k: v for k, v in labels.items() if v != "n/a"}  # a level that does not apply: as if left out
    attach, enc = labels.get("attach", "switch"), labels.get("encryption", "none")
    enc_name = {"wireguard": "WireGuard", "ipsec": "IPsec"}.get(enc.split("(")[0], enc)
    if attach == "host":
        return with_kernel("native" if enc == "none" else enc_name, labels)
    overlay = {"vxlan": "VXLAN", "geneve": "Geneve", "gre": "GRE", "none": "flat", "vlan": "VLAN"}.get(
        labels.get("overlay", "none").split("(")[0], labels.get("overlay", "none"))
    name = overlay if labels.get("switch", "linuxbridge").startswith("linuxbridge") else \
        f"{labels.get('switch', '').split('(')[0].upper()}+{overlay}"
    name = name if attach == "switch" else f"{attach}: {name}"
    name = name if enc == "none" else f"{name} + {enc_name} ({labels.get('encryption_scope', '')})"
    if str(labels.get("offloads", "on")) != "on":  # a row of its own: never pooled with the kernel's offloads
        name = f"{name} ({labels['offloads']})"
    return with_kernel(name, labels)


def with_kernel(name: str, labels: dict) -> str:
    # a datapath measured in a guest's kernel says so: it is not the same machine as the others
    return f"{name}{KERNELS.get(str(labels.get('kernel')), '')}"


def kernel_of(name: str) -> str:
    """The suffix of the kernel a row ran in: '' (the machine's), GUEST or QEMU."""
    return next((k for k in KERNELS.values() if name.endswith(k)), "")


def base(name: str) -> str:
    k = kernel_of(name)
    return name.removesuffix(k) if k else name


def in_guest(name: str) -> bool:
    return name.endswith(GUEST)


def measure(t: Trial) -> str | None:
    """tcp1, rr, gen4 or streamsN, from what the trial ran (so a user's own spec is understood too)."""
    if t.kind == "sockperf" or (t.kind == "netperf" and str(t.params.get("test", "")).endswith("_RR")):
        return RR
    if t.kind != "iperf3" or t.params.get("protocol", "tcp") != "tcp":
        return None
    streams = int(t.params.get("streams", 1))
    procs = t.params.get("processes", 1)
    if procs == 4 and streams == 4:
        return GEN4
    return SINGLE if streams == 1 else f"streams{streams}"


RR_TOOLS = {"sockperf": "sockperf TCP ping-pong", "netperf": "netperf TCP_RR"}


def _rr_tools(trials: list[Trial]) -> str:
    """What measured the request/response rows: 'sockperf TCP ping-pong', 'netperf TCP_RR' (the study's), or both."""
    seen = {RR_TOOLS.get(t.kind, t.kind) for t in trials}
    return " and ".join(sorted(seen)) or RR_TOOLS["sockperf"]


def _rank(name: str) -> tuple:
    b = base(name)
    return (["", GUEST, QEMU].index(kernel_of(name)), ORDER.index(b) if b in ORDER else len(ORDER), b)


def _cpus(t: Trial) -> int | None:
    """A guest's CPUs (from the per-CPU shares its probe took); None on the machine's kernel (the campaign's)."""
    if t.labels.get("kernel") != "guest":
        return None
    ids = {s["metadata"]["cpu"] for s in t.samples if s["metric"] == "cpu_busy_ratio"
           and s["metadata"].get("scope") == "machine" and "cpu" in s["metadata"] and not s["metadata"].get("series")}
    return len(ids) or None


def _uncarried(name: str, rr: list[Trial]) -> list[str]:
    """'VXLAN: p99 needs >= 100 round trips (had 30)' for a percentile some run's round trips cannot carry."""
    whys = [next((w for t in rr if (w := t.uncarried(f"latency_{k}_s"))), "") for k in ("p90", "p99")]
    return [f"{name}: {w}" for w in whys if w]


@register
class S4(Analysis):
    name = "s4"
    title = "S4 — tunnel and encryption methods for multi-cloud"

    def run(self, store: Store, campaign: int) -> AnalysisResult:
        data = load(store, campaign)
        camp = data.campaign
        scenarios, trials = data.scenario_list, data.ok
        self.cpus = int((camp.environment or {}).get("cpu_count") or 0) or None
        self.line_rate = _line_rate(camp.spec)
        by: dict[tuple[str, str, str], list[Trial]] = defaultdict(list)  # (interface, measure, mtu) -> trials
        for t in trials:
            if (m := measure(t)) is not None:
                by[(interface(t.labels), m, str(t.labels.get("mtu", "1500")))].append(t)
        self.by = by
        ifaces = sorted({s_iface for s_iface in (interface(s["labels"]) for s in scenarios)}, key=_rank)
        self.skipped = {}
        for s in scenarios:
            name = interface(s["labels"])
            if s["status"] in ("skipped", "failed") and not any(k[0] == name for k in by):
                self.skipped.setdefault(name, f"{s['status']}: {s['reason']}")
        self.base_mtu = min((k[2] for k in by), key=int, default="1500")
        result = AnalysisResult()
        result.tables.append(self._interfaces(ifaces))
        if any(k[1] == GEN4 for k in by):
            result.tables.append(self._line_rate(ifaces))
        if any(k[1].startswith("streams") for k in by):
            result.tables.append(self._scaling(ifaces))
        if len({k[2] for k in by if k[1] == SINGLE}) > 1:
            result.tables.append(self._mtu(ifaces))
        if self._both_kernels(ifaces):
            result.tables.append(self._kernels(ifaces))
        for fig in (self._series_figure(ifaces), self._cdf_figure(ifaces), self._scaling_figure(ifaces),
                    self._mtu_figure(ifaces)):
            if fig is not None:
                result.figures.append(fig)
        result.findings = self._findings(ifaces)
        return result

    # ---- values ------------------------------------------------------------------------------------------
    def _trials(self, iface: str, m: str, mtu: str | None = None) -> list[Trial]:
        return self.by.get((iface, m, mtu or self.base_mtu), [])

    def _rr_tool(self) -> str:
        return _rr_tools([t for key, ts in self.by.items() if key[1] == RR for t in ts])

    def _tput(self, iface: str, m: str = SINGLE, mtu: str | None = None) -> list[float]:
        return [v for t in self._trials(iface, m, mtu) if (v := t.total("throughput_bps", direction="forward")) is not None]

    def _used(self, names, *measures: str) -> list[Trial]:
        """The trials behind a row or finding: these interfaces' runs of these measures."""
        return [t for n in names for m in measures for t in self._trials(n, m)]

    def _per_trial(self, iface: str, m: str, fn, mtu: str | None = None) -> list[float]:
        return [v for t in self._trials(iface, m, mtu) if (v := fn(t)) is not None]

    def _cpu_per_gbit(self, iface: str, m: str = SINGLE) -> float | None:
        """Whole-machine CPU (in cores) per Gbit/s carried: what a bit costs, whatever the line rate; over the runs
        the ratio of sums, CPU seconds / Gbit (a run that carried almost nothing weighs what it carried)."""
        parts = [p for t in self._trials(iface, m) if (p := self._cpu_gbit(t)) is not None]
        total = math.fsum(g for _, g in parts)
        return math.fsum(c for c, _ in parts) / total if total > 0 else None

    def _cpu_per_gbit_runs(self, iface: str, m: str = SINGLE) -> list[float]:
        """Each run's own CPU per Gbit/s: what the test compares, one value per trial."""
        return [c / g for c, g in filter(None, map(self._cpu_gbit, self._trials(iface, m))) if g]

    def _cpu_gbit(self, t: Trial) -> tuple[float, float] | None:
        """A run's (machine CPU seconds, Gbit carried): the parts of its cpu_s_per_gbit (dataset.RATIO_OF_SUMS),
        else its busy cores and forward Gbit/s (qemu host guests, whose CPU is their own; a campaign stored without
        the parts: the runs weigh by their rate)."""
        for s in t.samples if t.labels.get("kernel") != "qemu" else ():
            meta = s["metadata"]
            if s["metric"] == "cpu_s_per_gbit" and meta.get("scope") == "machine" and not meta.get("host") \
                    and "cpu_s" in meta and meta.get("gbit"):
                return float(meta["cpu_s"]), float(meta["gbit"])
        cores, tp = self._cores_busy(t), t.total("throughput_bps", direction="forward")
        return (cores, tp / 1e9) if cores is not None and tp else None

    def _cores_busy(self, t: Trial) -> float | None:
        """The CPU cores busy over the trial's window: with a guest per host (qemu host guests) each host's own
        share times its CPUs, summed; else the machine's (or the one guest's) share times its CPUs."""
        hosts: dict[str, float] = {}
        cpus: dict[str, set] = defaultdict(set)
        for s in t.samples:
            meta = s["metadata"]
            if s["metric"] == "cpu_busy_ratio" and meta.get("scope") == "machine" and meta.get("host") \
                    and not meta.get("series"):
                if "cpu" in meta:
                    cpus[meta["host"]].add(meta["cpu"])
                else:
                    hosts.setdefault(meta["host"], s["value"])
        if t.labels.get("kernel") == "qemu" and hosts:
            return math.fsum(v * max(1, len(cpus[h])) for h, v in hosts.items())
        busy, n = t.machine("cpu_busy_ratio"), _cpus(t) or self.cpus
        return busy * n if busy is not None and n else None

    # ---- tables ------------------------------------------------------------------------------------------
    @noted
    def _interfaces(self, ifaces: list[str]) -> TableData:
        cols = ["interface", "implementation", "inner MTU", "throughput (1 stream)", "sender iperf3 CPU",
                "receiver iperf3 CPU", "machine CPU (min .. max over seconds)", "datapath processes CPU", "latency min", "p50", "p90", "p99", "max", "runs"]
        rows, short = [], []   # short: a percentile a run's round trips cannot carry, and why
        for name in ifaces:
            single, rr = self._trials(name, SINGLE), self._trials(name, RR)
            if not single and not rr:
                rows.append([name, DASH, DASH, self.skipped.get(name, "not measured")] + [DASH] * (len(cols) - 4))
                continue
            any_t = (single or rr)[0]
            impl = " + ".join(v for v in any_t_impl(any_t) if v)
            mtus = sorted({str(t.metadata.get("vm_mtu", DASH)) for t in single + rr})
            dp = self._per_trial(name, SINGLE, lambda t: sum(t.processes().values()) if t.processes() else None)
            lat = {k: [v for t in rr if (v := t.mean(m := f"latency_{k}_s")) is not None and not t.uncarried(m)]
                   for k in ("min", "p50", "p90", "p99", "max")}
            short += _uncarried(name, rr)
            rows.append([name, impl or DASH, "/".join(mtus), mean_ci(self._tput(name), "bit/s"),
                         mean_min_max(self._per_trial(name, SINGLE, lambda t: t.mean("sender_cpu_ratio"))),
                         mean_min_max(self._per_trial(name, SINGLE, lambda t: t.mean("receiver_cpu_ratio"))),
                         machine_cpu(single),
                         mean_min_max(dp),
                         human(min(lat["min"]), "s") if lat["min"] else DASH,
                         *[human(median(lat[k]), "s") if lat[k] else DASH for k in ("p50", "p90", "p99")],
                         human(max(lat["max"]), "s") if lat["max"] else DASH,
                         str(max(len(single), len(rr))) + offered_note(single + rr)])
        return TableData(
            f"S4 — interfaces: one TCP stream and request/response latency (MTU {self.base_mtu})", cols, rows,
            "Throughput: receiver goodput, mean over runs ± 95 % CI half-width. Sender/receiver iperf3 CPU: the iperf3 "
            "processes' own CPU time over the test (100 % = one core), mean over runs (min .. max over runs); not the "
            "study's netperf -c/-C, which is each host's system-wide share, since both hosts here are one machine. "
            f"{MACHINE_CPU_NOTE} Datapath processes: ovs-vswitchd, wireguard-go, charon ... summed (100 % = one core), "
            "mean over runs (min .. max over runs). Latency: "
            f"{self._rr_tool()} round trips; min and max over all runs, p50/p90/p99 the median over runs of "
            "each run's percentile. Inner MTU: the MTU the traffic saw (the VM's, or the tunnel interface's)."
            + (f" Rows '(guest kernel)' ran in a guest kernel (the implementation names it), machine CPU there being "
               f"the guest's one CPU: {GUEST_CAVEAT}; compare them with each other, and see the guest vs machine "
               f"kernel table for the same datapaths in both." if any(in_guest(n) for n in ifaces) else "")
            + (f" Rows '{QEMU.strip()}' ran with each host a qemu guest (its own kernel: WireGuard and OVS's datapath "
               f"are the kernel's, as the study's), machine CPU there being its host guests' own: {QEMU_CAVEAT}; "
               f"compare them with each other." if any(kernel_of(n) == QEMU for n in ifaces) else "")
            + offered_text(rows)
            + (f" A run's p90 or p99 over too few round trips is left out ({'; '.join(short)})." if short else ""))

    @noted
    def _line_rate(self, ifaces: list[str]) -> TableData:
        rows = []
        for name in ifaces:
            vals = self._tput(name, GEN4)
            if not vals:
                continue
            share = (sum(vals) / len(vals)) / self.line_rate if self.line_rate else None
            rows.append([name, mean_ci(vals, "bit/s"), DASH if share is None else f"{share * 100:.1f} %",
                         machine_cpu(self._trials(name, GEN4)),
                         mean_min_max(self._per_trial(name, GEN4, lambda t: t.total("sender_cpu_ratio"))),
                         str(len(vals)) + offered_note(self._trials(name, GEN4))])
        rate = human(self.line_rate, "bit/s") if self.line_rate else "not set (underlay.rate)"
        return TableData("S4 — 4 parallel generators as a percentage of line rate",
                         ["interface", "throughput (4 generators)", "of line rate", "machine CPU (min .. max over seconds)",
                          "senders' iperf3 CPU", "runs"],
                         rows, f"Four iperf3 client/server processes, one stream each, at once. Line rate: {rate}, the "
                               f"hosts' NICs' egress limit (tbf). {MACHINE_CPU_NOTE} Senders' iperf3 CPU: the four "
                               f"clients' own CPU time summed (100 % = one core), mean over runs (min .. max over runs)."
                               + offered_text(rows))

    def _streams_levels(self) -> list[int]:
        levels = {1} | {int(k[1][len("streams"):]) for k in self.by if k[1].startswith("streams")}
        return sorted(levels)

    def _stream_trials(self, name: str, n: int) -> list[Trial]:
        return self._trials(name, SINGLE if n == 1 else f"streams{n}")

    def _scaling(self, ifaces: list[str]) -> TableData:
        levels = self._streams_levels()
        names = [n for n in ifaces if any(self._stream_trials(n, s) for s in levels)]
        rows = []
        for s in levels:
            row = [str(s)]
            for name in names:
                ts = self._stream_trials(name, s)
                tp = [v for t in ts if (v := t.total("throughput_bps", direction="forward")) is not None]
                row.append(f"{mean_cell(tp, 'bit/s')} · CPU {machine_cpu(ts)}{offered_note(ts)}" if tp else DASH)
            procs = {_processes(t) for name in names for t in self._stream_trials(name, s)}
            row.append(", ".join(str(p) for p in sorted(procs)) or DASH)
            rows.append(row)
        return TableData("S4 — parallel streams: aggregate throughput and whole-machine CPU",
                         ["streams", *names, "generator processes"], rows,
                         "Mean over runs of the receiver throughput summed over all streams. " + MACHINE_CPU_NOTE +
                         " Past 128 streams iperf3 runs several generator processes (at most 128 streams "
                         "each); 1 stream is the single-stream test." + offered_text(rows))

    @noted
    def _mtu(self, ifaces: list[str]) -> TableData:
        mtus = sorted({k[2] for k in self.by if k[1] == SINGLE}, key=int)
        lo, hi = mtus[0], mtus[-1]
        rows, marks = [], []
        for name in ifaces:
            a, b = self._tput(name, SINGLE, lo), self._tput(name, SINGLE, hi)
            if not a and not b:
                continue
            if len(a) > 1 and len(b) > 1:
                marks.append((len(rows), compare(a, b).p))
            inner = lambda m: "/".join(sorted({str(t.metadata.get("vm_mtu")) for t in self._trials(name, SINGLE, m)})) or DASH  # noqa: E731
            rows.append([name, inner(lo), mean_ci(a, "bit/s") + offered_note(self._trials(name, SINGLE, lo)),
                         inner(hi), mean_ci(b, "bit/s") + offered_note(self._trials(name, SINGLE, hi)), _versus(b, a)])
        for (i, _), p in zip(marks, holm([p for _, p in marks])):
            if p < 0.05:
                rows[i][-1] += "*"
        return TableData(f"S4 — MTU {lo} vs {hi} (one TCP stream)",
                         ["interface", f"inner MTU at {lo}", f"throughput at {lo}", f"inner MTU at {hi}",
                          f"throughput at {hi}", f"{hi} vs {lo}"], rows,
                         "mtu is the hosts' NIC MTU; each tunnel lowers the inner MTU by its header. '*': the two "
                         "differ significantly: the permutation test of Welch's t (exact up to 8 trials a side) on the per-trial values, Holm-corrected over the "
                         f"{len(marks)} tests of this table (alpha 0.05)." + offered_text(rows))

    def _both_kernels(self, ifaces: list[str]) -> list[str]:
        """The datapaths measured in the machine's kernel and in a guest's with the same implementation (base names;
        IPsec is strongSwan's userspace ESP on one and the kernel's on the other: not the same datapath)."""
        return [n for n in ifaces if not in_guest(n) and n + GUEST in ifaces and (ts := self._any(n))
                and (tg := self._any(n + GUEST)) and _impl(ts) == _impl(tg)]

    def _any(self, name: str) -> Trial | None:
        return next(iter(self._trials(name, SINGLE) or self._trials(name, RR)), None)

    @noted
    def _kernels(self, ifaces: list[str]) -> TableData:
        rows = []
        for name in self._both_kernels(ifaces):
            g = name + GUEST
            p50 = lambda n: [v for t in self._trials(n, RR) if (v := t.mean("latency_p50_s")) is not None]  # noqa: E731
            impl = lambda n: " + ".join(any_t_impl((self._trials(n, SINGLE) or self._trials(n, RR))[0]))  # noqa: E731
            rows.append([name + offered_note(self._used([name, g], SINGLE, RR, GEN4)), impl(name) or "host kernel",
                         impl(g) or DASH,
                         mean_ci(self._tput(name), "bit/s"), mean_ci(self._tput(g), "bit/s"),
                         _ratio(self._tput(name), self._tput(g)),
                         mean_ci(p50(name), "s"), mean_ci(p50(g), "s"), _ratio(p50(name), p50(g)),
                         _ratio(self._tput(name, GEN4), self._tput(g, GEN4))])
        return TableData(
            "S4 — the same datapath in the machine's kernel and in a guest kernel (calibration)",  # same implementation
            ["interface", "implementation (machine)", "implementation (guest)", "throughput machine",
             "throughput guest", "guest / machine", "latency p50 machine", "latency p50 guest", "guest / machine",
             "4 generators guest / machine"], rows,
            f"One TCP stream (receiver goodput) and {self._rr_tool()} p50, mean over runs ± 95 % CI; ratio of the "
            f"means with Fieller's 95 % CI where there are two runs or more. {GUEST_CAVEAT[0].upper()}{GUEST_CAVEAT[1:]}: "
            f"the ratio is the guest's cost on a datapath both kernels have, a yardstick for the rows only a guest "
            f"could run (Geneve, kernel IPsec), not a correction to apply to them." + offered_text(rows))

    # ---- figures -----------------------------------------------------------------------------------------
    def _series_figure(self, ifaces: list[str]) -> FigureData | None:
        lines = {}
        for name in ifaces:
            pts: dict[float, list[float]] = defaultdict(list)
            for t in self._trials(name, SINGLE):
                for s in t.samples:
                    if s["metric"] == "throughput_interval_bps" and s["metadata"].get("direction") == "forward":
                        pts[round(figures.since_start(s), 1)].append(s["value"])
            if pts:
                lines[name] = pts
        if not lines:
            return None
        fig, (ax,) = figure()
        div, ulabel = scale("bit/s", [v for p in lines.values() for vs in p.values() for v in vs])
        for i, (name, pts) in enumerate(lines.items()):
            ts = sorted(pts)
            st = style(i)
            ax.plot(ts, [sum(pts[t]) / len(pts[t]) / div for t in ts], marker=".", label=name, **st)
            ax.fill_between(ts, [min(pts[t]) / div for t in ts], [max(pts[t]) / div for t in ts], color=st["color"],
                            alpha=0.12, lw=0)
        ax.set_xlabel("time since the start of the test (s)")
        ax.set_ylabel(f"throughput ({ulabel})")
        lows = [min(vs) for p in lines.values() for vs in p.values() if min(vs) > 0]
        if lows and max(max(vs) for p in lines.values() for vs in p.values()) / min(lows) > 20:
            ax.set_yscale("log")  # the interfaces differ by orders of magnitude: keep the slow ones readable
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        else:
            ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        title = "S4 — one TCP stream: throughput every second"
        ax.set_title(title, fontsize=11)
        return FigureData("s4-series", title, fig, "Receiver throughput per 1 s interval: the mean over runs, the band "
                                                   "from the lowest to the highest run.")

    def _cdf_figure(self, ifaces: list[str]) -> FigureData | None:
        curves = {}
        for name in ifaces:
            vals = sorted(v for t in self._trials(name, RR) for v in t.values("latency_s"))
            if vals:
                curves[name] = vals
        if not curves:
            return None
        fig, (ax,) = figure()
        for i, (name, vals) in enumerate(curves.items()):
            ax.step([v * 1e6 for v in vals], [(k + 1) / len(vals) for k in range(len(vals))], where="post", label=name,
                    **style(i))
        if max(v[-1] for v in curves.values()) / max(min(v[0] for v in curves.values()), 1e-9) > 20:
            ax.set_xscale("log")
        ax.set_xlabel("round-trip latency (µs)")
        ax.set_ylabel("fraction of round trips ≤ x")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=8, loc="lower right")
        title = "S4 — request/response latency CDF"
        ax.set_title(title, fontsize=11)
        return FigureData("s4-latency-cdf", title, fig, "Every round trip sockperf logged (thinned evenly to at most "
                                                        "20,000 per run), all runs pooled.")

    def _scaling_figure(self, ifaces: list[str]) -> FigureData | None:
        levels = self._streams_levels()
        if len(levels) < 2:
            return None
        fig, (ax_t, ax_c) = figure(2)
        data = {}
        for name in ifaces:
            pts = {}
            for s in levels:
                ts = self._stream_trials(name, s)
                tp = [v for t in ts if (v := t.total("throughput_bps", direction="forward")) is not None]
                cpu = [v for t in ts if (v := t.machine("cpu_busy_ratio")) is not None]
                if tp:
                    pts[s] = (summary(tp), summary(cpu))
            if len(pts) > 1:
                data[name] = pts
        if not data:
            return None
        div, ulabel = scale("bit/s", [p[0].mean for pts in data.values() for p in pts.values()])
        for i, (name, pts) in enumerate(data.items()):
            xs = sorted(pts)
            err = [[(pts[x][0].mean - pts[x][0].ci_mean[0]) / div if math.isfinite(pts[x][0].ci_mean[0]) else 0 for x in xs],
                   [(pts[x][0].ci_mean[1] - pts[x][0].mean) / div if math.isfinite(pts[x][0].ci_mean[1]) else 0 for x in xs]]
            ax_t.errorbar(xs, [pts[x][0].mean / div for x in xs], yerr=err, marker="o", capsize=3, label=name, **style(i))
            cx = [x for x in xs if pts[x][1] is not None]
            ax_c.plot(cx, [pts[x][1].mean * 100 for x in cx], marker="o", label=name, **style(i))
        for ax in (ax_t, ax_c):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.set_xlabel("parallel streams")
            ax.set_ylim(bottom=0)
        ax_t.set_ylabel(f"aggregate throughput ({ulabel})")
        ax_c.set_ylabel("whole-machine CPU busy (%)")
        ax_c.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        title = "S4 — scaling over parallel streams"
        fig.suptitle(title, fontsize=11)
        return FigureData("s4-stream-scaling", title, fig, "Mean over runs (whiskers: 95 % CI); past 128 streams "
                                                           "several iperf3 generator processes share the streams.")

    def _mtu_figure(self, ifaces: list[str]) -> FigureData | None:
        mtus = sorted({k[2] for k in self.by if k[1] == SINGLE}, key=int)
        names = [n for n in ifaces if any(self._tput(n, SINGLE, m) for m in mtus)]
        if len(mtus) < 2 or not names:
            return None
        fig, (ax,) = figure(height=3.8)
        width = 0.8 / len(mtus)
        allv = [v for n in names for m in mtus for v in self._tput(n, SINGLE, m)]
        div, ulabel = scale("bit/s", allv)
        for j, m in enumerate(mtus):
            sums = [summary(self._tput(n, SINGLE, m)) for n in names]
            xs = [i + (j - (len(mtus) - 1) / 2) * width for i in range(len(names))]
            means = [s.mean / div if s else 0 for s in sums]
            err = [(s.ci_mean[1] - s.mean) / div if s and math.isfinite(s.ci_mean[1]) else 0 for s in sums]
            ax.bar(xs, means, width, yerr=err, capsize=3, label=f"MTU {m}", color=f"C{j}")
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_ylabel(f"throughput ({ulabel})")
        ax.legend(fontsize=8)
        title = "S4 — MTU 1500 vs 9000: one TCP stream"
        ax.set_title(title, fontsize=11)
        return FigureData("s4-mtu", title, fig, "Mean over runs, whiskers the 95 % CI; the tunnel's inner MTU is lower "
                                                "by its header.")

    # ---- findings ----------------------------------------------------------------------------------------
    def _findings(self, ifaces: list[str]) -> list[str]:
        """Every test the findings make is one Holm family (built twice: see Family)."""
        self.family = Family()
        out = self.family.build(lambda: self._findings_once(ifaces))
        return out + [f"Tests: the permutation test of Welch's t (exact up to 8 trials a side) on per-trial values (one-sided exact sign test for 'several cores'), "
                      f"Holm-corrected over the {self.family.size} tests of these findings, alpha 0.05."]

    def _findings_once(self, ifaces: list[str]) -> list[str]:
        measured = {kernel_of(n) for n in ifaces if self._tput(n) or self._trials(n, RR)}
        out = []
        if "" in measured or not measured:  # the machine's kernel: unless only guests' rows were measured
            out += self._kernel_findings(ifaces, "")
            out.append(self._ovs_finding())
            out.append(self._cores_finding())
        if GUEST in measured:
            where = "In the guest kernel (compared with the guest's own native row): "
            out += [where + f for f in self._kernel_findings(ifaces, GUEST)]
            out.append(self._calibration_finding(ifaces))
        if QEMU in measured:
            where = (f"In the qemu host guests (compared with their own native row; {self._qemu_cpu(ifaces)}): ")
            out += [where + f for f in self._kernel_findings(ifaces, QEMU)]
            out.append(where + self._ovs_finding(QEMU))
        return out

    def _qemu_cpu(self, ifaces: list[str]) -> str:
        """What the qemu host guests' CPU was, from their rows' implementation: TCG's emulated CPU or KVM's."""
        kernels = {str(_impl_all(t).get("kernel", "")) for n in ifaces if kernel_of(n) == QEMU
                   for t in (self._trials(n, SINGLE) or self._trials(n, RR))[:1]}
        if any("qemu-tcg" in k for k in kernels):
            return "qemu-tcg: an emulated CPU's timing, not the study's hardware"
        return "qemu-kvm" if any("qemu-kvm" in k for k in kernels) else "qemu guests"

    def _calibration_finding(self, ifaces: list[str]) -> str:
        both = [n for n in self._both_kernels(ifaces) if self._tput(n) and self._tput(n + GUEST)]
        parts = [f"{n} {_ratio(self._tput(n), self._tput(n + GUEST))}" for n in both]
        only = [base(n) for n in ifaces if in_guest(n) and base(n) not in both and self._tput(n)]
        text = f"Guest vs machine kernel: {GUEST_CAVEAT}. "
        short = offered_note(self._used([*both, *(n + GUEST for n in both)], SINGLE))
        text += (f"Guest / machine single-stream throughput: {'; '.join(parts)}{short}." if parts
                 else "No datapath was measured in both kernels, so the guest's cost cannot be calibrated here.")
        if only:
            text += (f" Measured only in the guest (or with another implementation on the machine): {', '.join(only)}; "
                     f"read them against the guest's own native row.")
        return text

    def _kernel_findings(self, ifaces: list[str], k: str) -> list[str]:
        """'Tunnels lose' and 'encryption loses', each datapath against the native row of its own kernel (k: its
        rows' suffix, '' for the machine's)."""
        ifaces = [n for n in ifaces if kernel_of(n) == k]
        out = []
        native = self._tput("native" + k)
        nat = sum(native) / len(native) if native else None
        near = bool(nat and self.line_rate and nat >= LINE_RATE_NEAR * self.line_rate)
        tunnels = [n for n in ifaces if base(n) in TUNNELS and self._tput(n)]
        if nat and tunnels:
            parts, losing, untested = [], [], []
            for n in tunnels:
                vals = self._tput(n)
                ratio = nat / (sum(vals) / len(vals))
                testable = len(native) > 1 and len(vals) > 1
                sig = testable and self.family.significant(native, vals)
                parts.append(f"{base(n)} {ratio:.2f}x" + ("" if sig else " (not significant)" if testable
                                                    else " (one run: no test)"))
                if ratio >= LOSS and sig:
                    losing.append((n, ratio))
                elif not testable:
                    untested.append(n)
            verdict = ("confirmed for " + ", ".join(base(n) for n, _ in losing) if losing
                       else NOT_TESTED if untested else "cannot tell: no tunnel's loss is significant")
            if losing and untested:
                verdict += f"; not tested for {', '.join(base(n) for n in untested)} (one run)"
            big = [base(n) for n, r in losing if r >= 3]
            text = (f"'Tunnels lose vs native (up to 3-5x without segmentation offload)': {verdict}; native / tunnel "
                    f"single-stream throughput: {'; '.join(parts)}"
                    f"{offered_note(self._used(['native' + k, *tunnels], SINGLE))}.")
            if big:
                text += f" {', '.join(big)} lose 3x or more."
            if near:
                cost = {base(n): self._cpu_per_gbit(n) for n in ["native" + k, *tunnels]}
                shown = "; ".join(f"{n} {c:.2f}" for n, c in cost.items() if c is not None)
                text += (f" Native reaches {nat / self.line_rate:.0%} of the {human(self.line_rate, 'bit/s')} line "
                         f"rate, which hides part of a tunnel's cost: CPU cores per Gbit/s carried: {shown}.")
            out.append(text)
        else:
            out.append("'Tunnels lose vs native': cannot be checked: "
                       + ("no native measurement." if not nat else "no tunnel interface was measured."))
        enc = [n + k for n in ENCRYPTED if self._tput(n + k)]
        if nat and enc:
            ratios = {n: nat / (sum(v) / len(v)) for n in enc if (v := self._tput(n))}
            def verdict(r: float, n: str) -> str:
                size = "about 10x" if 5 <= r <= 20 else ("a larger loss" if r > 20 else "a smaller loss")
                if len(native) < 2 or len(self._tput(n)) < 2:
                    return f"{size}, {NOT_TESTED}"
                return size if self.family.significant(native, self._tput(n)) else f"{size}, not significant"
            impl = {n: sorted({t.samples[0]["implementation"].get("encryption", "") for t in self._trials(n, SINGLE)
                               if t.samples}) for n in enc}
            out.append("'Encryption loses ~10x': " + "; ".join(f"native / {base(n)} = {r:.1f}x ({verdict(r, n)}; "
                                                               f"{', '.join(impl[n]) or 'implementation unknown'})"
                                                               for n, r in ratios.items())
                       + offered_note(self._used(["native" + k, *enc], SINGLE)) + ".")
        else:
            out.append("'Encryption loses ~10x': cannot be checked: no encrypted interface (or no native) was measured.")
        return out

    def _ovs_finding(self, k: str = "") -> str:
        pairs = [(f"OVS+{t}{k}", t + k) for t in ("VXLAN", "Geneve", "GRE") if self._tput(f"OVS+{t}{k}")
                 and self._tput(t + k)]
        if pairs and self.cpus:
            parts, more, opposite, tested = [], [], [], []
            for ovs, lin in pairs:
                a, b = self._cpu_per_gbit(ovs), self._cpu_per_gbit(lin)
                if a is not None and b is not None:
                    xa, xb = self._cpu_per_gbit_runs(ovs), self._cpu_per_gbit_runs(lin)
                    testable = len(xa) > 1 and len(xb) > 1
                    sig = testable and self.family.significant(xa, xb)
                    parts.append(f"{ovs} {a:.2f} vs {lin} {b:.2f} CPU cores per Gbit/s"
                                 + ("" if sig else " (not significant)" if testable else " (one run: no test)"))
                    more.append(a > b and sig)
                    opposite.append(a < b and sig)
                    tested.append(testable)
            verdict = ("cannot be checked" if not more else NOT_TESTED if not all(tested)
                       else "confirmed" if all(more) else "not confirmed here: the opposite" if any(opposite)
                       else "cannot tell")
            datapaths = {str(_impl_all(t).get("switch", "")) for ovs, _ in pairs for t in self._trials(ovs, SINGLE)}
            kernel = bool(datapaths) and all(d.startswith("ovs-system") for d in datapaths)
            where = "the host guests' CPUs summed" if k == QEMU else "whole machine"
            return (f"'OVS tunnels cost more CPU than Linux ones': {verdict}: {'; '.join(parts)} ({where}, "
                    f"single stream){offered_note(self._used([n for p in pairs for n in p], SINGLE))}. OVS here is "
                    + ("the kernel datapath (ovs-system), as the study's." if kernel
                       else "the userspace datapath (no kernel module)."))
        missing = "the machine's CPU count" if pairs else "an OVS tunnel and the same Linux tunnel in one kernel"
        return f"'OVS tunnels cost more CPU than Linux ones': cannot be checked: needs {missing}."

    def _cores_finding(self) -> str:
        """WireGuard several cores, IPsec one: each trial's busiest datapath process (one value per trial, in the
        tests with traffic), and a one-sided test that its mean is above one core (never the maximum over trials)."""
        per_trial: dict[str, list[float]] = {}
        used: list[Trial] = []
        for name, proc_prefix in (("WireGuard", "wireguard"), ("IPsec", "charon")):
            for (iface, m, _), ts in self.by.items():
                if iface != name or m == RR:
                    continue
                for t in ts:
                    per = {p: v for p, v in t.processes().items() if p.startswith(proc_prefix)}
                    if per:
                        per_trial.setdefault(name, []).append(max(per.values()))
                        used.append(t)
        if not per_trial:
            return ("'WireGuard uses several cores, IPsec one': cannot be checked: no datapath process CPU was recorded "
                    "(the kernel implementations have no process to measure).")
        parts = "; ".join(f"{n}'s busiest process {sum(v) / len(v) * 100:.0f} % of a core (mean of {len(v)} trials)"
                          for n, v in per_trial.items())
        wg, ip = per_trial.get("WireGuard"), per_trial.get("IPsec")
        several = self.family.above(wg, 1.0) if wg else False
        if wg is None or ip is None:
            verdict = "partly checked"
        elif min(len(wg), len(ip)) < 2:
            verdict = NOT_TESTED
        elif several:
            verdict = "WireGuard: confirmed, above one core; IPsec: one core cannot be shown by a test"
        else:
            verdict = "cannot tell: WireGuard is not significantly above one core"
        cpus = f" on this {self.cpus}-CPU machine" if self.cpus else ""
        return (f"'WireGuard uses several cores, IPsec one': {verdict}{cpus}: {parts} (100 % = one core)"
                f"{offered_note(used)}.")


QEMU_CAVEAT = ("a qemu guest's row is not comparable with a row of another kernel: each host is a qemu guest with "
               "one vCPU, under TCG (the implementation says qemu-tcg) an emulated CPU, so its rates are an emulated "
               "CPU's timing, many times below the machine's")

MACHINE_CPU_NOTE = ("Machine CPU: the share of all the machine's CPUs busy (100 % = every CPU; in a guest kernel its "
                    "one CPU), as the study's mpstat: the mean over runs of each run's window, and the lowest and "
                    "highest 1-s reading over all runs' seconds (the study's min and max); both hosts are this one "
                    "machine, so it is the sum of both hosts' work.")


def machine_cpu(trials: list[Trial]) -> str:
    """'62.1 % (40.3 .. 88.0 % over 20 s)': the mean over runs of the window's busy share, min .. max of the 1-s
    readings of all runs (the study's mpstat min/max over seconds)."""
    window = [v for t in trials if (v := t.machine("cpu_busy_ratio")) is not None]
    secs = [s["value"] for t in trials for s in t.samples if s["metric"] == "cpu_busy_ratio"
            and s["metadata"].get("scope") == "machine" and s["metadata"].get("series") and "cpu" not in s["metadata"]]
    if not window:
        return DASH
    mean = human(sum(window) / len(window), "ratio")
    if not secs:
        return f"{mean} (no 1-s readings)"
    return f"{mean} ({min(secs) * 100:.3g} .. {human(max(secs), 'ratio')} over {len(secs)} s)"


def mean_min_max(values: list[float]) -> str:
    """'45.2 % (40.1 .. 52.3 %)': a CPU share's mean over runs with the lowest and highest run; one run, its value."""
    s = summary(values)
    if s is None:
        return DASH
    if s.n < 2:
        return f"{human(s.mean, 'ratio')} (1 run)"
    return f"{human(s.mean, 'ratio')} ({s.min * 100:.3g} .. {human(s.max, 'ratio')})"


def _processes(t: Trial) -> int:
    procs = t.params.get("processes", 1)
    return math.ceil(int(t.params.get("streams", 1)) / 128) if procs == "auto" else int(procs)


def any_t_impl(t: Trial) -> list[str]:
    impl = t.samples[0]["implementation"] if t.samples else {}
    return [v for v in impl.values() if v and v != "none"]


def _impl_all(t: Trial) -> dict:
    return t.samples[0]["implementation"] if t.samples else {}


def _impl(t: Trial) -> dict:
    """What ran, the kernel aside."""
    return {k: v for k, v in (t.samples[0]["implementation"] if t.samples else {}).items() if k != "kernel"}


def _ratio(a: list[float], b: list[float]) -> str:
    """b / a as a ratio of the means, with Fieller's 95 % CI when both have two runs or more."""
    if not a or not b or not sum(a):
        return DASH
    if len(a) < 2 or len(b) < 2:
        return f"{(sum(b) / len(b)) / (sum(a) / len(a)):.2f}x (one run: no CI)"
    c = compare(a, b)
    lo, hi = c.ratio_ci
    if not math.isfinite(lo):
        return f"{c.ratio:.2f}x"
    saw(min(len(a), len(b)))
    return f"{c.ratio:.2f}x ({lo:.2f} .. {hi:.2f})"


def _versus(b: list[float], a: list[float]) -> str:
    if not a or not b:
        return DASH
    return pct(relative(sum(b) / len(b), sum(a) / len(a)))


def _line_rate(spec: dict) -> float | None:
    try:
        rate = spec.get("underlay", {}).get("rate")
        return float(parse_rate(rate)) if rate is not None else None
    except (ValueError, AttributeError):
        return None
