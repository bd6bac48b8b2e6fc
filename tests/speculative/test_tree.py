"""Draft-tree construction and the compiled tree buffers (acceptance: test_accept.py).

The vectorised builder (``build_tree``) is checked against the literal best-first heap
(``build_tree_heap``) and against brute-force definitions written here: top-n of all
paths, the adaptive stopping rule of the tree.py docstring, and the ancestor matrix walked
parent by parent.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings

from bastion.speculative.path_rank import top_paths
from bastion.speculative.tree import (
    Tree,
    TreePolicy,
    ancestor_matrix,
    build_tree,
    build_tree_heap,
    chain_tree,
    root_tree,
)
from tests.support.tree_cases import HAND_DEPTHS, build, cases, cost_curve, draft_logprobs, hand_tree

FAST = settings(max_examples=150, deadline=None, derandomize=True)


# ---------------------------------------------------------------------------------------
# brute-force helpers


def _path_logprob(tree: Tree, logq: torch.Tensor, i: int) -> float:
    """log-probability of node i's root path, from the draft marginals (float64)."""
    parents, tokens = tree.parents.tolist(), tree.tokens.tolist()
    lp, d = 0.0, tree.depths[i].item()
    while i != 0:
        lp += float(logq[d - 1, tokens[i]].double())
        i, d = parents[i], d - 1
    return lp


def _path_probs(tree: Tree, logq: torch.Tensor) -> list[float]:
    return [math.exp(_path_logprob(tree, logq, i)) for i in range(1, tree.size)]


def _expected_ancestors(parents: list[int]) -> torch.Tensor:
    n = len(parents)
    anc = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j != -1:
            anc[i, j] = True
            j = parents[j]
    return anc


def _num_paths(d: int, k: int) -> int:
    return sum(k**e for e in range(1, d + 1))


def _best_excluded(tree: Tree, logq: torch.Tensor, k: int) -> float | None:
    """Probability of the most probable path (top-k tokens per depth) that is not in the tree."""
    d_max = logq.shape[0]
    ranked = logq.topk(k, dim=-1).indices.tolist()  # [D, k]
    children: dict[int, set[int]] = {}
    for i in range(1, tree.size):
        children.setdefault(tree.parents[i].item(), set()).add(tree.tokens[i].item())
    best = None
    for u in range(tree.size):
        d = tree.depths[u].item()
        if d >= d_max:
            continue
        free = [t for t in ranked[d] if t not in children.get(u, set())]
        if free:
            p = math.exp((_path_logprob(tree, logq, u) if u else 0.0) + float(logq[d, free[0]].double()))
            best = p if best is None else max(best, p)
    return best


def _rule(n: int, p: float, big_p: float, curve: list[float], fixed: float, n_min: int) -> tuple[bool, float, float]:
    """(n < n_min, lhs, rhs) of the tree.py rule for a candidate p joining a tree of n nodes."""
    return n < n_min, p * (fixed + curve[n]), big_p * (curve[n + 1] - curve[n])


# ---------------------------------------------------------------------------------------
# build_tree == build_tree_heap, and the structural invariants


@settings(max_examples=400, deadline=None, derandomize=True)
@given(cases())
def test_vectorised_equals_heap(case):
    tokens, parents = build_tree_heap(case["root"], case["logq"], case["policy"], case["curve"], case["fixed"])
    plain = build(case)
    hinted = build(case, case["hint"])
    assert plain.tokens.tolist() == tokens
    assert plain.parents.tolist() == parents
    assert hinted.tokens.tolist() == tokens
    assert hinted.parents.tolist() == parents


@FAST
@given(cases())
def test_tree_invariants(case):
    tree = build(case, case["hint"])
    logq, policy = case["logq"], case["policy"]
    d_max, v = logq.shape
    n = tree.size
    tokens, parents, depths = tree.tokens.tolist(), tree.parents.tolist(), tree.depths.tolist()
    assert len(tokens) == len(parents) == len(depths) == n >= 1
    assert tree.tokens.dtype == tree.parents.dtype == tree.depths.dtype == torch.long
    # root
    assert tokens[0] == case["root"] and parents[0] == -1 and depths[0] == 0
    # parents first, depth chain, depth bound
    for i in range(1, n):
        assert 0 <= parents[i] < i
        assert depths[i] == depths[parents[i]] + 1
        assert 1 <= depths[i] <= d_max
    # siblings carry distinct tokens, all drawn from the top-k of their depth
    k = min(policy.topk, v)
    top = logq.topk(k, dim=-1).indices.tolist()
    seen = set()
    for i in range(1, n):
        assert (parents[i], tokens[i]) not in seen
        seen.add((parents[i], tokens[i]))
        assert tokens[i] in top[depths[i] - 1]
    # ancestor matrix: exactly the root path, lower triangular in node order
    expected = _expected_ancestors(parents)
    assert tree.ancestors.dtype == torch.bool and tree.ancestors.shape == (n, n)
    assert torch.equal(tree.ancestors, expected)
    assert torch.equal(tree.ancestors, tree.ancestors.tril())
    assert bool(tree.ancestors.diagonal().all())
    # best-first order: path probabilities never increase along the node order
    probs = _path_probs(tree, logq)
    assert all(a >= b * (1 - 1e-5) for a, b in zip(probs, probs[1:]))
    # size rules
    if policy.budget is not None:
        kk = min(policy.topk, v, max(policy.budget - 1, 1))
        assert n == min(policy.budget, 1 + _num_paths(d_max, kk))
    else:
        total = 1 + _num_paths(d_max, k)
        assert n <= policy.n_max
        assert n >= min(policy.n_min, total)  # the rule always admits candidates while n < n_min
        if policy.rounding is not None:
            if total < policy.n_min:
                assert n == total
            else:
                assert n % policy.n_min == 0


@settings(max_examples=120, deadline=None, derandomize=True)
@given(cases(max_d=3, max_v=6, force_full_topk=True))
def test_kept_nodes_are_the_top_paths(case):
    """Brute force: the kept non-root nodes are the n-1 most probable of ALL paths."""
    tree = build(case, case["hint"])
    logq = case["logq"].double()
    d_max, v = logq.shape
    all_paths = []
    for d in range(1, d_max + 1):
        for toks in itertools.product(range(v), repeat=d):
            all_paths.append(math.exp(sum(float(logq[j, t]) for j, t in enumerate(toks))))
    all_paths.sort(reverse=True)
    kept = sorted(_path_probs(tree, case["logq"]), reverse=True)
    assert len(kept) == tree.size - 1 <= len(all_paths)
    np.testing.assert_allclose(kept, all_paths[: len(kept)], rtol=1e-5)
    # and nothing excluded beats anything kept
    if kept and len(kept) < len(all_paths):
        assert all_paths[len(kept)] <= kept[-1] * (1 + 1e-5)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(cases(adaptive=True, rounding=None))
def test_adaptive_rule_holds_then_fails(case):
    """Unbucketed adaptive size n: the rule admitted every node and rejects the next candidate."""
    tree = build(case, case["hint"])
    policy, logq, fixed = case["policy"], case["logq"], case["fixed"]
    curve = case["curve"].double().tolist()
    n = tree.size
    probs = _path_probs(tree, logq)  # p of node 1..n-1, in join order
    tol = 1e-4
    big_p = 1.0
    for j, p in enumerate(probs, start=1):  # node j joined a tree of j nodes
        small, lhs, rhs = _rule(j, p, big_p, curve, fixed, policy.n_min)
        assert small or lhs > rhs - tol * max(lhs, rhs), (j, p, big_p)
        big_p += p
    assert n <= policy.n_max
    if n < policy.n_max:
        k = min(policy.topk, logq.shape[1])
        nxt = _best_excluded(tree, logq, k)
        if nxt is not None:  # a candidate n+1 exists, so the rule must have rejected it
            small, lhs, rhs = _rule(n, nxt, big_p, curve, fixed, policy.n_min)
            assert not small, "growth stopped below n_min although candidates remain"
            assert lhs <= rhs + tol * max(lhs, rhs), (n, nxt, big_p)
        else:
            assert n - 1 == _num_paths(logq.shape[0], k)


@pytest.mark.parametrize("rounding", ["down", "best-neighbour"])
def test_bucketing_rounds_adaptive_size_down(rounding):
    logq = draft_logprobs(7, 5, 20, 1.0)
    curve = 1.0 + 1e-12 * torch.arange(52, dtype=torch.float64)  # nearly flat: every candidate helps
    curve[0] = 0.0
    free = build_tree(torch.tensor(0), logq, TreePolicy(n_min=8, n_max=50, rounding=None), curve, 0.01)
    bucketed = build_tree(torch.tensor(0), logq, TreePolicy(n_min=8, n_max=50, rounding=rounding), curve, 0.01)
    assert free.size == 50
    assert bucketed.size == 48  # the bucket above, 56, is past n_max: both roundings go down
    assert bucketed.tokens.tolist() == free.tokens.tolist()[:48]
    assert bucketed.parents.tolist() == free.parents.tolist()[:48]


@pytest.mark.parametrize("rounding", ["down", "best-neighbour"])
def test_the_rounding_of_the_count(rounding):
    """``down``: the multiple of n_min at or below the rule's count, always (the paper's release).
    ``best-neighbour``: the one beside it with the higher P / (T_fixed + C), not always the lower.

    Brute force: the unrounded tree's size n*, the buckets lo <= n* < hi, P(k) from every
    ranked path's probability.  With ``best-neighbour`` the tree must be ``hi`` exactly when
    hi can be formed (within n_max and the paths that exist) and its rate is higher, else
    ``lo``; with ``down`` always ``lo`` (n* itself under n_min); and it must be the best
    ``size - 1`` paths, as the heap oracle builds it.
    """
    ups = downs = 0
    for seed in range(150):
        n_min, n_max = (8, 16)[seed % 2], 64 + seed % 50
        logq = draft_logprobs(seed, 6, 30, 0.5 + (seed % 7) / 2)
        curve, fixed = cost_curve(seed + 1000, n_max)
        free = build(dict(root=0, logq=logq, policy=TreePolicy(n_min=n_min, n_max=n_max, rounding=None), curve=curve,
                           fixed=fixed))
        policy = TreePolicy(n_min=n_min, n_max=n_max, rounding=rounding)
        tree = build(dict(root=0, logq=logq, policy=policy, curve=curve, fixed=fixed), hint=seed % 40 + 1)
        logp = top_paths(logq.topk(min(policy.topk, 30), dim=-1).values, n_max - 1)[0].double()
        total = torch.cat([torch.ones(1, dtype=torch.float64), logp.exp()]).cumsum(0)  # P(k) = total[k - 1]
        c = curve.double()
        lo = free.size // n_min * n_min
        hi = lo + n_min
        if rounding == "best-neighbour" and lo >= n_min and lo < free.size and hi <= min(n_max, logp.shape[0] + 1) \
                and total[hi - 1] / (fixed + c[hi]) > total[lo - 1] / (fixed + c[lo]):
            expected, ups = hi, ups + 1
        else:
            expected = lo if free.size >= n_min else free.size
            downs += lo < free.size
        assert tree.size == expected, (seed, free.size, tree.size)
        tokens, parents = build_tree_heap(0, logq, policy, curve, fixed)
        assert (tree.tokens.tolist(), tree.parents.tolist()) == (tokens, parents)
    assert downs > 10, downs
    assert ups > 10 if rounding == "best-neighbour" else ups == 0, ups  # both outcomes exercised where they exist


def test_the_policy_names_an_unknown_rounding():
    with pytest.raises(ValueError, match="unknown rounding 'up'; choose from down, best-neighbour, None"):
        TreePolicy(rounding="up")


def test_adaptive_tree_needs_acost_curve():
    with pytest.raises(ValueError, match="cost curve"):
        build_tree(torch.tensor(0), draft_logprobs(0, 3, 5, 1.0), TreePolicy())


@pytest.mark.parametrize(
    "kwargs", [dict(n_min=0), dict(n_min=5, n_max=4), dict(topk=0), dict(topk=129), dict(budget=0)]
)
def test_policy_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        TreePolicy(**kwargs)


# ---------------------------------------------------------------------------------------
# hand-made trees


def test_chain_tree_and_positions():
    tree = chain_tree(torch.tensor(5), torch.tensor([1, 2, 3]))
    assert tree.tokens.tolist() == [5, 1, 2, 3]
    assert tree.parents.tolist() == [-1, 0, 1, 2]
    assert tree.depths.tolist() == [0, 1, 2, 3]
    assert torch.equal(tree.ancestors, torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]).bool())
    assert (10 + tree.depths).tolist() == [10, 11, 12, 13]  # verification positions: context length + depth
    # the chain equals the general compilation of the same parent vector
    depths, anc = ancestor_matrix(tree.parents, 3)
    assert torch.equal(depths, tree.depths) and torch.equal(anc, tree.ancestors)


def test_root_tree():
    tree = root_tree(torch.tensor(42))
    assert tree.size == 1
    assert tree.tokens.tolist() == [42] and tree.parents.tolist() == [-1] and tree.depths.tolist() == [0]
    assert tree.ancestors.tolist() == [[True]]
    assert tree.tokens.dtype == torch.long


def test_ancestor_matrix_hand_made():
    tree = hand_tree()
    assert tree.depths.tolist() == HAND_DEPTHS
    rows = {i: set(torch.nonzero(tree.ancestors[i]).flatten().tolist()) for i in range(8)}
    assert rows == {0: {0}, 1: {0, 1}, 2: {0, 2}, 3: {0, 1, 3}, 4: {0, 1, 4}, 5: {0, 1, 3, 5}, 6: {0, 2, 6},
                    7: {0, 2, 6, 7}}
    assert (100 + tree.depths).tolist() == [100, 101, 101, 102, 102, 103, 102, 103]
    # a larger max_depth than needed changes nothing
    d2, a2 = ancestor_matrix(tree.parents, 6)
    assert torch.equal(d2, tree.depths) and torch.equal(a2, tree.ancestors)


def test_ancestor_matrix_children_before_parents():
    # node 1 is the child of node 3, which is the child of node 2 (order not parent-first)
    parents = torch.tensor([-1, 3, 0, 2])
    depths, anc = ancestor_matrix(parents, 3)
    assert depths.tolist() == [0, 3, 1, 2]
    assert torch.equal(anc, _expected_ancestors(parents.tolist()))


# ---------------------------------------------------------------------------------------
# one tie order for the fast builder and the heap oracle; the rule in fp64


def _tied_logprobs(seed: int, d: int, v: int) -> torch.Tensor:
    """Log-probabilities with many exact ties: each row holds a few distinct levels, repeated."""
    g = torch.Generator().manual_seed(seed)
    levels = torch.randint(0, 3, (d, v), generator=g).float()  # 0, 1, 2 -> weights 1, 2, 4
    return torch.log_softmax(levels * math.log(2.0), dim=-1)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("rank", ["walk", "torch"])
def test_tied_inputs_give_identical_trees(seed, rank, monkeypatch):
    """Both of build_tree's paths (the CPU's best-first walk, the torch references a GPU runs) against the oracle."""
    if rank == "torch":
        monkeypatch.setenv("BASTION_RANK", "torch")
    d, v = 3 + seed % 4, 6 + seed % 5
    logq = _tied_logprobs(seed, d, v)
    curve, fixed = cost_curve(seed, 96)
    policies = [TreePolicy(budget=b, rounding=None) for b in (5, 17, 40, 96)]
    policies += [TreePolicy(n_min=n_min, n_max=96, rounding=None) for n_min in (1, 4, 16)]
    for policy in policies:
        adaptive = policy.budget is None
        tokens, parents = build_tree_heap(7, logq, policy, curve if adaptive else None, fixed)
        for hint in (None, 3):
            tree = build_tree(torch.tensor(7), logq, policy, curve if adaptive else None, fixed, search_hint=hint)
            assert tree.tokens.tolist() == tokens, (policy, hint)
            assert tree.parents.tolist() == parents, (policy, hint)


def test_all_equal_paths_follow_the_documented_tie_order():
    """Uniform drafts: every path of a depth ties; shallower first, then parent order, then token rank."""
    logq = torch.full((3, 4), math.log(0.25))
    tree = build_tree(torch.tensor(0), logq, TreePolicy(budget=1 + 4 + 6, rounding=None))
    tokens, parents = build_tree_heap(0, logq, TreePolicy(budget=1 + 4 + 6, rounding=None))
    assert tree.tokens.tolist() == tokens and tree.parents.tolist() == parents
    top = logq.topk(4, dim=-1).indices.tolist()
    assert tree.depths.tolist() == [0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]
    assert tree.parents.tolist()[5:] == [1, 1, 1, 1, 2, 2]  # the first depth-1 node's children first
    assert tree.tokens.tolist()[5:9] == top[1]


def test_rule_differences_in_fp64():
    """C(n+1) - C(n) below fp32's resolution of C: the fp64 rule rejects what fp32 would accept."""
    n_max = 40
    curve = 1.0 + 1e-9 * torch.arange(n_max + 2, dtype=torch.float64)
    curve[0] = 0.0
    assert bool((curve[2:].float() == curve[1:-1].float()).all())  # flat in fp32: every candidate pays
    logq = torch.full((2, 8), math.log(1e-11))
    policy = TreePolicy(n_min=2, n_max=n_max, rounding=None)
    # p * (T + C(n)) ~ 1e-11 < P * 1e-9: rejected as soon as n >= n_min
    assert build_tree(torch.tensor(0), logq, policy, curve, 0.0).size == 2
    assert len(build_tree_heap(0, logq, policy, curve, 0.0)[0]) == 2
    assert build_tree(torch.tensor(0), logq, policy, curve.float(), 0.0).size == n_max  # what an fp32 rule builds
