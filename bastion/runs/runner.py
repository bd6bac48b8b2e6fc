"""The device-side phases of one decode run: resolve, load, calibrate, decode with resume, gather.

:class:`Runner` executes a :class:`~bastion.runs.settings.RunSettings` whose inputs
passed :func:`bastion.runs.inputs.check_inputs`.  The checks that need the device or the
models' configs (positions, the pair's fit, the calibration cache) still run before any
weights load.  Under ``torchrun`` prompts are sharded round-robin by rank, rank 0
calibrates while the others wait, and rank 0 gathers the records.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from bastion.calibration import fingerprint
from bastion.calibration.calibrate import calibrate
from bastion.calibration.grid import MAX_HELDOUT_MAPE, Grid
from bastion.calibration.store import Calibration, CalibrationError, calibration_path, check_writable
from bastion.costmodel.roofline import ModelShape
from bastion.data.prompts import PromptBuilder
from bastion.models import registry as models
from bastion.progress import bar
from bastion.results import records
from bastion.runs import eagle3_choice, repeats
from bastion.runs.checks import UsageError, check_positions
from bastion.runs.inputs import Inputs, dist
from bastion.runs.plan import Plan, drafts, record_base, run_settings
from bastion.runs.session import Session, drafters
from bastion.runs.settings import RunSettings
from bastion.runs.turns import decode_prompt
from bastion.speculative.methods import Eagle3Policy


class Runner:
    """One run, phase by phase; :meth:`steps` yields each decoded prompt's index."""

    def __init__(self, run: RunSettings, inputs: Inputs, session: Session | None = None) -> None:
        self.given, self.inputs = run, inputs
        self.session = session or Session(run.methods)
        self.rank, self.world, self.local_rank = dist()
        quiet = run.quiet or self.rank != 0
        self.log: Callable[..., None] = (lambda *a: None) if quiet else (
            lambda *a: print(*a, file=sys.stderr, flush=True))
        self.records: list[dict[str, Any]] = []
        self.block_size: int | None = None

    def steps(self) -> Iterator[int]:
        plan = self._plan()
        # A calibration to measure goes before EAGLE-3's sweep, on an engine without the head, as
        # the pipeline orders its jobs: the latencies are then timed on a device that nothing of
        # the head has compiled or captured for, the same state in both.
        cal = self._calibrate(plan, self._load(plan)[1]) if plan.measures else None
        self._eagle3_tree(plan)
        loaded, engine = self._load(plan)
        if plan.adaptive and cal is None:
            cal = self._calibrate(plan, engine)
        yield from self._decode(plan, loaded, engine, cal)
        self._finish(plan)

    # ------------------------------------------------------------------------ resolve and check

    def _plan(self) -> Plan:
        """Every ``auto`` resolved, then the checks that read configs and the calibration cache."""
        given, inputs = self.given, self.inputs
        if self.world > 1 and not torch.distributed.is_initialized():
            cuda = given.device.startswith("cuda") or (given.device == "auto" and torch.cuda.is_available())
            torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")
        run = given.resolve(self.local_rank if self.world > 1 else None)
        torch.set_num_threads(run.threads)  # the threads it computes with, which its fingerprint records
        if drafts(run) and inputs.drafter_ref is None:
            raise UsageError("--draft-model is required for dflash/bastion unless --model is a registered pair")
        check_positions(inputs.target_ref, run.max_new_tokens, run.block_size)  # from the config, before any weights
        if drafts(run):
            models.check_pair_configs(inputs.target_ref, inputs.drafter_ref)  # the pair's fit, from the configs alone
        # the longest prompt plus its new tokens sizes the static buffers and the calibration grid
        longest = PromptBuilder(self.session.tokenizer(inputs.target_ref), run.enable_thinking).longest_context(
            inputs.prompts, run.max_new_tokens)
        fp_now = fingerprint.collect(torch.device(run.device), getattr(torch, run.dtype), run.attn_impl, run.engine,
                                     run.kernels)
        cal_path = Path(run.calibration) if run.calibration else calibration_path(
            run.cache_dir, run.hardware, inputs.model_name, run.engine, run.temperature)
        plan = Plan(run, inputs, fp_now, cal_path, longest)
        if plan.adaptive:
            self._check_calibration(plan)
            plan.measures = self._rank0(not run.calibration and (run.recalibrate or not cal_path.exists()))
        return plan

    def _rank0(self, value: bool) -> bool:
        """Rank 0's ``value`` on every rank, so that all ranks take the same phases (and barriers)."""
        if self.world == 1:
            return value
        box = [value]
        torch.distributed.broadcast_object_list(box, src=0)
        return bool(box[0])

    def _check_calibration(self, plan: Plan) -> None:
        """A stale, unreadable, wrong-temperature or too narrow calibration fails here, before loading weights."""
        run, path = plan.run, plan.cal_path
        if run.calibration and not path.exists():
            raise UsageError(f"--calibration {path} does not exist; omit it to calibrate into --cache-dir")
        if self.rank == 0 and (run.calibration or not run.recalibrate):
            if path.exists():
                _trusted(plan)
            else:
                check_writable(run.cache_dir, path)

    # ------------------------------------------------------------------------ EAGLE-3's tree

    def _eagle3_tree(self, plan: Plan) -> None:
        """The EAGLE-3 tree the head is bound with: explicit, or ``auto``'s choice (rank 0 sweeps, the others
        read its cache entry), once per session and setting."""
        run, inputs = plan.run, plan.inputs
        own = "eagle3" in run.methods
        if inputs.eagle3_ref is None or not (own or "eagle3" in drafters(self.session.methods)):
            return
        tree, tree_file = (run.eagle3_tree, run.eagle3_tree_file) if own else (
            self.session.eagle3_tree or (run.eagle3_tree, run.eagle3_tree_file))

        def resolve(again: bool) -> tuple[Eagle3Policy, str]:
            return eagle3_choice.resolve_tree(tree, tree_file, lambda: eagle3_choice.tree_key(run, inputs.eagle3_ref),
                                              run.cache_dir, again,
                                              lambda: eagle3_choice.sweep_for(run, inputs, self.session, self.log),
                                              self.log)

        memo = (inputs.eagle3_ref, tree, tree_file, run.hardware, run.engine, run.dtype)
        if self.world > 1:
            if self.rank == 0:
                self.session.memo_tree(memo, lambda: resolve(run.recalibrate))
            torch.distributed.barrier()  # the other ranks read rank 0's choice
        policy, source = self.session.memo_tree(memo, lambda: resolve(run.recalibrate and self.world == 1))
        plan.eagle3_tree, plan.eagle3_source = policy, source if own else None

    def choose_tree(self, output: str) -> eagle3_choice.TreeChoice:
        """Sweep for ``auto``'s tree and write the choice to ``output`` (the pipeline's choose_eagle3_tree)."""
        plan = self._plan()
        choice = eagle3_choice.sweep_for(plan.run, plan.inputs, self.session, self.log)
        eagle3_choice.save_choice(output, eagle3_choice.tree_key(plan.run, plan.inputs.eagle3_ref), choice)
        self.log(f"[eagle3] chose tree {eagle3_choice.describe(choice)}; wrote {output}")
        return choice

    # ------------------------------------------------------------------------ load

    def _load(self, plan: Plan):
        """Target, tokenizer, drafters and the engine; returns (loaded, engine)."""
        run, inputs, policy = plan.run, plan.inputs, plan.policy
        loaded = self.session.models(run.methods, inputs.target_ref, inputs.drafter_ref, inputs.eagle3_ref,
                                     getattr(torch, run.dtype), torch.device(run.device), run.attn_impl,
                                     run.block_size, plan.eagle3_tree)
        engine = self.session.engine(run.engine, loaded, n_max=max(policy.n_max, policy.budget or 0),
                                     max_context=max(plan.longest, run.max_new_tokens + 2048), kernels=run.kernels)
        return loaded, engine

    # ------------------------------------------------------------------------ calibrate

    def _calibrate(self, plan: Plan, engine) -> Calibration:
        """The run's calibration: rank 0 measures it when asked or missing, the other ranks wait."""
        run, path, fp_now, name = plan.run, plan.cal_path, plan.fingerprint, plan.inputs.model_name
        if self.rank == 0 and plan.measures:  # decided once, in _plan, for every rank
            check_writable(run.cache_dir, path)
            grid = Grid.named(run.calib_grid).covering(plan.longest)
            self.log(f"[calibrate] no calibration for ({fingerprint.hardware_key(fp_now)}, {name}); "
                     f"measuring on {fp_now['device_name']} ({run.calib_grid} grid)")
            cal = calibrate(name, fp_now, grid, engine, plan.policy, log=self.log, seed=run.seed,
                            progress=not run.quiet, temperature=run.temperature,
                            max_heldout_mape=None if run.accept_calibration_error else MAX_HELDOUT_MAPE)
            cal.save(path)
            self.log(f"[calibrate] wrote {path} ({cal.seconds:.1f}s)")
        if self.world > 1:
            torch.distributed.barrier()  # the other ranks wait for rank 0's calibration
        if not path.exists():
            raise CalibrationError(f"calibration {path} was not created")
        return _trusted(plan)

    # ------------------------------------------------------------------------ decode

    def _decode(self, plan: Plan, loaded, engine, cal: Calibration | None) -> Iterator[int]:
        """Every prompt of this rank's shard not already in the partial file, appended as it finishes.

        Yields after every decode: once a prompt, or ``repeats`` times (:mod:`bastion.runs.repeats`).
        """
        run, inputs, policy = plan.run, plan.inputs, plan.policy
        if cal is not None and cal.max_s < policy.n_max:
            # never extrapolate the cost model past the largest tree it was fitted on
            policy = replace(policy, n_max=max(cal.max_s, policy.n_min))
        decoders = {m: engine.decoder(m, policy, cal and cal.cost_model, cal and cal.overheads) for m in run.methods}
        settings = run_settings(plan, loaded.drafter)
        self.block_size = settings["block_size"]
        base = record_base(plan, settings, policy, cal, self.rank, self.world)
        shard_i, shard_n = run.shard
        mine = [i for i in range(len(inputs.prompts)) if i % shard_n == shard_i and (i // shard_n) % self.world == self.rank]
        # a partial file set aside is said even with --quiet: the run starts over instead of resuming
        done = records.resume(inputs.part, base["run_key"], settings, _notice) if inputs.part else []
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
                decodes = []
                for _ in range(run.repeats):
                    if decodes:  # a cell advances its other runs between the decodes of a prompt
                        yield idx
                    decodes.append(decode_prompt(run, idx, inputs.prompts[idx], decoders, builder, stops, base,
                                                 inputs.history and inputs.history.answers))
                recs = repeats.fastest(decodes)
                if inputs.part:
                    records.append_records(inputs.part, recs)
                self.records.extend(recs)
                tokens += sum(len(r["output_ids"]) for r in recs)
                seconds += sum(r["decode_seconds"] for r in recs)
                shown.set_postfix(tok_s=f"{tokens / max(seconds, 1e-9):.1f}", refresh=False)
                shown.update()
                yield idx

    # ------------------------------------------------------------------------ gather, write, summarise

    def _finish(self, plan: Plan) -> None:
        run, inputs = plan.run, plan.inputs
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


def _notice(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _trusted(plan: Plan) -> Calibration:
    """The calibration file, refused (naming the fix) if made on another stack, for the other
    temperature class, at another ``n_min`` or for shorter contexts than this run reaches."""
    run, path = plan.run, plan.cal_path
    cal = Calibration.load(path, current=plan.fingerprint)
    cal.check_temperature(run.temperature, path)
    cal.check_model(_shape(plan.inputs.target_ref), plan.inputs.target_ref, path, given=run.calibration is not None)
    cal.check_covers(run.n_min, plan.longest, path, given=run.calibration is not None)
    return cal


def _shape(target_ref: str) -> ModelShape:
    """The target's roofline shape, from its config alone (the width in bytes is the fingerprint's)."""
    from transformers import AutoConfig

    return ModelShape.from_config(AutoConfig.from_pretrained(target_ref), 1)
