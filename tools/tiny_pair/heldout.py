"""Standard-library modules held out from the tiny pair's training corpus.

The tiny target model is trained on CPython's own standard library, and the
default experiment prompts it with functions from the standard library.  To
keep that experiment honest (the model must *generate* code, not recite what
it memorised) the prompt modules below are removed from the training corpus
and only used for the held-out prompt set and the held-out perplexity report.

The list is explicit and fixed (not derived from the running interpreter), so
the split is identical on every machine.  Every entry is a pure-Python module
that exists in CPython 3.11 and 3.12 and has many documented functions.
"""

from __future__ import annotations

from pathlib import Path

# Sorted, dotted module names.  Keep sorted: the prompt set and the corpus
# manifest iterate in this order.
HELDOUT_MODULES: tuple[str, ...] = (
    "base64",
    "bisect",
    "calendar",
    "difflib",
    "email.utils",
    "fnmatch",
    "fractions",
    "graphlib",
    "heapq",
    "ipaddress",
    "json.decoder",
    "json.encoder",
    "mimetypes",
    "quopri",
    "random",
    "shlex",
    "shutil",
    "statistics",
    "textwrap",
    "urllib.parse",
)


def module_path(name: str, stdlib_dir: str | Path) -> Path:
    """Return the source file of dotted module ``name`` inside ``stdlib_dir``.

    Resolved purely from the file layout (``a.b`` -> ``a/b.py`` or
    ``a/b/__init__.py``) rather than by importing, so it works for a stdlib
    tree of another interpreter version and has no import side effects.
    """
    base = Path(stdlib_dir).joinpath(*name.split("."))
    as_file = base.with_name(base.name + ".py")
    if as_file.is_file():
        return as_file
    as_package = base / "__init__.py"
    if as_package.is_file():
        return as_package
    raise FileNotFoundError(f"held-out module {name!r} not found under {stdlib_dir}")


def heldout_paths(stdlib_dir: str | Path) -> list[Path]:
    """Files of all held-out modules, in ``HELDOUT_MODULES`` order."""
    return [module_path(name, stdlib_dir) for name in HELDOUT_MODULES]
