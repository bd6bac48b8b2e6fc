"""Build the held-out code-completion prompt set from held-out stdlib modules.

Each prompt is a function header exactly as written in the source file:
decorators, the (possibly multi-line) signature and the docstring, followed by
a newline, so that the model's natural continuation is the function body.
The modules come from ``heldout.HELDOUT_MODULES`` and never appear in the
training corpus, so the tiny target model has to write the body rather than
recite it.

The set is generated once (with CPython 3.11) and shipped as
``bastion/data/stdlib-heldout.jsonl`` so every machine sees the same prompts
regardless of its own interpreter version.

Usage::

    python -m tools.tiny_pair.heldout_prompts --out bastion/data/stdlib-heldout.jsonl
"""

from __future__ import annotations

import argparse
import ast
import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tools.tiny_pair.heldout import HELDOUT_MODULES, module_path

# Decorators whose functions are not ordinary "write the body" tasks.
_SKIP_DECORATORS = frozenset(
    {"property", "overload", "setter", "getter", "deleter", "abstractmethod", "cached_property"}
)

DEFAULT_MAX_RECORDS = 80
# Long doctest-heavy docstrings would dominate a tiny model's context window
# and bloat the shipped file; such functions are skipped.
DEFAULT_MAX_PROMPT_CHARS = 1200
MIN_BODY_STATEMENTS = 3


@dataclass(frozen=True)
class Candidate:
    """One documented function usable as a prompt."""

    module: str
    function: str  # "name" or "Class.name"
    lineno: int  # 1-based line of the first decorator or the ``def``
    prompt: str

    def record(self) -> dict:
        """JSON record in the harness's ``{"turns": [...]}`` format."""
        return {
            "turns": [self.prompt],
            "module": self.module,
            "function": self.function,
            "lineno": self.lineno,
        }


def _decorator_name(node: ast.expr) -> str:
    """Last dotted component of a decorator (``x.setter`` -> ``setter``)."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _leading_ws(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _extract_prompt(
    func: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]
) -> tuple[int, str] | None:
    """Return ``(lineno, prompt)`` for ``func`` or ``None`` if it does not qualify.

    The prompt is the exact source from the first decorator (or ``def``)
    through the line that closes the docstring, with the header's own
    indentation removed so the ``def`` starts at column 0.  Functions whose
    source cannot be cut that way without altering a character (docstring
    sharing a line with the ``def`` or with code, lines indented less than
    the header) are rejected rather than approximated.
    """
    body = func.body
    if not body or not isinstance(body[0], ast.Expr):
        return None
    doc = body[0].value
    if not (isinstance(doc, ast.Constant) and isinstance(doc.value, str)):
        return None
    if len(body) - 1 < MIN_BODY_STATEMENTS:
        return None
    if any(_decorator_name(d) in _SKIP_DECORATORS for d in func.decorator_list):
        return None
    start = min([func.lineno] + [d.lineno for d in func.decorator_list])
    doc_first, doc_last = body[0].lineno, body[0].end_lineno
    assert doc_last is not None and body[0].end_col_offset is not None
    # The docstring must sit on its own lines: only whitespace before it, and
    # only whitespace after its closing quotes.
    first_line = lines[doc_first - 1]
    if first_line[: body[0].col_offset].strip():
        return None
    last_line = lines[doc_last - 1]
    if last_line[body[0].end_col_offset :].strip():
        return None
    if body[1].lineno <= doc_last:
        return None
    block = lines[start - 1 : doc_last]
    indent = _leading_ws(block[0])
    out: list[str] = []
    for line in block:
        if line.startswith(indent):
            out.append(line[len(indent) :])
        elif not line.strip():
            # A blank line inside a docstring that is shorter than the header
            # indentation: keeping it as an empty line is faithful enough
            # only when it carries no characters at all.
            if line.strip("\r\n"):
                return None
            out.append(line)
        else:
            return None
    prompt = "".join(out)
    if not prompt.endswith("\n"):
        prompt += "\n"
    return start, prompt


def _is_public(name: str) -> bool:
    """Skip private helpers and dunders: their bodies are mostly plumbing."""
    return not name.startswith("_")


def module_candidates(
    module: str, source: str, max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
) -> list[Candidate]:
    """All qualifying top-level functions and top-level-class methods, by line."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    found: list[Candidate] = []

    def consider(func: ast.AST, qualname: str) -> None:
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return
        if not _is_public(func.name):
            return
        got = _extract_prompt(func, lines)
        if got is None:
            return
        lineno, prompt = got
        if len(prompt) > max_prompt_chars:
            return
        found.append(Candidate(module, qualname, lineno, prompt))

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            consider(node, node.name)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    consider(item, f"{node.name}.{item.name}")
    found.sort(key=lambda c: c.lineno)
    return found


def _quotas(sizes: list[int], cap: int) -> list[int]:
    """Round-robin allocation of ``cap`` slots over modules with ``sizes`` items."""
    quotas = [0] * len(sizes)
    remaining = cap
    while remaining > 0:
        progressed = False
        for i, size in enumerate(sizes):
            if remaining == 0:
                break
            if quotas[i] < size:
                quotas[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            break
    return quotas


def _spread(items: list[Candidate], k: int) -> list[Candidate]:
    """``k`` items evenly spaced through a module (not just its first ``k``)."""
    n = len(items)
    if k >= n:
        return list(items)
    return [items[(i * n) // k] for i in range(k)]


def select(per_module: list[list[Candidate]], cap: int) -> list[Candidate]:
    """Deterministic spread: round-robin quotas, evenly spaced within modules."""
    quotas = _quotas([len(c) for c in per_module], cap)
    chosen: list[Candidate] = []
    for cands, quota in zip(per_module, quotas):
        chosen.extend(_spread(cands, quota))
    return chosen


def build_records(
    stdlib_dir: str | Path,
    cap: int = DEFAULT_MAX_RECORDS,
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
) -> list[dict]:
    """Prompt records in module order, then line order."""
    per_module = []
    for name in HELDOUT_MODULES:
        source = module_path(name, stdlib_dir).read_text(encoding="utf-8")
        per_module.append(module_candidates(name, source, max_prompt_chars))
    return [c.record() for c in select(per_module, cap)]


def write_jsonl(records: list[dict], out: Path) -> None:
    """One JSON object per line, ASCII-safe, stable key order."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8", newline="\n") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output .jsonl path")
    parser.add_argument("--stdlib", type=Path, default=None, help="stdlib dir (default: running Python's)")
    parser.add_argument("--max-records", type=int, default=DEFAULT_MAX_RECORDS)
    parser.add_argument("--max-prompt-chars", type=int, default=DEFAULT_MAX_PROMPT_CHARS)
    args = parser.parse_args(argv)
    stdlib = args.stdlib or Path(sysconfig.get_paths()["stdlib"])
    records = build_records(stdlib, args.max_records, args.max_prompt_chars)
    write_jsonl(records, args.out)
    modules = sorted({r["module"] for r in records})
    print(
        f"wrote {len(records)} prompts from {len(modules)} modules to {args.out} "
        f"({args.out.stat().st_size / 1024:.1f} KiB)"
    )


if __name__ == "__main__":
    main()
