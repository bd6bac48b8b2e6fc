"""One calibration, assembled the same way by the CLI and the pipeline's stages.

Everything is measured on the device that will decode, through the engine that decodes
(its own verification probe and decoder), so the cost model describes what runs.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Callable

import torch

from bastion.calibration.grid import MAX_HELDOUT_MAPE, Grid, gated_fit, probe_grid
from bastion.calibration.overheads import (
    describe_baselines,
    describe_overheads,
    profile_baselines,
    profile_overheads,
)
from bastion.calibration.peaks import measure_peaks
from bastion.calibration.store import Calibration
from bastion.costmodel.roofline import ModelShape
from bastion.speculative.policy import TreePolicy

if TYPE_CHECKING:
    from bastion.engines.factory import Engine

PROBE_TOKENS = 128  # length of the overhead probe prompt


def probe_prompt(vocab_size: int, seed: int = 0) -> list[int]:
    """The overhead probe's prompt: seeded random tokens (ids 0 and 1 are often special)."""
    rng = random.Random(seed)
    return [rng.randrange(2, int(vocab_size)) for _ in range(PROBE_TOKENS)]


def overhead_budgets(policy: TreePolicy) -> tuple[int, ...]:
    """The probe's tree sizes: two buckets (a typical small step), then 8 and 32 buckets, capped at ``n_max``.

    Three sizes because the excess need not be a line: on an H200, measured at 16 and 64
    nodes only, the tiny pair's growth twice came out too small for the ~160-node trees
    the rule then built (docs/performance.md, sessions 9 and 10).  The probe skips sizes
    the rule could not reach (:func:`~bastion.calibration.overheads.profile_overheads`).
    """
    sizes = [min(k * policy.n_min, policy.n_max) for k in (2, 8, 32)]
    return tuple(sorted(set(sizes)))


def calibrate(
    model: str,
    fingerprint: dict[str, Any],
    grid: Grid,
    engine: Engine,
    policy: TreePolicy,
    log: Callable[[str], None] = print,
    seed: int = 0,
    progress: bool = True,
    temperature: float = 0.0,
    max_heldout_mape: float | None = MAX_HELDOUT_MAPE,
) -> Calibration:
    """Measure peaks, probe the grid, fit, then profile the step overheads.

    ``engine`` must be the engine that will decode; its drafter makes the overhead probe.
    At ``temperature`` > 0 the grid probes and the overhead run sample at every node, so
    C(n) and T_other include the sampling cost.  The fit passes the quality gate of
    :func:`~bastion.calibration.grid.gated_fit` (``max_heldout_mape=None``: no gate).
    """
    t0 = time.perf_counter()
    target = engine.target
    shape = ModelShape.from_config(target.config, torch.finfo(target.dtype).bits // 8)
    peaks = measure_peaks(target.device, target.dtype)
    log(f"[calibrate] peaks: {peaks.flops_per_s / 1e12:.2f} TFLOP/s matmul, "
        f"{peaks.attention_flops_per_s / 1e12:.2f} TFLOP/s masked attention, {peaks.bytes_per_s / 1e9:.1f} GB/s")
    log(f"[calibrate] grid of {len(grid.points())} points (s up to {max(grid.s_values + grid.tail_s)}, "
        f"c up to {grid.c_values[-1]})")
    probe = engine.verify_probe()
    rows, model_obj, report = gated_fit(
        lambda: probe_grid(probe, grid, temperature=temperature, progress=progress),
        shape, peaks, grid.holdout_every, max_heldout_mape, log)
    log(
        f"[calibrate] fit {model_obj.params}; in-sample MAPE {report['in_sample_mape']:.1%}, "
        f"held-out MAPE {report.get('heldout_mape', float('nan')):.1%}"
    )
    overheads = profile_overheads(lambda n: engine.decoder("bastion", replace(policy, budget=n)), overhead_budgets(policy),
                                  probe_prompt(target.config.vocab_size, seed), temperature=temperature,
                                  cost_model=model_obj)
    log(f"[calibrate] {describe_overheads(overheads)}")
    baselines = profile_baselines(lambda m: engine.decoder(m), probe_prompt(target.config.vocab_size, seed),
                                  temperature=temperature)
    log(f"[calibrate] {describe_baselines(baselines)}")
    return Calibration(
        model=model,
        fingerprint=fingerprint,
        cost_model=model_obj,
        overheads=overheads,
        report=report,
        grid=asdict(grid),
        points=rows,
        seconds=time.perf_counter() - t0,
        temperature=float(temperature),
        baselines=baselines,
    )
