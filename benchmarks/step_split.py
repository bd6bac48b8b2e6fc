"""Per-step time split (draft, tree build, verify, accept, commit) versus tree size.

Random weights: acceptance is ~1 token per step, so these are per-step costs, not
speedups.  Every phase is timed with a device synchronisation on both sides.

    python -m benchmarks.step_split --shape qwen3-8b --device cuda --contexts 512,4096 \\
        --sizes 32,64,128,256,512,1024 --json step_split.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from bastion.engines.eager import EagerDecoder
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
from benchmarks.shapes import random_pair

PHASES = ("t_draft", "t_tree", "t_verify", "t_accept", "t_commit")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-8b")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--contexts", default="512,4096")
    ap.add_argument("--sizes", default="32,64,128,256,512,1024")
    ap.add_argument("--steps", type=int, default=20, help="measured steps per point (after 4 warm-up steps)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    t0 = time.perf_counter()
    model, drafter = random_pair(args.shape, device, dtype)
    target = Target(model)
    print(f"# {args.shape} random weights, {dtype}, {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}, "
          f"torch {torch.__version__}; built in {time.perf_counter() - t0:.1f}s", flush=True)
    gen = torch.Generator().manual_seed(0)
    warm = torch.randint(0, model.config.vocab_size - 2, (64,), generator=gen).tolist()
    EagerDecoder(target, "bastion", drafter, TreePolicy(budget=64)).generate(warm, 8)  # kernels, allocator
    rows = []
    for ctx in (int(c) for c in args.contexts.split(",")):
        prompt = torch.randint(0, model.config.vocab_size - 2, (ctx,), generator=gen).tolist()
        cases = [("ar", None)] + [("bastion", int(n)) for n in args.sizes.split(",")]
        for method, n in cases:
            dec = EagerDecoder(target, method, drafter if method != "ar" else None, TreePolicy(budget=n) if n else None)
            res = dec.generate(prompt, args.steps + 5, collect_stats=True)
            steps = res.steps[4:]
            row = {"context": ctx, "method": method, "tree_size": n or 1, "steps": len(steps)}
            for ph in PHASES:
                row[ph + "_ms"] = 1e3 * statistics.median(getattr(s, ph) for s in steps)
            row["overhead_ms"] = row["t_tree_ms"] + row["t_accept_ms"] + row["t_commit_ms"]
            row["step_ms"] = sum(row[p + "_ms"] for p in PHASES)
            rows.append(row)
            print(json.dumps(row), flush=True)
    head = f"{'ctx':>5} {'method':>8} {'n':>5} {'draft':>7} {'tree':>7} {'verify':>7} {'accept':>7} {'commit':>7} {'tree+acc+com':>12} {'step':>7}"
    print(head)
    for r in rows:
        print(f"{r['context']:>5} {r['method']:>8} {r['tree_size']:>5} {r['t_draft_ms']:>7.2f} {r['t_tree_ms']:>7.2f} "
              f"{r['t_verify_ms']:>7.2f} {r['t_accept_ms']:>7.2f} {r['t_commit_ms']:>7.2f} {r['overhead_ms']:>12.2f} {r['step_ms']:>7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"argv": sys.argv, "torch": torch.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
