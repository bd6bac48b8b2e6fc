"""Train a DFlash drafter against a frozen Hugging Face causal-LM target.

Each step runs the target once over a batch of token windows to get (a) the tapped
hidden states, the drafter's context features, and (b) the target's own next-token
predictions, the labels.  Several anchors are drawn per window; every anchor makes one
block ``[token at a, mask * (b-1)]`` that sees the features of positions ``< a``, exactly
as at inference.  All blocks of a window go through the drafter in ONE forward, kept apart
by a block mask (``dflash.train_data.build_block_mask``).  The drafter is trained to match
the target's predictions (not the corpus): that is what speculative decoding accepts.

Data (``--data``/``--val-data``): a ``.npy`` 1-D integer array of token ids, a ``.bin``
of raw little-endian uint16 ids, or a UTF-8 text file tokenized with the target's
tokenizer (documents split on its EOS string; the token ids are cached in ``<out>``).

Usage::

    python -m dflash.train --target /work/tiny/target --data corpus/train.txt \\
        --draft-layers 2 --block-size 16 --steps 2000 --batch-size 16 --seq-len 512 \\
        --out runs/drafter
    python -m dflash.train --target Qwen/Qwen3-8B --drafter-config cfg.json --data ids.npy ...

``<out>/checkpoint`` is written every ``--save-every`` steps; rerunning the same command
resumes from it.  Results: ``<out>/drafter`` (public checkpoint layout) and
``<out>/train_log.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from . import train_data as td
from . import train_setup as ts
from .model import DFlashDraftModel
from .train_step import Meter, StepOut, Trainer, evaluate, lr_lambda, window_starts

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dflash.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="HF repo id or local folder of the target causal LM")
    p.add_argument("--tokenizer", help="tokenizer folder/id (default: the target's)")
    p.add_argument("--data", required=True, help=".npy / .bin (uint16) token ids, or a text file")
    p.add_argument("--val-data", help="validation data (same formats); evaluated at the end")
    p.add_argument("--out", required=True, help="output folder (checkpoint/, drafter/, train_log.jsonl)")
    g = p.add_argument_group("drafter")
    g.add_argument("--drafter-config", help="drafter config.json (public layout)")
    g.add_argument("--init-from", help="start from this drafter folder (its config is used)")
    g.add_argument("--draft-layers", type=int, default=1, help="derive a config with this many layers")
    g.add_argument("--block-size", type=int, default=16)
    g.add_argument("--target-layer-ids", help="comma-separated tapped target layers (default: spread)")
    g.add_argument("--mask-token-id", type=int, help="default: the tokenizer's mask token")
    g = p.add_argument_group("training")
    g.add_argument("--steps", type=int, default=1000)
    g.add_argument("--batch-size", type=int, default=8, help="windows per step")
    g.add_argument("--seq-len", type=int, default=512, help="window length in tokens")
    g.add_argument("--anchors-per-seq", type=int, default=16)
    g.add_argument("--labels", choices=("argmax", "soft"), default="argmax")
    g.add_argument("--gamma", type=float, default=7.0, help="position weight decay w_k = exp(-(k-1)/gamma)")
    g.add_argument("--lr", type=float, default=6e-4)
    g.add_argument("--min-lr-ratio", type=float, default=0.1, help="cosine floor as a fraction of --lr")
    g.add_argument("--warmup-steps", type=int, help="default: 5%% of --steps")
    g.add_argument("--weight-decay", type=float, default=0.01)
    g.add_argument("--grad-clip", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--doc-windows", action="store_true",
                   help="windows start at a document start (after an EOS), as prompts do at inference")
    g.add_argument("--max-seconds", type=float, default=0,
                   help="finish early (save the drafter, validate) once this much training time has passed")
    g.add_argument("--time-schedule", action="store_true",
                   help="with --max-seconds: the cosine decay follows elapsed time as well as steps, so a run cut by "
                        "the clock still ends at the floor learning rate (a resume restarts the clock)")
    g = p.add_argument_group("runtime")
    g.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    g.add_argument("--precision", default="auto", help="autocast: auto (bf16 on GPU, fp32 on CPU), bf16, fp32")
    g.add_argument("--target-dtype", default="auto", help="target weights: auto (bf16 GPU / fp32 CPU), bf16, fp32")
    g.add_argument("--compile", action="store_true", help="torch.compile the drafter")
    g.add_argument("--save-every", type=int, default=500)
    g.add_argument("--log-every", type=int, default=10)
    g.add_argument("--val-every", type=int, default=0, help="also validate every N steps (0: only at the end)")
    g.add_argument("--val-batches", type=int, default=16)
    g.add_argument("--stop-after", type=int, help="stop after this step without finishing (simulates a kill)")
    g.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    return p


@dataclass
class Job:
    """A training job's parts: made by :func:`_prepare`, resumed by :func:`_resume`, run by :func:`_train`."""

    args: argparse.Namespace
    out: Path
    device: torch.device
    drafter: DFlashDraftModel
    trainer: Trainer
    tokens: Any  # training token ids
    val_tokens: Any  # validation token ids, or None
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    lr_fn: Callable[[int], float]
    data_gen: torch.Generator
    log_path: Path
    start: int = 0  # the step a resumed job starts after

    def save(self, step: int) -> None:
        ts.save_checkpoint(self.out, {"drafter": self.drafter.state_dict(), "optimizer": self.opt.state_dict(),
                                      "scheduler": self.sched.state_dict(), "step": step,
                                      "rng": ts.rng_state(self.data_gen, self.device), "args": vars(self.args)},
                           self.drafter.config)

    def log(self, record: dict[str, Any]) -> None:
        with open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")


@dataclass
class Progress:
    """Where the loop ended: the last logged metrics, and why it ended."""

    last: dict[str, Any] | None = None
    stopped_at: int | None = None  # SIGTERM or --stop-after: checkpointed, not finished
    finished_early: int | None = None  # --max-seconds: finished at this step
    elapsed: float = 0.0


def _print_summary(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    bar = "-" * (width + 40)
    print(bar)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print(bar, flush=True)


def _prepare(args: argparse.Namespace) -> Job:
    """Target, drafter, data and optimiser; bad sizes and ids fail before the first step."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ts.TrainSetupError("--device cuda but no CUDA device is available")
    amp = ts.resolve_dtype(args.precision, device)
    tokenizer = ts.load_tokenizer(args.tokenizer or args.target)
    target = ts.load_target(args.target, ts.resolve_dtype(args.target_dtype, device), device)
    drafter = ts.setup_drafter(args, target, tokenizer).to(device).train()
    tokens = td.load_token_ids(args.data, tokenizer, cache_dir=out / "data_cache")
    val_tokens = td.load_token_ids(args.val_data, tokenizer, cache_dir=out / "data_cache") if args.val_data else None
    vocab = int(target.get_input_embeddings().weight.shape[0])
    if len(tokens) and int(tokens.max()) >= vocab:
        raise td.DataError(f"--data holds token id {int(tokens.max())}, outside the target vocabulary (0..{vocab - 1})")
    td.sample_anchors(1, args.seq_len, drafter.config.block_size, args.anchors_per_seq, torch.Generator())  # bad sizes
    decay = [p for p in drafter.parameters() if p.dim() >= 2]
    no_decay = [p for p in drafter.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    warmup = args.warmup_steps if args.warmup_steps is not None else max(1, args.steps // 20)
    lr_fn = lr_lambda(warmup, args.steps, args.min_lr_ratio)
    trainer = Trainer(target, drafter, args, device, None if amp == torch.float32 else amp)
    if args.compile:
        trainer.forward_drafter = torch.compile(drafter)
    return Job(args, out, device, drafter, trainer, tokens, val_tokens, opt,
               torch.optim.lr_scheduler.LambdaLR(opt, lr_fn), lr_fn, torch.Generator().manual_seed(args.seed),
               out / "train_log.jsonl")


def _resume(job: Job) -> None:
    """Continue from ``<out>/checkpoint`` when there is one (same arguments only); else start the log afresh."""
    ckpt = ts.checkpoint_dir(job.out)
    if ckpt is not None:
        state = ts.load_checkpoint(ckpt)
        ts.check_resume_args(state["args"], vars(job.args))
        job.drafter.load_state_dict(state["drafter"])
        job.opt.load_state_dict(state["optimizer"])
        job.sched.load_state_dict(state["scheduler"])
        ts.set_rng_state(state["rng"], job.data_gen, job.device)
        job.start = int(state["step"])
        ts.truncate_log(job.log_path, job.start)
        print(f"resuming from {ckpt} at step {job.start}", flush=True)
    elif job.log_path.exists():
        job.log_path.unlink()
    job.log({"step": job.start, "event": "resume" if job.start else "start"})


def _optimise(job: Job, res: StepOut, step: int, t_start: float) -> tuple[float, float]:
    """One optimiser step on the batch's loss; returns (gradient norm, learning rate used)."""
    args, opt = job.args, job.opt
    opt.zero_grad(set_to_none=True)
    res.loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(job.drafter.parameters(), args.grad_clip)
    if args.time_schedule and args.max_seconds:
        # the further of the step and the clock sets the schedule's progress
        by_time = (time.perf_counter() - t_start) / args.max_seconds * args.steps
        mult = job.lr_fn(max(step - 1, int(by_time)))
        for g in opt.param_groups:
            g["lr"] = args.lr * mult
    used_lr = opt.param_groups[0]["lr"]
    opt.step()
    job.sched.step()
    return float(gnorm), used_lr


def _train(job: Job) -> Progress:
    """The step loop: logs every ``--log-every`` steps, checkpoints, stops on SIGTERM or the clock."""
    from tqdm.auto import tqdm

    args, b = job.args, job.drafter.config.block_size
    stop = {"flag": False}
    old_handler = None
    try:
        old_handler = signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    except ValueError:  # not the main thread: no graceful SIGTERM, checkpoints still happen
        pass
    bar = tqdm(total=args.steps, initial=job.start, disable=args.no_progress, desc="drafter", dynamic_ncols=True)
    meter, progress = Meter(), Progress()
    t0 = t_start = time.perf_counter()
    starts = window_starts(job.tokens, job.trainer, args)
    try:
        for step in range(job.start + 1, args.steps + 1):
            if args.max_seconds and time.perf_counter() - t_start > args.max_seconds:
                progress.finished_early = step - 1
                print(f"--max-seconds {args.max_seconds:g} reached: finishing at step {step - 1}", flush=True)
                break
            ids = td.sample_windows(job.tokens, args.batch_size, args.seq_len, job.data_gen, starts).to(
                job.device, non_blocking=True)
            anchors = td.sample_anchors(args.batch_size, args.seq_len, b, args.anchors_per_seq, job.data_gen)
            res = job.trainer.step(ids, anchors.to(job.device))
            gnorm, used_lr = _optimise(job, res, step, t_start)
            meter.add(res)
            bar.update(1)
            if step % args.log_every == 0 or step == args.steps:
                rec = {"step": step, **meter.summary(), "lr": used_lr, "grad_norm": gnorm,
                       "tokens_per_s": meter.n * args.batch_size * args.seq_len / max(time.perf_counter() - t0, 1e-9)}
                if job.val_tokens is not None and args.val_every and step % args.val_every == 0:
                    rec["val"] = evaluate(job.trainer, job.val_tokens, args)
                job.log(rec)
                bar.set_postfix(loss=f"{rec['loss']:.3f}", acc1=f"{rec['acc'][0]:.3f}", tau=f"{rec['tau']:.2f}")
                progress.last, meter, t0 = rec, Meter(), time.perf_counter()
            if step % args.save_every == 0 or stop["flag"]:
                job.save(step)
            if stop["flag"] or (args.stop_after is not None and step >= args.stop_after):
                progress.stopped_at = step
                break
    finally:
        bar.close()
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)
    progress.elapsed = time.perf_counter() - t_start
    return progress


def _finish(job: Job, progress: Progress) -> dict[str, Any]:
    """Save the drafter, validate, log the final record and print the summary."""
    args, out, last = job.args, job.out, progress.last
    job.drafter.save_pretrained(str(out / "drafter"))
    steps = progress.finished_early or args.steps
    result: dict[str, Any] = {"steps": steps, "resumed_from": job.start, "train": last,
                              "elapsed_s": progress.elapsed, "drafter": str(out / "drafter")}
    if job.val_tokens is not None:
        result["val"] = evaluate(job.trainer, job.val_tokens, args)
    job.log({"step": args.steps, "event": "final", **result})
    cfg = job.drafter.config
    rows = [("steps", f"{job.start} -> {steps} ({progress.elapsed:.1f} s this run)"),
            ("drafter", f"{cfg.num_hidden_layers} layers, block {cfg.block_size}, taps {cfg.target_layer_ids}")]
    if last:
        rows += [("train loss", f"{last['loss']:.4f}"), ("train tau", f"{last['tau']:.3f}"),
                 ("train acc@k", " ".join(f"{a:.3f}" for a in last["acc"])),
                 ("tokens/s", f"{last['tokens_per_s']:.0f}")]
    if "val" in result:
        v = result["val"]
        rows += [("val loss", f"{v['loss']:.4f}"), ("val tau", f"{v['tau']:.3f}"),
                 ("val acc@k", " ".join(f"{a:.3f}" for a in v["acc"]))]
    rows.append(("saved", str(out / "drafter")))
    _print_summary(rows)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run (or resume) a training job; returns the final metrics."""
    job = _prepare(build_parser().parse_args(argv))
    _resume(job)
    progress = _train(job)
    if progress.stopped_at is not None:
        print(f"stopped at step {progress.stopped_at} (checkpoint: {job.out / ts.CHECKPOINT_DIR})", flush=True)
        return {"stopped_at": progress.stopped_at, "last": progress.last}
    return _finish(job, progress)


def run_cli(entry: Callable[[list[str] | None], object], argv: list[str] | None) -> int:
    """A trainer's entry point: bad input becomes a one-line error (exit 2) instead of a traceback."""
    try:
        entry(argv)
    except (ts.TrainSetupError, td.DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def cli(argv: list[str] | None = None) -> int:
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
