"""`show`: by default one line per scenario and metric (median [95% CI], n, what ran) within 100 columns; `--wide`
gives every statistic."""
import os
import re

from conftest import vnetbench
from vnetbench.core.sample import Sample
from vnetbench.results.store import Store

LABELS = [{"switch": "linuxbridge", "overlay": "vxlan", "encryption": "ipsec(aes-256-cbc,hmac-sha512)", "pairs": 8},
          {"switch": "ovs", "overlay": "geneve", "encryption": "ipsec(aes-256-cbc,hmac-sha512)", "pairs": 8}]
IMPLS = [{"switch": "linux-bridge", "overlay": "kernel-vxlan", "encryption": "strongswan-5.9.8 kernel-libipsec",
          "attach": "veth"},
         {"switch": "ovs-netdev", "overlay": "ovs-geneve (underlay in the OVS bridge, a long explanation)",
          "encryption": "strongswan-5.9.8 kernel-libipsec", "attach": "veth"}]


def campaign(path) -> None:
    store = Store(path)
    cid = store.new_campaign("wide", "w.yaml", "name: w\nworkloads: [{type: ping}]\n", "sha", {})
    for idx, (labels, impl) in enumerate(zip(LABELS, IMPLS), 1):
        store.put_scenario(cid, idx, str(labels), labels, labels, "done", None, impl, [])
        for rep in range(1, 6):
            samples = [Sample("throughput_bps", 9.1e9 + 1e7 * rep * idx, "bit/s"),
                       Sample("interrupts_per_s", 3e4, "1/s"),
                       Sample("rtt_s", 4.1e-5 * rep, "s"),
                       Sample("process_cpu_ratio", 0.2, "ratio", {"process": "ovs-vswitchd@h1-with-a-long-name"})]
            store.save_trial(cid, idx, rep, 0, "iperf3", {}, "ok", None, 0.0, 1.0, samples)
    store.close()


def test_show_fits_100_columns_one_line_per_scenario_and_metric(tmp_path):
    db = tmp_path / "r.db"
    campaign(db)
    out = vnetbench("show", "--db", db).stdout
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert "implementation of every scenario: strongswan-5.9.8 kernel-libipsec + veth" in out
    assert "switch/overlay" in out  # the factors that vary, named once per table
    rows = [line for line in lines if line.startswith(("linuxbridge/vxlan", "ovs/geneve"))]
    assert len(rows) == 2 * 3, out  # two scenarios x three metrics, one line each
    tput = [line for line in rows if "Gbit/s" in line]
    assert len(tput) == 2 and all(re.search(r"9\.1\d \[9\.\d+ \.\. 9\.\d+\] Gbit/s\*?\s+5\b", line) for line in tput), tput
    assert any("linux-bridge + kernel-vxlan" in line for line in rows)  # what ran, where scenarios differ
    assert "IQR" not in out and "std" not in out
    assert "process_cpu_ratio" not in out  # each daemon's CPU: --wide, --all or -m
    assert "process_cpu_ratio" in vnetbench("show", "--db", db, "--all").stdout


def test_show_wide_gives_every_statistic(tmp_path):
    db = tmp_path / "r.db"
    campaign(db)
    out = vnetbench("show", "--db", db, "--wide").stdout
    for col in ("IQR", "mean", "std", "CV", "min", "max", "95% CI mean", "95% CI median"):
        assert col in out, col
    assert "[ovs-vswitchd@h1-with-a-long-name]" in out  # a label in brackets is text, not console markup
    assert "interrupts_per_s" in out and "process_cpu_ratio" in out


def test_help_imports_nothing_heavy_and_answers_quickly():
    """`vnetbench --help` (and every command that needs no statistics) must not import scipy, numpy, matplotlib
    or pydantic: importing scipy.stats alone took 0.54 s of a 0.88 s --help."""
    import resource
    import subprocess
    import sys
    code = ("import sys\nsys.argv = ['vnetbench', '--help']\nfrom vnetbench.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'scipy', 'numpy', 'matplotlib', 'pydantic'})\n"
            "print('HEAVY', heavy, file=sys.stderr)\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert "HEAVY []" in proc.stderr, proc.stderr
    assert "run" in proc.stdout and "show" in proc.stdout
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 0.6, f"--help used {cpu:.2f} s of CPU (about 0.15 s expected)"


def test_run_ends_with_one_screen_main_metric_flags_and_commands(tmp_path):
    """`run`'s end: at most 40 lines however many scenarios (60 here), each row the workload's main metric, rows
    past the screen counted with the command that shows them, and the commands to type next never cut."""
    from rich.console import Console

    from vnetbench.report import tables
    db = tmp_path / "a-rather-long-directory-name-for-the-results" / "r.db"
    db.parent.mkdir()
    store = Store(db)
    cid = store.new_campaign("many", "m.yaml", "name: m\nworkloads: [{type: iperf3}]\n", "sha", {})
    for idx in range(1, 61):
        labels = {"switch": "linuxbridge", "mtu": str(1000 + idx)}
        store.put_scenario(cid, idx, str(labels), labels, labels, "done", None, {"switch": "linux-bridge"}, [])
        for rep in (1, 2, 3):
            store.save_trial(cid, idx, rep, 0, "iperf3", {}, "ok", None, 0.0, 1.0,
                             [Sample("throughput_bps", 1e9 + 1e6 * rep, "bit/s"), Sample("interrupts_per_s", 3e4, "1/s")])
    console = Console(width=80, record=True)
    tables.summary(store, cid, console, str(db))
    lines = console.export_text().splitlines()
    assert 10 < len(lines) <= 40, len(lines)
    assert max(map(len, lines)) <= 80
    assert any("throughput_bps" in ln for ln in lines) and not any("interrupts_per_s" in ln for ln in lines)
    assert any(re.search(r"\.\.\. \d+ more rows: vnetbench show 1 --db", ln) for ln in lines), lines
    said = "".join("".join(lines).split())
    assert "".join(f"vnetbench report 1 --db {db} -o report.html".split()) in said  # folded, never cut


def test_labels_cut_to_fit_never_make_two_rows_alike(tmp_path):
    """At 80 and 100 columns S4's rows read `n/a/wireguard/host/1500/shar…` twice (tcp1 and gen4 cut off the end).
    Each level is shortened instead, and a level every row of the table shares moves to its title."""
    db = tmp_path / "r.db"
    store = Store(db)
    cid = store.new_campaign("s4", "s.yaml", "name: s\nworkloads: [{type: iperf3}]\n", "sha", {})
    combos = [("n/a", "wireguard", "host", "1500", "shared", m) for m in ("tcp-single-stream-1", "tcp-single-stream-4")] + \
             [("vxlan", "none", "switch", mtu, k, "tcp-single-stream-1") for mtu in ("1500", "9000")
              for k in ("shared", "guest-per-host")]
    for idx, (ov, enc, att, mtu, kernel, measure) in enumerate(combos, 1):
        labels = {"overlay": ov, "encryption": enc, "attach": att, "mtu": mtu, "kernel": kernel,
                  "measure": measure, "tenants": "1"}
        impl = {"encryption": "wireguard-go-0.0.20220316 (userspace, over TUN)" if enc == "wireguard" else "none",
                "switch": "linux-bridge + kernel-vxlan with a long note" if ov == "vxlan" else "host"}
        store.put_scenario(cid, idx, str(labels), labels, labels, "done", None, impl, [])
        for rep in (1, 2, 3):
            store.save_trial(cid, idx, rep, 0, "iperf3", {}, "ok", None, 0.0, 1.0,
                             [Sample("throughput_bps", 1e9 * idx + 1e6 * rep, "bit/s")])
    store.close()
    for width in ("80", "100"):
        out = vnetbench("show", "--db", db, "-m", "throughput_bps", env=os.environ | {"COLUMNS": width}).stdout
        rows = [line for line in out.splitlines() if "Gbit/s" in line]
        assert len(rows) == len(combos), out
        labels = [line.split("  ")[0].strip() for line in rows]
        assert len(set(labels)) == len(labels), (width, labels)
        assert max(map(len, out.splitlines())) <= int(width)


def test_noisy_trials_say_why_a_ceiling_is_not_called_load(tmp_path):
    """A trial made noisy by intervals above the ceiling was counted under "noisy (steal or other load)"."""
    db = tmp_path / "r.db"
    store = Store(db)
    cid = store.new_campaign("n", "n.yaml", "name: n\nworkloads: [{type: iperf3}]\n", "sha", {})
    labels = {"switch": "linuxbridge", "overlay": "none", "mtu": "1500"}
    store.put_scenario(cid, 1, "a", labels, labels, "done", None, {}, [])
    why = {1: ["CPU steal 9.0% of the window (> 5%)"],
           2: ["3 throughput intervals above the payload ceiling 0.950 Gbit/s (highest 1.020): the receiver read data "
               "buffered before the interval"], 3: []}
    for rep, noisy in why.items():
        store.save_trial(cid, 1, rep, 0, "iperf3", {}, "ok", None, 0.0, 1.0, [Sample("throughput_bps", 9e8, "bit/s")],
                         {"noisy": noisy} if noisy else {})
    store.close()
    out = " ".join(vnetbench("show", "--db", db).stdout.split())
    assert "2 of 3 trials were flagged noisy (CPU steal 1, intervals above the ceiling 1)" in out, out
    assert "steal or other load" not in out
