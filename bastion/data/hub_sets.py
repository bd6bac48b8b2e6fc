"""The paper's online prompt sets: where each lives on the Hugging Face Hub and how it is fetched.

Fetching fails *fast* with :class:`DatasetUnavailableError`: the hub libraries retry
unreachable hosts for ~25 s, so the hub is probed once with a short timeout first
(skipped when ``HF_HUB_OFFLINE=1``, where only the local cache is consulted).  A prepared
``<name>.jsonl`` in the cache directory bypasses the network entirely.  LiveCodeBench and
LongBench ship only legacy loading scripts, so their raw files are downloaded and parsed
here.  ``datasets``/``huggingface_hub`` are imported inside the functions that need them.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bastion.data.formats import (
    FORMATTERS,
    DatasetFormatError,
    read_jsonl,
    read_raw_rows,
    write_jsonl,
)
from bastion.defaults import LONGBENCH_SUBSETS
from dflash import hub

log = logging.getLogger(__name__)
_FIX_HINT = hub.FIX_HINT + ", or place a prepared {name}.jsonl in the cache directory"


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


SOURCES: dict[str, HubSource] = {
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
    src = SOURCES[name]
    try:
        _probe_hub(src)
        if not src.files:
            return _rows_via_datasets(src)
        return _rows_via_hub_files(src)
    except Exception as exc:  # noqa: BLE001 - any failure here means "not available"
        raise _unavailable(name, src, exc, cache_dir) from exc


def format_rows(name: str, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Turn raw rows of online set ``name`` into ``{"turns": [...], <extra keys>}`` records."""
    src = SOURCES[name]
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


def load_online(name: str, cache_dir: str | Path | None) -> list[dict[str, Any]]:
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
