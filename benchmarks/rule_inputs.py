"""The budget rule's two inputs against reality: the acceptance surrogate, and the cost curve.

    python -m benchmarks.rule_inputs --calibration cache/calibration_cpu-..._tiny_compiled.json \\
        --datasets stdlib-heldout,humaneval-pkg --max-samples 4 --max-new-tokens 128 --temperature 0

decodes a few prompts (the tiny pair by default, fp32 on the CPU) with BASTION at fixed
budgets and with the adaptive rules (``bastion``, ``bastion_plus``) on one engine, timing
every step's phases, and prints three markdown tables:

1. per method: steps, τ (tokens committed a step), the surrogate P (the sum of the
   verified tree's path probabilities, the expected τ the rule maximises), their ratio,
   and seconds per token as measured and as the calibration predicts them;
2. for the adaptive rules, the same by tree size;
3. per tree size, a step's measured time against the cost the rules compare: the paper's
   ``T_draft + T_other + C(n, c)``, this project's ``fixed + C(n, c) + excess(n)`` (an AR
   step: ``C(1, c)`` plus its measured excess), and the rule's own work (``t_tree``: top-k,
   ranking, counting and building the tree).

P is computed from each drafted step's draft logits and verified tree at the temperature
its rule reads (the raw logits for the paper's rule and for fixed budgets, the sampling
temperature for this project's), and at the other one where they differ.  The steps of a
decode's last step, which ``--max-new-tokens`` may cut, are left out of the acceptance
columns.  The calibration is the CLI's (``python -m bastion.benchmark ... --cache-dir``
makes it, one per engine and temperature class).  Step times need a quiet machine; on a
busy one only the acceptance columns mean anything.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field

import numpy as np
import torch

from bastion.calibration.store import Calibration
from bastion.costmodel.model import rule_inputs
from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.speculative.policy import TreePolicy
from bastion.speculative.surrogate import SurrogateFit, depth_mass

SIZES = ((1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 63), (64, 8192))


@dataclass
class Step:
    """One decode step: what it verified and committed, its phase times, and the surrogate."""

    nodes: int
    context: int
    committed: int
    drafted: bool
    seconds: float
    t_tree: float
    p: float = math.nan  # the surrogate P, at the temperature the method's rule reads its draft
    mass: list[float] = field(default_factory=list)  # [D] its path probabilities summed by depth
    last: bool = False


@dataclass
class Observed:
    method: str
    steps: list[Step] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0


def surrogate(logits: torch.Tensor, tokens: list[int], parents: list[int], depths: list[int],
              t: float) -> tuple[float, list[float]]:
    """P: the root's 1 plus every node's path probability, the draft read at temperature ``t``
    (uncorrected); and those probabilities summed by depth."""
    logq = torch.log_softmax(logits.double() / t, dim=-1)  # [D, V]
    lp = [0.0] * len(tokens)
    for i in range(1, len(tokens)):
        lp[i] = lp[parents[i]] + float(logq[depths[i] - 1, tokens[i]])
    mass = depth_mass(lp[1:], depths[1:], logits.shape[0])
    return 1.0 + sum(mass), mass


def spy(dec, engine: Engine, trees: list) -> None:
    """Keep each drafted step's (draft logits, tree) in ``trees``: the eager decoder's tree, or the
    static engine's tree buffers as verification reads them (engines without CUDA graphs only)."""
    if engine.name == "eager":
        build = dec._tree

        def kept(*a, **kw):  # (root, draft, ...): the draft's logits and the tree it gave
            draft, tree = a[1], build(*a, **kw)
            trees.append((draft.logits.detach().clone(), tree.tokens.tolist(), tree.parents.tolist(),
                          tree.depths.tolist()))
            return tree

        dec._tree = kept
        return
    static = engine.static
    if static.runner.enabled:
        raise SystemExit("the surrogate is read from the steps' trees: pass --engine eager on a GPU")
    if getattr(static, "_kept", None) is trees:
        return
    verify, logits = static.verify, static.proposers["dflash"].draft_out

    def kept_verify(n, kv, greedy, taps):  # one call a step, drafted or not (the caller keeps the drafted)
        b = static.buffers
        trees.append((logits.clone(), b.tree_tokens[:n].tolist(), b.tree_parents[:n].tolist(),
                      b.tree_depths[:n].tolist()))
        return verify(n, kv, greedy, taps)

    static.verify, static._kept = kept_verify, trees


def decode(engine: Engine, method: str, policy: TreePolicy, cal: Calibration, prompts, stops, args) -> Observed:
    """Every prompt with one method (one decoder, as a run keeps it), each step timed and its surrogate computed."""
    dec = engine.decoder(method, policy, cal.cost_model, cal.overheads)
    t_rule = dec.spec.draft_temperature(args.temperature)
    out, trees = Observed(method if policy.budget is None else f"b{policy.budget}"), []
    spy(dec, engine, trees)
    for i, ids in enumerate(prompts):
        trees.clear()
        gen = torch.Generator(device=engine.target.device).manual_seed(args.seed * 1_000_003 + i)
        res = dec.generate(ids, args.max_new_tokens, args.temperature, stops, gen, collect_stats=True)
        # the static spy sees every step's verification, the eager one every drafted step's tree
        drafted = iter(trees) if engine.name == "eager" else (t for t, s in zip(trees, res.steps) if s.drafted)
        for j, s in enumerate(res.steps):
            seconds = s.t_draft + s.t_tree + s.t_verify + s.t_accept + s.t_commit
            step = Step(s.tree_size, s.context, s.committed, s.drafted, seconds, s.t_tree, last=j == len(res.steps) - 1)
            if s.drafted:
                logits, *tree = next(drafted)
                step.p, step.mass = surrogate(logits, *tree, t_rule)
            out.steps.append(step)
        out.tokens += len(res.output_ids) - 1
        out.seconds += res.decode_seconds
    return out


def modelled(cal: Calibration, rule: str, step: Step) -> float:
    """What the calibration says a step costs: an AR step, or the rule's ``T_fixed + C(n, c)``."""
    if not step.drafted:
        return cal.overheads.ar_step(cal.cost_model, step.context)
    model, fixed = rule_inputs(cal.cost_model, cal.overheads, rule)
    return fixed + model.curve_at(step.context, step.nodes)[step.nodes]


def corrected(steps: list[Step]) -> list[float]:
    """Each drafted step's P under the per-depth correction fitted over the drafted steps before it
    (this project's rule at T > 0, :mod:`bastion.speculative.surrogate`); NaN for AR steps."""
    fit, out = SurrogateFit(), []
    for s in steps:
        c = math.exp(fit.shift)
        out.append(1.0 + sum(m * c ** (d + 1) for d, m in enumerate(s.mass)) if s.drafted else math.nan)
        if s.drafted:
            fit.observe(s.mass, s.committed - 1, 0.0)
    return out


def _accept_cells(steps: list[Step], fitted: list[float]) -> str:
    """| steps | τ | P | P / τ | corrected P / τ | of the drafted steps (the last step of each decode left out)."""
    kept = [(s, f) for s, f in zip(steps, fitted) if s.drafted and not s.last]
    if not kept:
        return "| 0 | - | - | - | - |"
    tau = np.mean([s.committed for s, _ in kept])
    big_p, fixed = np.mean([s.p for s, _ in kept]), np.mean([f for _, f in kept])
    return f"| {len(kept)} | {tau:.2f} | {big_p:.2f} | {big_p / tau:.3f} | {fixed / tau:.3f} |"


def _table(head: list[str], rows: list[str]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows])


def method_table(runs: list[Observed], cal: Calibration) -> str:
    """Per method: the surrogate against τ, and seconds per token measured and modelled."""
    rows = []
    for run in runs:
        paper, plus = (1e3 * sum(modelled(cal, r, s) for s in run.steps) / run.tokens for r in ("paper", "plus"))
        rows.append(f"| {run.method} {_accept_cells(run.steps, corrected(run.steps))} {len(run.steps)} | "
                    f"{sum(not s.drafted for s in run.steps)} | {1e3 * run.seconds / run.tokens:.2f} | {paper:.2f} | "
                    f"{plus:.2f} |")
    return _table(["method", "drafted steps", "τ", "P", "P / τ", "corrected P / τ", "steps", "AR steps",
                   "ms/token measured", "modelled (paper form)", "modelled (plus form)"], rows)


def _bins(steps: list[Step]):
    for lo, hi in SIZES:
        got = [s for s in steps if lo <= s.nodes <= hi]
        if got:
            yield (f"{lo}" if lo == hi else f"{lo}-{hi}"), got


def size_table(runs: list[Observed]) -> str:
    """The adaptive rules' surrogate against τ, by the tree size they chose."""
    rows = []
    for run in (r for r in runs if r.method.startswith("bastion")):
        pairs = list(zip(run.steps, corrected(run.steps)))
        for lo, hi in SIZES:
            got = [(s, f) for s, f in pairs if s.drafted and lo <= s.nodes <= hi]
            if got:
                label = f"{lo}" if lo == hi else f"{lo}-{hi}"
                rows.append(f"| {run.method} | {label} {_accept_cells(*map(list, zip(*got)))}")
    return _table(["method", "tree size", "drafted steps", "τ", "P", "P / τ", "corrected P / τ"], rows)


def cost_table(runs: list[Observed], cal: Calibration) -> str:
    """A step's measured seconds by tree size against the two rules' cost forms, and the rule's own work."""
    steps = [s for run in runs for s in run.steps]
    rows = []
    for label, got in [("AR step (no draft)", [s for s in steps if not s.drafted]),
                       *_bins([s for s in steps if s.drafted])]:
        if not got:
            continue
        mean = lambda xs: 1e3 * float(np.mean(xs))  # noqa: E731  ms
        rows.append(f"| {label} | {len(got)} | {mean([s.seconds for s in got]):.2f} | "
                    f"{mean([modelled(cal, 'paper', s) for s in got]):.2f} | "
                    f"{mean([modelled(cal, 'plus', s) for s in got]):.2f} | {mean([s.t_tree for s in got]):.3f} |")
    return _table(["tree size", "steps", "measured ms", "paper form ms", "plus form ms", "rule's own work (t_tree) ms"],
                  rows)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rule_inputs", description=__doc__.split("\n\n")[0])
    p.add_argument("--calibration", required=True, help="the CLI's calibration file for this engine and temperature")
    p.add_argument("--model", default="tiny")
    p.add_argument("--datasets", default="stdlib-heldout,humaneval-pkg")
    p.add_argument("--max-samples", type=int, default=4, help="prompts per dataset")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--budgets", default="1,2,4,8,12,16,24,32,48,64", help="fixed budgets ('' for none)")
    p.add_argument("--methods", default="bastion,bastion_plus", help="adaptive methods")
    p.add_argument("--engine", default="compiled", choices=["eager", "static", "compiled"])
    p.add_argument("--n-min", type=int, default=None, help="default: the calibration's")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    cal = Calibration.load(args.calibration)
    cal.check_temperature(args.temperature, args.calibration)
    target_ref, drafter_ref, _ = models.resolve(args.model)
    target = models.load_target(target_ref, torch.float32, "cpu" if not torch.cuda.is_available() else "cuda")
    drafter = models.load_drafter(drafter_ref, target.dtype, target.device)
    builder = PromptBuilder(models.load_tokenizer(target_ref))
    prompts = [builder.encode([], p["turns"][0]) for name in args.datasets.split(",")
               for p in datasets.load_prompts(name, args.max_samples, seed=datasets.DEFAULT_SEED)]
    stops = builder.stop_ids(target)
    n_min = args.n_min or cal.n_min or 16
    budgets = [int(b) for b in args.budgets.split(",") if b]
    engine = Engine(args.engine, target, drafter, n_max=max([cal.max_s, *budgets]),
                    max_context=max(len(p) for p in prompts) + args.max_new_tokens + 64)
    runs = [decode(engine, "bastion", TreePolicy(n_min=n_min, budget=b), cal, prompts, stops, args) for b in budgets]
    runs += [decode(engine, m, TreePolicy(n_min=n_min, n_max=cal.max_s), cal, prompts, stops, args)
             for m in args.methods.split(",") if m]
    print(f"{args.model} on {args.datasets}, {len(prompts)} prompts x {args.max_new_tokens} tokens, "
          f"T = {args.temperature:g}, {engine.name} engine, n_min {n_min}\n")
    print("Acceptance and cost per method (τ and P over drafted steps):\n")
    print(method_table(runs, cal), "\n\nThe adaptive rules by tree size:\n")
    print(size_table(runs), "\n\nStep cost by tree size, all methods' steps:\n")
    print(cost_table(runs, cal))
    return 0


if __name__ == "__main__":
    sys.exit(main())
