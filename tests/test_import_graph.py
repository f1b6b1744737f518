"""The import graph of devices/ and collectives/: no cycles, and every module imports on its own.

Two checks, because a cycle hides in two ways.  The AST check reads every
``import`` (function-level ones included: the cycles issue 7 found were all
lazy imports) and fails on any strongly connected component, naming it.  The
fresh-import check imports each module with the packages wiped from
``sys.modules`` first, in a child interpreter, so an import that only works
after some other module was loaded fails here; it also checks that ``devices``
imports neither torch nor ``interop`` (the planner and the million-chip
what-ifs run without building anything).
"""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("devices", "collectives")

# Cycles that exist today and are owned by another piece of work.  Listed exactly, so that a new cycle fails
# and so that cutting this one fails too until its entry is deleted here (it must not come back).
KNOWN_CYCLES: dict[str, list[tuple[str, ...]]] = {
    "devices": [],
    # collectives/distributed/_checks imports DEVICE from its package, whose functions import _group -> _checks.
    "collectives": [("collectives.distributed", "collectives.distributed._checks", "collectives.distributed._engine",
                     "collectives.distributed._group", "collectives.distributed._ops",
                     "collectives.distributed._ops_rooted")],
}


def _modules(package: str) -> dict[str, tuple[pathlib.Path, bool]]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def import_graph(packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports anywhere in its body (``from pkg import sub`` -> pkg.sub)."""
    modules: dict[str, tuple[pathlib.Path, bool]] = {}
    for package in packages:
        modules.update(_modules(package))
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        here = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in modules:
                        graph[name].add(sub)
                    elif target in modules:
                        graph[name].add(target)
        graph[name].discard(name)
    return graph


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


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package):
    graph = import_graph()
    mine = [c for c in cycles(graph) if any(m == package or m.startswith(package + ".") for m in c)]
    assert mine == KNOWN_CYCLES[package], (
        f"import cycles in {package}/ (each a set of modules that import each other, function-level imports "
        f"included): {mine}")


_CHILD = r"""
import importlib, json, sys, traceback
names, packages = json.loads(sys.argv[1]), json.loads(sys.argv[2])
report = {}
for name in names:
    if name.split(".")[0] == "devices":
        for loaded in [m for m in sys.modules if m.split(".")[0] in packages]:
            del sys.modules[loaded]
    torch_before = "torch" in sys.modules
    try:
        importlib.import_module(name)
    except BaseException:
        report[name] = traceback.format_exc(limit=3)
        continue
    if name.split(".")[0] == "devices":
        pulled = [m for m in ("torch", "interop") if m in sys.modules and not (m == "torch" and torch_before)]
        if pulled:
            report[name] = f"importing {name} imported {pulled}"
print(json.dumps(report))
"""


def test_every_module_imports_alone_in_a_fresh_interpreter():
    names = [n for package in PACKAGES for n in sorted(_modules(package))]
    # devices first: it must not import torch, and nothing has imported it yet.
    result = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(names), json.dumps(list(PACKAGES))],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    failures = json.loads(result.stdout.strip().splitlines()[-1])
    assert not failures, "\n".join(f"{name}:\n{why}" for name, why in failures.items())
