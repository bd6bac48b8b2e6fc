"""Does method ``bastion`` build the original release's trees?  Both builders on identical inputs.

    git clone https://github.com/kaist-ai-osi-lab/BASTION /tmp/BASTION-release
    python -m benchmarks.bastion_fidelity --bastion-src /tmp/BASTION-release \\
        --calibration cache/calibration_cpu-..._tiny_compiled.json

The release's ``build_adaptive_best_tree_from_draft_logits`` (``tree_draft.py`` in the
``bastion`` folder of a checkout, loaded by file path as the package ``bastion_release``,
since this project's is also ``bastion``) and this project's ``bastion`` rule (the eager decoder's own tree step)
build trees from the same fp32 draft logits, root, context length, ``T_draft``,
``T_other`` and ``n_min``.  The release's latency estimator is replaced by one reading
this project's calibrated C(n, c) at the step's context (``estimate(1)`` = C(1),
``next_delta(n)`` = C(n + 1) - C(n)), so both rules see identical costs; its
``cost_model`` module (which needs ``loguru``) is never loaded.

Inputs: real drafts of the tiny pair (the draft logits of every step of a few greedy
prompts, decoded by ``bastion``) and seeded synthetic logits, each at ``n_min`` 16 and 32
and at the step's own context and two more.  A comparison is *identical* when both trees
hold the same nodes, as sets of token paths from the root; a *tie* when they differ only
in nodes whose path probability equals, to 1e-5, that of the least probable node kept
(the release sums log-probabilities in fp64 and breaks ties by insertion order, this
project in fp32 with a documented order); anything else is *different* and the exit
status is 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import types
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch

from bastion.calibration.store import Calibration
from bastion.costmodel.model import CostModel
from bastion.engines.eager import EagerDecoder
from bastion.engines.proposer import Draft
from bastion.speculative.policy import TreePolicy

TIE = 1e-5  # relative: path probabilities this close to the boundary's count as tied
N_MAX = 1024


@dataclass(frozen=True)
class Case:
    """One tree-building input: the root token, draft logits [D, V] (fp32) and the context length."""

    source: str
    root: int
    logits: torch.Tensor
    context: int


Builder = Callable[[Case, int], list[tuple[int, ...]]]  # (case, n_min) -> the tree's token paths (root: ())


def paths(tokens: list[int], parents: list[int]) -> list[tuple[int, ...]]:
    """Every node as the tuple of tokens on its path below the root (the root is ())."""
    out: list[tuple[int, ...]] = []
    for i, par in enumerate(parents):
        out.append(() if par < 0 else out[par] + (int(tokens[i]),))
    return out


def ours(decoder: EagerDecoder) -> Builder:
    """This project's ``bastion`` tree, through the eager decoder's own tree step (its policy's n_min replaced)."""
    def build(case: Case, n_min: int) -> list[tuple[int, ...]]:
        decoder.policy = TreePolicy(n_min=n_min, n_max=N_MAX, rounding="down")
        tree = decoder._tree(torch.tensor(case.root), Draft(logits=case.logits), case.context, 0.0, 2 * n_min)
        return paths(tree.tokens.tolist(), tree.parents.tolist())

    return build


def release(src: Path, cost: CostModel, t_draft: float, t_other: float) -> Builder:
    """The release's builder, loaded from a checkout, with C(n, c) from ``cost``."""
    module = load_release(src, cost)

    def build(case: Case, n_min: int) -> list[tuple[int, ...]]:
        tree = module.build_adaptive_best_tree_from_draft_logits(
            torch.tensor(case.root), case.logits[None], context_prefix_length=case.context, draft_latency_s=t_draft,
            non_verify_latency_s=t_other, cost_model_name="calibrated", cost_gpu_type="calibrated",
            min_tree_size=n_min, max_tree_size=N_MAX)
        return paths(tree.token_ids.tolist(), tree.parent_indices.tolist())

    return build


def load_release(src: Path, cost: CostModel) -> types.ModuleType:
    """``<src>/bastion/tree_draft.py`` as ``bastion_release.tree_draft``, its ``.cost_model`` a stub reading ``cost``."""
    path = Path(src) / "bastion" / "tree_draft.py"
    if not path.is_file():
        raise SystemExit(f"--bastion-src {src}: it has no tree_draft.py in a bastion folder; pass a checkout of "
                         "kaist-ai-osi-lab/BASTION (git clone https://github.com/kaist-ai-osi-lab/BASTION)")
    package = types.ModuleType("bastion_release")
    package.__path__ = [str(path.parent)]
    stub = types.ModuleType("bastion_release.cost_model")
    stub.build_verified_latency_estimator = lambda *, context_tokens, **_: Estimator(cost, int(context_tokens))
    sys.modules.update({"bastion_release": package, "bastion_release.cost_model": stub})
    spec = importlib.util.spec_from_file_location("bastion_release.tree_draft", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Estimator:
    """The release's estimator interface over this project's calibrated C(n, c) at one context."""

    def __init__(self, cost: CostModel, context: int) -> None:
        self.curve = cost.curve_at(context, N_MAX)

    def estimate(self, n: int) -> float:
        return self.curve[n]

    def next_delta(self, n: int) -> float:
        return self.curve[n + 1] - self.curve[n]


def verdict(a: list[tuple[int, ...]], b: list[tuple[int, ...]], logits: torch.Tensor) -> str:
    """``identical``, ``tie`` (the trees differ only in nodes tied with the least probable one kept) or ``different``."""
    sa, sb = set(a), set(b)
    if sa == sb:
        return "identical"
    if len(sa) != len(sb):
        return "different"
    logq = torch.log_softmax(logits.double(), dim=-1)  # [D, V]
    prob = lambda p: math.exp(sum(float(logq[d, t]) for d, t in enumerate(p)))  # noqa: E731
    odd = [prob(p) for p in sa ^ sb]  # never the root: both trees have it
    boundary = min(prob(p) for p in sa | sb if p)  # the least probable node either tree kept
    return "tie" if all(abs(x - boundary) <= TIE * boundary for x in odd) else "different"


def compare(cases: list[Case], n_mins: tuple[int, ...], a: Builder, b: Builder) -> dict[tuple[str, int], dict]:
    """Counts of identical, tied and different trees per (source, n_min), and the sizes of ``b``'s trees."""
    counts: dict[tuple[str, int], dict] = {}
    for case in cases:
        for n_min in n_mins:
            got = counts.setdefault((case.source, n_min), {"identical": 0, "tie": 0, "different": 0, "sizes": []})
            tree = b(case, n_min)
            got[verdict(a(case, n_min), tree, case.logits)] += 1
            got["sizes"].append(len(tree))
    return counts


def synthetic(count: int, depth: int, vocab: int, contexts: tuple[int, ...], seed: int = 0) -> list[Case]:
    """Seeded random draft logits from flat to peaked, each at every context."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        scale = (1.0, 3.0, 6.0, 10.0)[i % 4]
        logits = torch.randn(depth, vocab, generator=g) * scale
        root = int(torch.randint(0, vocab, (1,), generator=g))
        out += [Case(f"synthetic (scale {scale:g})", root, logits, c) for c in contexts]
    return out


def recorded(decoder: EagerDecoder, prompts: list[list[int]], new_tokens: int, contexts: tuple[int, ...]) -> list[Case]:
    """Every step's draft of greedy ``bastion`` decodes: (root, fp32 logits, context), and the same at ``contexts``."""
    seen: list[tuple[int, torch.Tensor, int]] = []
    step = decoder._tree

    def kept(root, draft, c, *a, **kw):
        seen.append((int(root), draft.logits.detach().float().clone(), int(c)))
        return step(root, draft, c, *a, **kw)

    decoder._tree = kept
    try:
        for ids in prompts:
            decoder.generate(ids, new_tokens)
    finally:
        decoder._tree = step
    return [Case(f"tiny pair, context {'own' if c is None else c}", r, x, own if c is None else c)
            for r, x, own in seen for c in (None, *contexts)]


def table(counts: dict[tuple[str, int], dict]) -> str:
    lines = ["| inputs | n_min | comparisons | identical | ties | different | tree sizes (steps) |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for (source, n_min), got in sorted(counts.items()):
        sizes = sorted(set(got["sizes"]))
        shown = ", ".join(f"{n}: {got['sizes'].count(n)}" for n in sizes)
        lines.append(f"| {source} | {n_min} | {len(got['sizes'])} | {got['identical']} | {got['tie']} | "
                     f"{got['different']} | {shown} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bastion_fidelity", description=__doc__.split("\n\n")[0])
    p.add_argument("--bastion-src", required=True, help="a checkout of kaist-ai-osi-lab/BASTION")
    p.add_argument("--calibration", required=True, help="this project's calibration file (its C(n, c), T_draft, T_other)")
    p.add_argument("--datasets", default="stdlib-heldout,humaneval-pkg")
    p.add_argument("--max-samples", type=int, default=3, help="prompts per dataset")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--synthetic", type=int, default=40, help="synthetic draft inputs")
    p.add_argument("--fixed-scale", type=float, default=1.0,
                   help="T_draft and T_other times this for both builders (larger: flatter costs, larger trees)")
    args = p.parse_args(argv)
    from bastion.data import registry as datasets
    from bastion.data.prompts import PromptBuilder
    from bastion.models import registry as models

    cal = Calibration.load(args.calibration)
    ov = cal.overheads
    target_ref, drafter_ref, _ = models.resolve("tiny")
    target = models.load_target(target_ref, torch.float32, "cpu")
    drafter = models.load_drafter(drafter_ref, torch.float32, "cpu")
    builder = PromptBuilder(models.load_tokenizer(target_ref))
    prompts = [builder.encode([], q["turns"][0]) for name in args.datasets.split(",")
               for q in datasets.load_prompts(name, args.max_samples, seed=datasets.DEFAULT_SEED)]
    decoder = EagerDecoder(target, "bastion", drafter, TreePolicy(n_min=16, n_max=N_MAX), cal.cost_model, ov)
    cases = recorded(decoder, prompts, args.max_new_tokens, (256, 2048))
    cases += synthetic(args.synthetic, drafter.block_size - 1, int(target.config.vocab_size), (64, 512, 2048))
    ov = replace(ov, t_draft=ov.t_draft * args.fixed_scale, t_other=ov.t_other * args.fixed_scale)
    decoder = EagerDecoder(target, "bastion", drafter, TreePolicy(n_min=16, n_max=N_MAX), cal.cost_model, ov)
    counts = compare(cases, (16, 32), release(Path(args.bastion_src), cal.cost_model, ov.t_draft, ov.t_other),
                     ours(decoder))
    print(f"T_draft {ov.t_draft * 1e3:.3f} ms, T_other {ov.t_other * 1e3:.3f} ms, n_max {N_MAX}\n")
    print(table(counts))
    return 1 if any(got["different"] for got in counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
