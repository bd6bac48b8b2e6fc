"""Self-distillation data for drafter training: the target's own continuations.

A drafter is judged on the target's *own* outputs (greedy at T = 0, samples at T > 0),
not on human text.  Training it on corpus text with the target's per-position labels is
off-policy: wherever the target would have written something else, the prefix the
drafter conditions on never occurs at decode time.  So, like the DFlash recipe, we let
the target write the training text: random corpus windows as prompts, followed by the
target's greedy (and some sampled) continuations.

    python -m dflash.distill_data --target T --data train.npy --out distill.npy \\
        --prompts 16384 --prompt-len 128 --new-tokens 256 --batch-size 1024

With ``--prompt-file`` (a .jsonl of ``{"turns": [text]}`` records, e.g. function headers
from ``tools/tiny_pair/train_prompts.py``) the prompts are those texts instead, every one
continued greedily, plus ``--sampled-copies`` x a random ``--sample-frac`` of them sampled
at T = 1.  Prompts of different lengths share a batch through left padding (sorted by
length, so padding stays small); each document is written unpadded.
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
    deadline: float | None = None,
) -> list[np.ndarray]:
    """Prompt + continuation per row; greedy for most rows, T = 1 samples for ``sample_frac``.

    Past ``deadline`` (a ``time.monotonic()`` value) no new batch starts, so a time-boxed
    run keeps what it generated instead of being killed with nothing saved.
    """
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    docs: list[np.ndarray] = []
    n_sampled = int(round(sample_frac * len(prompts)))
    for start in range(0, len(prompts), batch_size):
        if deadline is not None and time.monotonic() > deadline:
            break
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


def load_prompt_file(path: str, tokenizer, max_len: int) -> list[np.ndarray]:
    """Token ids of each record's first turn (no special tokens), at most ``max_len`` long."""
    import json

    texts = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                texts.append(json.loads(line)["turns"][0])
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [np.asarray(x, dtype=np.int64) for x in ids if 0 < len(x) <= max_len]


@torch.no_grad()
def continue_ragged(
    model,
    prompts: list[np.ndarray],
    sampled: list[bool],
    new_tokens: int,
    batch_size: int,
    pad_id: int,
    eos_id: int | None,
    seed: int,
    deadline: float | None = None,
) -> list[np.ndarray | None]:
    """Like ``continue_prompts`` for prompts of different lengths (left padding, mask).

    Returns prompt + continuation per prompt, in the input order; a continuation is cut
    at the first EOS.  Greedy prompts go first; past ``deadline`` no new batch starts and
    the prompts not reached get ``None`` (never without a deadline).
    """
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    docs: list[np.ndarray | None] = [None] * len(prompts)
    for mode in (False, True):
        idx = sorted((i for i in range(len(prompts)) if sampled[i] == mode), key=lambda i: len(prompts[i]))
        kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if mode else dict(do_sample=False)
        for start in range(0, len(idx), batch_size):
            if deadline is not None and time.monotonic() > deadline:
                break
            rows = idx[start : start + batch_size]
            width = max(len(prompts[i]) for i in rows)
            ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
            att = torch.zeros((len(rows), width), dtype=torch.long)
            for r, i in enumerate(rows):
                p = torch.as_tensor(prompts[i])
                ids[r, width - len(p) :] = p
                att[r, width - len(p) :] = 1
            out = model.generate(
                input_ids=ids.to(device), attention_mask=att.to(device), max_new_tokens=new_tokens,
                min_new_tokens=new_tokens, pad_token_id=pad_id, **kwargs,
            ).cpu().numpy()
            for r, i in enumerate(rows):
                cont = out[r, width:]
                if eos_id is not None:
                    hit = np.nonzero(cont == eos_id)[0]
                    if hit.size:
                        cont = cont[: hit[0]]
                docs[i] = np.concatenate([prompts[i], cont])
    return docs


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dflash.distill_data", description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="target folder or HF repo id")
    ap.add_argument("--data", help=".npy of corpus token ids (prompt source for random windows)")
    ap.add_argument("--prompt-file", help=".jsonl of {turns: [text]} prompts, used instead of random windows")
    ap.add_argument("--sampled-copies", type=int, default=1,
                    help="with --prompt-file: each of the --sample-frac prompts is also sampled this many times")
    ap.add_argument("--max-prompt-tokens", type=int, default=512, help="with --prompt-file: skip longer prompts")
    ap.add_argument("--out", required=True, help="output .npy: documents joined by EOS")
    ap.add_argument("--prompts", type=int, default=16384)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--sample-frac", type=float, default=0.25, help="fraction of prompts continued by T=1 sampling")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="start no new batch after this many seconds of generation and save what is done (0: no limit)")
    return ap


def _from_prompt_file(args: argparse.Namespace, model, eos: int | None,
                      deadline: float | None) -> tuple[list[np.ndarray], int, int]:
    """Continue every prompt of ``--prompt-file`` greedily, and a sampled share of them by T=1 sampling.

    Returns (documents, prompt tokens in them, prompts planned).
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.target)
    base = load_prompt_file(args.prompt_file, tok, args.max_prompt_tokens)
    rng = np.random.default_rng(args.seed)
    pick = rng.permutation(len(base))[: int(round(args.sample_frac * len(base)))]
    plist = base + [base[i] for i in pick for _ in range(args.sampled_copies)]
    flags = [False] * len(base) + [True] * (len(plist) - len(base))
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else (eos if eos is not None else 0)
    got = continue_ragged(model, plist, flags, args.new_tokens, args.batch_size, pad, eos, args.seed, deadline)
    docs = [d for d in got if d is not None]
    return docs, sum(len(p) for p, d in zip(plist, got) if d is not None), len(plist)


def _from_windows(args: argparse.Namespace, model, eos: int | None,
                  deadline: float | None) -> tuple[list[np.ndarray], int, int]:
    """Continue random windows of the ``--data`` corpus; returns (documents, prompt tokens, prompts planned)."""
    tokens = np.load(args.data)
    prompts = sample_prompts(tokens, args.prompts, args.prompt_len, eos, np.random.default_rng(args.seed))
    docs = continue_prompts(model, prompts, args.new_tokens, args.batch_size, args.sample_frac, eos, args.seed,
                            deadline)
    return docs, prompts.shape[1] * len(docs), len(prompts)


def main(argv: Sequence[str] | None = None) -> int:
    from transformers import AutoModelForCausalLM

    ap = build_parser()
    args = ap.parse_args(argv)
    if not 0.0 <= args.sample_frac <= 1.0:
        ap.error(f"--sample-frac must be in [0, 1], got {args.sample_frac}")
    if not args.prompt_file and not args.data:
        ap.error("give --data (random windows) or --prompt-file")
    dtype = (torch.bfloat16 if args.device.startswith("cuda") else torch.float32) if args.dtype == "auto" else getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).to(args.device).eval()
    eos = model.config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    t0 = time.perf_counter()
    deadline = time.monotonic() + args.max_seconds if args.max_seconds > 0 else None
    docs, n_prompt, planned = (_from_prompt_file if args.prompt_file else _from_windows)(args, model, eos, deadline)
    if not docs:
        print(f"error: --max-seconds {args.max_seconds} ended generation before the first batch", file=sys.stderr)
        return 1
    sep = [] if eos is None else [eos]
    flat = np.concatenate([np.concatenate([d, sep]) for d in docs]).astype(np.int32)
    np.save(args.out, flat)
    gen = sum(len(d) for d in docs) - n_prompt
    dt = time.perf_counter() - t0
    print(f"distill: {len(docs)} documents (of {planned}), {gen:,} generated tokens, {flat.size:,} total, {dt:.1f}s ({gen / dt:,.0f} tok/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
