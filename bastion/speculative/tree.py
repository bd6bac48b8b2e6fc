"""Draft token trees: the data structure and the budget-aware construction.

A tree is compiled once per step into flat buffers that the verifier and the acceptance
walk share: ``tokens``, ``parents``, ``depths`` and the ``ancestors`` matrix (node i may
attend to node j iff ``ancestors[i, j]``; every node is its own ancestor).  Node 0 is the
root: the last committed token, which the target has not seen yet.

Construction (BASTION).  The drafter gives position-wise marginals ``q_d`` for depths
1..D.  A path ``(r_1..r_d)`` of per-depth token ranks has probability
``prod_d q_d(r_d)``; a child never beats its parent, so growing the tree best-first is
the same as taking the top-n paths overall.  A candidate of probability ``p`` joins a
tree of ``n`` nodes whose probabilities sum to ``P`` iff

    n < n_min  or  p * (T_fixed + C(n)) > P * (C(n+1) - C(n)),

which is exactly "expected tokens per second rises": (P+p)/(T_fixed+C(n+1)) > P/(T_fixed+C(n)).
(``P`` counts the root with probability 1: it is the expected number of tokens a step
commits, bonus token included.)  Growth stops at the first failure or at ``n_max``.
The count then becomes a tree size by the policy's ``rounding``:

* ``"down"`` (the paper's release): down to a multiple of ``n_min``, so the verifier
  sees few shapes (a count under ``n_min``, when fewer candidates exist, is kept);
* ``"best-neighbour"``: to whichever multiple of ``n_min`` beside it has the higher
  expected rate P/(T_fixed + C), when the bucket above can be formed from the ranked
  candidates within ``n_max``, and down otherwise;
* ``None``: the count itself (granularity 1, where no graphs ask for few shapes).

The rule is evaluated in fp64 (C(n), C(n+1) - C(n), p and P), as in the original
release; path log-probabilities are fp32 sums of the per-depth fp32 log-probabilities.

Tie order.  Paths are ordered by log-probability, highest first; on exact ties the
shallower path first, and between tied paths of one depth the one whose parent comes
first, then the lower token rank.  (That is the stable-sort order of
:func:`~bastion.speculative.path_rank.top_paths`.)

Three implementations give the same tree, ties included: :func:`build_tree` (vectorised
top-k per depth plus a cumulative-sum form of the rule; what the decoders use on a GPU),
the best-first walk of :mod:`bastion.speculative.best_first` (what they use on a CPU,
where the vectorised form's hundreds of tiny calls cost more than the arithmetic) and
:func:`build_tree_heap` (the literal best-first heap loop; the test oracle).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from bastion.defaults import torch_references_forced
from bastion.speculative.best_first import rank_walk, tree_arrays
from bastion.speculative.path_rank import top_paths
from bastion.speculative.policy import TreePolicy
from bastion.speculative.rule import bucket_pair, bucket_size, count_nodes
from bastion.speculative.search import AdaptiveSearch
from bastion.speculative.surrogate import depth_mass


@dataclass
class Tree:
    """A compiled draft tree.  All tensors live on the decoding device."""

    tokens: torch.Tensor  # [n] long; tokens[0] is the root
    parents: torch.Tensor  # [n] long; parents[0] == -1
    depths: torch.Tensor  # [n] long; depths[0] == 0
    ancestors: torch.Tensor  # [n, n] bool; row i marks i and all its ancestors
    mass: list[float] | None = None  # [D] ranked trees: each depth's summed path probability (speculative.surrogate)

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    @classmethod
    def from_parents(cls, tokens: torch.Tensor, parents: torch.Tensor, max_depth: int,
                     ancestors_of: Callable | None = None) -> "Tree":
        """Compile ``tokens``/``parents`` (parents[0] == -1, parent before child not required);
        ``ancestors_of``: a compiled copy of :func:`ancestor_matrix` (None: the function)."""
        depths, ancestors = (ancestors_of or ancestor_matrix)(parents, max_depth)
        return cls(tokens=tokens, parents=parents, depths=depths, ancestors=ancestors)


def ancestor_matrix(parents: torch.Tensor, max_depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Depths [n] and the ancestors-or-self matrix [n, n] from a parent vector.

    Pointer doubling: column k of ``hops`` is every node's k-th ancestor (the root's
    parent is the root itself), and each round doubles the number of columns, so
    log2(max_depth) gathers mark all ancestors at once, with no host sync.
    """
    n = parents.shape[0]
    idx = torch.arange(n, device=parents.device)
    up = parents.clone()
    up[:1].fill_(0)  # fill_, not item assignment: no host-to-device copy (CUDA graph capture)
    hops = idx[:, None]  # [n, 1]
    jump = up
    while hops.shape[1] < max_depth + 1:
        hops = torch.cat([hops, jump[hops]], dim=1)  # [n, 2 * cols]: hops 0 .. 2 * cols - 1
        jump = jump[jump]
    anc = torch.zeros(n, n, dtype=torch.bool, device=parents.device)
    anc.scatter_(1, hops, True)
    return anc.sum(dim=1) - 1, anc


def chain_tree(root: torch.Tensor, draft_tokens: torch.Tensor) -> Tree:
    """The DFlash chain: root followed by the drafter's greedy block, each the next's parent."""
    tokens = torch.cat([root.view(1), draft_tokens.view(-1)])
    n = tokens.shape[0]
    parents = torch.arange(-1, n - 1, device=tokens.device)
    depths = torch.arange(n, device=tokens.device)
    ancestors = torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril_()
    return Tree(tokens=tokens, parents=parents, depths=depths, ancestors=ancestors)


def root_tree(root: torch.Tensor) -> Tree:
    """A tree with only the root: one autoregressive step."""
    return chain_tree(root, root.new_empty(0))


def topk_width(policy: TreePolicy, vocab: int) -> int:
    """Tokens considered per depth: the policy's cap, never more than the tree could hold."""
    return min(policy.topk, vocab, max(policy.limit - 1, 1))


def draft_topk(draft_logits: torch.Tensor, temperature: float, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each depth's top-``k`` tokens and their log-probabilities at the sampling temperature.

    ``draft_logits`` [D, V] -> (log-probabilities [D, k] fp32, tokens [D, k]), sorted
    descending.  The top-k is taken on the logits themselves (the same order as the
    log-probabilities).  On a GPU only the k winners are normalised, so the vocabulary is
    read twice and never written, instead of materialising [D, V] log-probabilities.  On a
    CPU the [D, V] log-softmax and a gather are cheaper than ``logsumexp``'s separate
    passes (about 35 against 85 us for the tiny pair's 15 x 4,096 logits, one thread).
    Both engines call this, so on one device their trees agree to the bit.
    """
    scale = temperature if temperature > 0 else 1.0  # greedy: the drafter's own probabilities
    vals, tok = draft_logits.topk(k, dim=-1)
    scaled = draft_logits.float() if scale == 1.0 else draft_logits.float() / scale  # x / 1 is x: skip the pass
    if draft_logits.device.type == "cpu" and not torch.compiler.is_compiling():
        return torch.log_softmax(scaled, dim=-1).gather(-1, tok), tok
    lse = torch.logsumexp(scaled, dim=-1, keepdim=True)  # [D, 1]
    return vals.float() / scale - lse, tok


def build_tree(
    root: torch.Tensor,  # 0-d long
    draft_logprobs: torch.Tensor,  # [D, V] float32 log-probabilities for depths 1..D
    policy: TreePolicy,
    cost_curve: torch.Tensor | None = None,  # [n_max + 2] seconds, C(n) at this context
    fixed_cost: float = 0.0,  # T_draft + T_other, seconds
    search_hint: int | None = None,
) -> Tree:
    """Vectorised budget-aware tree construction from log-probabilities (see the module docstring)."""
    logq, tok = draft_logprobs.topk(topk_width(policy, draft_logprobs.shape[1]), dim=-1)  # [D, K] each
    return build_tree_topk(root, logq, tok, policy, cost_curve, fixed_cost, search_hint)


def build_tree_topk(
    root: torch.Tensor,  # 0-d long
    logq: torch.Tensor,  # [D, K] float32 log-probabilities of each depth's top K, sorted descending
    tok: torch.Tensor,  # [D, K] their tokens
    policy: TreePolicy,
    cost_curve: torch.Tensor | None = None,
    fixed_cost: float = 0.0,
    search_hint: int | None = None,
) -> Tree:
    """The tree from each depth's top-K table (what :func:`draft_topk` gives).

    ``search_hint`` bounds how many paths are ranked per depth; if the rule would keep
    growing past that bound the search is repeated with a larger one, so the result is
    exact (:class:`~bastion.speculative.search.AdaptiveSearch`).  Each attempt costs one
    host sync (reading the node count).
    """
    if policy.budget is None and cost_curve is None:
        raise ValueError("the adaptive tree needs a cost curve; pass budget=N for a fixed-size tree")
    on_host = logq.device.type == "cpu" and not torch_references_forced()  # the best-first walk
    ranking = (_WalkRanking if on_host else _PathRanking)(logq, policy, cost_curve, fixed_cost)
    n = AdaptiveSearch(policy).count(search_hint, ranking.rank)
    tree = ranking.tree(root, tok, n)
    tree.mass = ranking.mass(n)
    return tree


class _WalkRanking:
    """Ranks and counts by the best-first walk (CPU): the walk's nodes are the tree's."""

    def __init__(self, logq: torch.Tensor, policy: TreePolicy, cost_curve: torch.Tensor | None, fixed_cost: float):
        self.logq, self.policy, self.cost_curve, self.fixed_cost = logq.numpy(), policy, cost_curve, fixed_cost

    def rank(self, m: int) -> tuple[int, int]:
        got, self.walked = rank_walk(self.logq, m, self.policy, lambda n: self.cost_curve[: n + 2].tolist(),
                                     self.fixed_cost)
        return got, self.walked.count

    def tree(self, root: torch.Tensor, tok: torch.Tensor, n: int) -> Tree:
        return Tree(*(torch.from_numpy(a) for a in tree_arrays(self.walked, tok.numpy(), int(root), n)))

    def mass(self, n: int) -> list[float]:
        return depth_mass(self.walked.logp[1:n], self.walked.depths[1:n], self.logq.shape[0])


class _PathRanking:
    """Ranks by :func:`top_paths` and counts by :func:`count_nodes` (one host read of the count)."""

    def __init__(self, logq: torch.Tensor, policy: TreePolicy, cost_curve: torch.Tensor | None, fixed_cost: float):
        self.logq, self.policy, self.cost_curve, self.fixed_cost = logq, policy, cost_curve, fixed_cost

    def rank(self, m: int) -> tuple[int, int]:
        self.m, self.paths = m, top_paths(self.logq, m)  # (logp, depth, local, par_local, rank) [got] each
        got = self.paths[0].shape[0]
        if self.policy.budget is not None:
            return got, min(self.policy.budget, got + 1)
        return got, int(count_nodes(self.paths[0], self.policy, self.cost_curve, self.fixed_cost))

    def tree(self, root: torch.Tensor, tok: torch.Tensor, n: int) -> Tree:
        return paths_tree(root.view(()).to(tok.device), tok, *self.paths[1:], n, self.m + 1)

    def mass(self, n: int) -> list[float]:
        return depth_mass(self.paths[0][: n - 1].tolist(), self.paths[1][: n - 1].tolist(), self.logq.shape[0])


def paths_tree(
    root: torch.Tensor,  # 0-d long
    tok: torch.Tensor,  # [D, K] each depth's top-K tokens
    depth: torch.Tensor,  # [>= n - 1] ranked paths: their depth (1..D) ...
    local: torch.Tensor,  # ... index among the ranked paths of that depth
    par_local: torch.Tensor,  # ... the parent's index among its depth's ranked paths
    rank: torch.Tensor,  # ... and their token's rank in that depth's top-K
    n: int,
    width: int,  # > every local index: the (depth, local) -> node table's width
) -> Tree:
    """The ``n``-node tree of the best ``n - 1`` ranked paths (:func:`~bastion.speculative.path_rank.top_paths`).

    Both engines build their trees here (the static engine inside a CUDA graph: no host
    reads, the root fill a device op).
    """
    sel, d_max, device = n - 1, tok.shape[0], tok.device
    depth, local, par_local, rank = depth[:sel], local[:sel], par_local[:sel], rank[:sel]
    # Map (depth, local index) of every kept path to its node index (root = node 0).
    table = torch.full((d_max + 1, width), -1, dtype=torch.long, device=device)
    table[0, :1].fill_(0)
    table[depth, local] = torch.arange(1, sel + 1, device=device)
    parents = torch.cat([torch.full((1,), -1, dtype=torch.long, device=device), table[depth - 1, par_local]])
    tokens = torch.cat([root.view(1), tok[depth - 1, rank]])
    _, ancestors = ancestor_matrix(parents, d_max)
    depths = torch.cat([depth.new_zeros(1), depth])
    return Tree(tokens=tokens, parents=parents, depths=depths, ancestors=ancestors)


def build_tree_heap(
    root: int,
    draft_logprobs: torch.Tensor,  # [D, V]
    policy: TreePolicy,
    cost_curve: torch.Tensor | None = None,
    fixed_cost: float = 0.0,
) -> tuple[list[int], list[int]]:
    """The literal best-first loop; returns (tokens, parents) in pop order.  Test oracle.

    Path log-probabilities are fp32 sums (as :func:`top_paths` computes them) and ties
    pop in the module's tie order: heap keys are (-logp, depth, within-depth key), where a
    node's within-depth key is (-logp, its parent's key, token rank).
    """
    k = topk_width(policy, draft_logprobs.shape[1])
    logq, toks = draft_logprobs.topk(k, dim=-1)
    heap = _Heap(root, logq.tolist(), toks.tolist(), k)
    curve = None if cost_curve is None else cost_curve.double().tolist()
    while heap.heap and len(heap.tokens) < policy.limit:
        p, n, big_p = math.exp(-heap.heap[0][0]), len(heap.tokens), heap.p_tree[-1]
        if policy.budget is None and not (n < policy.n_min
                                          or p * (fixed_cost + curve[n]) > big_p * (curve[n + 1] - curve[n])):
            break
        heap.take()
    count = len(heap.tokens)
    if policy.budget is None and policy.neighbour:  # the better bucket beside the count (count_nodes)
        lo, hi = bucket_pair(count, policy.n_min)
        if lo >= policy.n_min and lo < count and hi <= policy.limit:
            while heap.heap and len(heap.tokens) < hi:
                heap.take()
            if len(heap.tokens) == hi and heap.rate(hi, curve, fixed_cost) > heap.rate(lo, curve, fixed_cost):
                count = hi
    n = bucket_size(count, policy)
    return heap.tokens[:n], heap.parents[:n]


class _Heap:
    """:func:`build_tree_heap`'s candidates and the tree they join, one pop at a time."""

    def __init__(self, root: int, logq: list[list[float]], toks: list[list[int]], k: int) -> None:
        self.logq, self.toks, self.k, self.d_max = logq, toks, k, len(logq)
        self.tokens, self.parents = [root], [-1]
        self.p_tree = [1.0]  # p_tree[n - 1] = P(n): the root plus the kept paths' probabilities
        # entries: (-logp, depth, within-depth key, rank, parent node index, parent logp)
        self.heap = [self._entry(self._f32(logq[0][0]), 1, 0, 0, 0.0, ())] if self.d_max else []

    @staticmethod
    def _f32(x: float) -> float:  # the fp32 sum top_paths computes
        return float(np.float32(x))

    @staticmethod
    def _entry(lp: float, d: int, r: int, par: int, par_lp: float, par_key: tuple) -> tuple:
        return (-lp, d, (-lp, par_key, r), r, par, par_lp)

    def rate(self, n: int, curve: list[float], fixed_cost: float) -> float:
        """The expected tokens per second of the first ``n`` nodes: P(n) / (T_fixed + C(n))."""
        return self.p_tree[n - 1] / (fixed_cost + curve[n])

    def take(self) -> None:
        """The best candidate joins the tree; its first child and next sibling become candidates."""
        neg, d, key, r, par, par_lp = heapq.heappop(self.heap)
        self.tokens.append(self.toks[d - 1][r])
        self.parents.append(par)
        self.p_tree.append(self.p_tree[-1] + math.exp(-neg))
        me = len(self.tokens) - 1
        if d < self.d_max:  # first child
            heapq.heappush(self.heap, self._entry(self._f32(-neg + self.logq[d][0]), d + 1, 0, me, -neg, key))
        if r + 1 < self.k:  # next sibling
            lp = self._f32(par_lp + self.logq[d - 1][r + 1])
            heapq.heappush(self.heap, self._entry(lp, d, r + 1, par, par_lp, key[1]))
