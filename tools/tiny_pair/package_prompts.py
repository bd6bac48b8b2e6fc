"""Function-header prompts cut from an installed third-party package: code the tiny pair never saw.

The tiny pair was trained on the Python standard library only, so headers from a pip
package's source (cut exactly as :mod:`tools.tiny_pair.heldout_prompts` cuts the
held-out stdlib set: decorators, signature, docstring) measure whether its acceptance
holds on code from outside the standard library.  The output is a ``{"turns": [...]}``
.jsonl that ``--dataset`` reads directly:

    python -m tools.tiny_pair.package_prompts --package yaml --package jinja2 --out /tmp/pkg.jsonl
    python -m bastion.benchmark --model tiny --dataset /tmp/pkg.jsonl --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys
from pathlib import Path

from tools.tiny_pair.heldout_prompts import DEFAULT_MAX_PROMPT_CHARS, module_candidates, select, write_jsonl


def package_dir(name: str) -> Path:
    """The source folder (or single module file) of an importable package, without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin in (None, "built-in", "frozen"):
        raise SystemExit(f"error: package {name!r} is not installed here (pip install it, or name another)")
    origin = Path(spec.origin)
    if "site-packages" not in origin.parts and "dist-packages" not in origin.parts:
        raise SystemExit(f"error: {name!r} lives in {origin.parent}, not in site-packages: pick a third-party package")
    if spec.submodule_search_locations:  # a package: its folder, even when __init__ is compiled (mypyc, Cython)
        return Path(next(iter(spec.submodule_search_locations)))
    return origin


def build_records(packages: list[str], cap: int, max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS) -> list[dict]:
    """Headers of every package's modules (tests skipped), an even share per package.

    The packages alternate in the output, so a prefix (``--max-samples``) holds all of
    them: a large package (networkx has hundreds of modules) would otherwise fill the cap
    before the others were reached.
    """
    shares = [cap // len(packages) + (i < cap % len(packages)) for i in range(len(packages))]
    chosen = []
    for name, share in zip(packages, shares):
        root = package_dir(name)
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*.py") if "test" not in p.as_posix().lower())
        per_module = []
        for path in files:
            try:
                source = path.read_text(encoding="utf-8")
                found = module_candidates(f"{name}:{path.relative_to(root.parent).as_posix()}", source, max_prompt_chars)
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            if found:
                per_module.append(found)
        chosen.append(select(per_module, share))
    mixed = [c for row in itertools.zip_longest(*chosen) for c in row if c is not None]
    return [c.record() for c in mixed]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", action="append", required=True, help="an installed third-party package (repeatable)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--max-records", type=int, default=80)
    args = ap.parse_args(argv)
    records = build_records(args.package, args.max_records)
    if not records:
        print(f"error: no qualifying function headers in {', '.join(args.package)}", file=sys.stderr)
        return 1
    write_jsonl(records, args.out)
    print(f"wrote {len(records)} prompts from {', '.join(args.package)} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
