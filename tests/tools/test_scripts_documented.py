"""Every script says what it makes and how to run it, and every script or file the docs name exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHELL_SCRIPTS = sorted((REPO / "tools").rglob("*.sh"))
PY_SCRIPTS = sorted(p for folder in ("benchmarks", "tools") for p in (REPO / folder).rglob("*.py")
                    if "__pycache__" not in p.parts and 'if __name__ == "__main__"' in p.read_text())
HISTORY = re.compile(r"sessions? ?\d|\bround \d|device tool", re.IGNORECASE)


def _rel(p: Path) -> str:
    return p.relative_to(REPO).as_posix()


def test_the_scripts_are_found():
    assert len(SHELL_SCRIPTS) >= 10 and len(PY_SCRIPTS) >= 25, (SHELL_SCRIPTS, PY_SCRIPTS)


@pytest.mark.parametrize("path", SHELL_SCRIPTS, ids=_rel)
def test_a_shell_script_opens_with_what_it_does_and_its_command(path):
    lines = path.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash", f"{_rel(path)}: first line {lines[0]!r}"
    header = []
    for line in lines[1:]:
        if not line.startswith("#"):
            break
        header.append(line)
    text = "\n".join(header)
    assert len(header) >= 3, f"{_rel(path)}: say what it measures or makes, and how to run it, in its first lines"
    assert f"bash {_rel(path)}" in text, f"{_rel(path)}: its header shows no command that runs it"
    assert not HISTORY.search(text), f"{_rel(path)}: {HISTORY.search(text).group(0)!r} in its header"


@pytest.mark.parametrize("path", PY_SCRIPTS, ids=_rel)
def test_a_python_script_shows_its_module_command(path):
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    module = ".".join(path.relative_to(REPO).with_suffix("").parts)
    assert f"python -m {module}" in doc, f"{_rel(path)}: its docstring does not show `python -m {module}`"
    assert not HISTORY.search(doc), f"{_rel(path)}: {HISTORY.search(doc).group(0)!r} in its docstring"


# a repository path the prose names: top folder, then a file name with an extension
NAMED_PATH = re.compile(r"(?<![\w./-])((?:bastion|dflash|benchmarks|tools|tests|workflow|docs|profiles)/"
                        r"[\w./-]*\w\.(?:py|sh|smk|md|jsonl|json|yaml|csv|txt|png))(?!\w)")
NAMED_MODULE = re.compile(r"python3? -m ((?:benchmarks|tools)(?:\.[a-z_][a-z0-9_]*)+)")  # NAME: a placeholder


def _documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *SHELL_SCRIPTS, *PY_SCRIPTS]


@pytest.mark.parametrize("doc", _documents(), ids=_rel)
def test_every_named_file_and_module_exists(doc):
    text = doc.read_text()
    missing = [m for m in NAMED_PATH.findall(text) if not (REPO / m).exists()]
    missing += [m for m in NAMED_MODULE.findall(text) if not (REPO / (m.replace(".", "/") + ".py")).exists()]
    assert not missing, f"{_rel(doc)} names what the repository does not hold: {sorted(set(missing))}"


def test_the_reference_check_catches_a_missing_file():
    text = "run `bash tools/gpu/no_such_script.sh`, then python -m benchmarks.no_such_bench"
    assert NAMED_PATH.findall(text) == ["tools/gpu/no_such_script.sh"]
    assert NAMED_MODULE.findall(text) == ["benchmarks.no_such_bench"]
