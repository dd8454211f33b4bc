"""The seam between the scenario, its validation, the datapaths and the builder: no import cycle among them, and
datapath elements that use only the builder interface (datapaths/base.py: Builder), never one another."""
import ast
import json
from pathlib import Path

import yaml

from vnetbench.datapaths.base import Builder
from vnetbench.matrix import expand
from vnetbench.spec import loads
from vnetbench.topology import Topology

PKG = Path(__file__).resolve().parent.parent / "vnetbench"
SEAM = ("vnetbench.spec", "vnetbench.matrix", "vnetbench.scenario", "vnetbench.validate", "vnetbench.topology",
        "vnetbench.datapaths")
# Modules of datapaths/ that a datapath may import: the interface, the registry, and the base of the encrypting
# elements (which registers no element of its own).
SHARED = {"vnetbench.datapaths", "vnetbench.datapaths.base", "vnetbench.datapaths.encrypted"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST):
    """Every import statement that runs (at module level or in a function), not those under TYPE_CHECKING."""
    for node in ast.iter_child_nodes(tree):
        if _type_only(node):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _imports(node)


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                while target:  # importing a.b.c runs a and a.b first
                    if target in mods and target != name:
                        deps.add(target)
                    target = target.rpartition(".")[0]
        graph[name] = deps
    return graph


def _cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A shortest import path from `start` back to itself, or None."""
    paths, seen = [[start]], {start}
    while paths:
        nxt = []
        for path in paths:
            for dep in sorted(graph[path[-1]]):
                if dep == start:
                    return path + [start]
                if dep not in seen:
                    seen.add(dep)
                    nxt.append(path + [dep])
        paths = nxt
    return None


def test_no_import_cycle_through_the_scenario_seam():
    graph = _graph()
    seam = [m for m in graph if m.startswith(SEAM)]
    assert len(seam) > 10, seam  # the walk found the modules
    cycles = [" -> ".join(c) for m in seam if (c := _cycle_through(graph, m))]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
    leaves = {m for m, deps in graph.items() if not deps - {"vnetbench"}}
    assert graph["vnetbench.scenario"] - {"vnetbench"} <= leaves, \
        "scenario.py is plain data: it imports only modules that import nothing of vnetbench"
    plugins = [m for m in graph if m.startswith(("vnetbench.datapaths", "vnetbench.workloads"))]
    above = {"vnetbench.topology", "vnetbench.matrix", "vnetbench.spec", "vnetbench.validate"}
    assert not above & set().union(*(graph[m] for m in plugins)), "datapaths and workloads sit below the spec"


def test_datapaths_use_only_the_builder_and_not_one_another():
    graph = _graph()
    for mod in (m for m in graph if m.startswith("vnetbench.datapaths.")):
        others = {d for d in graph[mod] if d.startswith("vnetbench.datapaths")} - SHARED
        assert not others, f"{mod} imports {others}: a datapath asks the builder, not another datapath"
    allowed = {n for n in dir(Builder) if not n.startswith("_")} | set(Builder.__annotations__)
    for path in (PKG / "datapaths").glob("*.py"):
        used = {n.attr for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "topo"}
        assert used <= allowed, f"{path.name} uses {used - allowed} of the topology, outside datapaths.base.Builder"
    assert not {"elements", "site"} & allowed


def test_switches_realise_the_tunnel_the_overlay_defines():
    """The Linux bridge and OVS with kernel tunnels both build the overlay's own tunnel devices, from the same
    plain-data definition (three hosts: no remote on the device, head-end replication to each other host)."""
    text = yaml.safe_dump({"name": "seam", "hosts": 3, "tenants": 2, "workloads": [{"type": "ping", "count": 1}],
                           "factors": {"switch": ["linuxbridge", {"type": "ovs", "tunnel": "kernel"}],
                                       "overlay": "vxlan", "placement": "cross-host"}})
    scenarios = expand(loads(text).experiment, None)
    assert scenarios == expand(loads(text).experiment, None)  # plain data: equal when made twice
    assert json.loads(json.dumps([sc.to_dict() for sc in scenarios]))[1]["levels"]["switch"]["tunnel"] == "kernel"
    scripts = [Topology(sc, None).script() for sc in scenarios]
    for script in scripts:
        assert "link add vb0000-vx2 type vxlan id 102 local 10.250.0.3 dstport 4789" in script
        assert "fdb append 00:00:00:00:00:00 dev vb0000-vx1 dst 10.250.0.2" in script
    assert "ovs-vsctl" in scripts[1] and "ovs-vsctl" not in scripts[0]
    topo = Topology(expand(loads(text).experiment, None)[0], None)
    tun = topo.overlay_tunnel("h1", 2)
    assert (tun.kind, tun.key, tun.remote, tun.flood) == ("vxlan", 102, None, ("10.250.0.2", "10.250.0.3"))
