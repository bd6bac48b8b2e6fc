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
from typing import Any

from bastion.data import registry as datasets
from bastion.models import registry as models
from bastion.results import records
from bastion.runs.checks import UsageError, check_multi_turn
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
    prompts = datasets.load_prompts(run.dataset, run.max_samples, seed=run.data_seed, cache_dir=run.cache_dir)
    if not prompts:
        raise UsageError(f"dataset {run.dataset!r} has no prompts")
    check_multi_turn(prompts, run.methods, run.history_from, run.dataset)
    history = None
    if run.history_from:
        expect = {"target": target_ref, "dataset_arg": run.dataset, "max_samples": run.max_samples,
                  "data_seed": run.data_seed, "temperature": run.temperature, "max_new_tokens": run.max_new_tokens}
        history = load_history(run.history_from, expect, prompts)
    out_path = Path(run.output) if run.output else None
    part = None
    if out_path:
        part = records.partial_path(f"{out_path}.rank{rank}" if world > 1 else out_path)
        records.check_writable(part)  # an unwritable --output fails now, not after the first prompt
    return Inputs(target_ref, drafter_ref, eagle3_ref, run.model_name or model_name, prompts, history, out_path, part)
