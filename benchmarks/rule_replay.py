"""Tree-size rules replayed exactly at T = 0: how much any budget rule could gain, and what each one does.

    OMP_NUM_THREADS=1 python -m benchmarks.rule_replay --calibration results/<hw>/tiny/calibration.json \\
        [--step-ms 2:12.4,4:14.6,8:16.7,16:19.3,32:23.6] [--ar-ms 5.4]

At T = 0 a step's outcome depends only on where it starts: the target's greedy output is
fixed, and so is the drafter's draft at each position.  So this decodes each prompt once
with a draft at every position (BASTION at a fixed budget of one node: every step drafts
and commits one token), keeps each position's draft logits, and then replays any tree-size
rule exactly, step by step from the first position, without decoding again: the ranked
tree of n nodes at a position accepts what its paths share with the greedy output.  Each
replayed step commits what decoding's step at that position commits
(tests/test_benchmarks_rule_replay.py); the last positions, whose drafts reach past the
output, are left out.

Rules replayed: fixed budgets; ``bastion`` (the paper's count, rounded down to multiples of
``n_min``); ``bastion_plus`` as on a CPU at T = 0 (the count from ``--plus-floor`` in steps
of one); and ``oracle``, the size with the most tokens per second at each step knowing what
it accepts: an upper bound for any rule that sizes trees from the same ranked paths.

A step's seconds come from the calibration (the rule's own ``T_fixed + C(n, c)``), and with
``--step-ms`` also from measured step times by tree size (interpolated; e.g. the ms/step
of ``benchmarks.policy_ab --variants ar,fixed=2,...``), which is where a smooth cost curve and
the device part ways.  Speedups are over an AR step (``--ar-ms``, or the calibration's).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from benchmarks.rule_inputs import spy
from bastion.calibration.store import Calibration
from bastion.costmodel.model import rule_inputs
from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.speculative.best_first import tree_arrays, walk
from bastion.speculative.policy import TreePolicy
from bastion.speculative.rule import bucket_size, count_nodes
from bastion.speculative.tree import draft_topk

WIDEST = 64  # the largest tree replayed (nodes, root included)


@dataclass
class Position:
    """One start position: its ranked paths' probabilities and what each tree size commits."""

    context: int
    logp: torch.Tensor  # [WIDEST - 1] path log-probabilities, best first (fp32 sums, as the engines')
    tau: np.ndarray  # [WIDEST] tokens a tree of n = 1.. nodes commits (index n - 1)


def positions(engine: Engine, prompt: list[int], new: int) -> list[Position]:
    """Every position's draft, ranked and matched against the greedy output (one drafted step a token)."""
    trees: list = []
    dec = engine.decoder("bastion", TreePolicy(budget=1))
    spy(dec, engine, trees)
    res = dec.generate(prompt, new, 0.0, ())
    out, found = res.output_ids, []
    for k, (step, (logits, *_)) in enumerate(zip(res.steps, trees)):
        depth = logits.shape[0]
        if k + 1 + depth > len(out):  # the greedy output ends before this draft does
            break
        logq, tok = draft_topk(logits, 1.0, WIDEST)
        w = walk(logq.tolist(), WIDEST - 1, TreePolicy(budget=WIDEST), None, 0.0)
        tokens, parents, depths, _ = tree_arrays(w, tok.numpy(), out[k], WIDEST)
        hit = np.zeros(WIDEST, dtype=bool)
        hit[0] = True
        for i in range(1, WIDEST):  # parents come first
            hit[i] = hit[parents[i]] and tokens[i] == out[k + depths[i]]
        tau = 1 + np.maximum.accumulate(np.where(hit, depths, 0))
        found.append(Position(step.context, torch.tensor(w.logp[1:WIDEST], dtype=torch.float32), tau))
    return found


Rule = Callable[[Position, Callable[[int], float]], int]


def counted(policy: TreePolicy, cal: Calibration, which: str) -> Rule:
    """A budget rule's tree size, counted as the engines count it on a CPU."""
    model, fixed = rule_inputs(cal.cost_model, cal.overheads, which)

    def size(pos: Position, _cost) -> int:
        n = int(count_nodes(pos.logp, policy, model.curve(pos.context, WIDEST), fixed))
        return bucket_size(n, policy)
    return size


def oracle(pos: Position, cost: Callable[[int], float]) -> int:
    """The size with the most tokens per second at this step, knowing what each size accepts."""
    return max(range(1, WIDEST + 1), key=lambda n: pos.tau[n - 1] / cost(n))


def replay(found: list[list[Position]], rule: Rule, cost: Callable[[Position, int], float]) -> tuple[float, ...]:
    """(x AR, τ, mean nodes) over every prompt, each replayed from its first position; ``cost(pos, 0)``
    is an AR step's seconds there."""
    tokens = seconds = ar = nodes = steps = 0.0
    for prompt in found:
        k = 0
        while k < len(prompt):
            pos = prompt[k]
            n = rule(pos, lambda m, p=pos: cost(p, m))
            got = pos.tau[n - 1]
            tokens, seconds, ar = tokens + got, seconds + cost(pos, n), ar + got * cost(pos, 0)
            nodes, steps = nodes + n, steps + 1
            k += int(got)
    return ar / seconds, tokens / steps, nodes / steps


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rule_replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--calibration", required=True, help="the CPU calibration at T = 0 (the rules' costs)")
    p.add_argument("--datasets", default="humaneval-pkg,stdlib-heldout")
    p.add_argument("--max-samples", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--budgets", default="4,8,12,16,20,24,32")
    p.add_argument("--n-min", type=int, default=16, help="bastion's n_min (its buckets)")
    p.add_argument("--plus-floor", default="1,16", help="bastion_plus floors to replay")
    p.add_argument("--step-ms", default="", help="measured ms a step by tree size, 'n:ms,...' (interpolated)")
    p.add_argument("--ar-ms", type=float, default=None, help="an AR step's measured ms (with --step-ms)")
    return p.parse_args(argv)


def step_costs(args: argparse.Namespace, cal: Calibration) -> dict[str, Callable[[Position, int], float]]:
    """Each cost source: seconds of a drafted step of n nodes at a position (n = 0: an AR step)."""
    model, fixed = rule_inputs(cal.cost_model, cal.overheads, "plus")

    def modelled(pos: Position, n: int) -> float:
        if n == 0:
            return cal.overheads.ar_step(cal.cost_model, pos.context)
        return fixed + model.curve_at(pos.context, WIDEST)[n]  # Python floats, cached per size: no tensor a call
    costs = {"calibration": modelled}
    if args.step_ms:
        if args.ar_ms is None:
            raise SystemExit("--step-ms needs --ar-ms, an AR step's ms measured with it")
        pts = sorted((int(a), float(b) * 1e-3) for a, b in (x.split(":") for x in args.step_ms.split(",")))
        xs, ys = [a for a, _ in pts], [b for _, b in pts]
        costs["measured"] = lambda pos, n: args.ar_ms * 1e-3 if n == 0 else float(np.interp(n, xs, ys))
    return costs


def rules(args: argparse.Namespace, cal: Calibration) -> dict[str, Rule]:
    out: dict[str, Rule] = {f"fixed {b}": (lambda pos, cost, b=int(b): b) for b in args.budgets.split(",")}
    out["bastion"] = counted(TreePolicy(n_min=args.n_min, n_max=WIDEST, rounding="down"), cal, "paper")
    for floor in args.plus_floor.split(","):
        out[f"bastion_plus from {floor}"] = counted(TreePolicy(n_min=int(floor), n_max=WIDEST, rounding=None), cal, "plus")
    out["oracle"] = oracle
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    cal = Calibration.load(args.calibration)
    cal.check_temperature(0.0, args.calibration)
    target_ref, drafter_ref, _ = models.resolve("tiny")
    target = models.load_target(target_ref, torch.float32, "cpu")
    drafter = models.load_drafter(drafter_ref, torch.float32, "cpu")
    builder = PromptBuilder(models.load_tokenizer(target_ref))
    engine = Engine("eager", target, drafter, n_max=WIDEST)
    found = {name: [positions(engine, builder.encode([], p["turns"][0]), args.max_new_tokens)
                    for p in datasets.load_prompts(name, args.max_samples, seed=datasets.DEFAULT_SEED)]
             for name in args.datasets.split(",")}
    print("| costs | rule | " + " | ".join(f"{name} x AR | τ | nodes" for name in found) + " | mean x AR |")
    print("|---|---|" + "---:|---:|---:|" * len(found) + "---:|")
    for source, cost in step_costs(args, cal).items():
        for label, rule in rules(args, cal).items():
            cells, speed = [], []
            for prompts in found.values():
                x_ar, tau, nodes = replay(prompts, rule, cost)
                speed.append(x_ar)
                cells.append(f"{x_ar:.3f} | {tau:.2f} | {nodes:.1f}")
            print(f"| {source} | {label} | " + " | ".join(cells) + f" | {np.mean(speed):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
