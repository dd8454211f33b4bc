"""The configuration of the system under test that RFC 8204 §3 asks a report to give (hardware, BIOS-level CPU
policy, kernel and its command line, switch, tunnel and crypto versions, MTUs, offloads, each VM's configuration),
opening the report: what every scenario shared in one column ('all scenarios'), and per-scenario values only for
what differed between the scenarios compared (a table of its own, first). Values are what vnetbench recorded
(run/environment.py per campaign, the scenario's implementation and levels, each trial's metadata); a value it did
not record says "not recorded"."""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from ..catalog import WORKLOADS
from ..core import offloads
from .analyses.base import TableData

NOT_RECORDED = "not recorded"
SUMMARY_CHARS = 150   # the folded line stays one line on a 1400-px screen


@dataclass
class Config:
    summary: str        # one line: what differs between the scenarios, and the machine in a few words
    tables: list[TableData]   # what differs, parameter by scenario (when anything does); what all share


def _or(value) -> str:
    """The value as text, or 'not recorded' when it was not."""
    return NOT_RECORDED if value is None else str(value)


def _kernel_release(env: dict) -> str:
    k = env.get("kernel")
    return " ".join(str(k).split()[:2]) if k else NOT_RECORDED


def _frequency(env: dict) -> str:
    f = env.get("cpu_frequency")
    if f is None:
        return NOT_RECORDED
    if f == "none":
        return "none: no cpufreq driver (the kernel does not set the CPUs' clock)"
    return "; ".join(f"CPUs {g.get('cpus')}: {g.get('driver')}, governor {g.get('governor')}" for g in f)


def _idle(env: dict) -> str:
    held, drv = env.get("cpu_idle"), env.get("cpu_idle_driver")
    kernel = NOT_RECORDED if drv is None else "no cpuidle driver" if drv == "none" else \
        f"cpuidle driver {drv.get('driver') or '-'}, governor {drv.get('governor') or '-'}"
    return f"vnetbench: {held or NOT_RECORDED}; kernel: {kernel}"


def _numa(env: dict) -> str:
    if "numa_nodes" not in env:
        return NOT_RECORDED
    nodes = env["numa_nodes"]
    if not nodes:
        return "no NUMA information (/sys/devices/system/node absent)"
    return f"{len(nodes)} node{'s' * (len(nodes) != 1)}: " + "; ".join(f"{n} CPUs {c}" for n, c in nodes.items())


def _pinning(env: dict) -> str:
    if "cpu_affinity" not in env:
        return NOT_RECORDED
    iso = env.get("isolated_cpus")
    return (f"none (vnetbench pins no process or vCPU); the run could use CPUs {env['cpu_affinity']}; isolated CPUs: "
            f"{iso or 'none' if iso is not None else NOT_RECORDED}")


def _memory(env: dict) -> str:
    mem = env.get("memory_bytes")
    text = f"{mem / 2**30:.1f} GiB" if mem else NOT_RECORDED
    huge = env.get("hugepages")
    if huge:
        text += f"; huge pages: {huge.get('HugePages_Total', '?')} of {huge.get('Hugepagesize', '?')}"
    return text


def _cores(env: dict) -> str:
    n = env.get("cpu_count")
    return _or(n) + (f" (SMT control: {env['smt']})" if env.get("smt") else "")


def _nics(env: dict) -> str:
    if "nics" not in env:
        return NOT_RECORDED
    nics = env["nics"] or {}
    if not nics:
        return "none read (no physical NIC carries the traffic: the run's own devices do)"
    return "; ".join(f"{n} MTU {i.get('mtu', '?')}" for n, i in nics.items())


def _underlay(spec: dict) -> str:
    u = spec.get("underlay") or {}
    parts = [f"{k} {u[k]}" for k in ("rate", "delay", "jitter", "loss") if u.get(k) not in (None, "")]
    return ", ".join(parts) if parts else "no rate, delay or loss set"


def _testbed(env: dict) -> str | None:
    """Each testbed host as its preflight found it: CPU, kernel and command line, frequency policy, NUMA, NIC."""
    bed = env.get("testbed")
    if not bed:
        return None

    def one(h: dict) -> str:
        freq = h.get("cpufreq")
        facts = [f"{h['cpus']} × {h.get('cpu_model') or 'CPU'}" if h.get("cpus") else None, h.get("kernel"),
                 f"cpufreq {freq.strip() or 'none'}" if freq is not None else None,
                 f"NUMA nodes {h['numa_nodes']}" if h.get("numa_nodes") else None,
                 f"NIC {h.get('nic', '?')} ({', '.join(x for x in (h.get('nic_driver'), h.get('nic_firmware')) if x)}"
                 f"{', ' if h.get('nic_driver') else ''}MTU {h.get('nic_mtu') or '?'})",
                 f"command line: {h['cmdline']}" if h.get("cmdline") else None]
        return ", ".join(f for f in facts if f)
    alike: dict[str, list[str]] = defaultdict(list)  # hosts with the same facts said once
    for name, h in bed.items():
        alike[one(h)].append(f"{name} ({h.get('ssh', '?')})")
    return "; ".join(f"{', '.join(names)}: {text}" for text, names in alike.items())


def _tools(env: dict, kinds: set[str]) -> str:
    """The versions of the tools the campaign's workloads ran (each workload class names its own)."""
    tools = env.get("tools")
    if tools is None:
        return NOT_RECORDED
    names = {t for k in kinds for t in (WORKLOADS[k].tools if k in WORKLOADS else {k: None})}
    return ", ".join(f"{t} {tools[t]}" for t in sorted(names) if t in tools) or "-"


def machine_rows(env: dict, spec: dict, kinds: set[str]) -> list[tuple[str, str]]:
    """(parameter, value) recorded once per campaign: the same in every scenario."""
    host = env.get("hostname")
    rows = [("host", (f"{host} ({env['machine']})" if env.get("machine") else host) if host else NOT_RECORDED),
            ("CPU model", _or(env.get("cpu_model"))), ("CPU cores", _cores(env)), ("memory", _memory(env)),
            ("NUMA nodes", _numa(env)), ("CPU frequency policy", _frequency(env)), ("CPU idle policy", _idle(env)),
            ("CPU pinning", _pinning(env)), ("kernel", _or(env.get("kernel"))),
            ("kernel command line", _or(env.get("kernel_cmdline"))), ("machine NICs", _nics(env)),
            ("underlay (emulated host NIC)", _underlay(spec)), ("traffic tools", _tools(env, kinds)),
            ("vnetbench", " ".join(str(x) for x in (env.get("vnetbench"), env.get("vnetbench_git")) if x)
             or NOT_RECORDED)]
    if bed := _testbed(env):  # the rows above are then the machine that drives the testbed over SSH
        rows[0] = ("host", f"{rows[0][1]}, driving the testbed's hosts over SSH (the machine rows below are its own)")
        rows.insert(1, ("testbed hosts", bed))
    return rows


# ---- per scenario ------------------------------------------------------------------------------------------
def _impl(s: dict, key: str, tools: dict) -> str:
    impl = s.get("implementation") or {}
    value = impl.get(key)
    if value is None:
        return NOT_RECORDED
    if key == "switch" and str(value).startswith("ovs") and tools.get("ovs-vswitchd"):
        value = f"{value} (Open vSwitch {tools['ovs-vswitchd']})"
    return str(value)


def _vms(s: dict) -> str:
    """The VMs: a guest's kernel with its vCPUs and memory, or network namespaces on the machine's kernel."""
    impl, levels = s.get("implementation") or {}, s.get("levels") or {}
    if impl.get("vm_kernel"):
        return str(impl["vm_kernel"])
    level = levels.get("vm_kernel")
    if level is None:
        return NOT_RECORDED
    if level == "shared":
        return "network namespaces on the datapath's kernel (no vCPUs or memory of their own)"
    return f"{level} (what ran: {NOT_RECORDED})"


def _datapath_kernel(s: dict) -> str:
    impl, levels = s.get("implementation") or {}, s.get("levels") or {}
    if impl.get("kernel"):
        return str(impl["kernel"])
    level = levels.get("kernel")
    return NOT_RECORDED if level is None else "the machine's" if level == "shared" else f"{level} ({NOT_RECORDED})"


def _mtu(s: dict, trials: list[dict]) -> str:
    """The MTUs the trials ran with (VM and underlay), else the level asked."""
    vm = sorted({t["metadata"]["vm_mtu"] for t in trials if t["metadata"].get("vm_mtu") is not None})
    under = sorted({t["metadata"]["underlay_mtu"] for t in trials if t["metadata"].get("underlay_mtu") is not None})
    if vm or under:
        return f"VM {'/'.join(map(str, vm)) or '?'}, underlay {'/'.join(map(str, under)) or '?'}"
    labels = s.get("labels") or {}
    if labels.get("mtu") is None:
        return NOT_RECORDED
    return f"{labels['mtu']} asked ({labels.get('mtu_policy', 'policy ' + NOT_RECORDED)}); in force: {NOT_RECORDED}"


def _offloads(s: dict, trials: list[dict], features: list[str]) -> str:
    """The offloads read back before each trial (build/offloads.py); else the level: `on` is the kernel's
    defaults, which no trial read back."""
    said = list(dict.fromkeys(offloads.summary(t["metadata"]["offloads"], features) for t in trials
                              if t["metadata"].get("offloads")))
    level = (s.get("labels") or {}).get("offloads")
    if said:
        return f"{level}: " + " | ".join(said) if level else " | ".join(said)
    if level is None:
        return NOT_RECORDED
    return "on (the kernel's defaults, not changed)" if level == "on" else f"{level} (in force: {NOT_RECORDED})"


def _topology(s: dict) -> str:
    lab = s.get("labels") or {}
    if not lab.get("placement"):
        return NOT_RECORDED
    parts = [lab["placement"], *(f"{lab[k]} {what}" for k, what in (("pairs", "pair(s)"), ("hops", "router hop(s)"))
                                 if k in lab)]
    return ", ".join(parts) + (f", IPv{lab['ip_version']}" if "ip_version" in lab else "")


def _sysctls(s: dict) -> dict[str, str]:
    """Each namespace sysctl's value(s) over the scenario's nodes."""
    seen: dict[str, set[str]] = defaultdict(set)
    for node in ((s.get("environment") or {}).get("sysctls") or {}).values():
        for k, v in node.items():
            seen[k].add(v)
    return {k: " | ".join(sorted(v)) for k, v in seen.items()}


def scenario_rows(scenarios: list[dict], trials: dict[int, list[dict]], tools: dict) -> list[tuple[str, list[str]]]:
    features = list(dict.fromkeys(k for ts in trials.values() for t in ts
                                  if isinstance((t["metadata"].get("offloads") or {}).get("asked"), dict)
                                  for k in t["metadata"]["offloads"]["asked"]))
    rows = [("switch", [_impl(s, "switch", tools) for s in scenarios]),
            ("tunnel (overlay)", [_impl(s, "overlay", tools) for s in scenarios]),
            ("encryption", [_impl(s, "encryption", tools) for s in scenarios]),
            ("VM attachment", [_impl(s, "attach", tools) for s in scenarios]),
            ("datapath kernel", [_datapath_kernel(s) for s in scenarios]),
            ("VMs (kernel, vCPUs, memory)", [_vms(s) for s in scenarios]),
            ("topology", [_topology(s) for s in scenarios]),
            ("MTU", [_mtu(s, trials.get(s["idx"], [])) for s in scenarios]),
            ("offloads", [_offloads(s, trials.get(s["idx"], []), features) for s in scenarios])]
    nets = [_sysctls(s) for s in scenarios]
    names = list(dict.fromkeys(k for n in nets for k in n))
    differing = [k for k in names if len({n.get(k, NOT_RECORDED) for n in nets}) > 1]
    if names and not differing:
        rows.append(("network sysctls in the run's namespaces", ["the same in every scenario (see the environment's "
                                                                 "'Network sysctls')"] * len(scenarios)))
    elif not names:
        rows.append(("network sysctls in the run's namespaces", [NOT_RECORDED] * len(scenarios)))
    rows += [(f"sysctl {k}", [n.get(k, NOT_RECORDED) for n in nets]) for k in differing]
    return rows


def compared(scenarios: dict[int, dict], trials: list[dict]) -> list[dict]:
    """The scenarios whose numbers the report compares: those with a trial that passed (else every one not
    skipped)."""
    ok = {t["scenario"] for t in trials if t["status"] == "ok"}
    run = [s for s in scenarios.values() if s["status"] != "skipped"]
    return [s for s in run if s["idx"] in ok] or run


def build(env: dict, spec: dict, scenarios: dict[int, dict], trials: list[dict], names: dict[int, str]) -> Config:
    """`names`: each scenario's column heading (its levels of the factors that vary)."""
    chosen = compared(scenarios, trials)
    by_scenario: dict[int, list[dict]] = defaultdict(list)
    for t in trials:
        if t["status"] == "ok":
            by_scenario[t["scenario"]].append(t)
    per = scenario_rows(chosen, by_scenario, env.get("tools") or {})
    common = [(p, vals[0]) for p, vals in per if len(set(vals)) == 1]
    differ = [(p, vals) for p, vals in per if len(set(vals)) > 1]
    common += machine_rows(env, spec, {t["kind"] for t in trials})
    heads = [f"#{s['idx']} {names.get(s['idx'], '')}".strip() for s in chosen]
    n = len(chosen)
    tables = [TableData("What differs between the scenarios compared", ["parameter", *heads],
                        [[p, *vals] for p, vals in differ], text=True)] if differ else []
    tables.append(TableData("The same in every scenario" if n > 1 else "Configuration", ["parameter", "all scenarios"],
                            [[p, v] for p, v in common],
                            f"{n} scenario{'s' * (n != 1)} compared (those with a trial that passed). Recorded when "
                            "the campaign started (machine), as each scenario was built (implementations, namespaces' "
                            "sysctls) and before each trial (MTU, offloads read back); 'not recorded': this results "
                            "file has no such record (an older vnetbench, or a value it does not read).", text=True))
    return Config(summary(differ, env, n), tables)


def summary(differ: list[tuple[str, list[str]]], env: dict, n: int) -> str:
    what = (f"the {n} scenarios differ in " + ", ".join(p for p, _ in differ)) if differ else \
        (f"the same in all {n} scenarios" if n > 1 else "1 scenario" if n else "no scenario")
    cores = f"{env['cpu_count']} × " if env.get("cpu_count") else ""
    model = re.sub(r"\((R|TM)\)", "", env.get("cpu_model") or "CPU " + NOT_RECORDED)  # a few words, not marks
    machine = f"machine: {cores}{model}, {_kernel_release(env)}"
    if env.get("testbed"):
        machine = f"a testbed of {len(env['testbed'])} hosts over SSH"
    line = f"Configuration (RFC 8204 §3): {what}; {machine}"
    return line if len(line) <= SUMMARY_CHARS else line[:SUMMARY_CHARS - 1] + "…"
