"""Train the tiny pair's target: a small Qwen3ForCausalLM, from scratch, on the stdlib corpus.

The target only has to be a real language model whose predictions are worth drafting
for; a few million parameters trained for minutes on CPython's ``Lib/`` is enough, and
keeps the whole speculative-decoding experiment runnable without downloads.

Inputs: ``--corpus`` (``train.txt``, ``valid.txt``, ``heldout.txt``; documents separated by
``<|endoftext|>``) and ``--tokenizer`` (a fast tokenizer folder from ``tokenizer.py``).
Token ids are cached as ``<out>/tokens/<split>.npy`` (each document followed by EOS) and
packed into non-overlapping windows of ``--seq-len``; every step draws random windows.

Outputs in ``--out``: ``target/`` (bf16 safetensors + tokenizer, loadable offline with
``AutoModelForCausalLM`` / ``AutoTokenizer``), ``metrics.json`` (train / valid / held-out
perplexity, throughput) and ``train_log.jsonl``.

Usage::

    python -m tools.tiny_pair.train_target --corpus /work/tiny_build/corpus \\
        --tokenizer /work/tiny_build/tokenizer --out /work/tiny_build/target_run \\
        --steps 2000 --batch-size 64 --seq-len 512
    # size a run first: time a few steps and print tokens/s, then exit
    python -m tools.tiny_pair.train_target ... --tokens-per-second
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from tools.tiny_pair.target_data import WindowSampler, load_split, pack
from tools.tiny_pair.target_model import build_model, evaluate, lm_loss

SPLITS = ("train", "valid", "heldout")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Train the tiny Qwen3 target from scratch.")
    p.add_argument("--corpus", required=True, help="folder with train.txt, valid.txt, heldout.txt")
    p.add_argument("--tokenizer", required=True, help="HF fast tokenizer folder")
    p.add_argument("--out", required=True)
    g = p.add_argument_group("model")
    g.add_argument("--hidden-size", type=int, default=256)
    g.add_argument("--layers", type=int, default=6)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--head-dim", type=int, default=64)
    g.add_argument("--kv-heads", type=int, default=2)
    g.add_argument("--intermediate-size", type=int, default=768)
    g.add_argument("--max-position-embeddings", type=int, default=2048)
    g.add_argument("--rope-theta", type=float, default=10000.0)
    g.add_argument("--rms-norm-eps", type=float, default=1e-6)
    g = p.add_argument_group("training")
    g.add_argument("--steps", type=int, default=1000)
    g.add_argument("--batch-size", type=int, default=32)
    g.add_argument("--seq-len", type=int, default=512)
    g.add_argument("--lr", type=float, default=2e-3)
    g.add_argument("--min-lr-ratio", type=float, default=0.1)
    g.add_argument("--warmup-steps", type=int, help="default: 5%% of --steps")
    g.add_argument("--weight-decay", type=float, default=0.1)
    g.add_argument("--grad-clip", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g = p.add_argument_group("runtime")
    g.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    g.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                   help="autocast dtype: auto = bf16 on GPU, fp32 on CPU")
    g.add_argument("--compile", action="store_true", help="torch.compile the model")
    g.add_argument("--log-every", type=int, default=20)
    g.add_argument("--val-every", type=int, default=0, help="validation loss every N steps (0: end only)")
    g.add_argument("--eval-max-tokens", type=int, default=0,
                   help="cap tokens per split in evaluation (0: the whole split)")
    g.add_argument("--train-eval-tokens", type=int, default=524288,
                   help="tokens of train.txt used for the final train perplexity (0: all)")
    g.add_argument("--tokens-per-second", action="store_true",
                   help="benchmark: time --bench-steps steps, print tokens/s and the projected run time, exit")
    g.add_argument("--bench-steps", type=int, default=10)
    g.add_argument("--no-progress", action="store_true")
    return p


def _table(rows: list[tuple[str, str]]) -> None:
    w = max(len(k) for k, _ in rows)
    print("-" * (w + 44))
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    print("-" * (w + 44), flush=True)


class _Run:
    """One training run: the model (and its compiled forward), the optimiser with its warm-up and
    cosine schedule, and the sampler of training windows, on one device."""

    def __init__(self, args: argparse.Namespace, model, windows, device) -> None:
        import torch

        self.args, self.model, self.windows, self.device = args, model, windows, device
        self.amp_dtype = {"auto": torch.bfloat16 if device.type == "cuda" else None, "bf16": torch.bfloat16,
                          "fp32": None}[args.precision]
        self.forward = torch.compile(model) if args.compile else model
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
        self.warmup = args.warmup_steps if args.warmup_steps is not None else max(1, args.steps // 20)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, self.lr_mult)
        self.sampler = WindowSampler(windows["train"].shape[0], args.seed)
        self.tokens_per_step = args.batch_size * args.seq_len

    def lr_mult(self, step: int) -> float:
        """Linear warm-up, then a cosine down to ``min_lr_ratio``."""
        args = self.args
        if step < self.warmup:
            return (step + 1) / self.warmup
        prog = min(1.0, (step - self.warmup) / max(1, args.steps - self.warmup))
        return args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * prog))

    def autocast(self):
        import torch

        dtype = self.amp_dtype or torch.float32
        return torch.autocast(self.device.type, dtype=dtype, enabled=self.amp_dtype is not None)

    def step(self) -> float:
        """One optimiser step on a batch of random training windows; returns its loss."""
        import torch

        rows = self.sampler.take(self.args.batch_size)
        ids = self.windows["train"][rows].to(self.device, non_blocking=True)  # [B, T]
        with self.autocast():
            loss = lm_loss(self.forward, ids)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.grad_clip)
        self.opt.step()
        self.sched.step()
        return float(loss.detach())

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def evaluate(self, split: str, max_tokens: int = 0) -> float:
        return evaluate(self.model, self.windows[split], self.args.batch_size, self.device, self.autocast, max_tokens)


def _rate(run: _Run, n_params: int, train_tokens: int) -> dict[str, Any]:
    """``--tokens-per-second``: time ``--bench-steps`` steps after a warm-up one and project the run."""
    args = run.args
    run.step()  # warm-up (allocator, kernels, compile)
    run.sync()
    t = time.perf_counter()
    for _ in range(args.bench_steps):
        run.step()
    run.sync()
    dt = (time.perf_counter() - t) / args.bench_steps
    res = {"tokens_per_s": run.tokens_per_step / dt, "s_per_step": dt, "params": n_params,
           "projected_s": dt * args.steps, "device": str(run.device)}
    _table([("params", f"{n_params:,}"), ("device", str(run.device)),
            ("batch x seq", f"{args.batch_size} x {args.seq_len}"),
            ("s/step", f"{dt:.4f}"), ("tokens/s", f"{res['tokens_per_s']:,.0f}"),
            ("projected", f"{res['projected_s']:.1f} s for --steps {args.steps} "
                          f"({args.steps * run.tokens_per_step / train_tokens:.1f} epochs)")])
    return res


def _train(run: _Run, log_path: Path) -> tuple[float, dict[str, Any]]:
    """Every step, a record of the running loss every ``--log-every`` (with the validation loss every
    ``--val-every``) into ``log_path``; returns (training seconds, the last record)."""
    from tqdm.auto import tqdm

    args = run.args
    log = open(log_path, "w", encoding="utf-8")
    bar = tqdm(total=args.steps, disable=args.no_progress, desc="target", dynamic_ncols=True)
    t_start = t_log = time.perf_counter()
    run_loss, run_n = 0.0, 0
    rec: dict[str, Any] = {}
    try:
        for step in range(1, args.steps + 1):
            run_loss += run.step()
            run_n += 1
            bar.update(1)
            if step % args.log_every == 0 or step == args.steps:
                now = time.perf_counter()
                rec = {"step": step, "loss": run_loss / run_n, "lr": run.sched.get_last_lr()[0],
                       "tokens_per_s": run_n * run.tokens_per_step / max(now - t_log, 1e-9), "epoch": run.sampler.epoch}
                if args.val_every and step % args.val_every == 0:
                    rec["valid_loss"] = run.evaluate("valid", args.eval_max_tokens)
                log.write(json.dumps(rec) + "\n")
                log.flush()
                bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:.0f}")
                run_loss, run_n, t_log = 0.0, 0, time.perf_counter()
    finally:
        bar.close()
        log.close()
    run.sync()
    return time.perf_counter() - t_start, rec


def _metrics(run: _Run, splits: dict, n_params: int, train_s: float) -> dict[str, Any]:
    """Each split's loss and perplexity (capped at ``--eval-max-tokens``, the training split also at
    ``--train-eval-tokens``), with the run's size and speed."""
    args = run.args

    def cap(split: str) -> int:
        caps = [c for c in (args.eval_max_tokens, args.train_eval_tokens if split == "train" else 0) if c]
        return min(caps) if caps else 0

    losses = {s: run.evaluate(s, cap(s)) for s in SPLITS}
    seen = args.steps * run.tokens_per_step
    return {
        "steps": args.steps, "params": n_params, "train_seconds": train_s,
        "tokens_seen": seen, "epochs": seen / len(splits["train"]),
        "tokens_per_s": seen / max(train_s, 1e-9), "device": str(run.device),
        "split_tokens": {s: int(len(v)) for s, v in splits.items()},
        "eval_tokens": {s: cap(s) or int(len(v)) for s, v in splits.items()},
        **{f"{s}_loss": v for s, v in losses.items()},
        **{f"{s}_ppl": math.exp(min(v, 50.0)) for s, v in losses.items()},
        "args": vars(args),
    }


def _save(model, tokenizer, eos_id: int, target_dir: Path) -> None:
    """The target in bf16 safetensors (the only format Transformers 5 writes) with its tokenizer."""
    import torch

    model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = eos_id
    model.save_pretrained(str(target_dir))
    tokenizer.save_pretrained(str(target_dir))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    import torch
    from transformers import AutoTokenizer

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tok_dir = Path(args.tokenizer)
    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
    eos_id = tokenizer.eos_token_id
    if eos_id is None:
        raise SystemExit(f"tokenizer {tok_dir} has no EOS token; the corpus separator needs one")
    t_tok = time.perf_counter()
    splits = {s: load_split(Path(args.corpus), s, tokenizer, tok_dir, out / "tokens") for s in SPLITS}
    t_tok = time.perf_counter() - t_tok
    windows = {s: pack(ids, args.seq_len) for s, ids in splits.items()}
    print("tokens: " + ", ".join(f"{s} {len(v):,}" for s, v in splits.items())
          + f" ({t_tok:.1f} s incl. tokenization/cache)", flush=True)

    torch.manual_seed(args.seed)
    model = build_model(args, len(tokenizer), eos_id).to(device).train()
    n_params = sum(p.numel() for p in model.parameters())
    run = _Run(args, model, windows, device)
    if args.tokens_per_second:
        return _rate(run, n_params, len(splits["train"]))
    train_s, rec = _train(run, out / "train_log.jsonl")
    metrics = _metrics(run, splits, n_params, train_s)
    target_dir = out / "target"
    _save(model, tokenizer, eos_id, target_dir)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    _table([("params", f"{n_params:,}"), ("steps", f"{args.steps} ({metrics['epochs']:.2f} epochs)"),
            ("train time", f"{train_s:.1f} s ({metrics['tokens_per_s']:,.0f} tokens/s on {device})"),
            ("last train loss", f"{rec.get('loss', float('nan')):.4f}"),
            *[(f"{s} ppl", f"{metrics[f'{s}_ppl']:.3f} (loss {metrics[f'{s}_loss']:.4f})") for s in SPLITS],
            ("saved", str(target_dir))])
    return metrics


if __name__ == "__main__":
    main()
    sys.exit(0)
