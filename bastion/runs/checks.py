"""Checks of a run's settings and inputs that need no weights: they fail in seconds, with the fix.

The CLI and the pipeline's decode jobs both build a :class:`~bastion.runs.run.DecodeRun`;
these are the parts of its validation that read only flags, config files and records.
Everything here runs without torch, so the CLI refuses a bad flag before importing it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from bastion.defaults import METHODS, TOPK_LIMIT, resolve_n_min
from bastion.models import registry as models


class UsageError(ValueError):
    """Bad run settings; the CLI reports them as one line with exit status 2."""


def parse_methods(text: str | Sequence[str]) -> tuple[str, ...]:
    """Known methods in run order (AR first: later turns reuse its answer)."""
    methods = [m.strip() for m in (text.split(",") if isinstance(text, str) else text) if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise UsageError(f"unknown method(s) {bad or text!r} in --methods; choose from {', '.join(METHODS)}")
    return tuple(m for m in METHODS if m in methods)


def parse_shard(text: str | None) -> tuple[int, int]:
    """``I/N`` -> (I, N): decode only prompts with index % N == I."""
    if text is None:
        return 0, 1
    try:
        i, n = (int(x) for x in text.split("/"))
        assert 0 <= i < n
    except (ValueError, AssertionError):
        raise UsageError(f"--shard must be I/N with 0 <= I < N, got {text!r}") from None
    return i, n


def check_n_min(n_min: int | str, n_max: int, gpu: bool | None = None) -> int | str:
    """``--n-min`` checked against ``--n-max``; with ``gpu`` known, ``auto`` becomes the
    device's count (32 on a GPU, 16 on a CPU), so a bad value fails before the device is."""
    if n_min == "auto" and gpu is None:
        return n_min
    try:
        n = resolve_n_min(n_min, gpu=bool(gpu))
    except ValueError as exc:
        raise UsageError(f"--n-min: {exc}") from None
    if n > n_max:
        given = f"{n} (auto)" if n_min == "auto" else n
        raise UsageError(f"need --n-min <= --n-max, got --n-min {given} and --n-max {n_max}")
    return n


def check_at_least(flag: str, value: int | None, low: int, fix: str = "") -> None:
    """An integer flag's lower bound (None: the flag was not given)."""
    if value is not None and (isinstance(value, bool) or value < low):
        raise UsageError(f"{flag} must be >= {low}, got {value}{fix}")


def check_temperature(value: float) -> None:
    """A finite temperature >= 0: NaN or infinity would reach sampling as NaN probabilities."""
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--temperature must be a finite number >= 0 (0: greedy), got {value}")


def check_topk(value: int) -> None:
    """``--topk`` within the path-ranking layout's limit (the bound :class:`TreePolicy` keeps)."""
    if not 1 <= value <= TOPK_LIMIT:
        raise UsageError(f"--topk must be in 1..{TOPK_LIMIT}, got {value}")


def check_model_folder(flag: str, ref: str | None) -> None:
    """A local folder given for a model must hold its ``config.json``: say so, naming both."""
    if ref is None or ref in models.PAIRS:  # a registry key wins over a folder of that name
        return
    folder = Path(ref).expanduser()
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise UsageError(f"{flag} {ref}: the folder has no config.json, so it holds no model; pass the folder "
                         "with config.json and the weights, a registry key or a Hugging Face repo id")


def check_eagle3_tree(depth: int, topk: int, total_tokens: int) -> None:
    """EAGLE-3's tree flags, with the bounds of :class:`~bastion.speculative.methods.Eagle3Policy`
    (tests/runs/test_checks.py ties the two), checked here without importing torch."""
    bad = [f"{flag} {v}" for flag, v, low in (("--eagle3-depth", depth, 0), ("--eagle3-topk", topk, 1),
                                               ("--eagle3-total-tokens", total_tokens, 1)) if v < low]
    if bad:
        raise UsageError(f"{', '.join(bad)}: EAGLE-3 needs --eagle3-depth >= 0, --eagle3-topk >= 1 and "
                         "--eagle3-total-tokens >= 1")


def check_positions(target_ref: str, max_new_tokens: int, block_size: int | None) -> None:
    """Refuse --max-new-tokens beyond the target's positions, from its config alone (no weights)."""
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(target_ref)
    except Exception:  # noqa: BLE001 - an unreachable model is reported when it loads
        return
    if config.model_type not in models.SUPPORTED_FAMILIES:
        return  # refused, with the supported families named, when it loads
    limit = getattr(config, "max_position_embeddings", None)
    need = max_new_tokens + 1 + (block_size or 1)  # at least one prompt token and one draft block
    if limit is not None and need > int(limit):
        raise UsageError(
            f"--max-new-tokens {max_new_tokens} does not fit the target's {limit} positions "
            f"(max_position_embeddings of {target_ref}); lower --max-new-tokens below {int(limit) - 1 - (block_size or 1)}"
        )


def check_multi_turn(prompts: Sequence[dict], methods: Sequence[str], history_from: str | None, dataset: str) -> None:
    """Later turns carry AR's answers to the turns before them: AR must run, or its records be given."""
    turns = max((len(p["turns"]) for p in prompts), default=1)
    if turns > 1 and "ar" not in methods and history_from is None:
        raise UsageError(f"dataset {dataset!r} has prompts of {turns} turns, whose later turns carry AR's answers: "
                         "add ar to --methods, or pass AR's records of this dataset with --history-from")
