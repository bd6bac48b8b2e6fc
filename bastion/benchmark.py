"""``python -m bastion.benchmark``: AR vs DFlash vs BASTION on one dataset.

Flags follow the original release (``--model``, ``--draft-model``, ``--dataset``,
``--max-samples``, ``--max-new-tokens``, ``--temperature``, ``--block-size``,
``--enable-thinking``) plus device, dtype, method, output and cache controls.  Cheap
checks (arguments, dataset, model family, drafter fit, calibration cache) all run before
anything expensive.  Under ``torchrun`` prompts are sharded round-robin by rank, rank 0
calibrates while the others wait, and rank 0 gathers the records.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import torch

from bastion.data import registry as datasets
from bastion.calibration import fingerprint
from bastion.calibration import hardware
from bastion.models import registry as models
from bastion.results import records
from bastion.calibration.calibrate import Calibration, CalibrationError, Grid, calibrate, calibration_path, check_writable, profile_overheads
from bastion.engines.eager import METHODS
from bastion.engines.factory import ENGINES, Engine
from bastion.data.prompts import PromptBuilder
from bastion.speculative.tree import TreePolicy


class UsageError(ValueError):
    """Bad command-line input; reported as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bastion.benchmark", description="BASTION benchmark: AR vs DFlash vs BASTION")
    p.add_argument("--backend", choices=["transformers"], default="transformers", help="decoding backend (only transformers)")
    p.add_argument("--model", required=True, help=f"target: registry key, local folder or HF repo id. Registry: {models.registry_help()}")
    p.add_argument("--draft-model", default=None, help="drafter folder or repo id (default: the registered drafter of --model)")
    p.add_argument("--dataset", required=True, help="dataset name, group, or a local .jsonl of {\"turns\": [...]} records")
    p.add_argument("--max-samples", type=int, default=None, help="seeded random subset of this many prompts")
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--block-size", type=int, default=None, help="draft block size (default: the drafter's)")
    p.add_argument("--enable-thinking", action="store_true", help="chat template thinking mode (refused for the Qwen3 drafters)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    p.add_argument("--methods", default="ar,dflash,bastion", help=f"comma list of {', '.join(METHODS)}")
    p.add_argument("--output", default=None, help="write one JSON record per (prompt, turn, method) to this .jsonl")
    p.add_argument("--cache-dir", default="cache", help="calibration (and prepared dataset) cache directory")
    p.add_argument("--attn-impl", default="sdpa", choices=["sdpa", "eager"])
    p.add_argument("--engine", default="eager", choices=list(ENGINES),
                   help="eager: Transformers layers step by step; static: preallocated buffers and CUDA graphs; "
                        "compiled: static with torch.compile'd layers")
    p.add_argument("--n-min", type=int, default=32, help="BASTION: minimum tree size and bucket width")
    p.add_argument("--n-max", type=int, default=8192, help="BASTION: maximum tree size")
    p.add_argument("--topk", type=int, default=128, help="BASTION: candidate tokens per depth (<= 128)")
    p.add_argument("--budget", type=int, default=None, help="BASTION: fixed tree size instead of the adaptive rule")
    p.add_argument("--calib-grid", default="auto", help="latency grid: paper, small or tiny (auto: paper on GPU, small on CPU)")
    p.add_argument("--recalibrate", action="store_true", help="ignore and replace an existing calibration")
    p.add_argument("--calibration", default=None, help="use this calibration file (made by the pipeline) instead of --cache-dir")
    p.add_argument("--hardware", default="auto", help="hardware key recorded with the results (auto: detected)")
    p.add_argument("--model-name", default=None, help="name recorded with the results (default: --model)")
    p.add_argument("--dataset-name", default=None, help="dataset name recorded with the results (default: from --dataset)")
    p.add_argument("--step-times", action="store_true", help="record per-step phase times (adds device syncs)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (per prompt and turn)")
    p.add_argument("--data-seed", type=int, default=datasets.DEFAULT_SEED, help="seed of the --max-samples subset")
    p.add_argument("--shard", default=None, help="I/N: decode only prompts with index %% N == I")
    p.add_argument("--quiet", action="store_true")
    return p


def _dist() -> tuple[int, int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def parse_methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise UsageError(f"unknown method(s) {bad or text!r} in --methods; choose from {', '.join(METHODS)}")
    return [m for m in METHODS if m in methods]  # AR first: later turns reuse its answer


def _parse_shard(text: str | None) -> tuple[int, int]:
    if text is None:
        return 0, 1
    try:
        i, n = (int(x) for x in text.split("/"))
        assert 0 <= i < n
    except (ValueError, AssertionError):
        raise UsageError(f"--shard must be I/N with 0 <= I < N, got {text!r}") from None
    return i, n


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rank, world, local_rank = _dist()
    log = (lambda *a: None) if args.quiet or rank != 0 else (lambda *a: print(*a, file=sys.stderr, flush=True))
    methods = parse_methods(args.methods)
    if args.temperature < 0:
        raise UsageError(f"--temperature must be >= 0, got {args.temperature}")
    if args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    shard_i, shard_n = _parse_shard(args.shard)
    target_ref, drafter_ref, model_name = models.resolve(args.model, args.draft_model)
    model_name = args.model_name or model_name
    models.check_thinking(args.enable_thinking, target_ref)
    need_drafter = any(m != "ar" for m in methods)
    if need_drafter and drafter_ref is None:
        raise UsageError("--draft-model is required for dflash/bastion unless --model is a registered pair")
    policy = TreePolicy(n_min=args.n_min, n_max=args.n_max, topk=args.topk, budget=args.budget)

    # 1. prompts first: an unknown or unreachable dataset fails before any weights load
    prompts = datasets.load_prompts(args.dataset, args.max_samples, seed=args.data_seed, cache_dir=args.cache_dir)
    if not prompts:
        raise UsageError(f"dataset {args.dataset!r} has no prompts")

    # 2. device, models, checks
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if args.device.startswith("cuda") or (args.device == "auto" and torch.cuda.is_available()) else "gloo"
        torch.distributed.init_process_group(backend=backend)
    device = hardware.resolve_device(args.device, local_rank if world > 1 else None)
    dtype = hardware.resolve_dtype(args.dtype, device)
    fp_now = fingerprint.collect(device, dtype, args.attn_impl, args.engine)
    hw_key = fingerprint.hardware_key(fp_now) if args.hardware == "auto" else args.hardware
    cal_path = Path(args.calibration) if args.calibration else calibration_path(args.cache_dir, hw_key, model_name, args.engine)
    adaptive = "bastion" in methods and args.budget is None
    if adaptive and args.calibration and not cal_path.exists():
        raise UsageError(f"--calibration {cal_path} does not exist; omit it to calibrate into --cache-dir")
    if adaptive and rank == 0 and not args.recalibrate:
        if cal_path.exists():
            Calibration.load(cal_path, current=fp_now)  # a stale calibration fails here, before loading weights
        else:
            check_writable(args.cache_dir, cal_path)
    target = models.load_target(target_ref, dtype, device, args.attn_impl)
    tokenizer = models.load_tokenizer(target_ref)
    drafter = None
    if need_drafter:
        drafter = models.load_drafter(drafter_ref, dtype, device)
        models.check_pair(target, drafter, target_ref, drafter_ref)
        if args.block_size is not None:
            if not 2 <= args.block_size <= drafter.config.block_size:
                raise UsageError(
                    f"--block-size {args.block_size} must be in 2..{drafter.config.block_size} (the drafter's block size)"
                )
            drafter.config.block_size = args.block_size
    builder = PromptBuilder(tokenizer, args.enable_thinking)
    engine = Engine(args.engine, target, drafter, n_max=max(policy.n_max, policy.budget or 0),
                    max_context=args.max_new_tokens + 2048)

    # 3. calibration (adaptive BASTION only): rank 0 makes it, the others wait
    cal = None
    if adaptive:
        cal = _calibration(args, engine, policy, builder, prompts, model_name, fp_now, cal_path, device, rank, world, log)

    # 4. decode, resuming from a partial output
    if cal is not None and cal.max_s < policy.n_max:
        # never extrapolate the cost model past the largest tree it was fitted on
        policy = replace(policy, n_max=max(cal.max_s, policy.n_min))
    decoders = {m: engine.decoder(m, policy, cal and cal.cost_model, cal and cal.overheads) for m in methods}
    settings = {
        "model": target_ref, "draft_model": drafter_ref if need_drafter else None, "dataset": args.dataset,
        "max_samples": args.max_samples, "data_seed": args.data_seed, "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature, "block_size": drafter.block_size if drafter else None, "methods": methods,
        "policy": [args.n_min, args.n_max, args.topk, args.budget], "seed": args.seed, "thinking": args.enable_thinking,
    }
    key = records.run_key(settings)
    base = {
        "run_key": key, "model": model_name, "target": target_ref, "draft_model": drafter_ref if need_drafter else None,
        "dataset_arg": args.dataset, "rank": rank, "world_size": world, "temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
        "block_size": settings["block_size"], "hardware": hw_key, "fingerprint": fp_now, "budget": args.budget,
        "n_min": policy.n_min, "n_max": policy.n_max,
        "calibration": None if cal is None else {"params": cal.cost_model.to_dict()["params"], "t_draft": cal.overheads.t_draft, "t_other": cal.overheads.t_other},
    }
    mine = [i for i in range(len(prompts)) if i % shard_n == shard_i and (i // shard_n) % world == rank]
    out_path = Path(args.output) if args.output else None
    part = records.partial_path(f"{out_path}.rank{rank}" if out_path and world > 1 else out_path) if out_path else None
    done_recs = records.read_partial(part, key) if part else []
    turns = {i: len(prompts[i]["turns"]) for i in mine}
    finished = records.completed_prompts(done_recs, turns, methods)
    done_recs = [r for r in done_recs if r["prompt_index"] in finished]
    if finished:
        log(f"[resume] {len(finished)} of {len(mine)} prompts already done in {part}")
    stops = builder.stop_ids(target)
    todo = [i for i in mine if i not in finished]
    all_recs = list(done_recs)
    t_start = time.perf_counter()
    for n_done, idx in enumerate(todo, 1):
        prompt_recs = _decode_prompt(idx, prompts[idx], decoders, methods, builder, stops, args, base)
        if part:
            records.append_records(part, prompt_recs)
        all_recs.extend(prompt_recs)
        log(f"[decode] prompt {idx} done ({n_done}/{len(todo)}, {time.perf_counter() - t_start:.1f}s)")

    # 5. gather, write, summarise
    if world > 1:
        gathered = [None] * world
        torch.distributed.all_gather_object(gathered, all_recs)
        all_recs = [r for chunk in gathered for r in chunk]
    if rank == 0:
        if out_path:
            records.finalise(out_path, all_recs)
        if not args.quiet:
            print(records.format_summary(records.summarise(all_recs, methods), settings["block_size"] or 1))
    if world > 1:
        torch.distributed.barrier()
        if out_path and part:
            part.unlink(missing_ok=True)
    return all_recs


def _decode_prompt(idx, prompt, decoders, methods, builder, stops, args, base) -> list[dict[str, Any]]:
    out = []
    history: list[tuple[str, str]] = []
    for turn, text in enumerate(prompt["turns"]):
        ids = builder.encode(history, text)
        answers = {}
        for m in methods:
            gen = torch.Generator(device=decoders[m].target.device)
            gen.manual_seed((args.seed * 1_000_003 + idx * 1_009 + turn) % (1 << 62))
            res = decoders[m].generate(ids, args.max_new_tokens, args.temperature, stops, gen, collect_stats=args.step_times)
            answers[m] = res.output_ids
            dataset = args.dataset_name or prompt.get("dataset")
            out.append(records.make_record(res, prompt_index=idx, turn=turn, method=m, base={**base, "dataset": dataset}))
        history.append((text, builder.decode(answers[methods[0]])))
    return out


def _calibration(args, engine, policy, builder, prompts, model_name, fp_now, path, device, rank, world, log) -> Calibration:
    hw_key = fingerprint.hardware_key(fp_now)
    if rank == 0 and not args.calibration and (args.recalibrate or not path.exists()):
        check_writable(args.cache_dir, path)
        grid_name = args.calib_grid if args.calib_grid != "auto" else ("paper" if device.type == "cuda" else "small")
        grid = Grid.named(grid_name)
        log(f"[calibrate] no calibration for ({hw_key}, {model_name}); measuring on {fp_now['device_name']} ({grid_name} grid)")
        probe_ids = builder.encode([], prompts[0]["turns"][0])
        probe_policy = TreePolicy(n_min=policy.n_min, n_max=policy.n_max, topk=policy.topk, budget=2 * policy.n_min)
        cal = calibrate(
            engine.target, model_name, fp_now, grid,
            overheads_fn=lambda _cm: profile_overheads(lambda: engine.decoder("bastion", probe_policy), probe_ids),
            log=log,
            static=engine.verify_probe(),
        )
        cal.save(path)
        log(f"[calibrate] wrote {path} ({cal.seconds:.1f}s)")
    if world > 1:
        torch.distributed.barrier()  # the other ranks wait for rank 0's calibration
    if not path.exists():
        raise CalibrationError(f"calibration {path} was not created")
    return Calibration.load(path, current=fp_now)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        if os.environ.get("BASTION_TRACEBACK"):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
