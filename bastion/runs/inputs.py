"""A run's first phase: the checks that read only flags, files and records, without torch.

Flags, model references, the dataset and its turns, AR's history records and the output
path are checked here, cheapest first, so a bad input is refused in a fraction of a
second and before torch or Transformers load.  The device-side phases are
:mod:`bastion.runs.runner`'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bastion.data import registry as datasets
from bastion.models import registry as models
from bastion.results import records
from bastion.runs.checks import UsageError, check_block_size, check_eagle3_head, check_eagle3_tree, check_multi_turn
from bastion.runs.history import History, load_history, prompt_hash
from bastion.runs.settings import RunSettings


def dist() -> tuple[int, int, int]:
    """(rank, world size, local rank) under torchrun; (0, 1, 0) alone."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


@dataclass
class Inputs:
    """What the checks established before torch loads."""

    target_ref: str
    drafter_ref: str | None  # the DFlash drafter of this run or of a later one of the session
    eagle3_ref: str | None  # the EAGLE-3 head of this run or of a later one of the session
    model_name: str
    prompts: list[dict[str, Any]]
    history: History | None  # AR's answers from --history-from
    out_path: Path | None
    part: Path | None  # the partial records file this rank appends to

    @property
    def prompts_digest(self) -> str:
        """The prompts' identity: a resumed run must decode the very same ones."""
        return records.run_key({"prompts": [prompt_hash(p) for p in self.prompts]})


def check_inputs(run: RunSettings) -> Inputs:
    """Flags, models, dataset, history and output of ``run``, checked without torch."""
    rank, world, _ = dist()
    run.validate()
    target_ref, drafter_ref, model_name = models.resolve(run.model, run.draft_model)
    models.check_thinking(run.enable_thinking, target_ref)
    eagle3_ref = models.resolve_eagle3(run.model, run.eagle3_model)  # also for a later run of the session
    if "eagle3" in run.methods and eagle3_ref is None:
        raise UsageError("--eagle3-model is required for eagle3 unless --model is a registered pair")
    check_block_size(run.block_size, drafter_ref)
    if "eagle3" in run.methods:
        check_eagle3_head(eagle3_ref, target_ref, check_eagle3_tree(run.eagle3_tree))
    prompts = datasets.load_prompts(run.dataset, run.max_samples, seed=run.data_seed, cache_dir=run.cache_dir)
    if not prompts:
        raise UsageError(f"dataset {run.dataset!r} has no prompts; pass a dataset with at least one record")
    check_multi_turn(prompts, run.methods, run.history_from, run.dataset)
    history = None
    if run.history_from:
        expect = {"target": target_ref, "dataset_arg": run.dataset, "max_samples": run.max_samples,
                  "data_seed": run.data_seed, "temperature": run.temperature, "max_new_tokens": run.max_new_tokens}
        history = load_history(run.history_from, expect, prompts)
    return Inputs(target_ref, drafter_ref, eagle3_ref, run.model_name or model_name, prompts, history,
                  *_output(run, rank, world))


def _output(run: RunSettings, rank: int, world: int) -> tuple[Path | None, Path | None]:
    """The output path and this rank's partial file, which is created now: an unwritable
    ``--output`` fails before any work, not after the first prompt."""
    if not run.output:
        return None, None
    out_path = Path(run.output)
    if _test(out_path, Path.is_dir):
        raise UsageError(f"--output {out_path} is a folder; pass a file in it, e.g. {out_path / 'records.jsonl'}")
    part = records.partial_path(f"{out_path}.rank{rank}" if world > 1 else out_path)
    blocker = next((p for p in out_path.parents if _test(p, Path.is_file)), None)
    if blocker is not None:
        raise UsageError(f"--output {out_path}: cannot write {part}, since {blocker} is a file, not a folder; "
                         "pass an --output in a folder")
    records.check_writable(part)
    records.check_readable(part)
    return out_path, part


def _test(path: Path, test: Callable[[Path], bool]) -> bool:
    """``test(path)``, False where a folder on the way cannot be entered (the write then names it)."""
    try:
        return test(path)
    except OSError:
        return False
