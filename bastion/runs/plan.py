"""A run resolved for the device, and what its records say about it.

:class:`Plan` is a :class:`~bastion.runs.settings.RunSettings` with no ``auto`` left and
what it implies (the fingerprint, the calibration's path, the longest context);
:func:`run_settings` is the part of it that shapes a run's outputs (its hash is the
records' ``run_key``, which resume compares), and :func:`record_base` the fields every
record of the run carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bastion.calibration import fingerprint
from bastion.calibration.store import Calibration
from bastion.results import records
from bastion.runs.inputs import Inputs
from bastion.runs.session import drafters
from bastion.runs.settings import RunSettings
from bastion.speculative.methods import Eagle3Policy
from bastion.speculative.policy import TreePolicy


@dataclass
class Plan:
    """A run resolved for the device: its settings with no ``auto`` left, and what they imply."""

    run: RunSettings  # resolved
    inputs: Inputs
    fingerprint: dict[str, Any]
    cal_path: Path
    longest: int  # the longest prompt plus its new tokens: what the buffers and the calibration must reach
    eagle3_tree: Eagle3Policy | None = None  # the tree the head is bound with (this run's or a later run's)
    eagle3_source: str | None = None  # "auto" or "explicit" when this run decodes EAGLE-3
    measures: bool = False  # the run measures its calibration (decided before any rank writes one)

    @property
    def adaptive(self) -> bool:
        """BASTION's adaptive rule runs, so the run needs a calibration."""
        return self.run.adaptive

    @property
    def policy(self) -> TreePolicy:
        run = self.run
        return TreePolicy(n_min=run.n_min, n_max=run.n_max, topk=run.topk, budget=run.budget)


def _tree(plan: Plan) -> list[int]:
    """The EAGLE-3 tree this run decodes with, as [depth, top-k, total tokens]."""
    p = plan.eagle3_tree
    return [p.depth, p.top_k, p.total_tokens] if p is not None else []


def drafts(run: RunSettings) -> bool:
    """A method of the run drafts with the DFlash drafter."""
    return "dflash" in drafters(run.methods)


def run_settings(plan: Plan, drafter) -> dict[str, Any]:
    """The settings that shape a run's outputs: their hash is the records' ``run_key`` (resume)."""
    run, inputs = plan.run, plan.inputs
    settings = {
        "model": inputs.target_ref, "draft_model": inputs.drafter_ref if drafts(run) else None, "dataset": run.dataset,
        "max_samples": run.max_samples, "data_seed": run.data_seed, "max_new_tokens": run.max_new_tokens,
        "temperature": run.temperature, "block_size": drafter.block_size if drafter else None,
        "methods": list(run.methods), "policy": [run.n_min, run.n_max, run.topk, run.budget], "seed": run.seed,
        "thinking": run.enable_thinking,
    }
    if "eagle3" in run.methods:  # only then, so the run keys of runs without EAGLE-3 stay as they were
        settings["eagle3"] = [inputs.eagle3_ref, *_tree(plan)]
    if run.repeats > 1:  # only then, so the run keys of single decodes stay as they were
        settings["repeats"] = run.repeats
    if inputs.history is not None:  # the later turns' prompts depend on its answers (not on its path)
        settings["history"] = inputs.history.digest
    # what ran them: a partial file of another engine, dtype, device, stack, code or prompts never resumes
    settings.update({
        "engine": run.engine, "dtype": run.dtype, "device": torch.device(run.device).type, "hardware": run.hardware,
        "fingerprint": {k: plan.fingerprint.get(k) for k in fingerprint.COMPARED},
        "code": fingerprint.source_digest(), "prompts": inputs.prompts_digest,
    })
    return settings


def record_base(plan: Plan, settings: dict[str, Any], policy: TreePolicy, cal: Calibration | None,
                rank: int, world: int) -> dict[str, Any]:
    """The fields every record of the run carries besides its own prompt, turn and method."""
    run, inputs = plan.run, plan.inputs
    need_eagle3 = "eagle3" in run.methods
    return {
        "run_key": records.run_key(settings), "run_settings": settings, "model": inputs.model_name,
        "target": inputs.target_ref,
        "draft_model": settings["draft_model"], "dataset_arg": run.dataset, "rank": rank, "world_size": world,
        "temperature": run.temperature, "max_new_tokens": run.max_new_tokens, "max_samples": run.max_samples,
        "data_seed": run.data_seed, "block_size": settings["block_size"], "hardware": run.hardware,
        "fingerprint": plan.fingerprint, "budget": run.budget, "n_min": policy.n_min, "n_max": policy.n_max,
        "eagle3_model": inputs.eagle3_ref if need_eagle3 else None,
        "eagle3_tree": _tree(plan) if need_eagle3 else None,
        "eagle3_tree_source": plan.eagle3_source if need_eagle3 else None,
        "calibration": None if cal is None else {"params": cal.cost_model.to_dict()["params"],
                                                 "t_draft": cal.overheads.t_draft, "t_other": cal.overheads.t_other},
    }
