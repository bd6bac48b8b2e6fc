"""Where a decode step of the bundled tiny pair goes, per phase, on the engine you name.

Real weights and real prompts (the stdlib-heldout set), so acceptance is the pair's own;
every phase is timed with a device synchronisation on both sides (``collect_stats``), so
the phases add up to the step.  Fixed BASTION budgets need no calibration.

    python -m benchmarks.tiny_phases --engine compiled --threads 1 \\
        --methods ar:,dflash:,bastion:8,bastion:16,bastion:32
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.speculative.policy import TreePolicy

PHASES = ("t_draft", "t_tree", "t_verify", "t_accept", "t_commit")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="compiled", choices=("eager", "static", "compiled"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on a CPU (0: leave torch's default)")
    ap.add_argument("--prompts", type=int, default=2, help="measured prompts (after one warm-up prompt)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--methods", default="ar:,dflash:,bastion:8,bastion:16,bastion:32",
                    help="method:budget pairs; an empty budget for ar and dflash")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    target = models.load_target(str(models.tiny_dir("target")), dtype, args.device)
    drafter = models.load_drafter(str(models.tiny_dir("drafter")), dtype, args.device)
    tok = models.load_tokenizer(str(models.tiny_dir("target")))
    engine = Engine(args.engine, target, drafter, n_max=256)
    builder = PromptBuilder(tok)
    prompts = [builder.encode([], p["turns"][0]) for p in datasets.load_prompts("stdlib-heldout")[: args.prompts + 1]]
    print(f"engine {args.engine}, {args.device}, torch threads {torch.get_num_threads()}, "
          f"{args.prompts} prompts x {args.tokens} tokens; ms per step")
    print(f"{'method':<12} {'tau':>5} {'step':>7} " + " ".join(f"{p[2:]:>7}" for p in PHASES))
    for item in args.methods.split(","):
        method, _, budget = item.partition(":")
        decoder = engine.decoder(method, TreePolicy(budget=int(budget) if budget else 16))
        decoder.generate(prompts[0], 32, stop_token_ids=[])  # warm-up
        steps, tokens = [], 0
        for p in prompts[1:]:
            res = decoder.generate(p, args.tokens, stop_token_ids=[], collect_stats=True)
            steps += res.steps
            tokens += len(res.output_ids)
        phases = [1e3 * statistics.mean(getattr(s, k) for s in steps) for k in PHASES]
        label = method + (f" b{budget}" if budget else "")
        print(f"{label:<12} {tokens / len(steps):>5.2f} {sum(phases):>7.2f} " + " ".join(f"{v:>7.2f}" for v in phases))
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    rc = main()
    print(f"({time.perf_counter() - t0:.0f} s)")
    raise SystemExit(rc)
