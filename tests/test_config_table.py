"""The configuration table of RFC 8204 §3 that opens every report: what every scenario shared in one column, and
per-scenario values only for what differed; recorded once per campaign (run/environment.py); an older results
file without the new records still renders, saying 'not recorded'; the answer stays on the first screen."""
import os
import re
from pathlib import Path

from typer.testing import CliRunner

from test_report import labels, magenta_rows, screenshot
from vnetbench.capabilities import Capabilities
from vnetbench.cli import app
from vnetbench.core.sample import Sample
from vnetbench.report import configuration, document, render
from vnetbench.results.store import Store
from vnetbench.run import environment

SPEC = "name: cfgtest\nrepetitions: 3\nfactors:\n  offloads: [on, {tso: off, gso: off, gro: off}]\n" \
       "workloads: [{type: iperf3, duration: 3}]\n"
IMPL = {"switch": "linux-bridge", "overlay": "kernel-vxlan", "encryption": "none", "attach": "veth"}
OFF = {"tso": "off", "gso": "off", "gro": "off"}


def offload_record(asked, value, devices=4):
    return {"asked": asked, "groups": [{"features": {k: value for k in OFF},
                                        "devices": [f"h1 vb-{i}" for i in range(devices)]}]}


def env_now() -> dict:
    """The environment as a run on this machine records it (without probing tools)."""
    return environment.capture(Capabilities(), steal=0.0) | {"cpu_idle": "poll (test)"}


def two_scenarios(path: Path, env: dict) -> Store:
    """Offloads on against tso/gso/gro off: the off scenario's VM MTU is lower too; all else the same."""
    store = Store(path)
    cid = store.new_campaign("cfgtest", "cfg.yaml", SPEC, "ab" * 32, env)
    for idx, (level, mtu, value) in enumerate((("on", 1500, "on"), ("tso/gso/gro off", 1450, "off")), 1):
        lab = labels("vxlan", 1) | {"offloads": level, "mtu": "1500", "ip_version": "4", "hops": "0",
                                    "kernel": "shared", "vm_kernel": "shared"}
        store.put_scenario(cid, idx, f"offloads={level}", lab, lab, "done", None, IMPL, [])
        store.set_scenario_environment(cid, idx, {"h1": {}, "sysctls": {"h1": {"net.ipv4.tcp_rmem": "4096 131072"}}})
        for rep in (1, 2, 3):
            tput = (9e9 if value == "on" else 3e9) * (1 + 0.01 * rep)
            store.save_trial(cid, idx, rep, 0, "iperf3", {}, "ok", None, 1000.0 + rep, 1003.0 + rep,
                             [Sample.of("throughput_bps", tput, pair=1, direction="forward")],
                             {"vm_mtu": mtu, "underlay_mtu": 1500,
                              "offloads": offload_record("on" if value == "on" else OFF, value)})
    store.set_campaign(cid, status="done", finished=store.campaign(cid).created + 60)
    return store


def config_block(doc: document.Document) -> document.Fold:
    head = doc.sections[0]
    assert head.id == "campaign" and isinstance(head.blocks[1], document.Fold)
    return head.blocks[1]


def test_differing_offloads_and_mtu_are_per_scenario_the_rest_common(tmp_path):
    env = env_now()
    doc = document.build(two_scenarios(tmp_path / "c.db", env), 1)
    fold = config_block(doc)
    differ, same = fold.blocks
    assert differ.columns == ["parameter", "#1 offloads=on", "#2 offloads=tso/gso/gro off"]
    assert differ.rows == [["MTU", "VM 1500, underlay 1500", "VM 1450, underlay 1500"],
                           ["offloads", "on: tso on, gso on, gro on on 4 interfaces",
                            "tso/gso/gro off: tso off, gso off, gro off on 4 interfaces"]]
    assert same.columns == ["parameter", "all scenarios"] and all(len(r) == 2 for r in same.rows)
    rows = {r[0]: r[1:] for r in same.rows}
    assert not {"MTU", "offloads"} & set(rows)  # each parameter once, in one table or the other
    for name, value in (("switch", "linux-bridge"), ("tunnel (overlay)", "kernel-vxlan"), ("encryption", "none"),
                        ("CPU model", env["cpu_model"]), ("kernel", env["kernel"]),
                        ("kernel command line", Path("/proc/cmdline").read_text().strip()),
                        ("network sysctls in the run's namespaces",
                         "the same in every scenario (see the environment's 'Network sysctls')")):
        assert rows[name][0] == " ".join(value.split()), name
    line = (f"Configuration (RFC 8204 §3): the 2 scenarios differ in MTU, offloads; machine: {env['cpu_count']} × "
            f"{re.sub(r'[(](R|TM)[)]', '', env['cpu_model'])}, {' '.join(env['kernel'].split()[:2])}")
    cut = configuration.SUMMARY_CHARS
    assert fold.summary == (line if len(line) <= cut else line[:cut - 1] + "…")
    assert "not recorded" not in " ".join(v for t in fold.blocks for r in t.rows for v in r)  # all recorded
    md = render.to_markdown(doc)
    assert md.index("## Campaign") < md.index(f"### {fold.summary}") < md.index("## Answer")
    assert "| offloads | on: tso on, gso on, gro on on 4 interfaces | tso/gso/gro off: tso off, gso off, gro off on 4 " \
           "interfaces |" in md
    assert "| switch | linux-bridge |" in md


def test_a_differing_namespace_sysctl_gets_its_own_row(tmp_path):
    store = two_scenarios(tmp_path / "s.db", {"cpu_count": 2})
    store.set_scenario_environment(1, 2, {"sysctls": {"h1": {"net.ipv4.tcp_rmem": "4096 6291456"}}})
    differ, same = config_block(document.build(store, 1)).blocks
    assert ["sysctl net.ipv4.tcp_rmem", "4096 131072", "4096 6291456"] in differ.rows
    assert "network sysctls in the run's namespaces" not in {r[0] for t in (differ, same) for r in t.rows}


def test_the_machine_policy_is_read_from_proc_and_sys():
    """The new fields against the files themselves, read here independently."""
    got = env_now()
    assert got["kernel_cmdline"] == " ".join(Path("/proc/cmdline").read_text().split())
    cpu = Path("/sys/devices/system/cpu")
    if (cpu / "cpu0" / "cpufreq").is_dir():
        first = got["cpu_frequency"][0]
        assert first["cpus"].startswith("0") and first["governor"] == \
            (cpu / "cpu0" / "cpufreq" / "scaling_governor").read_text().strip()
    else:
        assert got["cpu_frequency"] == "none"
    node = Path("/sys/devices/system/node")
    if node.is_dir():
        assert set(got["numa_nodes"]) == {p.name for p in node.glob("node[0-9]*")}
        assert got["numa_nodes"]["node0"] == (node / "node0" / "cpulist").read_text().strip()
    if (cpu / "cpuidle" / "current_driver").exists():
        assert got["cpu_idle_driver"]["driver"] == (cpu / "cpuidle" / "current_driver").read_text().strip()
    assert got["cpu_affinity"] == environment.cpu_ranges(os.sched_getaffinity(0))
    total = re.search(r"HugePages_Total:\s+(\d+)", Path("/proc/meminfo").read_text())
    assert got["hugepages"]["HugePages_Total"] == total.group(1)


def test_cpu_frequency_groups_cpus_by_driver_and_governor(tmp_path):
    system = tmp_path / "system"
    for n, gov in ((0, "performance"), (1, "performance"), (2, "powersave"), (3, "performance")):
        d = system / "cpu" / f"cpu{n}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_driver").write_text("intel_pstate\n")
        (d / "scaling_governor").write_text(gov + "\n")
    for n, cpus in ((0, "0-1"), (1, "2-3"), (10, "4")):
        (system / "node" / f"node{n}").mkdir(parents=True)
        (system / "node" / f"node{n}" / "cpulist").write_text(cpus + "\n")
    got = environment.cpu_policy(system, tmp_path / "noproc")
    assert got["cpu_frequency"] == [{"cpus": "0-1,3", "driver": "intel_pstate", "governor": "performance"},
                                    {"cpus": "2", "driver": "intel_pstate", "governor": "powersave"}]
    assert list(got["numa_nodes"].items()) == [("node0", "0-1"), ("node1", "2-3"), ("node10", "4")]
    assert got["kernel_cmdline"] is None and got["hugepages"] is None and got["cpu_idle_driver"] == "none"
    text = dict(configuration.machine_rows(got | {"cpu_count": 4}, {}, set()))
    assert text["CPU frequency policy"] == ("CPUs 0-1,3: intel_pstate, governor performance; CPUs 2: intel_pstate, "
                                            "governor powersave")
    assert text["NUMA nodes"] == "3 nodes: node0 CPUs 0-1; node1 CPUs 2-3; node10 CPUs 4"
    assert environment.cpu_policy(tmp_path / "nothing", tmp_path)["cpu_frequency"] == "none"


def test_an_old_campaign_without_the_records_still_renders(tmp_path):
    """A results file from before: no machine policy, no MTU or offloads per trial, nor even an environment."""
    for env in ({"hostname": "old", "kernel": "Linux 5.10", "cpu_model": "Old CPU", "cpu_count": 4}, {}):
        db = tmp_path / f"old{len(env)}.db"
        store = Store(db)
        cid = store.new_campaign("old", "o.yaml", "name: old\n", "cd" * 32, env)
        store.put_scenario(cid, 1, "a", labels("none", 1), labels("none", 1), "done", None, {}, [])
        store.save_trial(cid, 1, 1, 0, "ping", {}, "ok", None, 0.0, 1.0, [Sample.of("rtt_s", 4e-5, pair=1)])
        store.set_campaign(cid, status="done", finished=store.campaign(cid).created + 5)
        fold = config_block(document.build(store, cid))
        rows = dict((r[0], r[1]) for r in fold.blocks[0].rows)
        for name in ("NUMA nodes", "CPU frequency policy", "CPU pinning", "kernel command line", "MTU", "offloads",
                     "switch", "VMs (kernel, vCPUs, memory)"):
            assert rows[name] == "not recorded", (name, rows[name])
        assert rows["CPU model"] == env.get("cpu_model", "not recorded")
        assert fold.summary.startswith("Configuration (RFC 8204 §3): 1 scenario; machine: ")
        out = tmp_path / f"old{len(env)}.md"
        result = CliRunner().invoke(app, ["report", "1", "--db", str(db), "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert "| NUMA nodes | not recorded |" in out.read_text()


MAGENTA = "#answer table,#answer table *{background:#ff00ff!important;color:#ff00ff!important}</style>"


def test_the_answer_stays_on_the_first_screen_under_the_configuration(tmp_path):
    """The configuration opens the report as one folded line: the answer's figure and table still start on the
    first 1400 x 900 screen. Unfolded, the same table pushes them down (so the check can fail)."""
    two_scenarios(tmp_path / "f.db", env_now()).close()
    page = tmp_path / "f.html"
    result = CliRunner().invoke(app, ["report", "1", "--db", str(tmp_path / "f.db"), "-o", str(page)])
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert re.findall(r'<section id="([^"]+)">', text)[:2] == ["campaign", "answer"]
    marked = tmp_path / "marked.html"
    marked.write_text(text.replace("</style>", MAGENTA, 1))
    screenshot(marked, tmp_path / "marked.png", 1400, 900)
    rows = magenta_rows(tmp_path / "marked.png")
    assert rows and rows[0] < 900 - 60, rows[:1]  # the answer's table starts on the first screen
    figure_top = text.index('<section id="answer">') < text.index("<figure", text.index('<section id="answer">')) \
        < text.index("<table", text.index('<section id="answer">'))
    assert figure_top  # the figure comes before that table: it is on the first screen too
    opened = tmp_path / "opened.html"
    opened.write_text(text.replace("<details>", "<details open>", 1).replace("</style>", MAGENTA, 1))
    screenshot(opened, tmp_path / "opened.png", 1400, 900)
    moved = magenta_rows(tmp_path / "opened.png")
    assert not moved or moved[0] > rows[0] + 300


def test_a_testbeds_hosts_are_described_by_their_own_facts():
    """Over SSH the machine running vnetbench only drives: each host's preflight facts say what carried the traffic."""
    facts = {"ssh": "root@10.0.0.1", "nic": "eth1", "cpus": "8", "cpu_model": "Xeon X", "kernel": "Linux 6.1.0-9",
             "cpufreq": "intel_pstate performance ", "numa_nodes": "2", "nic_driver": "ice", "nic_firmware": "4.2",
             "nic_mtu": "9000", "cmdline": "isolcpus=2-7"}
    bare = facts | {"cpufreq": "", "cmdline": ""}
    env = {"hostname": "ctl", "testbed": {"h1": facts, "h2": bare | {"ssh": "root@10.0.0.2"},
                                          "h3": bare | {"ssh": "root@10.0.0.3"}}}
    rows = dict(configuration.machine_rows(env, {}, set()))
    assert rows["host"].startswith("ctl, driving the testbed's hosts over SSH")
    assert rows["testbed hosts"] == (
        "h1 (root@10.0.0.1): 8 × Xeon X, Linux 6.1.0-9, cpufreq intel_pstate performance, NUMA nodes 2, NIC eth1 "
        "(ice, 4.2, MTU 9000), command line: isolcpus=2-7; h2 (root@10.0.0.2), h3 (root@10.0.0.3): 8 × Xeon X, "
        "Linux 6.1.0-9, cpufreq none, NUMA nodes 2, NIC eth1 (ice, 4.2, MTU 9000)")
    assert configuration.summary([], env, 0).endswith("; a testbed of 3 hosts over SSH")


def test_a_testbed_run_leaves_the_driving_machines_policy_out():
    """Over SSH this machine only drives: its frequency policy or command line would be read as the hosts'."""
    env = environment.capture(Capabilities(), nics=False, steal=0.0)
    assert not {"cpu_frequency", "numa_nodes", "kernel_cmdline", "cpu_affinity"} & set(env)
