"""Self-distillation data for drafter training: the target's own continuations.

A drafter is judged on the target's *own* outputs (greedy at T = 0, samples at T > 0),
not on human text.  Training it on corpus text with the target's per-position labels is
off-policy: wherever the target would have written something else, the prefix the
drafter conditions on never occurs at decode time.  So, like the DFlash recipe, we let
the target write the training text: random corpus windows as prompts, followed by the
target's greedy (and some sampled) continuations.

    python -m dflash.distill_data --target T --data train.npy --out distill.npy \\
        --prompts 16384 --prompt-len 128 --new-tokens 256 --batch-size 1024
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

import numpy as np
import torch


def sample_prompts(tokens: np.ndarray, n: int, length: int, eos_id: int | None, rng: np.random.Generator) -> np.ndarray:
    """``n`` random windows of ``length`` tokens, avoiding windows that cross a document end."""
    if len(tokens) <= length:
        raise ValueError(f"the data holds {len(tokens)} tokens, fewer than --prompt-len {length}")
    out = np.empty((n, length), dtype=np.int64)
    filled = 0
    while filled < n:
        starts = rng.integers(0, len(tokens) - length, size=2 * (n - filled))
        for s in starts:
            win = tokens[s : s + length]
            if eos_id is not None and (win == eos_id).any():
                continue
            out[filled] = win
            filled += 1
            if filled == n:
                break
    return out


@torch.no_grad()
def continue_prompts(
    model,
    prompts: np.ndarray,  # [N, P]
    new_tokens: int,
    batch_size: int,
    sample_frac: float,
    eos_id: int | None,
    seed: int,
) -> list[np.ndarray]:
    """Prompt + continuation per row; greedy for most rows, T = 1 samples for ``sample_frac``."""
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    docs: list[np.ndarray] = []
    n_sampled = int(round(sample_frac * len(prompts)))
    for start in range(0, len(prompts), batch_size):
        chunk = torch.as_tensor(prompts[start : start + batch_size], device=device)
        sampled = start >= len(prompts) - n_sampled
        kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if sampled else dict(do_sample=False)
        out = model.generate(
            input_ids=chunk,
            attention_mask=torch.ones_like(chunk),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=eos_id if eos_id is not None else 0,
            **kwargs,
        ).cpu().numpy()  # [B, P + new]
        for row in out:
            cont = row[prompts.shape[1] :]
            if eos_id is not None:
                hit = np.nonzero(cont == eos_id)[0]
                if hit.size:
                    cont = cont[: hit[0]]
            docs.append(np.concatenate([row[: prompts.shape[1]], cont]))
    return docs


def main(argv: Sequence[str] | None = None) -> int:
    from transformers import AutoModelForCausalLM

    ap = argparse.ArgumentParser(prog="python -m dflash.distill_data", description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="target folder or HF repo id")
    ap.add_argument("--data", required=True, help=".npy of corpus token ids (prompt source)")
    ap.add_argument("--out", required=True, help="output .npy: documents joined by EOS")
    ap.add_argument("--prompts", type=int, default=16384)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--sample-frac", type=float, default=0.25, help="fraction of prompts continued by T=1 sampling")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    args = ap.parse_args(argv)
    if not 0.0 <= args.sample_frac <= 1.0:
        ap.error(f"--sample-frac must be in [0, 1], got {args.sample_frac}")
    dtype = (torch.bfloat16 if args.device.startswith("cuda") else torch.float32) if args.dtype == "auto" else getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).to(args.device).eval()
    eos = model.config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    tokens = np.load(args.data)
    t0 = time.perf_counter()
    prompts = sample_prompts(tokens, args.prompts, args.prompt_len, eos, np.random.default_rng(args.seed))
    docs = continue_prompts(model, prompts, args.new_tokens, args.batch_size, args.sample_frac, eos, args.seed)
    sep = [] if eos is None else [eos]
    flat = np.concatenate([np.concatenate([d, sep]) for d in docs]).astype(np.int32)
    np.save(args.out, flat)
    gen = sum(len(d) for d in docs) - prompts.size
    dt = time.perf_counter() - t0
    print(f"distill: {len(docs)} documents, {gen:,} generated tokens, {flat.size:,} total, {dt:.1f}s ({gen / dt:,.0f} tok/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
