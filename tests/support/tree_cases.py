"""Random and hand-made draft trees for the tree and acceptance tests of tests/speculative."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

from bastion.speculative.policy import ROUNDINGS
from bastion.speculative.tree import Tree, TreePolicy, build_tree


def draft_logprobs(seed: int, d: int, v: int, scale: float) -> torch.Tensor:
    """Continuous random log-probabilities [D, V] (no ties with probability one)."""
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(d, v, generator=g, dtype=torch.float32) * scale, dim=-1)


def cost_curve(seed: int, n_max: int) -> tuple[torch.Tensor, float]:
    """A random non-decreasing C(n) for n = 0..n_max+1 (float32, like CostModel.curve) and T_fixed."""
    rng = np.random.default_rng(seed)
    intercept = 10 ** rng.uniform(-3, 0)
    step = 10 ** rng.uniform(-5, -1)
    incr = rng.exponential(step, n_max + 1) * (rng.random(n_max + 1) < rng.uniform(0.2, 1.0))
    curve = np.concatenate([[0.0], intercept + np.cumsum(incr)])
    fixed = 0.0 if rng.random() < 0.2 else float(10 ** rng.uniform(-3, 0))
    return torch.tensor(curve, dtype=torch.float32), fixed


@st.composite
def cases(draw, max_d: int = 7, max_v: int = 40, force_full_topk: bool = False, adaptive=None, rounding="any"):
    """One tree build's inputs: a random draft [D, V], a fixed budget or the adaptive rule with a random
    cost curve, a search hint and a root token."""
    seed = draw(st.integers(0, 2**31 - 1))
    d = draw(st.integers(1, max_d))
    v = draw(st.integers(2, max_v))
    scale = draw(st.floats(0.3, 4.0))
    topk = v if force_full_topk else draw(st.integers(1, min(v, 128)))
    is_adaptive = draw(st.booleans()) if adaptive is None else adaptive
    use_rounding = draw(st.sampled_from(ROUNDINGS)) if rounding == "any" else rounding
    curve, fixed = None, 0.0
    if is_adaptive:
        n_min = draw(st.integers(1, 16))
        n_max = draw(st.integers(n_min, 120))
        policy = TreePolicy(n_min=n_min, n_max=n_max, topk=topk, rounding=use_rounding)
        curve, fixed = cost_curve(seed + 1, n_max)
        limit = n_max
    else:
        budget = draw(st.integers(1, 80))
        policy = TreePolicy(topk=topk, rounding=use_rounding, budget=budget)
        limit = budget
    hint = draw(st.none() | st.integers(1, limit))
    root = draw(st.integers(0, v - 1))
    return dict(logq=draft_logprobs(seed, d, v, scale), policy=policy, curve=curve, fixed=fixed, hint=hint, root=root)


def build(case, hint=None) -> Tree:
    """The tree ``build_tree`` makes of a :func:`cases` draw."""
    return build_tree(torch.tensor(case["root"]), case["logq"], case["policy"], case["curve"], case["fixed"],
                      search_hint=hint)


# node: 0    1    2    3    4    5    6    7
# tok:  5    3    7    4    9    2    8    1
# par: -1    0    0    1    1    3    2    6
#                root(5)
#              /        \
#           1(3)        2(7)
#          /    \          \
#       3(4)    4(9)      6(8)
#        |                  |
#       5(2)               7(1)
HAND_TOKENS = [5, 3, 7, 4, 9, 2, 8, 1]
HAND_PARENTS = [-1, 0, 0, 1, 1, 3, 2, 6]
HAND_DEPTHS = [0, 1, 1, 2, 2, 3, 2, 3]


def hand_tree() -> Tree:
    return Tree.from_parents(torch.tensor(HAND_TOKENS), torch.tensor(HAND_PARENTS), max_depth=3)
