"""How well the drafter's path probabilities predict acceptance: the budget rule's surrogate, checked.

    python -m benchmarks.draft_calibration --budget 64 -- --model tiny --dataset prompts.jsonl \\
        --max-new-tokens 128 --engine eager

Everything after ``--`` goes to ``python -m bastion.benchmark`` (BASTION only, the given
fixed budget, so every step verifies the same number of ranked paths).  The eager decoder's
path ranking and acceptance are observed from outside: each verified node's path
probability (the product of its depths' draft probabilities, what the rule sums) and
whether the target accepted it.  Printed: predicted probability against the accepted
fraction, by probability band and by node rank, and the τ a tree of the first ``b`` paths
would have had (a node's acceptance depends only on its ancestors, so every smaller
budget's tree is a prefix of this one).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import bastion.engines.eager as eager
import bastion.speculative.tree as tree_mod
from bastion import benchmark

BANDS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.01)
RANKS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 63))


def observe(bench_args: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Decode, returning one (path probabilities [n - 1], accepted [n - 1]) pair per step."""
    steps: list[tuple[np.ndarray, np.ndarray]] = []
    last: dict[str, np.ndarray] = {}
    rank_paths, accept = tree_mod.top_paths, eager.accept

    def ranked(logq, m):
        out = rank_paths(logq, m)
        last["logp"] = out[0].double().cpu().numpy()
        return out

    def accepted(tree, proposals):
        result = accept(tree, proposals)
        match = tree.tokens == proposals[tree.parents.clamp(min=0)]
        match[0] = True
        ok = ~(tree.ancestors & ~match[None, :]).any(dim=1)  # the node's whole root path matches
        steps.append((np.exp(last["logp"][: tree.size - 1]), ok[1:].cpu().numpy()))
        return result

    tree_mod.top_paths, eager.accept = ranked, accepted
    try:
        if benchmark.main(bench_args) != 0:
            raise SystemExit("the benchmark failed (its error is above)")
    finally:
        tree_mod.top_paths, eager.accept = rank_paths, accept
    return steps


def report(steps: list[tuple[np.ndarray, np.ndarray]], budget: int) -> str:
    p = np.concatenate([s[0] for s in steps])
    ok = np.concatenate([s[1] for s in steps]).astype(float)
    rank = np.concatenate([np.arange(1, len(s[0]) + 1) for s in steps])
    lines = [f"{len(steps)} steps, {len(p)} verified draft nodes", "",
             "| predicted p | nodes | mean predicted | accepted |", "|---|---:|---:|---:|"]
    for lo, hi in zip(BANDS, BANDS[1:]):
        m = (p >= lo) & (p < hi)
        if m.any():
            lines.append(f"| {lo:.2f}–{min(hi, 1.0):.2f} | {m.sum()} | {p[m].mean():.3f} | {ok[m].mean():.3f} |")
    lines += ["", "| node rank | mean predicted | accepted |", "|---|---:|---:|"]
    for lo, hi in RANKS:
        m = (rank >= lo) & (rank <= hi)
        if m.any():
            lines.append(f"| {lo}–{hi} | {p[m].mean():.3f} | {ok[m].mean():.3f} |")
    taus = [f"{b}: {np.mean([1 + s[1][: b - 1].sum() for s in steps]):.2f}" for b in (4, 8, 12, 16, 24, 32, 48, 64)
            if b <= budget]
    lines += ["", "τ of the first b nodes' tree: " + ", ".join(taus)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, default=64, help="fixed tree size every step verifies")
    args = p.parse_args(argv[:split])
    rest = argv[split + 1:]
    if "--engine" in rest and rest[rest.index("--engine") + 1] != "eager":
        raise SystemExit("error: only --engine eager is observed (the static engine ranks inside its graphs)")
    steps = observe(rest + ["--methods", "bastion", "--budget", str(args.budget), "--n-max", str(args.budget),
                            "--engine", "eager", "--quiet"])
    print(report(steps, args.budget))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
