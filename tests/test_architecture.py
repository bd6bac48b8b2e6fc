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
