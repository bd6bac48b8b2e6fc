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
import math
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import train_data as td
from . import train_setup as ts
from .config import DFlashConfig
from .model import DFlashDraftModel


@dataclass
class StepOut:
    loss: torch.Tensor  # scalar, weighted mean cross-entropy
    correct: torch.Tensor  # [N, b-1] bool: draft argmax == target argmax


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


# ----------------------------------------------------------------------------- the step


class Trainer:
    """Holds the frozen target pieces and the drafter; computes the loss of one batch."""

    def __init__(self, target: nn.Module, drafter: DFlashDraftModel, args: argparse.Namespace,
                 device: torch.device, amp_dtype: torch.dtype | None) -> None:
        self.target = target
        self.drafter = drafter
        self.forward_drafter = drafter  # replaced by a compiled wrapper with --compile
        self.embed = target.get_input_embeddings()
        self.lm_head = target.get_output_embeddings()
        self.cfg = drafter.config
        self.b = self.cfg.block_size
        self.args = args
        self.device = device
        self.amp_dtype = amp_dtype
        self.weights = td.position_weights(self.b, args.gamma, device)  # [b-1]

    def autocast(self):
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                              enabled=self.amp_dtype is not None)

    @torch.no_grad()
    def target_pass(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [B, T] -> (features [B, T, nF*H], logits [B, T, V])."""
        out = self.target(input_ids=ids, output_hidden_states=True, use_cache=False)
        hs = out.hidden_states  # L+1 entries; [i+1] is layer i's output, [-1] already normed
        feats = torch.cat([hs[i + 1] for i in self.cfg.target_layer_ids], dim=-1)
        return feats, out.logits

    def step(self, ids: torch.Tensor, anchors: torch.Tensor) -> StepOut:
        """Loss of one batch: ids [B, T], anchors [B, A] (sorted, 1 <= a <= T-b)."""
        b = self.b
        bsz, n_anchor = anchors.shape
        with self.autocast():
            feats, logits = self.target_pass(ids)
        with torch.no_grad():
            hard = td.gather_argmax_labels(logits, anchors, b)  # [B, A, b-1]
            soft = td.gather_soft_labels(logits, anchors, b) if self.args.labels == "soft" else None
            del logits
            # No block looks at positions >= its anchor; a compiled drafter gets a fixed
            # length instead, so shapes stay static and it compiles once.
            ctx_len = ids.shape[1] - b if self.args.compile else int(anchors.max())
            feats = feats[:, :ctx_len].to(next(self.drafter.parameters()).dtype)  # [B, C, nF*H]
            blk_ids = td.block_token_ids(ids, anchors, b, self.cfg.mask_token_id)  # [B, Q=A*b]
            blk_emb = self.embed(blk_ids).to(feats.dtype)  # [B, Q, H]
            blk_pos = td.block_positions(anchors, b)  # [B, Q]
            ctx_pos = torch.arange(ctx_len, device=ids.device).expand(bsz, ctx_len)  # [B, C]
            mask = td.build_block_mask(anchors, ctx_len, b)  # [B, 1, Q, C+Q]
        with self.autocast():
            h = self.forward_drafter(blk_emb, blk_pos, feats, ctx_pos, mask)  # [B, Q, H]
            h = h.view(bsz, n_anchor, b, -1)[:, :, 1:]  # [B, A, b-1, H]: position 0 is the known token
            dl = self.lm_head(h.to(self.lm_head.weight.dtype)).float()  # [B, A, b-1, V]
        if soft is None:
            ce = F.cross_entropy(dl.flatten(0, 2), hard.flatten(), reduction="none").view_as(hard)
        else:
            ce = -(soft * dl.log_softmax(dim=-1)).sum(dim=-1)  # [B, A, b-1]
        w = self.weights
        loss = (ce * w).sum() / (w.sum() * bsz * n_anchor)
        correct = (dl.detach().argmax(dim=-1) == hard).flatten(0, 1)  # [B*A, b-1]
        return StepOut(loss=loss, correct=correct)


class Meter:
    """Running means of loss, per-position accuracy and tau over a log interval."""

    def __init__(self) -> None:
        self.n = 0
        self.loss = 0.0
        self.hits: torch.Tensor | None = None  # [b-1] summed hits
        self.rows = 0
        self.tau = 0.0

    def add(self, out: StepOut) -> None:
        c = out.correct
        self.n += 1
        self.loss += float(out.loss.detach())
        hits = c.float().sum(dim=0).cpu()
        self.hits = hits if self.hits is None else self.hits + hits
        self.rows += c.shape[0]
        self.tau += float(td.expected_acceptance(c)) * c.shape[0]

    def summary(self) -> dict[str, Any]:
        acc = (self.hits / max(self.rows, 1)).tolist() if self.hits is not None else []
        return {"loss": self.loss / max(self.n, 1), "acc": [round(a, 4) for a in acc],
                "tau": self.tau / max(self.rows, 1)}


def lr_lambda(warmup: int, total: int, floor: float):
    """Linear warm-up then cosine decay to ``floor`` * lr (returns the multiplier)."""
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        prog = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * prog))
    return f


@torch.no_grad()
def evaluate(trainer: Trainer, tokens, args: argparse.Namespace) -> dict[str, Any]:
    """Validation loss / accuracy / tau on fixed windows (same draws every call)."""
    gen = torch.Generator().manual_seed(args.seed + 1_000_003)
    meter = Meter()
    trainer.drafter.eval()
    starts = _starts(tokens, trainer, args)
    for _ in range(args.val_batches):
        ids = td.sample_windows(tokens, args.batch_size, args.seq_len, gen, starts).to(trainer.device)
        anchors = td.sample_anchors(args.batch_size, args.seq_len, trainer.b, args.anchors_per_seq, gen)
        meter.add(trainer.step(ids, anchors.to(trainer.device)))
    trainer.drafter.train()
    return meter.summary()


# ----------------------------------------------------------------------------- main


def _starts(tokens, trainer: Trainer, args: argparse.Namespace):
    """Document starts for ``--doc-windows`` (None: any offset)."""
    if not getattr(args, "doc_windows", False):
        return None
    eos = trainer.target.config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    if eos is None:
        raise td.DataError("--doc-windows needs the target's eos_token_id")
    return td.document_starts(tokens, int(eos), args.seq_len)


def _setup_drafter(args, target, tokenizer) -> DFlashDraftModel:
    mask_id = args.mask_token_id
    if mask_id is None and tokenizer is not None:
        mask_id = getattr(tokenizer, "mask_token_id", None)
    if args.init_from:
        drafter = DFlashDraftModel.from_pretrained(args.init_from)
        if args.mask_token_id is not None or drafter.config.mask_token_id is None:
            drafter.config.mask_token_id = mask_id
    else:
        if args.drafter_config:
            config = DFlashConfig.from_json_file(args.drafter_config)
            if args.mask_token_id is not None or config.mask_token_id is None:
                config.mask_token_id = mask_id
        else:
            config = ts.derive_config(target.config, args.draft_layers, args.block_size,
                                      ts.parse_layer_ids(args.target_layer_ids), mask_id)
        ts.check_pair(config, target)
        torch.manual_seed(args.seed)
        drafter = DFlashDraftModel(config)
        ts.init_drafter_weights(drafter)
    ts.check_pair(drafter.config, target)
    return drafter.float()


def _print_summary(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    bar = "-" * (width + 40)
    print(bar)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print(bar, flush=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run (or resume) a training job; returns the final metrics."""
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ts.TrainSetupError("--device cuda but no CUDA device is available")
    amp = ts.resolve_dtype(args.precision, device)
    amp_dtype = None if amp == torch.float32 else amp

    tokenizer = ts.load_tokenizer(args.tokenizer or args.target)
    target = ts.load_target(args.target, ts.resolve_dtype(args.target_dtype, device), device)
    drafter = _setup_drafter(args, target, tokenizer).to(device).train()
    b = drafter.config.block_size
    tokens = td.load_token_ids(args.data, tokenizer, cache_dir=out / "data_cache")
    val_tokens = td.load_token_ids(args.val_data, tokenizer, cache_dir=out / "data_cache") if args.val_data else None
    vocab = int(target.get_input_embeddings().weight.shape[0])
    if len(tokens) and int(tokens.max()) >= vocab:
        raise td.DataError(f"--data holds token id {int(tokens.max())}, outside the target vocabulary (0..{vocab - 1})")
    td.sample_anchors(1, args.seq_len, b, args.anchors_per_seq, torch.Generator())  # fail early on bad sizes

    decay = [p for p in drafter.parameters() if p.dim() >= 2]
    no_decay = [p for p in drafter.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    warmup = args.warmup_steps if args.warmup_steps is not None else max(1, args.steps // 20)
    lr_fn = lr_lambda(warmup, args.steps, args.min_lr_ratio)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_fn)
    data_gen = torch.Generator().manual_seed(args.seed)
    trainer = Trainer(target, drafter, args, device, amp_dtype)
    if args.compile:
        trainer.forward_drafter = torch.compile(drafter)

    log_path = out / "train_log.jsonl"
    arg_dict = vars(args)
    start = 0
    ckpt = ts.checkpoint_dir(out)
    if ckpt is not None:
        state = ts.load_checkpoint(ckpt)
        ts.check_resume_args(state["args"], arg_dict)
        drafter.load_state_dict(state["drafter"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        ts.set_rng_state(state["rng"], data_gen, device)
        start = int(state["step"])
        ts.truncate_log(log_path, start)
        print(f"resuming from {ckpt} at step {start}", flush=True)
    elif log_path.exists():
        log_path.unlink()
    with open(log_path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"step": start, "event": "resume" if start else "start"}) + "\n")

    def save(step: int) -> None:
        ts.save_checkpoint(out, {"drafter": drafter.state_dict(), "optimizer": opt.state_dict(),
                                 "scheduler": sched.state_dict(), "step": step,
                                 "rng": ts.rng_state(data_gen, device), "args": arg_dict}, drafter.config)

    stop = {"flag": False}
    old_handler = None
    try:
        old_handler = signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    except ValueError:  # not the main thread: no graceful SIGTERM, checkpoints still happen
        pass

    from tqdm.auto import tqdm

    bar = tqdm(total=args.steps, initial=start, disable=args.no_progress, desc="drafter", dynamic_ncols=True)
    meter, last = Meter(), None
    tokens_per_step = args.batch_size * args.seq_len
    t0, t_start, step = time.perf_counter(), time.perf_counter(), start
    starts = _starts(tokens, trainer, args)
    finished_early = None
    try:
        for step in range(start + 1, args.steps + 1):
            if args.max_seconds and time.perf_counter() - t_start > args.max_seconds:
                finished_early = step - 1
                print(f"--max-seconds {args.max_seconds:g} reached: finishing at step {step - 1}", flush=True)
                break
            ids = td.sample_windows(tokens, args.batch_size, args.seq_len, data_gen, starts).to(device, non_blocking=True)
            anchors = td.sample_anchors(args.batch_size, args.seq_len, b, args.anchors_per_seq, data_gen).to(device)
            res = trainer.step(ids, anchors)
            opt.zero_grad(set_to_none=True)
            res.loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(drafter.parameters(), args.grad_clip)
            if args.time_schedule and args.max_seconds:
                # the further of the step and the clock sets the schedule's progress
                by_time = (time.perf_counter() - t_start) / args.max_seconds * args.steps
                mult = lr_fn(max(step - 1, int(by_time)))
                for g in opt.param_groups:
                    g["lr"] = args.lr * mult
            used_lr = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            meter.add(res)
            bar.update(1)
            if step % args.log_every == 0 or step == args.steps:
                dt = time.perf_counter() - t0
                rec = {"step": step, **meter.summary(), "lr": used_lr,
                       "grad_norm": float(gnorm), "tokens_per_s": meter.n * tokens_per_step / max(dt, 1e-9)}
                if val_tokens is not None and args.val_every and step % args.val_every == 0:
                    rec["val"] = evaluate(trainer, val_tokens, args)
                with open(log_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(rec) + "\n")
                bar.set_postfix(loss=f"{rec['loss']:.3f}", acc1=f"{rec['acc'][0]:.3f}", tau=f"{rec['tau']:.2f}")
                last, meter, t0 = rec, Meter(), time.perf_counter()
            if step % args.save_every == 0 or stop["flag"]:
                save(step)
            if stop["flag"] or (args.stop_after is not None and step >= args.stop_after):
                bar.close()
                print(f"stopped at step {step} (checkpoint: {out / ts.CHECKPOINT_DIR})", flush=True)
                return {"stopped_at": step, "last": last}
    finally:
        bar.close()
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)

    elapsed = time.perf_counter() - t_start
    drafter.save_pretrained(str(out / "drafter"))
    result: dict[str, Any] = {"steps": finished_early or args.steps, "resumed_from": start, "train": last,
                              "elapsed_s": elapsed, "drafter": str(out / "drafter")}
    if val_tokens is not None:
        result["val"] = evaluate(trainer, val_tokens, args)
    with open(log_path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"step": args.steps, "event": "final", **{k: v for k, v in result.items()}}) + "\n")
    rows = [("steps", f"{start} -> {finished_early or args.steps} ({elapsed:.1f} s this run)"),
            ("drafter", f"{drafter.config.num_hidden_layers} layers, block {b}, taps {drafter.config.target_layer_ids}")]
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


def cli(argv: list[str] | None = None) -> int:
    """Entry point: bad input becomes a one-line error instead of a traceback."""
    try:
        main(argv)
    except (ts.TrainSetupError, td.DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
