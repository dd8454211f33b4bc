"""The seams, checked from the source: the package's layers, each importing only the ones before it; no import circle
among vnetbench's modules, type-only imports included; the lowest layers know no backend; the matrix knows no guest
module; one registry implementation; datapath elements that use only the builder interface (datapaths/base.py:
Builder), placements only theirs (hosts/steps.py: PlacementHost); no import by name outside the registry, no test of
a class's name, no level read by a computed name where the choice of hosts belongs to hosts.choose."""
import ast
import functools
import json
import re
from pathlib import Path

import yaml

from vnetbench.build.topology import Topology
from vnetbench.datapaths.base import Builder
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import loads
from vnetbench.hosts.steps import PlacementHost

PKG = Path(__file__).resolve().parent.parent / "vnetbench"
SEAM = ("vnetbench.experiment.spec", "vnetbench.experiment.matrix", "vnetbench.core.scenario",
        "vnetbench.experiment.validate", "vnetbench.build.topology", "vnetbench.datapaths")
# The layers, lowest first: a module imports only modules of its own layer or of those before it (experiment ->
# build -> run -> results -> report is the pipeline; the store and statistics sit below the run that writes them).
LAYERS = [
    ("plain data", ("vnetbench.core",)),
    ("the process boundary", ("vnetbench.system",)),
    ("measuring plug-ins", ("vnetbench.workloads", "vnetbench.probes")),
    ("what the plug-ins declare", ("vnetbench.catalog",)),
    ("what a kernel offers", ("vnetbench.capabilities",)),
    ("datapath plug-ins", ("vnetbench.datapaths",)),
    ("guest and host plug-ins", ("vnetbench.guests", "vnetbench.hosts")),
    ("experiment", ("vnetbench.experiment",)),
    ("build", ("vnetbench.build",)),
    ("results", ("vnetbench.results",)),
    ("run", ("vnetbench.run",)),
    ("report", ("vnetbench.report",)),
    ("command", ("vnetbench.cli", "vnetbench.__main__")),
]
# Modules of datapaths/ that a datapath may import: the interface, the registry, and the base of the encrypting
# elements (which registers no element of its own).
SHARED = {"vnetbench.datapaths", "vnetbench.datapaths.base", "vnetbench.datapaths.encrypted"}


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.AST:
    """A module's syntax tree, parsed once for every test of the module."""
    return ast.parse(path.read_text())


def _topo_uses(tree: ast.AST) -> set[str]:
    """The topology's attributes a module uses: `topo.x`, and `getattr(topo, "x")` (a constant name is no less a use
    of the topology than the attribute written out)."""
    used = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "topo":
            used.add(n.attr)
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")
              and len(n.args) >= 2 and isinstance(n.args[0], ast.Name) and n.args[0].id == "topo"):
            name = n.args[1]
            used.add(name.value if isinstance(name, ast.Constant) else "<computed name>")
    return used


@functools.lru_cache(maxsize=None)
def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST, in_function: bool = False):
    """(import statement, whether it sits in a function) for every import: at module level, in a function, or
    under TYPE_CHECKING (a type-only import is a dependency of the design all the same)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        yield from _imports(node, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


@functools.lru_cache(maxsize=None)
def _empty_packages() -> frozenset[str]:
    """Packages whose __init__ holds only a docstring: importing a module in one runs nothing of it."""
    return frozenset(name for name, path in _modules().items() if path.name == "__init__.py" and all(
        isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in _tree(path).body))


def _graph(lazy: bool | None = None) -> dict[str, set[str]]:
    """module -> the vnetbench modules it imports (lazy=None: all; True: only inside functions; False: only at
    module level)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node, in_function in _imports(_tree(path)):
            if lazy is not None and in_function != lazy:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                while target:  # importing a.b.c runs a and a.b first (but a module's own packages ran before it)
                    if target in mods and target != name and not name.startswith(target + "."):
                        deps.add(target)
                    target = target.rpartition(".")[0]
        graph[name] = deps - _empty_packages()
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


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module importing `start` runs, at once or later (module and function level)."""
    seen, todo = set(), [start]
    while todo:
        for dep in graph[todo.pop()] - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


# Imports of vnetbench modules inside functions, outside cli.py (which loads its commands' modules lazily for
# start-up speed), and why each is there. A function-local import that only dodged an import circle is not allowed:
# the circle is broken by moving the shared part down a layer instead.
ALLOWED_LAZY: dict[tuple[str, str], str] = {}
# What counts as a backend: where the hosts are (a testbed over SSH, guests), and the topology built on one.
BACKENDS = ("vnetbench.guests", "vnetbench.build.topology", "vnetbench.hosts")
# The host backend interface (hosts/base.py, hosts/steps.py, the emulated underlay that base's placement builds) and
# the package that registers the backends and chooses one.
INTERFACE = {"vnetbench.hosts", "vnetbench.hosts.base", "vnetbench.hosts.steps", "vnetbench.hosts.underlay"}


def test_no_import_circle_at_run_time():
    """No module imports one that imports it back, counting imports inside functions (they run too)."""
    graph = _graph()
    assert "vnetbench" in _empty_packages() and "vnetbench.core" in _empty_packages()
    assert len(graph) > 60 and len([m for m in graph if m.startswith(SEAM)]) > 10, graph  # the walk found them
    cycles = {" -> ".join(c) for m in graph if (c := _cycle_through(graph, m))}
    assert not cycles, "import circles:\n" + "\n".join(sorted(cycles))
    assert graph["vnetbench.core.scenario"] <= {"vnetbench.core.strict"} and not graph["vnetbench.core.strict"], \
        "scenario.py is plain data: it imports nothing of vnetbench but strict's one-line messages"
    plugins = [m for m in graph if m.startswith(("vnetbench.datapaths", "vnetbench.workloads"))]
    above = {"vnetbench.build.topology", "vnetbench.experiment.matrix", "vnetbench.experiment.spec", "vnetbench.experiment.validate"}
    assert not above & set().union(*(graph[m] for m in plugins)), "datapaths and workloads sit below the spec"


def test_function_level_imports_are_for_start_up_only():
    lazy = {(m, d) for m, deps in _graph(lazy=True).items() for d in deps if m != "vnetbench.cli"}
    assert not lazy - set(ALLOWED_LAZY), f"imports inside functions that could sit at module level: {lazy - set(ALLOWED_LAZY)}"


def test_the_lowest_layers_import_no_backend():
    graph = _graph()
    for low in ("vnetbench.system.ledger", "vnetbench.system.executor", "vnetbench.capabilities"):
        backends = {d for d in _reach(graph, low) if d.startswith(BACKENDS)}
        assert not backends, f"{low} imports (directly or not) {sorted(backends)}: a lower layer knows no backend"


def test_the_matrix_imports_no_guest_module():
    """The matrix asks the chosen host backend whether it runs a scenario (and with whose kernel's capabilities):
    it imports no guest module, directly or not."""
    graph = _graph()
    guests = {d for d in _reach(graph, "vnetbench.experiment.matrix") if d.startswith(("vnetbench.guests",
                                                                                           "vnetbench.hosts.lab"))}
    assert not guests, f"the matrix imports {sorted(guests)}"
    assert "vnetbench.hosts" in graph["vnetbench.experiment.matrix"]  # the walk sees the import it makes instead


def test_backends_never_import_the_topology():
    graph = _graph()
    backends = [m for m in graph if m.startswith(("vnetbench.hosts", "vnetbench.guests"))]
    assert {"vnetbench.hosts.namespaces", "vnetbench.hosts.guest", "vnetbench.hosts.guest_per_host",
            "vnetbench.hosts.lab.placement"} <= set(backends)
    for mod in backends:
        assert "vnetbench.build.topology" not in _reach(graph, mod), f"{mod} imports the topology (directly or not)"
    # nor reach into its private state (a testbed's VF leases and MAC serials live on its placement)
    for path in [*(PKG / "hosts").rglob("*.py"), *(PKG / "guests").rglob("*.py")]:
        private = {a for a in _topo_uses(_tree(path)) if a.startswith("_")}
        assert not private, f"{path.name} uses the topology's private {sorted(private)}"


def test_the_topology_imports_only_the_backend_interface():
    graph = _graph()
    backends = {d for d in _reach(graph, "vnetbench.build.topology") if d.startswith(BACKENDS)}
    assert backends == INTERFACE, f"the topology imports {sorted(backends - INTERFACE)}: it knows the interface only"
    for mod in INTERFACE:  # and the interface knows no backend
        assert not {d for d in _reach(graph, mod) if d.startswith(BACKENDS)} - INTERFACE, mod


def test_every_host_backend_is_registered_and_chosen_by_one_function():
    from vnetbench import hosts
    reg = hosts.load_all()
    assert {"namespaces", "guest", "guest-per-host", "testbed"} <= set(reg)
    assert all(issubclass(cls, hosts.Backend) for cls in reg.values())
    assert hosts.choose({"kernel": "shared"}) is reg["namespaces"]
    assert hosts.choose({"kernel": "guest"}) is reg["guest"]
    assert hosts.choose({"kernel": "guest-per-host"}) is reg["guest-per-host"]
    assert hosts.choose({"kernel": "shared"}, testbed=object()) is reg["testbed"]
    # the commands, the campaign loop and the topology ask hosts.choose, never the level themselves
    chooser = [name for name in ("cli.py", "run/campaign.py", "build/topology.py")
               if re.search(r"""levels(\.get\(|\[)["'](kernel|vm_kernel)["']""", (PKG / name).read_text())]
    assert not chooser, f"modules that choose where the hosts are by themselves: {chooser}"


def test_one_registry_implementation():
    """Datapaths, workloads, probes, analyses and guest backends register through registry.Registry; no other
    module keeps a registry of its own (a module-level REGISTRY that is not one)."""
    from vnetbench import datapaths, guests, hosts, probes, workloads
    from vnetbench.core.registry import Registry
    from vnetbench.report import analyses
    for pkg in (analyses, datapaths, guests, hosts, probes, workloads):
        assert isinstance(pkg.REGISTRY, Registry) and pkg.load_all() is pkg.REGISTRY, pkg.__name__
    assert set(datapaths.REGISTRY) == {"switch", "overlay", "encryption", "attach"}
    assert {"iperf3", "ping"} <= set(workloads.REGISTRY) and {"system", "process", "interfaces"} <= set(probes.REGISTRY)
    own = [str(p) for p in PKG.rglob("*.py") if p.name != "registry.py" and "REGISTRY: dict" in p.read_text()]
    assert not own, own


def test_datapaths_use_only_the_builder_and_not_one_another():
    graph = _graph()
    for mod in (m for m in graph if m.startswith("vnetbench.datapaths.")):
        others = {d for d in graph[mod] if d.startswith("vnetbench.datapaths")} - SHARED
        assert not others, f"{mod} imports {others}: a datapath asks the builder, not another datapath"
    allowed = {n for n in dir(Builder) if not n.startswith("_")} | set(Builder.__annotations__)
    for path in (PKG / "datapaths").glob("*.py"):
        used = _topo_uses(_tree(path))
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


def test_the_topology_use_check_sees_getattr_with_a_constant_name():
    """An evasion the check once let through: getattr(topo, "machine") is a use of the topology's `machine`."""
    tree = ast.parse("def f(topo, k):\n    getattr(topo, 'machine', None)\n    topo.ip('h1')\n    getattr(topo, k)\n")
    assert _topo_uses(tree) == {"machine", "ip", "<computed name>"}


def _layer(module: str) -> int:
    for k, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return k
    raise AssertionError(f"{module} is in no layer of LAYERS: place it")


def test_each_layer_imports_only_the_layers_before_it():
    """Every module sits in one layer; none imports a module of a later layer (type-only and function-level imports
    included: each is a dependency all the same)."""
    graph = _graph()
    upward = sorted(f"{m} ({LAYERS[_layer(m)][0]}) -> {d} ({LAYERS[_layer(d)][0]})"
                    for m, deps in graph.items() if m != "vnetbench" for d in deps if _layer(d) > _layer(m))
    assert not upward, "imports of a later layer:\n" + "\n".join(upward)
    assert {_layer(m) for m in graph if m != "vnetbench"} == set(range(len(LAYERS)))  # no empty layer


def test_the_layer_check_sees_an_upward_import():
    """The check above would fail on a report module imported by the store (and a type-only one counts)."""
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..report import tables\n")
    targets = [n for n, _ in _imports(tree)]
    assert len(targets) == 2 and targets[1].module == "report"
    assert _layer("vnetbench.report.tables") > _layer("vnetbench.results.store")


def test_placements_use_only_the_placement_contract():
    """hosts/ and guests/ use of the topology only what hosts/steps.py: PlacementHost declares, as datapaths use only
    Builder: the contract is what a new backend may rely on."""
    allowed = {n for n in dir(PlacementHost) if not n.startswith("_")} | set(PlacementHost.__annotations__)
    for path in [*(PKG / "hosts").rglob("*.py"), *(PKG / "guests").rglob("*.py")]:
        used = _topo_uses(_tree(path))
        assert used <= allowed, f"{path.relative_to(PKG)} uses {sorted(used - allowed)} of the topology, " \
                                f"outside hosts/steps.py: PlacementHost"
    assert {"ip", "nodes", "run_wave"} <= allowed and not {"placement", "elements", "steps"} & allowed


def _imports_by_name(tree: ast.AST) -> list[str]:
    """A module loaded by a name the import graph cannot see: importlib's import_module or util (importlib.metadata
    reads a distribution's version, which imports nothing), or __import__."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import) and any(a.name in ("importlib", "importlib.util") for a in n.names):
            out.append("import importlib")
        elif isinstance(n, ast.ImportFrom) and n.module in ("importlib", "importlib.util") and \
                any(a.name in ("import_module", "util", "__import__", "spec_from_file_location") for a in n.names):
            out.append(f"from {n.module} import {', '.join(a.name for a in n.names)}")
        elif isinstance(n, ast.Name) and n.id == "__import__":
            out.append("__import__")
    return out


def _class_name_tests(tree: ast.AST) -> list[str]:
    """Comparisons that test what class an object is by its name (`type(x).__name__ == "Uml"`): a backend asked
    which one it is, where its interface should answer."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare):
            parts = [n.left, *n.comparators]
            if any(isinstance(x, ast.Attribute) and x.attr in ("__name__", "__qualname__", "__class__")
                   for p in parts for x in ast.walk(p)):
                out.append(ast.unparse(n))
    return out


def _computed_levels(tree: ast.AST) -> list[str]:
    """Reads of a scenario's levels by a computed key (`levels[k]`, `levels.get(k)`) or by the host choice's own
    keys (kernel, vm_kernel): where hosts.choose should answer, a name in a variable hides the same choice."""
    out = []

    def levels(x) -> bool:
        return (isinstance(x, ast.Name) and x.id == "levels") or (isinstance(x, ast.Attribute) and x.attr == "levels")

    for n in ast.walk(tree):
        key = None
        if isinstance(n, ast.Subscript) and levels(n.value):
            key = n.slice
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
              and levels(n.func.value) and n.args):
            key = n.args[0]
        if key is not None and (not isinstance(key, ast.Constant) or key.value in ("kernel", "vm_kernel")):
            out.append(ast.unparse(n))
    return out


def test_no_import_by_name_no_class_name_test_no_computed_level():
    """The evasions the checks above once let through, each refused where it matters: importlib outside the
    registry, a test of a class's name anywhere, the host choice's levels read by the commands, the campaign or the
    topology."""
    by_name = {m: found for m, path in _modules().items() if m != "vnetbench.core.registry"
               and (found := _imports_by_name(_tree(path)))}
    assert not by_name, f"imports by name outside core/registry.py: {by_name}"
    named = {m: found for m, path in _modules().items() if (found := _class_name_tests(_tree(path)))}
    assert not named, f"tests of a class's name: {named}"
    chooser = {m: found for m in ("vnetbench.cli", "vnetbench.run.campaign", "vnetbench.build.topology")
               if (found := _computed_levels(_tree(_modules()[m])))}
    assert not chooser, f"the choice of hosts read from the levels by hand: {chooser}"


def test_the_evasion_checks_see_each_evasion():
    assert _imports_by_name(ast.parse("import importlib\nm = importlib.import_module('x')"))
    assert _imports_by_name(ast.parse("m = __import__('vnetbench.guests.uml')"))
    assert _imports_by_name(ast.parse("from importlib import import_module"))
    assert not _imports_by_name(ast.parse("from importlib import metadata"))
    assert _class_name_tests(ast.parse("if type(b).__name__ == 'Uml':\n    pass"))
    assert _class_name_tests(ast.parse("ok = b.__class__ is Uml"))
    assert not _class_name_tests(ast.parse("if __name__ == '__main__':\n    pass"))
    assert _computed_levels(ast.parse("k = 'kernel'\nv = sc.levels[k]"))
    assert _computed_levels(ast.parse("v = levels.get('vm_kernel', 'shared')"))
    assert not _computed_levels(ast.parse("v = sc.levels.get('hops', 0)"))
