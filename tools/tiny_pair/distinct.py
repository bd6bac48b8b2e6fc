"""Repetitiveness of a target's greedy continuations: the distinct-4-gram ratio.

Each prompt of a ``{"turns": [text]}`` .jsonl is continued greedily for ``--new-tokens``
tokens (fp32, left-padded batches, cut at EOS); the report gives, over all continuations,
unique 4-grams / all 4-grams of token ids (pooled), and the mean of the per-continuation
ratios.  Higher is less repetitive.

    python -m tools.tiny_pair.distinct --target dflash/assets/tiny/target --prompts bastion/data/stdlib-heldout.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch


def distinct_ngrams(seqs: list[list[int]], n: int = 4) -> tuple[float, float]:
    """(pooled ratio, mean per-sequence ratio) of distinct n-grams; sequences shorter than n are skipped."""
    pooled: set[tuple[int, ...]] = set()
    total = 0
    per: list[float] = []
    for s in seqs:
        grams = [tuple(s[i : i + n]) for i in range(len(s) - n + 1)]
        if not grams:
            continue
        total += len(grams)
        pooled.update(grams)
        per.append(len(set(grams)) / len(grams))
    return (len(pooled) / total if total else 0.0), (float(np.mean(per)) if per else 0.0)


def main(argv=None) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, ".")
    from dflash.distill_data import continue_ragged, load_prompt_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args(argv)
    tok = AutoTokenizer.from_pretrained(args.target)
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    prompts = load_prompt_file(args.prompts, tok, 10_000)
    eos = tok.eos_token_id
    # generate() with min_new_tokens keeps EOS out; cut at EOS afterwards as in distillation
    docs = continue_ragged(model, prompts, [False] * len(prompts), args.new_tokens, args.batch_size, eos, eos, 0)
    conts = [d[len(p) :].tolist() for p, d in zip(prompts, docs)]
    pooled, mean = distinct_ngrams(conts, 4)
    print(json.dumps({"target": args.target, "prompts": len(prompts), "new_tokens": args.new_tokens,
                      "distinct4_pooled": round(pooled, 4), "distinct4_mean": round(mean, 4),
                      "mean_len": round(float(np.mean([len(c) for c in conts])), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
