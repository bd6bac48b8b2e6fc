"""The phases of one decode run: checks, load, calibrate, decode with resume, gather and write.

:class:`Runner` executes a :class:`~bastion.runs.run.RunSettings`.  Cheap checks
(arguments, dataset, model family, drafter fit, calibration cache) all run before
anything expensive.  Under ``torchrun`` prompts are sharded round-robin by rank, rank 0
calibrates while the others wait, and rank 0 gathers the records.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from bastion.calibration import fingerprint
from bastion.calibration.calibrate import calibrate
from bastion.calibration.grid import MAX_HELDOUT_MAPE, Grid
from bastion.calibration.store import Calibration, CalibrationError, calibration_path, check_writable
from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.models import registry as models
from bastion.progress import bar
from bastion.results import records
from bastion.runs.checks import UsageError, check_positions
from bastion.runs.history import load_histories
from bastion.runs.settings import RunSettings
from bastion.runs.session import Session, drafters
from bastion.runs.turns import decode_prompt
from bastion.speculative.tree import TreePolicy


def _dist() -> tuple[int, int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


@dataclass
class Inputs:
    """What the checks established before any weights load."""

    target_ref: str
    drafter_ref: str | None  # the DFlash drafter of this run or of a later one of the session
    eagle3_ref: str | None  # the head for this run or a later one of the session
    model_name: str
    prompts: list[dict[str, Any]]
    histories: dict[tuple[int, int], list[int]] | None
    out_path: Path | None
    part: Path | None  # the partial records file this rank appends to
    fingerprint: dict[str, Any]
    cal_path: Path
    longest: int  # the longest prompt plus its new tokens: what the buffers and the calibration must reach


class Runner:
    """One run, phase by phase; :meth:`steps` yields each decoded prompt's index."""

    def __init__(self, run: RunSettings, session: Session | None = None) -> None:
        self.given = run
        self.session = session
        self.rank, self.world, self.local_rank = _dist()
        quiet = run.quiet or self.rank != 0
        self.log: Callable[..., None] = (lambda *a: None) if quiet else (
            lambda *a: print(*a, file=sys.stderr, flush=True))
        self.records: list[dict[str, Any]] = []
        self.block_size: int | None = None

    def steps(self) -> Iterator[int]:
        run, inputs = self._check()
        loaded, engine = self._load(run, inputs)
        cal = self._calibrate(run, inputs, engine) if self._adaptive(run) else None
        yield from self._decode(run, inputs, loaded, engine, cal)
        self._finish(run, inputs)

    # ------------------------------------------------------------------------ checks

    @staticmethod
    def _adaptive(run: RunSettings) -> bool:
        return "bastion" in run.methods and run.budget is None

    def _check(self) -> tuple[RunSettings, Inputs]:
        """Every check that needs no weights, cheapest first; returns the resolved run and its inputs."""
        given = self.given
        given.validate()  # flags alone, before torch does anything
        self.session = self.session or Session(given.methods)
        target_ref, drafter_ref, model_name = models.resolve(given.model, given.draft_model)
        models.check_thinking(given.enable_thinking, target_ref)
        eagle3_ref = models.resolve_eagle3(given.model, given.eagle3_model)  # also for a later run of the session
        if "eagle3" in given.methods and eagle3_ref is None:
            raise UsageError("--eagle3-model is required for eagle3 unless --model is a registered pair")
        prompts = datasets.load_prompts(given.dataset, given.max_samples, seed=given.data_seed,
                                        cache_dir=given.cache_dir)
        if not prompts:
            raise UsageError(f"dataset {given.dataset!r} has no prompts")
        histories = load_histories(given.history_from) if given.history_from else None
        out_path = Path(given.output) if given.output else None
        part = None
        if out_path:
            part = records.partial_path(f"{out_path}.rank{self.rank}" if self.world > 1 else out_path)
            records.check_writable(part)  # an unwritable --output fails now, not after the first prompt
        run = self._resolve(given)
        self._check_models(run, target_ref, drafter_ref)
        # the longest prompt plus its new tokens sizes the static buffers and the calibration grid
        longest = PromptBuilder(self.session.tokenizer(target_ref), run.enable_thinking).longest_context(
            prompts, run.max_new_tokens)
        fp_now = fingerprint.collect(torch.device(run.device), getattr(torch, run.dtype), run.attn_impl, run.engine)
        cal_path = Path(run.calibration) if run.calibration else calibration_path(
            run.cache_dir, run.hardware, given.model_name or model_name, run.engine, run.temperature)
        inputs = Inputs(target_ref, drafter_ref, eagle3_ref, given.model_name or model_name, prompts, histories,
                        out_path, part, fp_now, cal_path, longest)
        if self._adaptive(run):
            self._check_calibration(run, inputs)
        return run, inputs

    def _resolve(self, given: RunSettings) -> RunSettings:
        if self.world > 1 and not torch.distributed.is_initialized():
            cuda = given.device.startswith("cuda") or (given.device == "auto" and torch.cuda.is_available())
            torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")
        return given.resolve(self.local_rank if self.world > 1 else None)

    def _check_models(self, run: RunSettings, target_ref: str, drafter_ref: str | None) -> None:
        """The target's positions and the drafter's fit, from the configs alone."""
        need_drafter = _drafts(run)
        if need_drafter and drafter_ref is None:
            raise UsageError("--draft-model is required for dflash/bastion unless --model is a registered pair")
        check_positions(target_ref, run.max_new_tokens, run.block_size)  # from the config, before any weights
        if need_drafter:
            models.check_pair_configs(target_ref, drafter_ref)  # the pair's fit, from the configs alone

    def _check_calibration(self, run: RunSettings, inputs: Inputs) -> None:
        """A stale, unreadable or wrong-temperature calibration fails here, before loading weights."""
        path = inputs.cal_path
        if run.calibration and not path.exists():
            raise UsageError(f"--calibration {path} does not exist; omit it to calibrate into --cache-dir")
        if self.rank == 0 and (run.calibration or not run.recalibrate):
            if path.exists():
                self._trusted(run, inputs)
            else:
                check_writable(run.cache_dir, path)

    # ------------------------------------------------------------------------ load

    def _load(self, run: RunSettings, inputs: Inputs):
        """Target, tokenizer, drafters and the engine; returns (loaded, engine)."""
        device, dtype = torch.device(run.device), getattr(torch, run.dtype)
        loaded = self.session.models(run.methods, inputs.target_ref, inputs.drafter_ref, inputs.eagle3_ref, dtype,
                                     device, run.attn_impl, run.block_size, run.eagle3_policy())
        policy = self._policy(run)
        engine = self.session.engine(run.engine, loaded, n_max=max(policy.n_max, policy.budget or 0),
                                     max_context=max(inputs.longest, run.max_new_tokens + 2048))
        return loaded, engine

    @staticmethod
    def _policy(run: RunSettings) -> TreePolicy:
        return TreePolicy(n_min=run.n_min, n_max=run.n_max, topk=run.topk, budget=run.budget)

    # ------------------------------------------------------------------------ calibrate

    def _calibrate(self, run: RunSettings, inputs: Inputs, engine) -> Calibration:
        """The run's calibration: rank 0 measures it when asked or missing, the other ranks wait."""
        path, fp_now = inputs.cal_path, inputs.fingerprint
        if self.rank == 0 and not run.calibration and (run.recalibrate or not path.exists()):
            check_writable(run.cache_dir, path)
            grid = Grid.named(run.calib_grid).covering(inputs.longest)
            self.log(f"[calibrate] no calibration for ({fingerprint.hardware_key(fp_now)}, {inputs.model_name}); "
                     f"measuring on {fp_now['device_name']} ({run.calib_grid} grid)")
            cal = calibrate(inputs.model_name, fp_now, grid, engine, self._policy(run), log=self.log, seed=run.seed,
                            progress=not run.quiet, temperature=run.temperature,
                            max_heldout_mape=None if run.accept_calibration_error else MAX_HELDOUT_MAPE)
            cal.save(path)
            self.log(f"[calibrate] wrote {path} ({cal.seconds:.1f}s)")
        if self.world > 1:
            torch.distributed.barrier()  # the other ranks wait for rank 0's calibration
        if not path.exists():
            raise CalibrationError(f"calibration {path} was not created")
        return self._trusted(run, inputs)

    @staticmethod
    def _trusted(run: RunSettings, inputs: Inputs) -> Calibration:
        """The calibration file, refused (naming the fix) if made on another stack, for the other
        temperature class, at another ``n_min`` or for shorter contexts than this run reaches."""
        cal = Calibration.load(inputs.cal_path, current=inputs.fingerprint)
        cal.check_temperature(run.temperature, inputs.cal_path)
        cal.check_covers(run.n_min, inputs.longest, inputs.cal_path, given=run.calibration is not None)
        return cal

    # ------------------------------------------------------------------------ decode

    def _decode(self, run: RunSettings, inputs: Inputs, loaded, engine, cal: Calibration | None) -> Iterator[int]:
        """Every prompt of this rank's shard not already in the partial file, appended as it finishes."""
        policy = self._policy(run)
        if cal is not None and cal.max_s < policy.n_max:
            # never extrapolate the cost model past the largest tree it was fitted on
            policy = replace(policy, n_max=max(cal.max_s, policy.n_min))
        decoders = {m: engine.decoder(m, policy, cal and cal.cost_model, cal and cal.overheads) for m in run.methods}
        settings = run_settings(run, inputs, loaded.drafter)
        self.block_size = settings["block_size"]
        base = record_base(run, inputs, settings, policy, cal, self.rank, self.world)
        shard_i, shard_n = run.shard
        mine = [i for i in range(len(inputs.prompts)) if i % shard_n == shard_i and (i // shard_n) % self.world == self.rank]
        done = records.read_partial(inputs.part, base["run_key"]) if inputs.part else []
        finished = records.completed_prompts(done, {i: len(inputs.prompts[i]["turns"]) for i in mine}, run.methods)
        self.records = [r for r in done if r["prompt_index"] in finished]
        if finished:
            self.log(f"[resume] {len(finished)} of {len(mine)} prompts already done in {inputs.part}")
        builder = PromptBuilder(loaded.tokenizer, run.enable_thinking)
        stops = builder.stop_ids(loaded.target)
        todo = [i for i in mine if i not in finished]
        with bar(len(todo), f"decode {'/'.join(run.methods)}", "prompt", enabled=not run.quiet and self.rank == 0) as shown:
            tokens = seconds = 0.0
            for idx in todo:
                recs = decode_prompt(run, idx, inputs.prompts[idx], decoders, builder, stops, base, inputs.histories)
                if inputs.part:
                    records.append_records(inputs.part, recs)
                self.records.extend(recs)
                tokens += sum(len(r["output_ids"]) for r in recs)
                seconds += sum(r["decode_seconds"] for r in recs)
                shown.set_postfix(tok_s=f"{tokens / max(seconds, 1e-9):.1f}", refresh=False)
                shown.update()
                yield idx

    # ------------------------------------------------------------------------ gather, write, summarise

    def _finish(self, run: RunSettings, inputs: Inputs) -> None:
        if self.world > 1:
            gathered: list[Any] = [None] * self.world
            torch.distributed.all_gather_object(gathered, self.records)
            self.records = [r for chunk in gathered for r in chunk]
        if self.rank == 0:
            if inputs.out_path:
                records.finalise(inputs.out_path, self.records, keep_partial=run.keep_partial)
            if not run.quiet:
                print(records.format_summary(records.summarise(self.records, run.methods), self.block_size or 1))
        if self.world > 1:
            torch.distributed.barrier()
            if inputs.out_path and inputs.part:
                inputs.part.unlink(missing_ok=True)


def _drafts(run: RunSettings) -> bool:
    """A method of the run drafts with the DFlash drafter."""
    return "dflash" in drafters(run.methods)


def run_settings(run: RunSettings, inputs: Inputs, drafter) -> dict[str, Any]:
    """The settings that shape a run's outputs: their hash is the records' ``run_key`` (resume)."""
    settings = {
        "model": inputs.target_ref, "draft_model": inputs.drafter_ref if _drafts(run) else None, "dataset": run.dataset,
        "max_samples": run.max_samples, "data_seed": run.data_seed, "max_new_tokens": run.max_new_tokens,
        "temperature": run.temperature, "block_size": drafter.block_size if drafter else None,
        "methods": list(run.methods), "policy": [run.n_min, run.n_max, run.topk, run.budget], "seed": run.seed,
        "thinking": run.enable_thinking,
    }
    if "eagle3" in run.methods:  # only then, so the run keys of runs without EAGLE-3 stay as they were
        settings["eagle3"] = [inputs.eagle3_ref, run.eagle3_depth, run.eagle3_topk, run.eagle3_total_tokens]
    if run.history_from:  # the later turns' prompts depend on it
        settings["history_from"] = str(run.history_from)
    return settings


def record_base(run: RunSettings, inputs: Inputs, settings: dict[str, Any], policy: TreePolicy,
                cal: Calibration | None, rank: int, world: int) -> dict[str, Any]:
    """The fields every record of the run carries besides its own prompt, turn and method."""
    need_eagle3 = "eagle3" in run.methods
    return {
        "run_key": records.run_key(settings), "model": inputs.model_name, "target": inputs.target_ref,
        "draft_model": settings["draft_model"], "dataset_arg": run.dataset, "rank": rank, "world_size": world,
        "temperature": run.temperature,
        "max_new_tokens": run.max_new_tokens, "block_size": settings["block_size"], "hardware": run.hardware,
        "fingerprint": inputs.fingerprint, "budget": run.budget, "n_min": policy.n_min, "n_max": policy.n_max,
        "eagle3_model": inputs.eagle3_ref if need_eagle3 else None,
        "eagle3_tree": [run.eagle3_depth, run.eagle3_topk, run.eagle3_total_tokens] if need_eagle3 else None,
        "calibration": None if cal is None else {"params": cal.cost_model.to_dict()["params"],
                                                 "t_draft": cal.overheads.t_draft, "t_other": cal.overheads.t_other},
    }
