"""Build the tiny pair's text corpus from the Python standard library source.

The tiny target model is a code model trained on CPython's own ``Lib/``: it is
available offline on every machine, permissively licensed, and large enough
(~12 MB) for a model of a few million parameters.  The held-out modules
(``heldout.HELDOUT_MODULES``) are removed so the shipped prompt set tests
generation rather than recall; test suites are removed because they contain
the held-out modules' own tests (and a lot of deliberately odd code).

Outputs in ``--out``:

* ``train.txt``   -- training text, files joined by ``<|endoftext|>``
* ``valid.txt``   -- ~2% of the non-held-out files, chosen by a hash of the
  relative path, for the target's validation loss
* ``heldout.txt`` -- the held-out modules' source, for held-out perplexity
* ``manifest.json`` -- Python version, stdlib dir, file lists with sizes

Usage::

    python -m tools.tiny_pair.corpus --out /work/tiny_build/corpus
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tools.tiny_pair.heldout import HELDOUT_MODULES, heldout_paths

EOS = "<|endoftext|>"
MAX_FILE_BYTES = 1_000_000
# 1 in VALID_MODULUS files (by hash) goes to the validation split: ~2%.
VALID_MODULUS = 50

_EXCLUDED_DIR_NAMES = frozenset({"site-packages", "dist-packages", "test", "tests", "__pycache__"})
# Relative directories excluded explicitly (also covered by the name rule
# where it applies; listed so the intent survives a rule change).
_EXCLUDED_DIR_PATHS = ("idlelib/idle_test", "lib2to3/tests")


@dataclass(frozen=True)
class SourceFile:
    """One corpus document: its path relative to the stdlib dir and its text."""

    rel: str  # POSIX-style relative path
    text: str

    @property
    def nbytes(self) -> int:
        return len(self.text.encode("utf-8"))


def stdlib_dir() -> Path:
    """The running interpreter's pure-Python standard library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def _is_excluded_dir(rel_parts: tuple[str, ...]) -> bool:
    if any(part in _EXCLUDED_DIR_NAMES for part in rel_parts):
        return True
    rel = "/".join(rel_parts)
    return any(rel == p or rel.startswith(p + "/") for p in _EXCLUDED_DIR_PATHS)


def is_valid_split(rel: str) -> bool:
    """Deterministic ~2% validation split, stable across machines and runs."""
    digest = hashlib.sha256(rel.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % VALID_MODULUS == 0


def candidate_paths(root: Path) -> list[str]:
    """Sorted relative paths of every ``.py`` file not in an excluded directory."""
    rels: list[str] = []
    for path in root.rglob("*.py"):
        rel_parts = path.relative_to(root).parts
        if _is_excluded_dir(rel_parts[:-1]):
            continue
        if path.is_file():
            rels.append("/".join(rel_parts))
    return sorted(rels)


def _read(path: Path) -> str | None:
    """Source text, or ``None`` if too large or not UTF-8 (e.g. latin-1 demos)."""
    if path.stat().st_size > MAX_FILE_BYTES:
        return None
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    if EOS in text:  # would be confused with the document separator
        return None
    return text


@dataclass
class Collection:
    """Result of scanning the stdlib: the three splits plus what was skipped."""

    train: list[SourceFile]
    valid: list[SourceFile]
    heldout: list[SourceFile]
    skipped: list[str]


def heldout_rel_paths(root: Path) -> list[str]:
    """Relative paths of the held-out modules, in ``HELDOUT_MODULES`` order."""
    return ["/".join(p.relative_to(root).parts) for p in heldout_paths(root)]


def collect(root: Path | None = None, read: bool = True) -> Collection:
    """Scan ``root`` (default: running stdlib) and split it.

    With ``read=False`` the size/encoding filters are skipped and texts are
    empty: enough to inspect the file lists quickly (used by the tests).
    """
    root = Path(root) if root is not None else stdlib_dir()
    held = heldout_rel_paths(root)
    held_set = set(held)
    train: list[SourceFile] = []
    valid: list[SourceFile] = []
    skipped: list[str] = []
    for rel in candidate_paths(root):
        if rel in held_set:
            continue
        text = _read(root / rel) if read else ""
        if text is None:
            skipped.append(rel)
            continue
        (valid if is_valid_split(rel) else train).append(SourceFile(rel, text))
    heldout = [SourceFile(rel, (root / rel).read_text(encoding="utf-8") if read else "") for rel in held]
    return Collection(train, valid, heldout, skipped)


def join_documents(files: list[SourceFile]) -> str:
    """Concatenate sources with the EOS token string between documents."""
    return EOS.join(f.text for f in files)


def _file_list(files: list[SourceFile]) -> list[dict]:
    return [{"path": f.rel, "bytes": f.nbytes} for f in files]


def write_corpus(out: Path, coll: Collection, root: Path) -> dict:
    """Write the three text files and the manifest; return the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    for name, files in (("train", coll.train), ("valid", coll.valid), ("heldout", coll.heldout)):
        (out / f"{name}.txt").write_text(join_documents(files), encoding="utf-8", newline="")
    manifest = {
        "python_version": platform.python_version(),
        "stdlib_dir": str(root),
        "separator": EOS,
        "valid_rule": f"sha256(relpath)[:8] % {VALID_MODULUS} == 0",
        "heldout_modules": list(HELDOUT_MODULES),
        "skipped": coll.skipped,
        "splits": {
            name: {
                "files": len(files),
                "bytes": sum(f.nbytes for f in files),
                "file_list": _file_list(files),
            }
            for name, files in (("train", coll.train), ("valid", coll.valid), ("heldout", coll.heldout))
        },
    }
    manifest["total_bytes"] = sum(s["bytes"] for s in manifest["splits"].values())
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--stdlib", type=Path, default=None, help="stdlib dir (default: running Python's)")
    args = parser.parse_args(argv)
    root = args.stdlib or stdlib_dir()
    manifest = write_corpus(args.out, collect(root), root)
    for name, split in manifest["splits"].items():
        print(f"{name:8s} {split['files']:5d} files {split['bytes'] / 1e6:7.2f} MB")
    print(f"skipped  {len(manifest['skipped']):5d} files (non-UTF-8 or > 1 MB)")
    print(f"total    {manifest['total_bytes'] / 1e6:7.2f} MB -> {args.out}")


if __name__ == "__main__":
    main()
