"""The import graph of the whole project: layered, no cycle across subpackages, every module imports alone.

The layers, each importing only itself and the ones below (:data:`LAYERS`)::

    hybrid_cli -> interop -> planner -> collectives -> devices

Three checks, because a bad edge hides in three ways. The AST checks read
every ``import`` (function-level ones included: the cycles issue 7 found were
all lazy imports): one fails on an edge that goes up a layer, one on a
strongly connected component that spans more than one subpackage (a
"subpackage" is the first two parts of a module's name: ``interop.live``,
``interop.rack``, ``planner.step``), naming it. The compiled extension
``interop._C`` is a leaf: ``from interop import _C`` does not import the
package root. The fresh-import check imports each module with the packages
wiped from ``sys.modules`` first, in a child interpreter, so an import that
only works after some other module was loaded fails here; it also checks that
``devices``, ``collectives``' paper half and ``planner`` import neither torch nor
``interop`` (the million-chip what-ifs run without building anything).
"""

from __future__ import annotations

import ast
import functools
import json
import pathlib
import subprocess
import sys



ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("devices", "collectives", "planner", "interop", "hybrid_cli")
"""Lowest first: a module may import modules of its own layer and of the layers before it."""
PACKAGES = LAYERS
LEAVES = ("interop._C",)
"""Modules that are not Python files (the compiled extension): nodes with no imports of their own."""

# Cycles between a subpackage taken whole and the modules around it (see test_no_cycle_through_a_whole_subpackage)
# that exist today, listed exactly as for KNOWN_CYCLES. devices' chips/ and cost/ both read the chip records and
# are read by them.
KNOWN_UNIT_CYCLES: list[tuple[str, ...]] = [
    ("devices.capability", "devices.chip", "devices.chip_set", "devices.chips", "devices.cost"),
]

# Cycles inside one subpackage that exist today. Listed exactly, so that a new cycle fails and so that cutting
# one fails too until its entry is deleted here (it must not come back).
KNOWN_CYCLES: list[tuple[str, ...]] = []


def _modules(package: str) -> dict[str, tuple[pathlib.Path, bool]]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _known(name: str, known: set[str]) -> str | None:
    """The innermost module of the project that ``name`` is or lies in (None outside the project)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


@functools.lru_cache(maxsize=None)
def import_graph(packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its body (``from pkg import sub`` -> pkg.sub); read
    once per run (the tests only read it)."""
    modules: dict[str, tuple[pathlib.Path, bool]] = {}
    for package in packages:
        modules.update(_modules(package))
    known = set(modules) | set(LEAVES)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, (path, is_package) in modules.items():
        here = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                graph[name].update(filter(None, (_known(a.name, known) for a in node.names)))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    found = _known(f"{target}.{alias.name}", known) if f"{target}.{alias.name}" in known \
                        else _known(target, known)
                    if found:
                        graph[name].add(found)
        graph[name].discard(name)
    return graph


def subpackage(module: str) -> str:
    """The unit a cycle may live in: the first two parts of the name (``interop.live``, ``planner.step``)."""
    return ".".join(module.split(".")[:2])


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(tuple(sorted(component)))
    return sorted(found)


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set(), "f": {"f"}}
    assert cycles(graph) == [("a", "b", "c")]


def test_the_graph_counts_function_level_imports_and_treats_the_extension_as_a_leaf():
    graph = import_graph()
    assert "interop.session" in graph["interop.rack"]          # a module-level import
    assert "interop._C" in graph["interop.session"]            # `from interop import _C` inside a function
    assert "interop" not in graph["interop.session"]           # ... is not an import of the package root


def test_every_import_goes_down_the_layers():
    layer = {package: i for i, package in enumerate(LAYERS)}
    upward = sorted((module, target) for module, targets in import_graph().items() for target in targets
                    if layer[target.split(".")[0]] > layer[module.split(".")[0]])
    assert not upward, "imports that go up a layer (" + " -> ".join(reversed(LAYERS)) + "): " + ", ".join(
        f"{m} imports {t}" for m, t in upward)


def test_no_import_cycle_spans_two_subpackages():
    found = cycles(import_graph())
    across = [c for c in found if len({subpackage(m) for m in c}) > 1]
    assert not across, ("import cycles across subpackages (function-level imports included): "
                        + "; ".join(" <-> ".join(c) for c in across))
    assert sorted(found) == sorted(KNOWN_CYCLES), (
        f"cycles inside a subpackage changed: found {found}, listed {KNOWN_CYCLES} (delete an entry that is gone; "
        "do not add one: cut the cycle)")


def unit(module: str) -> str:
    """A subpackage taken whole (``interop.compile.flex_graph`` -> ``interop.compile``); a package's root modules
    (``interop.session``, ``interop``) each stay themselves."""
    return ".".join(module.split(".")[:2])


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with each subpackage's modules merged into one node."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        out.setdefault(unit(module), set()).update(unit(t) for t in targets)
    for name, targets in out.items():
        targets.discard(name)
    return out


def test_unit_graph_merges_subpackages_only():
    graph = {"p": {"p.core"}, "p.core": set(), "p.sub.a": {"p.core"}, "p.sub.b": {"p.top"}, "p.top": {"p.sub.a"}}
    assert cycles(graph) == []  # no module cycle ...
    assert cycles(unit_graph(graph)) == [("p.sub", "p.top")]  # ... but the subpackage and p.top use each other


def test_no_cycle_through_a_whole_subpackage():
    # Issue 29: a subpackage (interop.compile, interop.cuda_layer, interop.hybrid, interop.numerics, planner.step)
    # sits at one place in its package's order: it may use root modules (interop.session) and be used by root
    # modules (interop._backend), but no chain of imports leaves it and comes back, even where no single module
    # is on a cycle (interop.compile.flex_graph -> interop.flex_attention -> interop.compile.slot_graph was one).
    found = cycles(unit_graph(import_graph()))
    assert sorted(found) == sorted(KNOWN_UNIT_CYCLES), (
        f"import cycles through a whole subpackage (function-level imports included): found {found}, listed "
        f"{KNOWN_UNIT_CYCLES} (cut a new one; delete an entry that is gone)")


_CHILD = r"""
import importlib, json, sys, traceback
names, packages, torch_free = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
report = {}
for name in names:
    free = name.split(".")[0] in torch_free and name not in torch_free[name.split(".")[0]]
    for loaded in [m for m in sys.modules if m.split(".")[0] in packages]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except BaseException:
        report[name] = traceback.format_exc(limit=3)
        continue
    if free:
        pulled = [m for m in ("torch", "interop") if m in sys.modules]
        if pulled:
            report[name] = f"importing {name} imported {pulled}"
print(json.dumps(report))
"""

TORCH_FREE = {
    "devices": [],
    "collectives": ["collectives.executor", "collectives.in_process", "collectives.verify", "collectives.distributed",
                    "collectives.distributed._checks", "collectives.distributed._engine",
                    "collectives.distributed._group", "collectives.distributed._model",
                    "collectives.distributed._names", "collectives.distributed._ops",
                    "collectives.distributed._ops_rooted", "collectives.distributed._p2p",
                    "collectives.distributed._peers", "collectives.distributed._work"],
    "planner": [],
    "hybrid_cli": [],
}
"""Packages whose modules import neither torch nor interop, with the modules that are allowed to (the
in-process collectives run on tensors)."""


RUN_ON_IMPORT = ("hybrid_cli.__main__", "interop.cuda")
"""Modules whose import is an action (the command line; installing the CUDA layer), not checked here."""


def test_every_module_imports_alone_in_a_fresh_interpreter():
    # The torch-free modules first, while nothing has imported torch yet.
    # interop is left out: the device registers itself once per process, and its compiler modules load
    # through import hooks after torch._dynamo (interop.import_hooks); the AST checks above cover it.
    names = [n for package in PACKAGES if package != "interop" for n in sorted(_modules(package))
             if n not in RUN_ON_IMPORT]
    names.sort(key=lambda n: not (n.split(".")[0] in TORCH_FREE and n not in TORCH_FREE[n.split(".")[0]]))
    result = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(names), json.dumps(list(PACKAGES)),
                             json.dumps(TORCH_FREE)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    failures = json.loads(result.stdout.strip().splitlines()[-1])
    assert not failures, "\n".join(f"{name}:\n{why}" for name, why in failures.items())


def test_the_paper_planner_and_the_cli_start_without_torch():
    code = ("import sys, planner, hybrid_cli; [hybrid_cli.build_parser(argv) for argv in ([], ['racks'], ['whatif'])]; "
            "assert 'torch' not in sys.modules and 'interop' not in sys.modules, "
            "sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'interop'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
