"""Load the bundled tiny pair and generate 128 tokens with each method, timing both.

    python -m benchmarks.tiny_latency [--device cpu] [--tokens 128]
"""

from __future__ import annotations

import argparse
import time

import torch

from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.engines.eager import EagerDecoder
from bastion.models import registry as models
from bastion.speculative.policy import TreePolicy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--budget", type=int, default=16, help="BASTION tree size (no calibration needed)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    target = models.load_target(str(models.tiny_dir("target")), torch.float32, args.device)
    drafter = models.load_drafter(str(models.tiny_dir("drafter")), torch.float32, args.device)
    tok = models.load_tokenizer(str(models.tiny_dir("target")))
    load_s = time.perf_counter() - t0
    prompt = PromptBuilder(tok).encode([], datasets.load_prompts("stdlib-heldout")[0]["turns"][0])
    print(f"load: {load_s:.2f} s (prompt {len(prompt)} tokens, torch threads {torch.get_num_threads()})")
    outs = {}
    for method in ("ar", "dflash", "bastion"):
        dec = EagerDecoder(target, method, drafter if method != "ar" else None, TreePolicy(budget=args.budget))
        t0 = time.perf_counter()
        res = dec.generate(prompt, args.tokens, stop_token_ids=[tok.eos_token_id])
        dt = time.perf_counter() - t0
        outs[method] = res.output_ids
        tau = sum(res.acceptance_lengths) / max(len(res.steps), 1)
        print(f"{method:>8}: {len(res.output_ids)} tokens in {dt:.2f} s ({len(res.output_ids) / dt:.0f} tok/s), tau {tau:.2f}")
    print("identical outputs:", outs["ar"] == outs["dflash"] == outs["bastion"])


if __name__ == "__main__":
    main()
