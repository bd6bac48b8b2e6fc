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
from bastion.runs import folders
from bastion.runs.folders import FolderError


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


def check_repeats(repeats: int, temperature: float) -> None:
    """``--repeats`` (decodes of each prompt, the fastest kept): at least one, and more only at T = 0."""
    check_at_least("--repeats", repeats, 1)
    if repeats > 1 and temperature > 0:
        raise UsageError(
            f"--repeats {repeats} needs --temperature 0, got {temperature}: at T > 0 bastion_plus learns its gate "
            "and surrogate from every decode, so a second decode of a prompt is another decode; use --repeats 1")


def check_temperature(value: float) -> None:
    """A finite temperature >= 0: NaN or infinity would reach sampling as NaN probabilities."""
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--temperature must be a finite number >= 0 (0: greedy), got {value}")


def check_topk(value: int) -> None:
    """``--topk`` within the path-ranking layout's limit (the bound :class:`TreePolicy` keeps)."""
    if not 1 <= value <= TOPK_LIMIT:
        raise UsageError(f"--topk must be in 1..{TOPK_LIMIT}, got {value}")


ROLES = {"--model": "target", "--draft-model": "drafter", "--eagle3-model": "eagle3"}


def check_model_folder(flag: str, ref: str | None) -> None:
    """A local folder given for a model must hold a model of its flag's kind, complete: say
    what is wrong, naming the flag and the folder (a registry key wins over a folder of that name)."""
    if ref is None or ref in models.PAIRS:
        return
    if not ref.strip():
        raise UsageError(f"{flag} is empty; pass a registry key ({', '.join(models.PAIRS)}), a folder or a repo id")
    folder = Path(ref).expanduser()
    if not folder.exists():
        if folders.looks_like_path(ref):
            raise UsageError(f"{flag} {ref}: no such folder; pass the folder that holds the model's config.json "
                             "and weights, a registry key or a Hugging Face repo id (owner/name)")
        if "/" not in ref:
            raise UsageError(f"{flag} {ref}: neither a registry key ({', '.join(models.PAIRS)}), a folder nor a "
                             "Hugging Face repo id (owner/name); check its spelling")
        return  # a repo id: loading fetches it and names the fix if it cannot
    if not folder.is_dir():
        raise UsageError(f"{flag} {ref} is a file; pass the folder that holds it (with config.json and the weights)")
    try:
        folders.check_folder(folder, ROLES[flag])
    except FolderError as exc:
        raise UsageError(f"{flag} {ref}: {exc}; {exc.fix}") from None


def check_block_size(block_size: int | None, drafter_ref: str | None) -> None:
    """``--block-size`` within 2 and the drafter's own block size (from its config.json, when local)."""
    if block_size is None:
        return
    limit = None
    if drafter_ref is not None and Path(drafter_ref).is_dir():
        try:
            limit = int(folders.read_config(Path(drafter_ref)).get("block_size", 16))  # DFlashConfig's default
        except (FolderError, TypeError, ValueError):
            limit = None  # refused with its own message by the folder check or when it loads
    if block_size < 2 or (limit is not None and block_size > limit):
        bound = f"2..{limit} (the drafter's block size)" if limit else ">= 2 (one known token plus a guess)"
        raise UsageError(f"--block-size {block_size} must be {'in ' if limit else ''}{bound}")


def check_eagle3_head(head_ref: str, target_ref: str, tree: tuple[int, int, int] | None) -> None:
    """An EAGLE-3 head folder that fits the target folder and can build an explicit ``tree``
    (None: ``auto``), from configs and safetensors headers (the same line loading would give,
    without the weights)."""
    head, target = Path(head_ref), Path(target_ref)
    if not (head.is_dir() and target.is_dir()):
        return  # a repo id: checked when it loads
    try:
        problems = folders.eagle3_misfits(head, target)
        vocab = int(folders.read_config(head).get("draft_vocab_size") or 0)
    except (FolderError, TypeError, ValueError):
        return  # the folder checks name what is wrong with it
    if problems:
        raise UsageError(f"EAGLE-3 head {head_ref!r} does not fit target {target_ref!r}: {'; '.join(problems)}")
    if vocab and tree is not None:
        check_eagle3_tree("/".join(map(str, tree)), vocab, f"EAGLE-3 head {head_ref!r}: --eagle3-tree")


def check_eagle3_tree(text: str, draft_vocab: int | None = None,
                      flag: str = "--eagle3-tree") -> tuple[int, int, int] | None:
    """EAGLE-3's tree setting: None for ``auto`` (chosen per device and head when the models
    load), else its (depth, top-k, total tokens), refused when it cannot be built or wastes a
    round (:func:`bastion.speculative.eagle3_tree.check_tree`, with the head's vocabulary when known)."""
    from bastion.speculative.eagle3_tree import check_tree

    if text == "auto":
        return None
    parts = str(text).split("/")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"{flag} {text!r} is not a tree setting: give auto, or depth/top-k/total tokens as three "
                         "integers, e.g. 7/10/60")
    depth, top_k, total = (int(p) for p in parts)
    try:
        check_tree(depth, top_k, total, draft_vocab)
    except ValueError as exc:
        raise UsageError(f"{flag} {text}: {exc}") from None
    return depth, top_k, total


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
