"""The `irq_affinity` factor on a lab: the interrupts of the NIC each of the scenario's hosts uses for its underlay go
to the CPUs the level names (/proc/irq/N/smp_affinity_list). That state is the host's own, not the run's: each IRQ's
old CPU list goes into the host's ledger before it is changed; teardown writes it back, and so does `vnetbench clean`
after a run killed mid-way (clean.clean_script).

The NIC's IRQs (a NIC without a device behind it has none): its PCI function's MSI/MSI-X vectors (/sys/class/net/NIC/device/msi_irqs), else the lines of
/proc/interrupts named after the NIC or its device (a virtio NIC's `virtio2-input.0`), else its legacy line
(device/irq). A NIC without any (a veth, as in the emulated lab; a macvlan) takes no interrupts: the scenario is
skipped with that reason, as it is when /proc/irq is not writable (a container), when the level names a CPU the host
lacks, or when the kernel keeps another list (a managed interrupt refuses a change). A daemon like irqbalance may move
them again: each trial's read-back (in_force) flags a trial whose IRQs are no longer where the level put them.
"""
from __future__ import annotations

import json
import shlex

from ...datapaths.base import Refused
from ...core.cpus import cpu_list, cpus_text
from ...system.executor import CommandError, remote_ledger_append
from . import clean as lab_clean

# $1: the NIC, $2: the /proc/irq to read. '@@cpus LIST' then '@@irq N LIST w|r' for each of the NIC's IRQs.
SURVEY = ('n=$1; r=$2; echo "@@cpus $(cat /sys/devices/system/cpu/online)"; '
          '[ -e /sys/class/net/"$n"/device ] || exit 0; '  # no device (a veth, a bridge): no IRQ of its own
          'irqs=$(ls /sys/class/net/"$n"/device/msi_irqs 2>/dev/null); '
          'd=$(basename "$(readlink /sys/class/net/"$n"/device 2>/dev/null)" 2>/dev/null); '
          '[ -n "$irqs" ] || irqs=$(awk -v n="$n" -v d="${d:-//}" \'{sub(":", "", $1)} '
          '$1 ~ /^[0-9]+$/ && ($NF == n || index($NF, n "-") == 1 || index($NF, d "-") == 1) {print $1}\' '
          '/proc/interrupts 2>/dev/null); '
          '[ -n "$irqs" ] || { i=$(cat /sys/class/net/"$n"/device/irq 2>/dev/null); [ "${i:-0}" -gt 0 ] 2>/dev/null '
          '&& irqs=$i; }; '
          'for i in $irqs; do f=$r/$i/smp_affinity_list; '
          'echo "@@irq $i $(cat "$f" 2>/dev/null || echo ?) $([ -w "$f" ] && echo w || echo r)"; done; true')
NOT_AS_ASKED = "irq_affinity not as asked"  # a trial's flag when an IRQ moved (irqbalance) after the build


class Survey:
    """A host's online CPUs and its NIC's IRQs: number -> (CPU list in force, whether it can be written)."""

    def __init__(self, text: str):
        self.online: list[int] = []
        self.irqs: dict[int, tuple[str, bool]] = {}
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["@@cpus"] and len(words) == 2:
                try:
                    self.online = cpu_list(words[1])
                except ValueError:
                    pass
            elif words[:1] == ["@@irq"] and len(words) == 4 and words[1].isdigit():
                self.irqs[int(words[1])] = (words[2], words[3] == "w")


def survey(ex, nic: str) -> Survey:
    return Survey(ex.run_script(f"sh -c {shlex.quote(SURVEY)} sh {shlex.quote(nic)} "
                                f"{shlex.quote(lab_clean.IRQ_ROOT)}", timeout=30).stdout)


def problem(found: Survey, want: list[int], host: str, nic: str) -> str | None:
    """Why the level cannot be had on this host (None: every IRQ can be written, every CPU is there)."""
    if not found.irqs:
        return (f"{host}'s {nic} has no IRQs (no MSI vectors, no /proc/interrupts line, no legacy IRQ): a virtual "
                f"device such as a veth takes no interrupts")
    if locked := [i for i, (_, w) in found.irqs.items() if not w]:
        return (f"{lab_clean.IRQ_ROOT}/{locked[0]}/smp_affinity_list is not writable on {host} (a read-only /proc, "
                f"as in a container)")
    if found.online and (missing := sorted(set(want) - set(found.online))):
        return f"CPU {cpus_text(missing)} is not on {host} (its CPUs: {cpus_text(found.online)})"
    return None


def write_script(prefix: str, want: list[int], old: dict[int, str]) -> str:
    """The old lists into the host's ledger first (teardown and clean write them back), then the new list to each."""
    records = [json.dumps({"op": "add", "kind": "irq", "name": str(i), "cpus": cpus}) for i, cpus in old.items()]
    text = shlex.quote(cpus_text(want))
    writes = "; ".join(f"echo {text} > {shlex.quote(f'{lab_clean.IRQ_ROOT}/{i}/smp_affinity_list')} || "
                       f"echo 'IRQ {i} refused' >&2" for i in old)
    return f"{remote_ledger_append(prefix, records)} && {{ {writes}; }}"


def asked(sc) -> list[int]:
    level = sc.levels.get("irq_affinity", "default")
    return [] if level == "default" else cpu_list(level)


def apply(site, topo) -> dict[str, dict[int, str]]:
    """Pin the IRQs of each scenario host's NIC. Returns host label -> {IRQ: its old list} of what was changed (the
    ledger has it already); raises Refused, after writing back what it changed, when a host cannot have the level."""
    want = asked(topo.sc)
    if not want:
        return {}
    changed: dict[str, dict[int, str]] = {}
    try:
        for node in topo.hosts:
            ex, name, nic = site.executor(node.label), site.name(node.label), site.nic(node.label)
            found = survey(ex, nic)
            if why := problem(found, want, name, nic):
                raise Refused(f"irq_affinity {cpus_text(want)}: {why}")
            site.touch([node.label])
            old = {i: cpus for i, (cpus, _) in found.irqs.items()}
            said = ex.run_script(write_script(topo.prefix, want, old), timeout=30, check=False).stderr
            changed[node.label] = old
            after = survey(ex, nic)
            if wrong := [f"IRQ {i} on {cpus}" for i, (cpus, _) in after.irqs.items() if not _same(cpus, want)]:
                raise Refused(f"irq_affinity {cpus_text(want)}: {name}'s {nic} kept {', '.join(wrong[:3])}"
                              + (f" (the kernel said: {' '.join(said.split())[:200]})" if said.strip() else ""))
    except Refused:
        restore(site, topo.prefix, changed)
        raise
    except CommandError as exc:
        restore(site, topo.prefix, changed)
        raise Refused(f"irq_affinity {cpus_text(want)}: {exc}") from None
    return changed


def _same(cpus: str, want: list[int]) -> bool:
    try:
        return cpu_list(cpus) == want
    except ValueError:
        return False


def objects(changed: dict[int, str]) -> list:
    """The ledger objects teardown hands clean_script: each IRQ with its old list."""
    return [lab_clean.Obj("irq", str(i), extra={"cpus": cpus}) for i, cpus in changed.items()]


def restore(site, prefix: str, changed: dict[str, dict[int, str]]) -> None:
    """Write the old lists back and mark them restored in the hosts' ledgers (a host gone: clean does it later)."""
    for label, old in changed.items():
        objs = objects(old)
        script = lab_clean.clean_script(prefix, objs, remove_dir=False) + "; " + remote_ledger_append(
            prefix, [json.dumps({"op": "del", "kind": o.kind, "name": o.name}) for o in objs])
        try:
            site.executor(label).run_script(script, timeout=30, check=False)
        except CommandError:
            pass


def in_force(site, topo, changed: dict[str, dict[int, str]]) -> dict | None:
    """A trial's record: each host's NIC IRQs and their CPU lists, read right before it measures; "flag" when one
    is not where the level put it (None when the level is default)."""
    want = asked(topo.sc)
    if not want:
        return None
    out: dict = {"asked": cpus_text(want), "hosts": {}}
    wrong = []
    for label in changed:
        try:
            found = survey(site.executor(label), site.nic(label))
        except CommandError as exc:
            return {"asked": cpus_text(want), "error": str(exc)}
        out["hosts"][site.name(label)] = {str(i): cpus for i, (cpus, _) in found.irqs.items()}
        wrong += [f"IRQ {i} on {cpus} on {site.name(label)}" for i, (cpus, _) in found.irqs.items()
                  if not _same(cpus, want)]
    if wrong:
        out["flag"] = f"{NOT_AS_ASKED}: {wrong[0]}" + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else "")
    return out


def support(ex, host: str, nic: str) -> tuple[bool, str]:
    """Whether irq_affinity can pin this host's NIC (doctor --testbed): its IRQs found and writable."""
    try:
        found = survey(ex, nic)
    except CommandError as exc:
        return False, str(exc)
    if why := problem(found, [], host, nic):
        return False, why
    return True, f"{nic}'s IRQs {cpus_text(sorted(found.irqs))} writable in {lab_clean.IRQ_ROOT}"
