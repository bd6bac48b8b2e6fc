"""One calibration, assembled the same way by the CLI and the pipeline's stages.

Everything is measured on the device that will decode, through the engine that decodes
(its own verification probe and decoder), so the cost model describes what runs.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, replace
from typing import Any, Callable

import torch

from bastion.calibration.grid import Grid, fit_probe, probe_grid
from bastion.calibration.overheads import profile_overheads
from bastion.calibration.peaks import measure_peaks
from bastion.calibration.store import Calibration
from bastion.costmodel.roofline import ModelShape
from bastion.engines.factory import Engine
from bastion.speculative.tree import TreePolicy

PROBE_TOKENS = 128  # length of the overhead probe prompt


def probe_prompt(vocab_size: int, seed: int = 0) -> list[int]:
    """The overhead probe's prompt: seeded random tokens (ids 0 and 1 are often special)."""
    rng = random.Random(seed)
    return [rng.randrange(2, int(vocab_size)) for _ in range(PROBE_TOKENS)]


def overhead_policy(policy: TreePolicy) -> TreePolicy:
    """The probe's trees: the decode policy at a fixed budget of two buckets, a typical small step."""
    return replace(policy, budget=2 * policy.n_min)


def calibrate(
    model: str,
    fingerprint: dict[str, Any],
    grid: Grid,
    engine: Engine,
    policy: TreePolicy,
    log: Callable[[str], None] = print,
    seed: int = 0,
    progress: bool = True,
) -> Calibration:
    """Measure peaks, probe the grid, fit, then profile the step overheads.

    ``engine`` must be the engine that will decode; its drafter makes the overhead probe.
    """
    t0 = time.perf_counter()
    target = engine.target
    shape = ModelShape.from_config(target.config, torch.finfo(target.dtype).bits // 8)
    peaks = measure_peaks(target.device, target.dtype)
    log(f"[calibrate] peaks: {peaks.flops_per_s / 1e12:.2f} TFLOP/s matmul, "
        f"{peaks.attention_flops_per_s / 1e12:.2f} TFLOP/s masked attention, {peaks.bytes_per_s / 1e9:.1f} GB/s")
    rows = probe_grid(engine.verify_probe(), grid, progress=progress)
    model_obj, report = fit_probe(rows, shape, peaks, grid.holdout_every)
    log(
        f"[calibrate] fit {model_obj.params}; in-sample MAPE {report['in_sample_mape']:.1%}, "
        f"held-out MAPE {report.get('heldout_mape', float('nan')):.1%}"
    )
    overheads = profile_overheads(lambda: engine.decoder("bastion", overhead_policy(policy)),
                                  probe_prompt(target.config.vocab_size, seed))
    log(f"[calibrate] T_draft {overheads.t_draft * 1e3:.2f} ms, T_other {overheads.t_other * 1e3:.2f} ms")
    return Calibration(
        model=model,
        fingerprint=fingerprint,
        cost_model=model_obj,
        overheads=overheads,
        report=report,
        grid=asdict(grid),
        points=rows,
        seconds=time.perf_counter() - t0,
    )
