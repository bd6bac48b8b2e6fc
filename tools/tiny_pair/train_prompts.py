"""Function-header prompts from the corpus' TRAINING (or validation) split, for drafter data.

The drafter is evaluated on prompts that are a function header (decorators, signature and
docstring, cut from the source exactly as ``heldout_prompts.py`` cuts them) whose body the
target writes.  To train the drafter on that situation, this tool cuts headers of the same
shape from the files of one corpus split; the target then continues each of them
(``python -m dflash.distill_data --prompt-file``), and the drafter learns those
continuations.

Only files of the requested split are read (``corpus.collect``: the held-out modules are
never in it, and the ~2 % validation files are in the ``valid`` split only).  As a second
guard, any header whose text also occurs as a header in a held-out module (code copied
between stdlib files) is dropped.

Compared with the held-out prompt set the filter is looser, to get thousands of prompts:
private functions and methods of nested classes count too, one body statement is enough,
and no per-module quota applies.

    python -m tools.tiny_pair.train_prompts --split train --out train_prompts.jsonl
    python -m tools.tiny_pair.train_prompts --split valid --out valid_prompts.jsonl
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import sysconfig
from pathlib import Path

from tools.tiny_pair import corpus
from tools.tiny_pair import heldout_prompts as hp
from tools.tiny_pair.heldout import HELDOUT_MODULES, module_path

DEFAULT_MAX_PROMPT_CHARS = 1500
MIN_BODY_STATEMENTS = 1


def _headers(source: str, max_chars: int) -> list[tuple[str, int, str]]:
    """``(qualname, lineno, prompt)`` for every qualifying function or method, any depth."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines(keepends=True)
    found: list[tuple[str, int, str]] = []
    old_min = hp.MIN_BODY_STATEMENTS
    hp.MIN_BODY_STATEMENTS = MIN_BODY_STATEMENTS
    try:
        def walk(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    got = hp._extract_prompt(child, lines)
                    if got is not None and len(got[1]) <= max_chars:
                        found.append((prefix + child.name, got[0], got[1]))
                    # nested functions are rarer and mostly closures: skip their insides
                elif isinstance(child, ast.ClassDef):
                    walk(child, f"{prefix}{child.name}.")
                elif isinstance(child, (ast.If, ast.Try)):
                    walk(child, prefix)  # e.g. "if sys.platform == ...: def f(): ..."
        walk(tree, "")
    finally:
        hp.MIN_BODY_STATEMENTS = old_min
    found.sort(key=lambda t: t[1])
    return found


def heldout_header_texts(stdlib: Path, max_chars: int = 100_000) -> set[str]:
    """Every header the same cutter finds in the held-out modules (the de-duplication guard)."""
    texts: set[str] = set()
    for name in HELDOUT_MODULES:
        src = module_path(name, stdlib).read_text(encoding="utf-8")
        texts.update(p for _, _, p in _headers(src, max_chars))
    return texts


def build_records(stdlib: Path | None = None, split: str = "train",
                  max_chars: int = DEFAULT_MAX_PROMPT_CHARS) -> list[dict]:
    """Header records of one split (``train`` or ``valid``), in file then line order."""
    if split not in ("train", "valid"):
        raise ValueError(f"split must be train or valid, got {split!r}")
    root = Path(stdlib) if stdlib is not None else corpus.stdlib_dir()
    coll = corpus.collect(root)
    files = coll.train if split == "train" else coll.valid
    banned_paths = {f.rel for f in coll.heldout} | ({f.rel for f in coll.valid} if split == "train" else set())
    banned_texts = heldout_header_texts(root)
    out: list[dict] = []
    seen: set[str] = set()
    for f in files:
        if f.rel in banned_paths:  # cannot happen (collect splits by path); kept as a hard guard
            raise AssertionError(f"{f.rel} is outside the {split} split")
        for qual, lineno, prompt in _headers(f.text, max_chars):
            if prompt in banned_texts or prompt in seen:
                continue
            seen.add(prompt)
            out.append({"turns": [prompt], "file": f.rel, "function": qual, "lineno": lineno})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--split", choices=("train", "valid"), default="train")
    ap.add_argument("--stdlib", type=Path, default=None, help="stdlib dir (default: the running Python's)")
    ap.add_argument("--max-prompt-chars", type=int, default=DEFAULT_MAX_PROMPT_CHARS)
    args = ap.parse_args(argv)
    recs = build_records(args.stdlib or Path(sysconfig.get_paths()["stdlib"]), args.split, args.max_prompt_chars)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8", newline="\n") as fh:
        for r in recs:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {len(recs)} {args.split} headers from {len({r['file'] for r in recs})} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
