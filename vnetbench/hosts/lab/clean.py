"""Clean of a lab: each host keeps its own ledger of what a run made there (/run/vnetbench/<prefix>/objects.jsonl);
`clean` and a run's teardown reach it through the local ledger (REMOTE_CLEANERS), and runs whose local ledger is
gone are found on the hosts and removed once their owner is gone."""
from __future__ import annotations

import json
import shlex
import socket

from ...system.executor import REMOTE_STATE_DIR, CommandError, HostUnreachable, SshExecutor, SshTarget
from ...system.ledger import REMOTE_CLEANERS, Obj, identity, owner_state
from .preflight import _last
from .testbed import Host, Testbed, executor

IRQ_ROOT = "/proc/irq"  # where an IRQ's CPU list is written back (irq.py; a test points it at a copy)

# ---- the remote ledgers ---------------------------------------------------------------------------------------------

def host_record(host: Host, control: str) -> dict:
    t = host.target
    return {"kind": "host", "name": host.name, "destination": t.destination, "port": t.port, "user": t.user,
            "identity": t.identity, "known_hosts": t.known_hosts, "config": t.config,
            "strict_host_keys": t.strict_host_keys, "control": control}


def target_of(entry: dict) -> SshTarget:
    return SshTarget(entry["destination"], port=entry.get("port"), user=entry.get("user"),
                     identity=entry.get("identity"), known_hosts=entry.get("known_hosts"), config=entry.get("config"),
                     strict_host_keys=entry.get("strict_host_keys", "yes"))


def owner_script(prefix: str) -> str:
    """Create the run's directory on a host with who owns it: this kernel's boot and pid namespace, this process
    (the hostname is only for people: clones and containers share it)."""
    owner = json.dumps({"controller": socket.gethostname()} | identity())
    d = shlex.quote(f"{REMOTE_STATE_DIR}/{prefix}")
    return f"mkdir -p -m 700 {d} && printf '%s\\n' {shlex.quote(owner)} > {d}/owner.json"


def parse_objects(text: str) -> list[Obj]:
    live: dict[tuple[str, str], Obj] = {}
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(e, dict) or not isinstance(e.get("kind"), str) or not isinstance(e.get("name"), str):
            continue  # not a record of ours
        key = (e.get("kind"), e.get("name"))
        if e.get("op") == "add":
            extra = ({k: e[k] for k in ("mtu", "ns", "dev", "cpus") if k in e}
                     if e.get("kind") in ("mtu", "vf", "irq") else None)
            live[key] = Obj(e["kind"], e["name"], e.get("pid"), e.get("start"), extra)
        else:
            live.pop(key, None)
    return list(live.values())


def clean_script(prefix: str, objs: list[Obj], remove_dir: bool = True) -> str:
    """Remove exactly what the run recorded on this host: its processes (pid and start time must match), the
    processes in its namespaces, its namespaces, its links (newest first), then its directory. Three execs of
    `ip` at most, whatever the number of objects."""
    q = shlex.quote
    parts = ["set +e"]
    for o in reversed(objs):
        if o.kind == "process" and o.pid and o.start:
            parts.append(f"[ \"$(sed 's/.*) //' /proc/{int(o.pid)}/stat 2>/dev/null | cut -d' ' -f20)\" = {int(o.start)} ]"
                         f" && {{ kill -9 -- -{int(o.pid)} 2>/dev/null || kill -9 {int(o.pid)} 2>/dev/null; }}")
    # a virtual function the run moved into a VM goes back to the host under its own name and MTU, before the VM's
    # namespace goes (which would return it under the VM's name); if the namespace is gone already, it is renamed
    for o in objs:
        if o.kind == "vf" and o.extra and {"ns", "dev", "mtu"} <= set(o.extra):
            ns, dev, mtu, name = q(o.extra["ns"]), q(o.extra["dev"]), int(o.extra["mtu"]), q(o.name)
            parts.append(f"{{ ip -n {ns} link set dev {dev} down && ip -n {ns} link set dev {dev} mtu {mtu} && "
                         f"ip -n {ns} link set dev {dev} netns $$ name {name}; }} 2>/dev/null || "
                         f"{{ ip link set dev {dev} down && ip link set dev {dev} mtu {mtu} && "
                         f"ip link set dev {dev} name {name}; }} 2>/dev/null")
    spaces = [o.name for o in reversed(objs) if o.kind == "netns" and o.name.startswith(prefix)]
    links = [o.name for o in reversed(objs) if o.kind == "link" and o.name.startswith(prefix)]
    # One ip: the pids in the namespaces are listed before the names go (the processes are killed right after;
    # a namespace lives on, nameless, until its last process is gone), then the links.
    lines = [f"netns pids {n}" for n in spaces] + [f"netns del {n}" for n in spaces] + [f"link del {n}" for n in links]
    if lines:
        parts.append(f"pids=$(printf '%s\\n' {' '.join(map(q, lines))} | ip -force -batch - 2>/dev/null); "
                     f"[ -z \"$pids\" ] || kill -9 $pids 2>/dev/null")
    # a NIC's MTU changed by the run (allow_mtu) goes back to what it was, once the run's devices on it are gone
    parts += [f"ip link set dev {q(o.name)} mtu {int(o.extra['mtu'])}" for o in objs if o.kind == "mtu" and o.extra]
    # an IRQ the run pinned (irq_affinity: irq.py) goes back to the CPUs it had
    parts += [f"echo {q(str(o.extra['cpus']))} > {q(f'{IRQ_ROOT}/{int(o.name)}/smp_affinity_list')} 2>/dev/null"
              for o in objs if o.kind == "irq" and o.extra and "cpus" in o.extra and o.name.isdigit()]
    if remove_dir:
        parts.append(f"rm -rf {q(REMOTE_STATE_DIR + '/' + prefix)}")
    return "; ".join(parts + ["true"])


SURVEY = "cat {d}/objects.jsonl 2>/dev/null; echo @@netns; ip netns list; echo @@links; ip -o link show; echo @@pids; " \
         "for p in /proc/[0-9]*; do echo \"${{p#/proc/}} $(sed 's/.*) //' $p/stat 2>/dev/null | cut -d' ' -f20)\"; done; true"


def clean_host(entry: dict, prefix: str, dry_run: bool = False) -> tuple[list[str], str | None]:
    """Visit one host a run touched. Returns (what was removed, None) or ([], why it is pending)."""
    ex = SshExecutor(target_of(entry), name=entry["name"], control=entry.get("control") or None, prefix=prefix)
    try:
        out = ex.run_script(SURVEY.format(d=shlex.quote(f"{REMOTE_STATE_DIR}/{prefix}")), timeout=30).stdout
        text, _, rest = out.partition("@@netns\n")
        spaces, _, rest = rest.partition("@@links\n")
        links, _, pids = rest.partition("@@pids\n")
        objs = parse_objects(text)
        present = {ln.split()[0] for ln in spaces.splitlines() if ln.strip()}
        present |= {ln.split(":")[1].strip().split("@")[0] for ln in links.splitlines() if ln.count(":") >= 2}
        running = {tuple(map(int, ln.split())) for ln in pids.splitlines() if len(ln.split()) == 2}
        what = [f"{entry['name']}: process {o.name} (pid {o.pid})" for o in objs
                if o.kind == "process" and o.pid and (o.pid, o.start) in running]
        what += [f"{entry['name']}: {o.kind} {o.name}" for o in objs if o.kind in ("netns", "link") and o.name in present]
        what += [f"{entry['name']}: MTU of {o.name} back to {o.extra['mtu']}" for o in objs if o.kind == "mtu" and o.extra]
        what += [f"{entry['name']}: IRQ {o.name} back to CPUs {o.extra.get('cpus')}" for o in objs
                 if o.kind == "irq" and o.extra]
        if not dry_run:
            ex.run_script(clean_script(prefix, objs), timeout=60, check=False)
        return what + [f"{entry['name']}: directory {REMOTE_STATE_DIR}/{prefix}"] * bool(text.strip()), None
    except HostUnreachable as exc:
        return [], _last(exc.stderr)
    except CommandError as exc:
        return [], str(exc)
    finally:
        ex.close()


REMOTE_CLEANERS["host"] = clean_host  # `clean` and a run's teardown reach a testbed host through the ledger


def remote_runs(host: Host) -> list[tuple[str, dict]]:
    """The vnetbench runs whose directory is on a host: (prefix, owner)."""
    ex = executor(host)
    try:
        out = ex.run_script(f"for d in {REMOTE_STATE_DIR}/vb*; do [ -d \"$d\" ] && echo \"@@$(basename $d)\" && "
                            f"cat \"$d/owner.json\" 2>/dev/null; done; true", timeout=20).stdout
    finally:
        ex.close()
    runs = []
    for chunk in out.split("@@")[1:]:
        prefix, _, owner = chunk.partition("\n")
        try:
            runs.append((prefix.strip(), json.loads(owner)))
        except json.JSONDecodeError:
            runs.append((prefix.strip(), {}))
    return runs


def clean_testbed(bed: Testbed, local_runs: set[str], dry_run: bool = False) -> tuple[list[str], list[str], list[str]]:
    """Visit every host of a testbed: remove the runs started there from this boot and pid namespace whose process
    is gone and whose local ledger is gone too (those with a local ledger are cleaned through it). Runs whose
    owner cannot be checked from here (another machine, container or boot) are left alone. Returns (removed, left alone (why), pending)."""
    removed: list[str] = []
    left: list[str] = []
    pending: list[str] = []
    for h in bed.hosts:
        try:
            found = remote_runs(h)
        except CommandError as exc:
            pending.append(f"host {h.name}: {_last(exc.stderr)}")
            continue
        for prefix, owner in found:
            if prefix in local_runs:
                continue
            state, why = owner_state(owner, remote=True)
            if state != "dead":
                left.append(f"run {prefix} on {h.name}: " + ("still running" if state == "alive"
                                                             else f"its owner cannot be checked: {why}"))
                continue
            got, why = clean_host(host_record(h, ""), prefix, dry_run)
            removed += [f"{prefix}: {line}" for line in got]
            if why:
                pending.append(f"{prefix}: host {h.name}: {why}")
    return removed, left, pending
