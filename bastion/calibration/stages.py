"""The pipeline's calibration stages: the parts of :mod:`bastion.calibration.calibrate`, one per Snakemake rule.

Calibration is split into three jobs per (hardware, model) so each result is cached and
inspectable on its own: the device's ceilings and fingerprint, the latency grid with the
fitted cost model, and the step overheads that complete a :class:`Calibration` file in
the same format the CLI writes.  Each stage runs the same part as the CLI's
:func:`~bastion.calibration.calibrate.calibrate` and re-checks that it runs on the device
and software stack of the stage before it.  For small models, where a job's start-up
(imports, CUDA, compilation) costs more than its measurements, :func:`calibrate_all` runs
the same stages in one process and writes the same files.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import torch

from bastion.calibration import fingerprint, hardware
from bastion.calibration.calibrate import (
    coverage,
    device_peaks,
    fit_latency,
    overhead_budgets,
    probe_prompt,
    profile_steps,
)
from bastion.calibration.grid import MAX_HELDOUT_MAPE, Grid
from bastion.calibration.store import Calibration, CalibrationError, write_json_atomic
from bastion.costmodel.model import CostModel
from bastion.costmodel.roofline import HardwarePeaks
from bastion.data.formats import read_jsonl
from bastion.data.prompts import PromptBuilder
from bastion.defaults import N_MAX
from bastion.engines.choice import Kernels, resolve_engine
from bastion.models import registry as models
from bastion.speculative.policy import TreePolicy


def read_json(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _same_stack(before: dict[str, Any], now: dict[str, Any], where: str) -> None:
    fingerprint.check(before, now, where, "Rerun the calibration rules on one device type (delete the results/{hardware}/{model} calibration files).")


def _stack(device: str, dtype: str, attn_impl: str, engine: str, kernels: Kernels | None,
           threads: int | None) -> tuple[torch.device, torch.dtype, dict[str, Any]]:
    """Device, dtype and fingerprint of this process, after setting the CPU ``threads`` it
    computes with (None: as they are) and with the engine's ``kernels``."""
    dev = hardware.resolve_device(device)
    dt = hardware.resolve_dtype(dtype, dev)
    if threads is not None:
        torch.set_num_threads(threads)
    return dev, dt, fingerprint.collect(dev, dt, attn_impl, resolve_engine(engine, dev), kernels)


def _load_target(before: dict[str, Any], where: str, model_json: str, device: str, dtype: str, attn_impl: str,
                 engine: str, kernels: Kernels | None, threads: int | None):
    """Device, dtype and fingerprint of this process, checked against the previous stage's, then the target.

    Returns (device, dtype, fingerprint, model paths, target); the check runs before any
    weights load.
    """
    dev, dt, fp_now = _stack(device, dtype, attn_impl, engine, kernels, threads)
    _same_stack(before, fp_now, where)
    paths = read_json(model_json)
    return dev, dt, fp_now, paths, models.load_target(paths["target"], dt, dev, attn_impl)


def measure_hardware(out: str, hardware_key: str, pattern: str | None, device: str, dtype: str, attn_impl: str,
                     engine: str, *, kernels: Kernels | None = None, threads: int | None = None) -> dict[str, Any]:
    """Part 1: the device checked against its hardware key, its fingerprint and its measured ceilings.

    ``kernels``: the engine's kernel settings; ``threads``: the CPU threads to compute with
    (each stage takes both, and its fingerprint records them)."""
    dev, dt, fp_now = _stack(device, dtype, attn_impl, engine, kernels, threads)
    where = hardware.check_device(hardware_key, pattern, dev)
    peaks = device_peaks(dev, dt)
    result = {**where, "fingerprint": fp_now, "peaks": asdict(peaks)}
    write_json_atomic(out, result)
    return result


def calibrate_latency(out: str, model_json: str, hardware_json: str, grid_name: str, device: str, dtype: str,
                      attn_impl: str, engine: str, datasets: Sequence[str] = (), max_new_tokens: int = 0,
                      temperature: float = 0.0, max_heldout_mape: float | None = MAX_HELDOUT_MAPE,
                      kernels: Kernels | None = None, threads: int | None = None) -> dict[str, Any]:
    """Part 2: the latency grid and its fit; the grid's contexts reach the longest prompt of
    ``datasets`` plus ``max_new_tokens``."""
    # model code loads only in the stages that run models
    from bastion.engines.factory import Engine

    hw = read_json(hardware_json)
    dev, dt, fp_now, paths, target = _load_target(hw["fingerprint"], hardware_json, model_json, device, dtype,
                                                  attn_impl, engine, kernels, threads)
    builder = PromptBuilder(models.load_tokenizer(paths["target"]))
    longest = builder.longest_context([p for d in datasets for p in read_jsonl(d)], max_new_tokens) if datasets else 0
    grid = Grid.named(grid_name).covering(longest)
    # the static engine's probe taps the drafter's layers, as its decode steps do
    engine = resolve_engine(engine, dev)
    drafter = models.load_drafter(paths["drafter"], dt, dev) if engine != "eager" else None
    probe = Engine(engine, target, drafter, n_max=1, kernels=kernels).verify_probe()  # probe_grid sizes it to the grid
    rows, cost, report = fit_latency(probe, HardwarePeaks(**hw["peaks"]), grid, temperature=temperature,
                                     max_heldout_mape=max_heldout_mape)
    result = {"fingerprint": fp_now, "grid": asdict(grid), "points": rows, "cost_model": cost.to_dict(), "report": report,
              "temperature": float(temperature)}
    write_json_atomic(out, result)
    return result


def profile_constants(out: str, model_name: str, model_json: str, latency_json: str, device: str, dtype: str, attn_impl: str,
                      engine: str, n_min: int, seed: int = 0, n_max: int = N_MAX, *, kernels: Kernels | None = None,
                      threads: int | None = None) -> Calibration:
    """Part 3: T_draft and the step excess (sampling at the latency grid's temperature); writes the calibration file."""
    from bastion.engines.factory import Engine

    lat = read_json(latency_json)
    try:  # before loading anything: a latency file of an older cost model cannot be completed
        cost = CostModel.from_dict(lat["cost_model"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CalibrationError(f"{latency_json}: {exc}; delete it and rerun the calibrate_latency rule") from None
    dev, dt, fp_now, paths, target = _load_target(lat["fingerprint"], latency_json, model_json, device, dtype,
                                                  attn_impl, engine, kernels, threads)
    drafter = models.load_drafter(paths["drafter"], dt, dev)
    models.check_pair(target, drafter, paths["target"], paths["drafter"])
    policy = TreePolicy(n_min=n_min, n_max=n_max)
    gpu = dev.type == "cuda"
    eng = Engine(engine, target, drafter, n_max=max(overhead_budgets(policy, gpu)),
                 max_context=len(probe_prompt(target.config.vocab_size, seed)) + 4 * n_min + 64, kernels=kernels)
    temperature = float(lat.get("temperature", 0.0))
    overheads, baselines = profile_steps(eng, policy, cost, seed=seed, temperature=temperature)
    cal = Calibration(model=model_name, fingerprint=fp_now, cost_model=cost, overheads=overheads, report=lat["report"],
                      grid=lat["grid"], points=lat["points"], temperature=temperature, baselines=baselines,
                      **coverage(policy, lat["grid"]["c_values"], gpu))
    cal.save(out)
    return cal


def calibrate_all(hardware_out: str, classes: Sequence[tuple[str, str, float]], hardware_key: str, pattern: str | None,
                  model_name: str, model_json: str, grid_name: str, device: str, dtype: str, attn_impl: str,
                  engine: str, n_min: int, seed: int = 0, datasets: Sequence[str] = (), max_new_tokens: int = 0,
                  max_heldout_mape: float | None = MAX_HELDOUT_MAPE, n_max: int = N_MAX, kernels: Kernels | None = None,
                  threads: int | None = None) -> list[Calibration]:
    """Every stage in one process: the hardware file, then per temperature class a latency
    grid and its calibration file.

    ``classes`` holds (latency grid path, calibration path, probe temperature) per class.
    The files are the ones the three-job chain writes, each after the one it depends on, so
    a kill keeps what was finished and decode jobs read either layout alike.
    """
    stack = {"kernels": kernels, "threads": threads}
    measure_hardware(hardware_out, hardware_key, pattern, device, dtype, attn_impl, engine, **stack)
    calibrations = []
    for latency_out, calibration_out, temperature in classes:
        calibrate_latency(latency_out, model_json, hardware_out, grid_name, device, dtype, attn_impl, engine,
                          datasets=datasets, max_new_tokens=max_new_tokens, temperature=temperature,
                          max_heldout_mape=max_heldout_mape, **stack)
        calibrations.append(profile_constants(calibration_out, model_name, model_json, latency_out, device, dtype,
                                              attn_impl, engine, n_min, seed, n_max, **stack))
    return calibrations
