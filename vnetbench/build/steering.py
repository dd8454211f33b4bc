"""The `steering` factor: receive and transmit packet steering (RPS, XPS) on the devices the run creates. A level
other than `default` writes the CPUs' mask to every receive queue's rps_cpus and every transmit queue's xps_cpus
(/sys/class/net/DEV/queues/{rx,tx}-N), as build steps that `plan` prints and `run` executes; the masks are read back
once after writing (a device that refuses, or a CPU the machine lacks, skips the scenario) and again right before
every trial's measurement (stored with the trial; a mask found otherwise flags it).

Which devices: the same as offloads' (build/offloads.py: targets), every device a line of the run creates, in its own
namespace; never a device the run did not make. sysfs shows a namespace's own devices only when mounted in it, which
`ip netns exec` does: the commands run there.

What each does. RPS is decided where a packet enters the stack from a device's receive queue (netif_rx,
netif_receive_skb): a veth's transmit hands the packet to its peer's receive queue, so the peer's rps_cpus picks the
CPU that runs the rest of the receive path (bridge, routing, the socket's protocol); a vxlan device's decapsulated
packets and a bridge's own deliveries go through their rps_cpus too. XPS chooses among a device's transmit queues by
the sending CPU: the run's veths have one transmit queue each (so the mask is written and read back, and chooses
nothing), and bridges and tunnel devices have none to choose (their xps_cpus cannot be read: nothing is written, the
read-back says `n/a`).
`rps_flow_cnt` (RFS) is not a level: it also needs the machine-wide net.core.rps_sock_flow_entries, which a run does
not change.

Teardown deletes the run's namespaces, and every device with them: nothing is restored.
"""
from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor

from ..core.cpus import cpu_list, cpu_mask, cpus_text, mask_cpus
from ..core.scenario import Scenario, label
from ..system.executor import CommandError, Executor
from . import offloads

# Writes the masks ($1: rps, $2: xps, '' for neither) to every queue of each device; a write the kernel refuses
# prints its error and the rest go on (the read-back names what is not as asked). An xps_cpus that cannot be read
# (a bridge's, a vxlan device's: the kernel answers ENOENT, having no transmit queue to choose) is not written.
WRITE_SCRIPT = ('r=$1; x=$2; shift 2; for d in "$@"; do for q in /sys/class/net/"$d"/queues/rx-*; do '
                '[ -z "$r" ] || echo "$r" > "$q/rps_cpus" || echo "$d ${q##*/} rps_cpus refused" >&2; done; '
                'for q in /sys/class/net/"$d"/queues/tx-*; do [ -z "$x" ] || ! cat "$q/xps_cpus" >/dev/null 2>&1 || '
                'echo "$x" > "$q/xps_cpus" || echo "$d ${q##*/} xps_cpus refused" >&2; done; done')
# One command per node: the online CPUs, then each device's queue masks after an '@@ dev' line ('rx-0/rps_cpus 3').
READ_SCRIPT = ('echo "@@cpus $(cat /sys/devices/system/cpu/online)"; for d in "$@"; do echo "@@ $d"; '
               'for f in /sys/class/net/"$d"/queues/*/rps_cpus /sys/class/net/"$d"/queues/*/xps_cpus; do '
               '[ -e "$f" ] && echo "${f#/sys/class/net/$d/queues/} $(cat "$f" 2>/dev/null || echo -)"; done; done')
NOT_AS_ASKED = "steering not as asked"  # the flag a trial gets when its read-back differs from the level
FILES = {"rps": "rps_cpus", "xps": "xps_cpus"}


class Refused(offloads.Refused):
    """A device kept a mask other than the level asks, or the level names a CPU the machine lacks: the scenario is
    skipped with this reason (the campaign treats it as offloads' refusal)."""


def asked(sc: Scenario) -> dict[str, list[int]]:
    """'rps'/'xps' -> the CPUs the scenario's level sets ({} for `default`: the kernel's, RPS and XPS off)."""
    level = sc.levels.get("steering", "default")
    return {k: cpu_list(v) for k, v in level.items()} if isinstance(level, dict) else {}


def add_steps(topo) -> None:
    """One step per node: the masks written to the queues of the devices the run made there, shown by plan, then
    the read-back that skips the scenario when a CPU is missing or a device refused."""
    want = asked(topo.sc)
    if not want:
        return
    shown = label(topo.sc.levels["steering"])
    for node, devs in offloads.targets(topo).items():
        ex = topo.executor(node)
        argv = write_argv(want, devs)
        topo.call(node, f"steering {shown} on {node}: the masks written to the queues of the {len(devs)} "
                        f"device{'s' * (len(devs) != 1)} the run made there, then read back (a CPU the machine lacks "
                        f"or a device that refuses skips the scenario)",
                  lambda ex=ex, argv=argv, devs=devs, node=node: _set(ex, argv, devs, node, want),
                  [shlex.join(ex.wrap(argv))])


def write_argv(want: dict[str, list[int]], devs: list[str]) -> list[str]:
    return ["sh", "-c", WRITE_SCRIPT, "sh", cpu_mask(want["rps"]) if "rps" in want else "",
            cpu_mask(want["xps"]) if "xps" in want else "", *devs]


def _set(ex: Executor, argv: list[str], devs: list[str], node: str, want: dict[str, list[int]]) -> None:
    online, _ = read(ex, devs)
    if missing := sorted({c for cpus in want.values() for c in cpus} - set(online)):
        raise Refused(f"steering {_level_text(want)}: CPU {cpus_text(missing)} is not on {node}'s machine (its CPUs: "
                      f"{cpus_text(online) or 'unknown'})")
    said = " ".join((ex.run(argv, check=False, timeout=30).stderr or "").split())
    wrong = differences(want, {node: read(ex, devs)[1]})
    if wrong:
        more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
        raise Refused(f"steering {_level_text(want)}: not in force: {'; '.join(wrong[:3])}{more}"
                      + (f" (the kernel said: {said[:200]})" if said else ""))


def _level_text(want: dict[str, list[int]]) -> str:
    return " + ".join(f"{k} {cpus_text(v)}" for k, v in want.items())


def read(ex: Executor, devs: list[str]) -> tuple[list[int], dict[str, dict[str, str]]]:
    """The machine's online CPUs, and device -> 'rx-0/rps_cpus' -> mask as sysfs shows it, in this place."""
    return parse(ex.run(["sh", "-c", READ_SCRIPT, "sh", *devs], check=False, timeout=30).stdout)


def parse(text: str) -> tuple[list[int], dict[str, dict[str, str]]]:
    online: list[int] = []
    out: dict[str, dict[str, str]] = {}
    dev = None
    for line in text.splitlines():
        if line.startswith("@@cpus "):
            try:
                online = cpu_list(line[7:].strip())
            except ValueError:
                online = []
        elif line.startswith("@@ "):
            dev = line[3:].strip()
            out[dev] = {}
        elif dev and " " in line:
            path, _, mask = line.partition(" ")
            out[dev][path] = mask.strip()
    return online, out


def summary(queues: dict[str, str]) -> dict[str, str]:
    """'rps'/'xps' -> the CPUs in force on a device's queues ('0-1'; 'off' for an empty mask; per queue when they
    differ: 'rx-0 0-1, rx-1 off'; 'n/a' where the device has no such file or it cannot be read ('-'), '?' for a mask
    not understood)."""
    out = {}
    for k, name in FILES.items():
        per = {path.split("/")[0]: _cpus(mask) for path, mask in sorted(queues.items())
               if path.endswith(name) and mask != "-"}
        values = set(per.values())
        out[k] = ("n/a" if not per else values.pop() if len(values) == 1 else
                  ", ".join(f"{q} {v}" for q, v in per.items()))
    return out


def _cpus(mask: str) -> str:
    try:
        return cpus_text(mask_cpus(mask)) or "off"
    except ValueError:
        return "?"


def differences(want: dict[str, list[int]], found: dict[str, dict[str, dict[str, str]]]) -> list[str]:
    """'rps off on h1 vb12-x' for each device whose queues have other than asked. A device without rps_cpus files
    (a kernel without CONFIG_RPS) refuses rps; one without xps_cpus (a bridge, a tunnel: no queue) has no XPS."""
    out = []
    for node, devs in found.items():
        for dev, queues in devs.items():
            has = summary(queues)
            for k, cpus in want.items():
                if has[k] == "n/a" and k == "xps":
                    continue
                if has[k] != cpus_text(cpus):
                    out.append(f"{k} {'not offered (no rps_cpus)' if has[k] == 'n/a' else has[k]} on {node} {dev}")
    return out


# ---- per trial -------------------------------------------------------------------------------------------------
def in_force(topo) -> dict:
    """What a trial ran with, read right before it measures, for its metadata: the level asked and the devices in
    groups of identical masks ({"steering": {rps: "0-1", xps: "n/a"}, "devices": ["h1 vb12-u", ...]}); "flag" when
    a device has other than asked."""
    want, where = asked(topo.sc), offloads.targets(topo)
    found: dict[str, dict[str, dict[str, str]]] = {}
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            for node, got in zip(where, pool.map(lambda n: read(topo.executor(n), where[n])[1], where)):
                found[node] = got
    except CommandError as exc:  # a host lost: the trial says so itself; this record only says what it could not read
        return {"asked": _level_text(want) or "default", "error": str(exc)}
    groups: dict[str, dict] = {}
    for node, devs in found.items():
        for dev, queues in devs.items():
            has = summary(queues)
            groups.setdefault(repr(sorted(has.items())), {"steering": has, "devices": []})["devices"].append(
                f"{node} {dev}")
    out = {"asked": _level_text(want) or "default", "groups": list(groups.values())}
    if wrong := differences(want, found):
        out["flag"] = f"{NOT_AS_ASKED}: {wrong[0]}" + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else "")
    return out


# ---- doctor --------------------------------------------------------------------------------------------------------
PROBE_FILE = "/sys/class/net/lo/queues/rx-0/rps_cpus"  # every namespace's lo has one when the kernel has CONFIG_RPS
PROBE_SCRIPT = f'f={PROBE_FILE}; if [ ! -e $f ]; then echo absent; elif [ -w $f ]; then echo ok; else echo ro; fi'


def support(answer: str) -> tuple[bool, str]:
    """Whether steering can be set, from PROBE_SCRIPT's answer on a machine (sysfs is remounted in each of the run's
    namespaces as this one is: read-only here means read-only there)."""
    answer = answer.strip()
    if answer == "ok":
        return True, f"RPS/XPS masks writable ({PROBE_FILE})"
    if answer == "absent":
        return False, f"the kernel has no RPS/XPS (no {PROBE_FILE}: built without CONFIG_RPS)"
    return False, f"{PROBE_FILE} is not writable (a read-only /sys, as in a container)"
