"""The `offloads` factor: a level other than `on` becomes `ethtool -K` on every device the run creates, as build steps
that `plan` prints and `run` executes; `ethtool -k` reads back what is in force, once after setting (a device that
refuses skips the scenario) and again right before every trial's measurement (stored with the trial).

Which devices. Linux decides segmentation and receive coalescing device by device:
- TSO/GSO: TCP always hands its device super-packets of up to 64 KB (GSO is always on for TCP); a device cuts them in
  software just before its own transmit when its features lack what they need (validate_xmit_skb), and what is cut
  stays cut. veth, bridge and vxlan devices all have GSO, so with the defaults a super-packet crosses the VM's veth,
  the bridge and the vxlan device whole, is encapsulated whole, and is cut (if at all) at the underlay NIC. With
  segmentation off on the VM NIC alone, its packets are MTU-sized from there on; on the underlay alone, the VM,
  bridge and tunnel would still carry super-packets.
- GRO: it runs where a device receives through NAPI or gro_cells: a vxlan device coalesces the inner packets it
  decapsulates (gro_cells, unless its gro is off); a veth only in its NAPI mode (gro on, off by default); a bridge never
  by itself: it forwards what its ports hand it. With gro off on the VM NIC and the underlay only, the receiving
  vxlan device would still hand the VM coalesced packets.
- A bridge's own features count for what it sends itself (its address); what it forwards is judged by the port it
  leaves through.
So a level applies to every device the traffic crosses, not only to the VM NIC and the underlay: in a run's topology
that is every device the run creates (VM NICs, the hosts' VM ports, bridges, tunnel devices, the emulated underlay NIC,
routers' links), read off its own `ip link add` lines (both ends of a veth), plus a guest VM's NIC, which its guest's
kernel makes inside a VM of the run. Devices no line of the run makes are never changed: a testbed host's NIC (or an
SR-IOV function of it), a guest host's own NIC (`kernel: guest-per-host`), and the devices a daemon makes itself (Open
vSwitch's bridge and tunnel devices, wireguard-go's and strongSwan's TUN devices: no line names them); the scenario's
notes say so (experiment/matrix.py, hosts/). Teardown deletes the run's namespaces, and every device with them:
nothing is restored.

A device that refuses a level (`ethtool -K` says "Could not change any device features", or a feature stays as it
was, e.g. `off [fixed]`) skips the scenario with the reason (Refused): run anyway, its rows would be labelled with
offloads that were not in force. A feature found otherwise at a trial's own read-back (changed under the run) flags
that trial.
"""
from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor

from ..core.offloads import shown
from ..core.scenario import OFFLOADS, Scenario, label
from ..datapaths.base import LevelRefused
from ..hosts.steps import ROOT
from ..system.executor import CommandError, Executor

# One command per node: every device's `ethtool -k`, each after an '@@ dev' marker line (parse_ethtool_k).
READ_SCRIPT = 'for d in "$@"; do echo "@@ $d"; ethtool -k "$d" 2>&1; done'
NOT_AS_ASKED = "offloads not as asked"  # the flag a trial gets when its read-back differs from the level


class Refused(LevelRefused):
    """A device kept a feature other than the level asks: the scenario is skipped with this reason."""


def asked(sc: Scenario) -> dict[str, str]:
    """The features the scenario's level sets ({} for `on`: the kernel's defaults)."""
    level = sc.levels.get("offloads", "on")
    return level if isinstance(level, dict) else {}


def targets(topo) -> dict[str, list[str]]:
    """node label -> the devices there that the topology's own steps create (`ip link add`, both ends of a veth;
    `tuntap add`) and guest VMs' NICs. A device in the machine's root namespace or a real host's is never one."""
    spaces = {n.netns: label for label, n in topo.nodes.items() if n.netns}
    out: dict[str, list[str]] = {}
    for step in topo.steps:
        if step.tool != "ip":
            continue
        for line in step.lines:
            for node, dev in created(step.node, line, spaces):
                if node != ROOT and node in topo.nodes and topo.nodes[node].netns and dev not in out.get(node, []):
                    out.setdefault(node, []).append(dev)
    for node, dev in topo.vm_nics:
        if topo.nodes[node].guest and dev not in out.get(node, []):  # made by the guest's kernel, not a line of ours
            out.setdefault(node, []).append(dev)
    return out


def created(node: str, line: str, spaces: dict[str, str]) -> list[tuple[str, str]]:
    """(node, device) a line of an `ip` batch run in `node` creates: `link add NAME [netns NS] ... type KIND [peer
    name NAME2 [netns NS2]]` (a peer without netns stays where the command runs), `tuntap add ... name TAP`."""
    words = line.split()
    if words[:2] == ["tuntap", "add"] and "name" in words[:-1]:
        return [(node, words[words.index("name") + 1])]
    if words[:2] != ["link", "add"]:
        return []
    head, peer = words[2:], []
    if "peer" in head:
        head, peer = head[:head.index("peer")], head[head.index("peer") + 1:]
    if "type" in head:
        head = head[:head.index("type")]
    return [d for d in (_device(head, node, spaces), _device(peer, node, spaces)) if d]


def _device(words: list[str], node: str, spaces: dict[str, str]) -> tuple[str, str] | None:
    if words[:1] in (["name"], ["dev"]):
        words = words[1:]
    if not words:
        return None
    where = node
    if "netns" in words[:-1]:
        where = spaces.get(words[words.index("netns") + 1], ROOT)  # a namespace not of this topology: not ours
    return where, words[0]


def add_steps(topo) -> None:
    """The level's `ethtool -K` on each device, one step per node (its command lines shown by plan), each followed by
    the read-back that skips the scenario when a device refused."""
    want = asked(topo.sc)
    if not want:
        return
    args = [w for k, v in want.items() for w in (OFFLOADS[k][0], v)]
    shown = label(want)
    for node, devs in targets(topo).items():
        ex = topo.executor(node)
        argvs = [["ethtool", "-K", dev, *args] for dev in devs]
        topo.call(node, f"offloads {shown} on {node}: ethtool -K on the {len(devs)} device{'s' * (len(devs) != 1)} "
                        f"the run made there, then ethtool -k reads them back (a device that refuses skips the "
                        f"scenario)",
                  lambda ex=ex, argvs=argvs, node=node: _set(ex, argvs, node, want),
                  [shlex.join(ex.wrap(a)) for a in argvs])


def _set(ex: Executor, argvs: list[list[str]], node: str, want: dict[str, str]) -> None:
    """Each device's `ethtool -K`, then one read-back of them all: Refused names what is not as asked (and what
    ethtool said), at most three devices."""
    said = []
    for argv in argvs:
        got = ex.run(argv, check=False, timeout=30)
        if got.returncode != 0:
            said.append(f"{argv[2]}: {' '.join((got.stderr or got.stdout).split())[:200]}")
    wrong = differences(want, {node: read(ex, [a[2] for a in argvs])})
    if wrong or said:
        more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
        why = f"not in force: {'; '.join(wrong[:3])}{more}" if wrong else "in force, but ethtool -K failed"
        raise Refused(f"offloads {label(want)}: {why}" + (f" (ethtool -K said: {'; '.join(said[:3])})" if said else ""))


def read(ex: Executor, devs: list[str]) -> dict[str, dict[str, str]]:
    """device -> short feature name -> 'on' / 'off' (+ ' fixed'), as `ethtool -k` shows them in this place."""
    text = ex.run(["sh", "-c", READ_SCRIPT, "sh", *devs], check=False, timeout=30).stdout
    return {dev: {short: feats[name] for short, (_, name) in OFFLOADS.items() if name in feats}
            for dev, feats in parse_ethtool_k(text).items()}


def differences(want: dict[str, str], found: dict[str, dict[str, dict[str, str]]]) -> list[str]:
    """'tso on [fixed] on h1 vb12-vx1' for each feature a device has other than asked (or does not show at all)."""
    out = []
    for node, devs in found.items():
        for dev, feats in devs.items():
            for k, v in want.items():
                has = feats.get(k)
                if has is None or has.split()[0] != v:
                    out.append(f"{k} {shown(has) if has else 'not shown by ethtool -k'} on {node} {dev}")
    return out


def parse_ethtool_k(text: str) -> dict[str, dict[str, str]]:
    """'@@ dev' then `ethtool -k dev` lines ('feature: on [fixed]') -> dev -> feature -> 'on'/'off' (+' fixed')."""
    out: dict[str, dict[str, str]] = {}
    dev = None
    for line in text.splitlines():
        if line.startswith("@@ "):
            dev = line[3:].strip()
            out[dev] = {}
        elif dev and ":" in line and not line.startswith("Features for"):
            key, _, value = line.strip().partition(": ")
            out[dev][key] = value.replace("[", "").replace("]", "").strip()
    return out


# ---- per trial -------------------------------------------------------------------------------------------------
def in_force(topo) -> dict:
    """What a trial ran with, read right before it measures, for its metadata: the level asked, and the devices in
    groups of identical features ({"features": {tso: off, ...}, "devices": ["h1 vb12-u", ...]}); "flag" when a
    device has a feature other than asked."""
    found: dict[str, dict[str, dict[str, str]]] = {}
    want, where = asked(topo.sc), targets(topo)
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            for node, got in zip(where, pool.map(lambda n: read(topo.executor(n), where[n]), where)):
                found[node] = got
    except CommandError as exc:  # a host lost: the trial says so itself; this record only says what it could not read
        return {"asked": want or "on", "error": str(exc)}
    groups: dict[str, dict] = {}
    for node, devs in found.items():
        for dev, feats in devs.items():
            key = repr(sorted(feats.items()))
            groups.setdefault(key, {"features": feats, "devices": []})["devices"].append(f"{node} {dev}")
    out = {"asked": want or "on", "groups": list(groups.values())}
    if wrong := differences(want, found):
        out["flag"] = f"{NOT_AS_ASKED}: {wrong[0]}" + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else "")
    return out
