"""One decode run: a dataset through one (target, drafter) pair with AR, EAGLE-3, DFlash and BASTION.

:class:`DecodeRun` holds every knob of a run; the CLI (``python -m bastion.benchmark``)
fills it from flags and the pipeline's decode jobs from their params, so both execute
the same code.  Cheap checks (arguments, dataset, model family, drafter fit, calibration
cache) all run before anything expensive.  Under ``torchrun`` prompts are sharded
round-robin by rank, rank 0 calibrates while the others wait, and rank 0 gathers the
records.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import torch

from bastion.calibration import fingerprint, hardware
from bastion.calibration.calibrate import calibrate
from bastion.calibration.grid import MAX_HELDOUT_MAPE, Grid
from bastion.calibration.store import (
    Calibration,
    CalibrationError,
    calibration_path,
    check_writable,
)
from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.defaults import EAGLE3_DEPTH, EAGLE3_TOPK, EAGLE3_TOTAL_TOKENS, METHODS, N_MAX, TOPK
from bastion.engines.choice import resolve_engine
from bastion.models import registry as models
from bastion.progress import bar
from bastion.runs.checks import UsageError, check_n_min, check_positions, load_histories, parse_methods
from bastion.runs.session import Session
from bastion.results import records
from bastion.speculative.methods import Eagle3Policy, method_spec
from bastion.speculative.policy import TreePolicy


def _dist() -> tuple[int, int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


@dataclass
class DecodeRun:
    """Every setting of one run; field names are the CLI's flags (``--max-new-tokens`` -> max_new_tokens)."""

    model: str
    dataset: str
    draft_model: str | None = None
    methods: tuple[str, ...] = METHODS
    max_samples: int | None = None
    max_new_tokens: int = 2048
    temperature: float = 0.0
    block_size: int | None = None
    enable_thinking: bool = False
    device: str = "auto"
    dtype: str = "auto"
    output: str | None = None
    cache_dir: str = "cache"
    attn_impl: str = "sdpa"
    engine: str = "auto"
    n_min: int | str = "auto"  # auto: sized for the device (resolve_n_min)
    n_max: int = N_MAX
    topk: int = TOPK
    budget: int | None = None
    calib_grid: str = "auto"
    recalibrate: bool = False
    calibration: str | None = None
    hardware: str = "auto"
    model_name: str | None = None
    dataset_name: str | None = None
    step_times: bool = False
    seed: int = 0
    data_seed: int = datasets.DEFAULT_SEED
    shard: tuple[int, int] = (0, 1)
    quiet: bool = False
    eagle3_model: str | None = None
    eagle3_depth: int = EAGLE3_DEPTH
    eagle3_topk: int = EAGLE3_TOPK
    eagle3_total_tokens: int = EAGLE3_TOTAL_TOKENS
    history_from: str | None = None  # AR's records: turn-k prompts carry its answers to turns 1..k-1
    accept_calibration_error: bool = False  # keep a calibration that fails the held-out error gate
    keep_partial: bool = False  # keep <output>.partial after the output is written (a cell job resumes from it)

    def validate(self) -> None:
        """Settings checks that need no model, data or device."""
        self.methods = parse_methods(self.methods)
        if self.temperature < 0:
            raise UsageError(f"--temperature must be >= 0, got {self.temperature}")
        if self.max_new_tokens < 1:
            raise UsageError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.budget is not None and self.budget < 1:
            raise UsageError(f"--budget must be >= 1 node, got {self.budget}")
        check_n_min(self.n_min, self.n_max)
        if self.history_from is not None and not Path(self.history_from).is_file():
            raise UsageError(f"history records {self.history_from} do not exist; decode AR first (it writes them)")
        self.eagle3_policy()

    def eagle3_policy(self) -> Eagle3Policy:
        try:
            return Eagle3Policy(self.eagle3_depth, self.eagle3_topk, self.eagle3_total_tokens)
        except ValueError as exc:
            raise UsageError(f"--eagle3-depth/--eagle3-topk/--eagle3-total-tokens: {exc}") from None

    def execute(self, session: Session | None = None) -> list[dict[str, Any]]:
        """Decode every prompt of this rank's shard; write, resume and summarise the records.

        ``session``: models and engine already loaded by this process, reused where they
        match this run's settings (:mod:`bastion.runs.session`); without one, all are loaded here.
        """
        for _ in self.prompt_steps(session):
            pass
        return self.records

    def prompt_steps(self, session: Session | None = None) -> Iterator[int]:
        """:meth:`execute` one prompt at a time: yields each decoded prompt's index.

        Every records file, resume and summary is as :meth:`execute` makes them (the
        records end up in ``self.records``); a cell advances several runs in turn this way
        (:func:`bastion.runs.cell.decode_cell`).
        """
        rank, world, local_rank = _dist()
        log = (lambda *a: None) if self.quiet or rank != 0 else (lambda *a: print(*a, file=sys.stderr, flush=True))
        self.validate()
        methods = list(self.methods)
        shard_i, shard_n = self.shard
        target_ref, drafter_ref, model_name = models.resolve(self.model, self.draft_model)
        model_name = self.model_name or model_name
        models.check_thinking(self.enable_thinking, target_ref)
        need_drafter = any(method_spec(m).drafter == "dflash" for m in methods)
        if need_drafter and drafter_ref is None:
            raise UsageError("--draft-model is required for dflash/bastion unless --model is a registered pair")
        need_eagle3 = "eagle3" in methods
        session = session or Session(methods)
        eagle3_ref = models.resolve_eagle3(self.model, self.eagle3_model)  # also for a later run of the session
        if need_eagle3 and eagle3_ref is None:
            raise UsageError("--eagle3-model is required for eagle3 unless --model is a registered pair")

        # 1. prompts first: an unknown or unreachable dataset fails before any weights load
        prompts = datasets.load_prompts(self.dataset, self.max_samples, seed=self.data_seed, cache_dir=self.cache_dir)
        if not prompts:
            raise UsageError(f"dataset {self.dataset!r} has no prompts")
        histories = load_histories(self.history_from) if self.history_from else None
        check_positions(target_ref, self.max_new_tokens, self.block_size)  # from the config, before any weights
        if need_drafter:
            models.check_pair_configs(target_ref, drafter_ref)  # the pair's fit, from the configs alone
        out_path = Path(self.output) if self.output else None
        part = records.partial_path(f"{out_path}.rank{rank}" if out_path and world > 1 else out_path) if out_path else None
        if part is not None:
            records.check_writable(part)  # an unwritable --output fails now, not after the first prompt

        # 2. device, models, checks
        if world > 1 and not torch.distributed.is_initialized():
            backend = "nccl" if self.device.startswith("cuda") or (self.device == "auto" and torch.cuda.is_available()) else "gloo"
            torch.distributed.init_process_group(backend=backend)
        device = hardware.resolve_device(self.device, local_rank if world > 1 else None)
        dtype = hardware.resolve_dtype(self.dtype, device)
        self.engine = resolve_engine(self.engine, device)  # auto -> the device's engine, in the fingerprint too
        self.n_min = check_n_min(self.n_min, self.n_max, gpu=device.type == "cuda")  # auto -> the device's
        policy = TreePolicy(n_min=self.n_min, n_max=self.n_max, topk=self.topk, budget=self.budget)
        fp_now = fingerprint.collect(device, dtype, self.attn_impl, self.engine)
        hw_key = fingerprint.hardware_key(fp_now) if self.hardware == "auto" else self.hardware
        cal_path = Path(self.calibration) if self.calibration else calibration_path(
            self.cache_dir, hw_key, model_name, self.engine, self.temperature)
        adaptive = "bastion" in methods and self.budget is None
        if adaptive and self.calibration and not cal_path.exists():
            raise UsageError(f"--calibration {cal_path} does not exist; omit it to calibrate into --cache-dir")
        if adaptive and rank == 0 and (self.calibration or not self.recalibrate):
            if cal_path.exists():
                # a stale, unreadable or wrong-temperature calibration fails here, before loading weights
                Calibration.load(cal_path, current=fp_now).check_temperature(self.temperature, cal_path)
            else:
                check_writable(self.cache_dir, cal_path)
        loaded = session.models(methods, target_ref, drafter_ref, eagle3_ref, dtype, device, self.attn_impl,
                                self.block_size, self.eagle3_policy())
        target, drafter = loaded.target, loaded.drafter
        builder = PromptBuilder(loaded.tokenizer, self.enable_thinking)
        # the longest prompt plus its new tokens sizes the static buffers and the calibration grid
        self._longest = builder.longest_context(prompts, self.max_new_tokens)
        engine = session.engine(self.engine, loaded, n_max=max(policy.n_max, policy.budget or 0),
                                max_context=max(self._longest, self.max_new_tokens + 2048))

        # 3. calibration (adaptive BASTION only): rank 0 makes it, the others wait
        cal = None
        if adaptive:
            cal = self._calibration(engine, policy, model_name, fp_now, cal_path, device, rank, world, log)

        # 4. decode, resuming from a partial output
        if cal is not None and cal.max_s < policy.n_max:
            # never extrapolate the cost model past the largest tree it was fitted on
            policy = replace(policy, n_max=max(cal.max_s, policy.n_min))
        decoders = {m: engine.decoder(m, policy, cal and cal.cost_model, cal and cal.overheads) for m in methods}
        settings = {
            "model": target_ref, "draft_model": drafter_ref if need_drafter else None, "dataset": self.dataset,
            "max_samples": self.max_samples, "data_seed": self.data_seed, "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature, "block_size": drafter.block_size if drafter else None, "methods": methods,
            "policy": [self.n_min, self.n_max, self.topk, self.budget], "seed": self.seed, "thinking": self.enable_thinking,
        }
        if need_eagle3:  # only then, so the run keys of runs without EAGLE-3 stay as they were
            settings["eagle3"] = [eagle3_ref, self.eagle3_depth, self.eagle3_topk, self.eagle3_total_tokens]
        if self.history_from:  # the later turns' prompts depend on it
            settings["history_from"] = str(self.history_from)
        key = records.run_key(settings)
        base = {
            "run_key": key, "model": model_name, "target": target_ref, "draft_model": drafter_ref if need_drafter else None,
            "dataset_arg": self.dataset, "rank": rank, "world_size": world, "temperature": self.temperature, "max_new_tokens": self.max_new_tokens,
            "block_size": settings["block_size"], "hardware": hw_key, "fingerprint": fp_now, "budget": self.budget,
            "n_min": policy.n_min, "n_max": policy.n_max,
            "eagle3_model": eagle3_ref if need_eagle3 else None,
            "eagle3_tree": [self.eagle3_depth, self.eagle3_topk, self.eagle3_total_tokens] if need_eagle3 else None,
            "calibration": None if cal is None else {"params": cal.cost_model.to_dict()["params"], "t_draft": cal.overheads.t_draft, "t_other": cal.overheads.t_other},
        }
        mine = [i for i in range(len(prompts)) if i % shard_n == shard_i and (i // shard_n) % world == rank]
        done_recs = records.read_partial(part, key) if part else []
        turns = {i: len(prompts[i]["turns"]) for i in mine}
        finished = records.completed_prompts(done_recs, turns, methods)
        done_recs = [r for r in done_recs if r["prompt_index"] in finished]
        if finished:
            log(f"[resume] {len(finished)} of {len(mine)} prompts already done in {part}")
        stops = builder.stop_ids(target)
        todo = [i for i in mine if i not in finished]
        all_recs = list(done_recs)
        with bar(len(todo), f"decode {'/'.join(methods)}", "prompt", enabled=not self.quiet and rank == 0) as shown:
            tokens = seconds = 0.0
            for idx in todo:
                prompt_recs = self._decode_prompt(idx, prompts[idx], decoders, methods, builder, stops, base, histories)
                if part:
                    records.append_records(part, prompt_recs)
                all_recs.extend(prompt_recs)
                tokens += sum(len(r["output_ids"]) for r in prompt_recs)
                seconds += sum(r["decode_seconds"] for r in prompt_recs)
                shown.set_postfix(tok_s=f"{tokens / max(seconds, 1e-9):.1f}", refresh=False)
                shown.update()
                yield idx

        # 5. gather, write, summarise
        if world > 1:
            gathered = [None] * world
            torch.distributed.all_gather_object(gathered, all_recs)
            all_recs = [r for chunk in gathered for r in chunk]
        if rank == 0:
            if out_path:
                records.finalise(out_path, all_recs, keep_partial=self.keep_partial)
            if not self.quiet:
                print(records.format_summary(records.summarise(all_recs, methods), settings["block_size"] or 1))
        if world > 1:
            torch.distributed.barrier()
            if out_path and part:
                part.unlink(missing_ok=True)
        self.records = all_recs

    def _decode_prompt(self, idx, prompt, decoders, methods, builder, stops, base, histories=None) -> list[dict[str, Any]]:
        """All turns of one prompt with every method; turn k's history is AR's answers to the turns before.

        The first method (AR when it runs) gives the history, or ``histories`` (AR's
        records, ``history_from``) when given, so every method sees the same prompts.
        """
        out = []
        history: list[tuple[str, str]] = []
        for turn, text in enumerate(prompt["turns"]):
            if histories is not None and turn > 0:
                if (idx, turn - 1) not in histories:
                    raise UsageError(f"history records {self.history_from} have no answer for prompt {idx}, turn {turn - 1}; "
                                     "decode AR on the same dataset and settings first")
                history[turn - 1] = (history[turn - 1][0], builder.decode(histories[(idx, turn - 1)]))
            ids = builder.encode(history, text)
            answers = {}
            for m in methods:
                gen = torch.Generator(device=decoders[m].target.device)
                gen.manual_seed((self.seed * 1_000_003 + idx * 1_009 + turn) % (1 << 62))
                res = decoders[m].generate(ids, self.max_new_tokens, self.temperature, stops, gen, collect_stats=self.step_times)
                answers[m] = res.output_ids
                dataset = self.dataset_name or prompt.get("dataset")
                out.append(records.make_record(res, prompt_index=idx, turn=turn, method=m, base={**base, "dataset": dataset}))
            history.append((text, builder.decode(answers[methods[0]])))
        return out


    def _calibration(self, engine, policy, model_name, fp_now, path, device, rank, world, log) -> Calibration:
        hw_key = fingerprint.hardware_key(fp_now)
        if rank == 0 and not self.calibration and (self.recalibrate or not path.exists()):
            check_writable(self.cache_dir, path)
            grid_name = self.calib_grid if self.calib_grid != "auto" else ("paper" if device.type == "cuda" else "small")
            grid = Grid.named(grid_name).covering(self._longest)
            log(f"[calibrate] no calibration for ({hw_key}, {model_name}); measuring on {fp_now['device_name']} ({grid_name} grid)")
            cal = calibrate(model_name, fp_now, grid, engine, policy, log=log, seed=self.seed, progress=not self.quiet,
                            temperature=self.temperature,
                            max_heldout_mape=None if self.accept_calibration_error else MAX_HELDOUT_MAPE)
            cal.save(path)
            log(f"[calibrate] wrote {path} ({cal.seconds:.1f}s)")
        if world > 1:
            torch.distributed.barrier()  # the other ranks wait for rank 0's calibration
        if not path.exists():
            raise CalibrationError(f"calibration {path} was not created")
        cal = Calibration.load(path, current=fp_now)
        cal.check_temperature(self.temperature, path)
        return cal


def run_from_knobs(k: dict[str, Any], models: dict[str, Any], data: str, calibration: str, hardware_key: str,
                   model_name: str, dataset_name: str, output: str, history: str | None = None,
                   shard: tuple[int, int] = (0, 1)) -> DecodeRun:
    """The run of one pipeline decode job (or one method of a cell) from its rule's knobs."""
    return DecodeRun(
        model=models["target"], draft_model=models["drafter"], dataset=data, methods=(k["method"],),
        temperature=k["temperature"], max_new_tokens=k["max_new_tokens"], max_samples=k["max_samples"] or None,
        n_min=k["n_min"], n_max=k["n_max"], topk=k["topk"], budget=k["budget"] or None, block_size=k["block_size"] or None,
        device=k["device"], dtype=k["dtype"], attn_impl=k["attn_impl"], engine=k["engine"], seed=k["seed"],
        data_seed=k["seed"], calibration=calibration, hardware=hardware_key, output=output, model_name=model_name,
        dataset_name=dataset_name, shard=shard, eagle3_model=models.get("eagle3"), history_from=history,
        **k.get("eagle3_tree", {}),
    )
