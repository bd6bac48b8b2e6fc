"""The layer contract of docs/architecture.md holds, and would catch a violation."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 320  # "about 300": split a module by responsibility before it grows past this
MAX_FUNCTION_LINES = 60  # a function that needs a scroll bar is two functions


def _lint(cwd: Path = REPO) -> subprocess.CompletedProcess:
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_import_contracts_are_kept():
    res = _lint()
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


@pytest.mark.parametrize("module, line, contract", [
    ("bastion/report/_probe_violation.py", "import torch\n", "never load torch"),
    ("bastion/results/_probe_violation.py", "from bastion.engines import factory\n", "imports point down"),
    ("dflash/_probe_violation.py", "import bastion.defaults\n", "dflash never imports bastion"),
])
def test_a_violation_breaks_the_contract(module, line, contract):
    """The contract is no decoration: one upward or forbidden import turns it red, naming the contract."""
    path = REPO / module
    path.write_text(line)
    try:
        res = _lint()
    finally:
        path.unlink()
    assert res.returncode != 0
    broken = [ln for ln in res.stdout.splitlines() if ln.endswith("BROKEN")]
    assert any(contract in ln for ln in broken), res.stdout


def _py_files(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((REPO / f).rglob("*.py")) if "__pycache__" not in p.parts]


def test_no_library_module_is_oversized():
    big = {p.relative_to(REPO).as_posix(): n for p in _py_files("bastion", "dflash")
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"split these modules by responsibility: {big}"


def long_functions(path: Path, root: Path = REPO) -> dict[str, int]:
    """``module:function`` -> lines, for every function (methods and nested ones included) over the limit."""
    out = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                out[f"{path.relative_to(root).as_posix()}:{node.name}"] = n
    return out


def test_no_library_function_is_long():
    long = {k: v for p in _py_files("bastion", "dflash") for k, v in long_functions(p).items()}
    assert not long, f"split these functions: {long}"


def test_a_long_function_is_caught(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n" + "    x = 1\n" * (MAX_FUNCTION_LINES - 1) + "\n\ndef g():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert long_functions(probe, tmp_path) == {"probe.py:g": MAX_FUNCTION_LINES + 1}


def test_nothing_imports_the_workflow_folder():
    offenders = []
    for p in _py_files("bastion", "dflash", "tests", "benchmarks", "tools", "workflow"):
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{p.relative_to(REPO)}: {n}" for n in names if n == "workflow" or n.startswith("workflow.")]
    assert not offenders


def test_tests_and_benchmarks_do_not_edit_sys_path():
    edits = [f"{p.relative_to(REPO)}:{i}" for p in _py_files("tests", "benchmarks")
             for i, ln in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"sys\.path\.(insert|append)", ln) and p.name != "test_architecture.py"]
    assert not edits, f"import helpers as packages instead: {edits}"


def test_rule_files_hash_code_by_folder():
    """Reruns follow subpackage folders, never hand-kept lists of module files."""
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    assert "code_hash(" in common and not re.search(r'"[a-z_]+\.py"', common.split("def code_hash")[1])


# ------------------------------------------------------------------ import cycles


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The known modules one import statement names (a ``from`` import of a submodule names the submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the module's package, one level up per extra dot
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    out = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
    if base in known and len(out) < len(node.names):
        out.append(base)
    return out


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Every module of ``packages`` under ``root`` -> the modules of those packages it imports.

    All import statements count: at module level, inside functions and under
    ``if TYPE_CHECKING:`` (a cycle there still ties the modules into one unit).  A
    package's ``__init__`` is an edge only where it is named, not for each submodule.
    """
    files = {_module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))
             if "__pycache__" not in p.parts}
    known = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        edges = {m for node in ast.walk(ast.parse(path.read_text())) for m in _imported(node, module, is_package, known)}
        graph[module] = edges - {module}
    return graph


def import_components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module: each is one cycle or several."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return components


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """The shortest cycle through the component's first module (breadth first, inside the component)."""
    start = min(component)
    came_from = {start: ""}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:  # walk back from v to the start
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in the component {sorted(component)}")


def describe_cycles(graph: dict[str, set[str]]) -> str:
    """Each component as one of its cycles, and every module it ties together when there are more."""
    out = []
    for component in import_components(graph):
        cycle = _cycle_in(graph, component)
        rest = sorted(component - set(cycle))
        out.append(" -> ".join(cycle) + (f" (and {', '.join(rest)} in the same knot)" if rest else ""))
    return "; ".join(out)


def test_no_import_cycles():
    """No two modules of bastion/ or dflash/ import each other, even only for type checking or inside a function."""
    cycles = describe_cycles(import_graph(REPO, ("bastion", "dflash")))
    assert not cycles, f"import cycles (move what both need into a module of its own): {cycles}"


def test_a_planted_import_cycle_is_caught_and_named(tmp_path):
    """Cycles through function-level, TYPE_CHECKING and relative imports are found; an acyclic graph passes."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n")
    (pkg / "d.py").write_text("import pkg.a\nfrom pkg.c import something\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.d"] == {"pkg.a", "pkg.c"}
    assert describe_cycles(graph) == "pkg.a -> pkg.b -> pkg.c -> pkg.a"
    (pkg / "e.py").write_text("import pkg.b\n")
    (pkg / "b.py").write_text("import pkg.e\nfrom . import c\n")
    assert describe_cycles(import_graph(tmp_path, ("pkg",))) == "pkg.a -> pkg.b -> pkg.c -> pkg.a (and pkg.e in the same knot)"
    (pkg / "c.py").write_text("import os\n")
    (pkg / "e.py").write_text("")
    assert describe_cycles(import_graph(tmp_path, ("pkg",))) == ""
