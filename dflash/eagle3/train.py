"""Train a small EAGLE-3 head against a frozen target with the *training-time test*.

Each step runs the frozen target once over a batch of windows (its three tapped states
and its logits), unrolls the head ``--ttt-steps`` times (:mod:`.ttt`) and minimises the
per-step soft cross-entropies weighted ``--step-decay ** k`` (reference
``eagle/traineagle3/main.py``: 7 steps, 0.8).  Each step's loss is normalised by the
positions it counts (the reference divides by all positions).  The draft vocabulary is the
full target vocabulary or its ``--draft-vocab-size`` most frequent tokens in ``--data``
(reference ``d2t``/``t2d``).

The run follows the DFlash trainer (:mod:`dflash.train`) where the reasons are the same:
linear warm-up then cosine decay to ``--min-lr-ratio`` (at a constant rate the loss is
still falling when the run stops); ``--max-seconds`` with ``--time-schedule``, so a run
cut by the clock still ends at its floor rate; ``--doc-windows`` (windows start where a
document starts, as a prompt does); checkpoints every ``--save-every`` steps that the same
command resumes, carrying the training time so the clock's schedule continues; per-step
validation accuracy on ``--val-data``.

Usage::

    python -m dflash.eagle3.train --target DIR --data ids.npy --out runs/eagle3 --steps 500
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import train_data as td
from .. import train_setup as ts
from ..train import lr_lambda, run_cli
from .checkpoint import load_eagle3, save_eagle3
from .config import head_config_for
from .model import Eagle3Head
from .ttt import target_pass, target_view, ttt_forward, ttt_scores, weighted_loss

__all__ = ["build_parser", "vocab_maps", "head_config_for", "ttt_forward", "weighted_loss", "evaluate", "main", "cli"]
# --threads and --compile only run the same work differently: a resume may change them
_FREE = ("threads", "compile")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dflash.eagle3.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="HF repo id or local folder of the target causal LM")
    p.add_argument("--data", required=True, help=".npy / .bin (uint16) token ids, or a text file")
    p.add_argument("--val-data", help="validation token ids (same formats): per-step accuracy, at the end "
                                      "and every --val-every steps")
    p.add_argument("--out", required=True, help="output folder: head/ (public layout), checkpoint/, train_log.jsonl")
    p.add_argument("--init-from", help="fine-tune this head folder (its vocabulary, taps and widths are kept)")
    p.add_argument("--draft-vocab-size", type=int, help="keep the N most frequent data tokens (default: all)")
    p.add_argument("--target-layer-ids", help="comma-separated output-of-layer ids (default: reference taps)")
    p.add_argument("--intermediate-size", type=int, help="head MLP width (default: the target's)")
    p.add_argument("--ttt-steps", type=int, default=7, help="training-time-test unroll length")
    p.add_argument("--step-decay", type=float, default=0.8, help="loss weight of unroll step k: decay**k")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--doc-windows", action="store_true", help="windows start at a document start (after an EOS)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.1, help="cosine floor as a fraction of --lr")
    p.add_argument("--warmup-steps", type=int, help="default: 5%% of --steps")
    p.add_argument("--max-seconds", type=float, default=0, help="finish (save, validate) after this much training time")
    p.add_argument("--time-schedule", action="store_true",
                   help="with --max-seconds: the decay follows the clock as well as the steps")
    p.add_argument("--grad-clip", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--target-dtype", default="auto", help="auto (bf16 GPU / fp32 CPU), bf16, fp32")
    p.add_argument("--precision", default="fp32", help="autocast of the head's matmuls: fp32 (none), bf16, auto "
                                                       "(bf16 on a GPU)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the unrolled loss (fused elementwise work: 2.5 times the eager step on "
                        "an H100, after a compile of about a minute)")
    p.add_argument("--layout", choices=("eagle", "angelslim"), default="eagle")
    p.add_argument("--save-every", type=int, default=0, help="checkpoint every N steps (0: never)")
    p.add_argument("--val-every", type=int, default=0)
    p.add_argument("--val-batches", type=int, default=8)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--stop-after", type=int, help="checkpoint and stop after this step without finishing (a kill)")
    return p


def vocab_maps(tokens: np.ndarray, vocab: int, n: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(d2t [n], t2d [vocab]) for the ``n`` most frequent ids (ties: lower id); all if None."""
    if n is None or n >= vocab:
        return torch.zeros(vocab, dtype=torch.long), torch.ones(vocab, dtype=torch.bool)
    counts = np.bincount(np.asarray(tokens, dtype=np.int64), minlength=vocab)[:vocab]
    used = np.sort(np.argsort(-counts, kind="stable")[:n])
    d2t = torch.from_numpy(used - np.arange(n)).long()
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[torch.from_numpy(used)] = True
    return d2t, t2d


def _new_head(args: argparse.Namespace, target: torch.nn.Module, tokens: np.ndarray) -> Eagle3Head:
    """A fresh head (draft vocabulary from ``tokens``) or the ``--init-from`` one, on the target's embeddings."""
    if args.init_from:
        head = load_eagle3(args.init_from, target.config)
    else:
        tcfg = getattr(target.config, "text_config", None) or target.config
        d2t, t2d = vocab_maps(tokens, int(tcfg.vocab_size), args.draft_vocab_size)
        cfg = head_config_for(target.config, int(d2t.numel()), ts.parse_layer_ids(args.target_layer_ids),
                              args.intermediate_size)
        head = Eagle3Head(cfg)
        with torch.no_grad():
            head.d2t.copy_(d2t)
            head.t2d.copy_(t2d)
    head.attach_target_embeddings(target.get_input_embeddings())
    return head.float()


def _doc_starts(target: torch.nn.Module, tokens: np.ndarray, args: argparse.Namespace) -> np.ndarray | None:
    if not args.doc_windows:
        return None
    eos = target.config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    if eos is None:
        raise td.DataError("--doc-windows needs the target's eos_token_id")
    return td.document_starts(tokens, int(eos), args.seq_len)


@torch.no_grad()
def evaluate(head: Eagle3Head, target: torch.nn.Module, layer_ids: list[int], tokens: np.ndarray,
             args: argparse.Namespace) -> dict[str, Any]:
    """Loss and accuracy per unrolled step on fixed validation windows (the same draws every call)."""
    gen = torch.Generator().manual_seed(args.seed + 1_000_003)
    starts = _doc_starts(target, tokens, args)
    hits = torch.zeros(args.ttt_steps)
    counted = torch.zeros(args.ttt_steps)
    loss = 0.0
    device = next(head.parameters()).device
    for _ in range(args.val_batches):
        ids = td.sample_windows(tokens, args.batch_size, args.seq_len, gen, starts).to(device)
        feats, logits = target_pass(target, ids, layer_ids)
        for k, s in enumerate(ttt_scores(head, feats, ids, logits, args.ttt_steps)):
            hits[k] += float(s.hits)
            counted[k] += float(s.counted)
            loss += float(s.loss) * args.step_decay**k / args.val_batches
    return {"loss": loss, "acc": [round(float(a), 4) for a in hits / counted.clamp(min=1)]}


def _resume(out: Path, head: Eagle3Head, opt: torch.optim.Optimizer, gen: torch.Generator,
            arg_dict: dict[str, Any], device: torch.device) -> tuple[int, float]:
    """Load ``<out>/checkpoint`` if there is one; return (step, training seconds so far)."""
    ckpt = ts.checkpoint_dir(out)
    if ckpt is None:
        return 0, 0.0
    state = ts.load_checkpoint(ckpt)
    ts.check_resume_args(state["args"], arg_dict)
    head.load_state_dict(state["head"])
    opt.load_state_dict(state["optimizer"])
    ts.set_rng_state(state["rng"], gen, device)
    ts.truncate_log(out / "train_log.jsonl", int(state["step"]))
    print(f"resuming from {ckpt} at step {int(state['step'])}", file=sys.stderr, flush=True)
    return int(state["step"]), float(state["elapsed"])


def _start_log(path: Path, start: int, args: argparse.Namespace) -> None:
    """A fresh run starts a new log; either way the arguments are logged (tokens seen, tables read them)."""
    if not start and path.exists():
        path.unlink()
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps({"step": start, "event": "resume" if start else "start", "args": vars(args)}) + "\n")


def _schedule(args: argparse.Namespace):
    """Step (and, with --time-schedule, training seconds) -> learning rate."""
    warmup = args.warmup_steps if args.warmup_steps is not None else max(1, args.steps // 20)
    mult = lr_lambda(warmup, args.steps, args.min_lr_ratio)

    def lr(step: int, elapsed: float) -> float:
        progress = step - 1
        if args.time_schedule and args.max_seconds:
            progress = max(progress, int(elapsed / args.max_seconds * args.steps))
        return args.lr * mult(progress)
    return lr


class _Stopped(Exception):
    """``--stop-after`` reached: the checkpoint is written, the head is not."""

    def __init__(self, history: list[dict[str, Any]]) -> None:
        super().__init__("stopped")
        self.history = history


def _check_args(args: argparse.Namespace) -> None:
    for name in ("steps", "batch_size", "ttt_steps"):
        if getattr(args, name) < 1:
            raise ts.TrainSetupError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.seq_len <= args.ttt_steps:
        raise ts.TrainSetupError(f"--seq-len {args.seq_len} leaves no position for step {args.ttt_steps} of the "
                                 f"unroll: give --seq-len > --ttt-steps")
    if args.init_from and args.draft_vocab_size:
        raise ts.TrainSetupError("--draft-vocab-size cannot change the vocabulary of an --init-from head; drop it")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    _check_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    target = ts.load_target(args.target, ts.resolve_dtype(args.target_dtype, device), device)
    tokenizer = ts.load_tokenizer(args.target)
    tokens = td.load_token_ids(args.data, tokenizer, cache_dir=args.out)
    val = td.load_token_ids(args.val_data, tokenizer, cache_dir=args.out) if args.val_data else None
    head = _new_head(args, target, tokens).to(device)
    tcfg = getattr(target.config, "text_config", None) or target.config
    layer_ids = head.config.layer_ids(int(tcfg.num_hidden_layers))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        history = _train(args, out, head, target, layer_ids, tokens, val)
    except _Stopped as stop:
        return {"history": stop.history, "stopped_at": args.stop_after, "layer_ids": layer_ids}
    save_eagle3(head, out / "head", layout=args.layout)  # before validating: a run killed there keeps its head
    result: dict[str, Any] = {"history": history, "head_dir": str(out / "head"), "layer_ids": layer_ids}
    if val is not None:
        result["val"] = evaluate(head, target, layer_ids, val, args)
        with open(out / "train_log.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": history[-1]["step"] if history else 0, "event": "final",
                                 "val": result["val"]}) + "\n")
        print(f"validation: loss {result['val']['loss']:.4f} acc {result['val']['acc']}", file=sys.stderr)
    return result


def _train(args: argparse.Namespace, out: Path, head: Eagle3Head, target: torch.nn.Module, layer_ids: list[int],
           tokens: np.ndarray, val: np.ndarray | None) -> list[dict[str, Any]]:
    """The step loop; returns this run's per-step log rows (also appended to train_log.jsonl)."""
    device = next(head.parameters()).device
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed)
    arg_dict = {k: v for k, v in vars(args).items() if k not in _FREE}
    log_path = out / "train_log.jsonl"
    start, elapsed = _resume(out, head, opt, gen, arg_dict, device)
    _start_log(log_path, start, args)
    lr_at = _schedule(args)
    starts = _doc_starts(target, tokens, args)
    weights = torch.tensor([args.step_decay**k for k in range(args.ttt_steps)], device=device)  # [S]
    amp = ts.resolve_dtype(args.precision, device)
    loss_fn = torch.compile(weighted_loss) if args.compile else weighted_loss
    history: list[dict[str, Any]] = []

    def save(step: int) -> None:
        ts.save_checkpoint(out, {"head": head.state_dict(), "optimizer": opt.state_dict(), "step": step,
                                 "elapsed": elapsed, "rng": ts.rng_state(gen, device), "args": arg_dict}, head.config)

    with open(log_path, "a", encoding="utf-8") as log:
        for step in range(start + 1, args.steps + 1):
            if args.max_seconds and elapsed > args.max_seconds:
                print(f"--max-seconds {args.max_seconds:g} reached: finishing at step {step - 1}", file=sys.stderr)
                save(step - 1)
                break
            t0 = time.perf_counter()
            ids = td.sample_windows(tokens, args.batch_size, args.seq_len, gen, starts).to(device)
            lr = lr_at(step, elapsed)
            loss, losses, accs = _update(args, head, target, layer_ids, opt, params, loss_fn, weights, amp, ids, lr)
            elapsed += time.perf_counter() - t0
            row = {"step": step, "loss": loss, "step_losses": [round(x, 5) for x in losses],
                   "acc": [round(a, 4) for a in accs], "lr": lr, "elapsed_s": round(elapsed, 2),
                   "tokens_seen": step * args.batch_size * args.seq_len}
            if not math.isfinite(row["loss"]):
                raise ts.TrainSetupError(f"loss became {row['loss']} at step {step}")
            if val is not None and args.val_every and step % args.val_every == 0:
                row["val"] = evaluate(head, target, layer_ids, val, args)
            history.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            if args.log_every and (step % args.log_every == 0 or step == start + 1):
                print(f"step {step}: loss {row['loss']:.4f} acc0 {accs[0]:.3f} lr {lr:.2e} {elapsed:.0f}s"
                      + (f" val {row['val']['acc']}" if "val" in row else ""), file=sys.stderr, flush=True)
            if (args.save_every and step % args.save_every == 0) or step == args.stop_after:
                save(step)
            if step == args.stop_after:
                raise _Stopped(history)
    return history


def _update(args: argparse.Namespace, head: Eagle3Head, target: torch.nn.Module, layer_ids: list[int],
            opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], loss_fn, weights: torch.Tensor,
            amp: torch.dtype, ids: torch.Tensor, lr: float) -> tuple[float, list[float], list[float]]:
    """One optimiser step on windows ``ids`` [B, T] at rate ``lr``: the target's features and logits, the
    unrolled steps' losses weighted by ``weights`` [S] under ``amp`` autocast (``loss_fn``:
    :func:`.ttt.weighted_loss`, perhaps compiled), clipped gradients.  Returns the weighted loss, each
    step's loss and each step's accuracy, read back from the device once, after the optimiser step is
    queued."""
    feats, logits = target_pass(target, ids, layer_ids)
    loss, losses, accs = loss_fn(head, feats, ids, target_view(head, logits), weights, amp)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    values = torch.cat([loss.detach()[None], losses, accs]).tolist()
    return values[0], values[1 : 1 + len(weights)], values[1 + len(weights) :]


def cli(argv: list[str] | None = None) -> int:
    return run_cli(main, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
