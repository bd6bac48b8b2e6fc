"""The CPU's best-first walk gives the vectorised path's trees: the same paths, count and tree.

:mod:`bastion.speculative.best_first` replaces, on a CPU, ranking with
:func:`top_paths`, counting with :func:`count_nodes` and building with
:func:`paths_tree`.  Checked here against those (their torch references, which the GPU
runs) on random drafts, cost curves and policies, including drafts with many exact ties
(the tie order is the subtle part) and counts that go to the bucket above.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from bastion.speculative.best_first import tree_arrays, walk
from bastion.speculative.path_rank import _rank_torch
from bastion.speculative.policy import ROUNDINGS, TreePolicy
from bastion.speculative.rule import count_nodes
from bastion.speculative.tree import paths_tree


def _draft(rng: np.random.Generator, d: int, k: int, ties: bool) -> torch.Tensor:
    """[D, K] fp32 log-probabilities, each row sorted descending; ``ties``: values on a coarse grid."""
    x = -np.sort(rng.exponential(rng.uniform(0.2, 3.0), size=(d, k)), axis=1)
    x[:, 0] = -rng.exponential(0.3, size=d)
    x = -np.sort(-np.minimum(x, x[:, :1]), axis=1)
    if ties:
        x = np.round(x * 4) / 4
    return torch.tensor(x, dtype=torch.float32)


def _curve(rng: np.random.Generator, size: int) -> torch.Tensor:
    incr = rng.exponential(10 ** rng.uniform(-5, -2), size - 1) * (rng.random(size - 1) < 0.7)
    return torch.tensor(np.concatenate([[0.0], rng.uniform(1e-3, 3e-2) + np.cumsum(incr)]), dtype=torch.float64)


def _reference(logq, tok, m, policy, curve, fixed):
    """What the GPU does: rank m paths, count with the rule, build the tree of the bucketed count."""
    logp, depth, local, par_local, rank = _rank_torch(logq, m)
    got = logp.shape[0]
    if policy.budget is not None:
        count = min(policy.budget, got + 1)
    else:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("BASTION_RANK", "torch")
            count = int(count_nodes(logp, policy, curve, fixed))
    return got, count, logp, (lambda n: paths_tree(torch.tensor(7), tok, depth, local, par_local, rank, n, m + 1))


CASES = list(itertools.product((1, 3, 7, 15), (1, 2, 5, 31), (False, True)))


@pytest.mark.parametrize("d,k,ties", CASES)
def test_walk_gives_the_vectorised_count_and_tree(d, k, ties):
    rng = np.random.default_rng(d * 100 + k * 2 + ties)
    raised = 0
    for trial in range(12):
        logq = _draft(rng, d, k, ties)
        tok = torch.tensor(rng.integers(2, 4096, size=(d, k)), dtype=torch.long)
        n_min = int(rng.choice([1, 2, 4, 8, 16]))
        n_max = int(max(n_min, rng.choice([8, 16, 32, 64])))
        m = int(min(n_max - 1, rng.choice([3, 7, 15, 31, 63])))
        m = max(m, 1)
        budget = None if trial % 4 else int(rng.integers(1, n_max + 1))
        policy = TreePolicy(n_min=n_min, n_max=n_max, budget=budget, rounding=ROUNDINGS[trial % 3])
        if budget is not None:
            m = max(budget - 1, 1)
        curve = _curve(rng, n_max + 2)
        fixed = float(rng.uniform(0, 2e-2))
        got, count, logp, build = _reference(logq, tok, m, policy, curve, fixed)
        w = walk(logq.tolist(), got, policy, None if budget is not None else curve.tolist(), fixed)
        assert w.count == count, (trial, n_min, n_max, m, budget)
        popped = len(w.parents) - 1
        assert popped <= got and popped >= min(count, got + 1) - 1
        assert w.logp[1:] == logp[:popped].tolist()  # the same paths, in the same order, to the bit
        if count % max(n_min, 1) == 0 and count > n_min and budget is None and policy.neighbour:
            raised += 1
        n = count if budget is not None or policy.rounding is None or count < n_min else (count // n_min) * n_min
        ref = build(n)
        tokens, parents, depths, ancestors = tree_arrays(w, tok.numpy(), 7, n)
        assert tokens.tolist() == ref.tokens.tolist()
        assert parents.tolist() == ref.parents.tolist()
        assert depths.tolist() == ref.depths.tolist()
        assert ancestors.tolist() == ref.ancestors.tolist()


def test_walk_stops_where_the_rule_stops():
    """A confident first depth and a steep curve: the count is n_min, and only that many paths are popped."""
    logq = torch.log_softmax(torch.randn(15, 4096, generator=torch.Generator().manual_seed(0)) * 4, -1).topk(31).values
    curve = torch.linspace(0, 1, 66, dtype=torch.float64).tolist()
    curve[0] = 0.0
    w = walk(logq.tolist(), 31, TreePolicy(n_min=16, n_max=64), curve, 0.01)
    assert w.count == 16 and len(w.parents) == 17  # 15 forced paths and the one that failed
