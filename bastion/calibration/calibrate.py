"""One calibration: the peaks, the latency grid and its fit, the step overheads.

The three parts are written once here.  The CLI runs them back to back on the engine that
will decode (:func:`calibrate`); the pipeline's stages (:mod:`bastion.calibration.stages`)
run the same parts as separate jobs, with files between them.  Everything is measured on
the device that will decode, through the engine that decodes (its own verification probe
and decoder), so the cost model describes what runs.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from bastion.calibration.grid import MAX_HELDOUT_MAPE, Grid, gated_fit, probe_grid
from bastion.calibration.overheads import (
    describe_baselines,
    describe_overheads,
    profile_overheads,
    settled_baselines,
)
from bastion.calibration.peaks import measure_peaks
from bastion.calibration.store import Calibration
from bastion.costmodel.model import CostModel, StepOverheads
from bastion.costmodel.roofline import HardwarePeaks, ModelShape
from bastion.speculative.policy import TreePolicy

if TYPE_CHECKING:
    from bastion.engines.base import VerifyProbe
    from bastion.engines.factory import Engine

PROBE_TOKENS = 128  # length of the overhead probe prompt
BASELINE_STEPS = 24  # steps of the AR and DFlash baseline runs

Log = Callable[[str], None]


def probe_prompt(vocab_size: int, seed: int = 0) -> list[int]:
    """The overhead probe's prompt: seeded random tokens (ids 0 and 1 are often special)."""
    rng = random.Random(seed)
    return [rng.randrange(2, int(vocab_size)) for _ in range(PROBE_TOKENS)]


SMALL_TREES = (2, 8)  # probe sizes added on a CPU, where bastion_plus's trees grow from one node at T > 0


def overhead_budgets(policy: TreePolicy, gpu: bool = True) -> tuple[int, ...]:
    """The probe's tree sizes: two buckets (a typical small step), then 8 and 32 buckets, capped at ``n_max``;
    on a CPU also :data:`SMALL_TREES`.

    Three sizes because the excess need not be a line: on an H200, measured at 16 and 64
    nodes only, the tiny pair's growth came out too small for the ~160-node trees the
    rule then built (docs/performance.md).  On a CPU this project's rule sizes trees from
    one node at T > 0, below the buckets, so the excess is measured there too rather than
    extrapolated down from two buckets.  The probe skips sizes the rule could not reach
    (:func:`~bastion.calibration.overheads.profile_overheads`).
    """
    sizes = [min(k * policy.n_min, policy.n_max) for k in (2, 8, 32)]
    if not gpu:
        sizes += [min(n, policy.n_max) for n in SMALL_TREES]
    return tuple(sorted(set(sizes)))


def reference_size(policy: TreePolicy) -> int:
    """The probe size whose ``T_draft`` and ``T_other`` the calibration reports: two buckets."""
    return min(2 * policy.n_min, policy.n_max)


def device_peaks(device: torch.device, dtype: torch.dtype, log: Log = print) -> HardwarePeaks:
    """Part 1: the device's measured ceilings (matmul, masked attention, copy)."""
    peaks = measure_peaks(device, dtype)
    log(f"[calibrate] peaks: {peaks.flops_per_s / 1e12:.2f} TFLOP/s matmul, "
        f"{peaks.attention_flops_per_s / 1e12:.2f} TFLOP/s masked attention, {peaks.bytes_per_s / 1e9:.1f} GB/s")
    return peaks


def fit_latency(probe: VerifyProbe, peaks: HardwarePeaks, grid: Grid, *, temperature: float = 0.0,
                max_heldout_mape: float | None = MAX_HELDOUT_MAPE, progress: bool = True,
                log: Log = print) -> tuple[list[dict], CostModel, dict[str, Any]]:
    """Part 2: the latency grid through the engine's probe and the cost model's gated fit.

    At ``temperature`` > 0 every probe samples at every node, so C(n) includes the
    sampling cost.  Returns (grid rows, cost model, fit report).
    """
    target = probe.target
    shape = ModelShape.from_config(target.config, torch.finfo(target.dtype).bits // 8)
    log(f"[calibrate] grid of {len(grid.points())} points (s up to {max(grid.s_values + grid.tail_s)}, "
        f"c up to {grid.c_values[-1]})")
    rows, cost, report = gated_fit(lambda: probe_grid(probe, grid, temperature=temperature, progress=progress),
                                   shape, peaks, grid.holdout_every, max_heldout_mape, log)
    log(f"[calibrate] fit {cost.params}; in-sample MAPE {report['in_sample_mape']:.1%}, "
        f"held-out MAPE {report.get('heldout_mape', float('nan')):.1%}")
    return rows, cost, report


def profile_steps(engine: Engine, policy: TreePolicy, cost: CostModel, *, seed: int = 0, temperature: float = 0.0,
                  log: Log = print) -> tuple[StepOverheads, dict[str, float]]:
    """Part 3: T_draft and the step excess at :func:`overhead_budgets`, then AR's and DFlash's steps.

    ``engine`` carries the DFlash drafter that makes the probe; at ``temperature`` > 0
    the runs sample, so the excess includes the per-node sampling.  AR's step less the
    fitted C(1, c) at the probe's contexts becomes :attr:`StepOverheads.ar_excess`.
    """
    prompt = probe_prompt(engine.target.config.vocab_size, seed)
    gpu = engine.target.device.type == "cuda"
    overheads = profile_overheads(lambda n: engine.decoder("bastion", replace(policy, budget=n)),
                                  overhead_budgets(policy, gpu), prompt, temperature=temperature, cost_model=cost,
                                  reference=reference_size(policy))
    # the AR runs' contexts: the prompt, then one more token a step
    c1 = float(cost.predict(1, len(prompt) + BASELINE_STEPS // 2))
    baselines = settled_baselines(lambda m: engine.decoder(m), prompt, c1, steps=BASELINE_STEPS,
                                  temperature=temperature, log=log)
    overheads = replace(overheads, ar_excess=baselines["ar"] - c1)
    log(f"[calibrate] {describe_overheads(overheads)}")
    log(f"[calibrate] {describe_baselines(baselines)}")
    return overheads, baselines


def calibrate(
    model: str,
    fingerprint: dict[str, Any],
    grid: Grid,
    engine: Engine,
    policy: TreePolicy,
    log: Log = print,
    seed: int = 0,
    progress: bool = True,
    temperature: float = 0.0,
    max_heldout_mape: float | None = MAX_HELDOUT_MAPE,
) -> Calibration:
    """The three parts in one process, on ``engine``: the engine that will decode.

    The fit passes the quality gate of :func:`~bastion.calibration.grid.gated_fit`
    (``max_heldout_mape=None``: no gate).
    """
    t0 = time.perf_counter()
    target = engine.target
    peaks = device_peaks(target.device, target.dtype, log)
    rows, cost, report = fit_latency(engine.verify_probe(), peaks, grid, temperature=temperature,
                                     max_heldout_mape=max_heldout_mape, progress=progress, log=log)
    overheads, baselines = profile_steps(engine, policy, cost, seed=seed, temperature=temperature, log=log)
    return Calibration(model=model, fingerprint=fingerprint, cost_model=cost, overheads=overheads, report=report,
                       grid=asdict(grid), points=rows, seconds=time.perf_counter() - t0,
                       temperature=float(temperature), baselines=baselines,
                       **coverage(policy, grid.c_values, target.device.type == "cuda"))


def coverage(policy: TreePolicy, c_values: Sequence[int], gpu: bool) -> dict[str, Any]:
    """What a calibration covers, recorded in its file: the ``n_min`` and the probe sizes of its
    step overheads, and the largest context of its latency grid."""
    return {"n_min": policy.n_min, "probe_sizes": overhead_budgets(policy, gpu), "max_context": int(max(c_values))}
