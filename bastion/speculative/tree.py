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
Trees come in buckets (multiples of ``n_min``) so the verifier sees few shapes: the count
goes to whichever bucket beside it has the higher expected rate P/(T_fixed + C), when the
bucket above can be formed from the ranked candidates within ``n_max``, and down otherwise.

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

import numpy as np
import torch

from bastion.defaults import torch_references_forced
from bastion.speculative.best_first import tree_arrays, walk
from bastion.speculative.path_rank import ranked_count, top_paths
from bastion.speculative.policy import TreePolicy
from bastion.speculative.rule import (
    bucket_pair,
    bucket_size,
    count_nodes,
    search_width,
    wider_search,
)


@dataclass
class Tree:
    """A compiled draft tree.  All tensors live on the decoding device."""

    tokens: torch.Tensor  # [n] long; tokens[0] is the root
    parents: torch.Tensor  # [n] long; parents[0] == -1
    depths: torch.Tensor  # [n] long; depths[0] == 0
    ancestors: torch.Tensor  # [n, n] bool; row i marks i and all its ancestors

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    @classmethod
    def from_parents(cls, tokens: torch.Tensor, parents: torch.Tensor, max_depth: int) -> "Tree":
        """Compile ``tokens``/``parents`` (parents[0] == -1, parent before child not required)."""
        depths, ancestors = ancestor_matrix(parents, max_depth)
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
    limit = policy.limit
    return min(policy.topk, vocab, max(limit - 1, 1))


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
    exact.  Each attempt costs one host sync (reading the node count).
    """
    if policy.budget is None and cost_curve is None:
        raise ValueError("the adaptive tree needs a cost curve; pass budget=N for a fixed-size tree")
    limit = policy.limit
    # a fixed budget knows its size; the adaptive rule starts from the hint and widens if needed
    adaptive_hint = search_hint is not None and policy.budget is None
    m = search_width(search_hint, policy) if adaptive_hint else max(limit - 1, 1)
    on_host = logq.device.type == "cpu" and not torch_references_forced()  # the best-first walk
    while True:
        if on_host:
            got = ranked_count(logq.shape[0], logq.shape[1], m)
            curve = None if policy.budget is not None else cost_curve[: min(policy.n_max, got) + 2].tolist()
            walked = walk(logq[:, :m].tolist(), got, policy, curve, fixed_cost)
            n = walked.count
        else:
            logp, depth, local, par_local, rank = top_paths(logq, m)
            got = logp.shape[0]
            n = min(policy.budget, got + 1) if policy.budget is not None else None
            if n is None:
                n = int(count_nodes(logp, policy, cost_curve, fixed_cost))  # the step's one host sync
        if policy.budget is not None:
            break
        wider = wider_search(m, got, n, policy)
        if wider is None:
            break
        m = wider
    n = bucket_size(n, policy)
    if on_host:
        arrays = tree_arrays(walked, tok.numpy(), int(root), n)
        return Tree(*(torch.from_numpy(a) for a in arrays))
    return paths_tree(root.view(()).to(tok.device), tok, depth, local, par_local, rank, n, m + 1)


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
    d_max, vocab = draft_logprobs.shape
    limit = policy.limit
    k = topk_width(policy, vocab)
    logq, toks = draft_logprobs.topk(k, dim=-1)
    logq, toks = logq.tolist(), toks.tolist()
    curve = None if cost_curve is None else cost_curve.double().tolist()
    tokens, parents = [root], [-1]
    big_p = 1.0

    def f32(x: float) -> float:  # the fp32 sum top_paths computes
        return float(np.float32(x))

    def entry(lp: float, d: int, r: int, par: int, par_lp: float, par_key: tuple) -> tuple:
        return (-lp, d, (-lp, par_key, r), r, par, par_lp)

    # heap entries: (-logp, depth, within-depth key, rank, parent node index, parent logp)
    heap = [entry(f32(logq[0][0]), 1, 0, 0, 0.0, ())] if d_max else []

    def take() -> None:  # the best candidate joins the tree
        nonlocal big_p
        neg, d, key, r, par, par_lp = heapq.heappop(heap)
        tokens.append(toks[d - 1][r])
        parents.append(par)
        big_p += math.exp(-neg)
        me = len(tokens) - 1
        if d < d_max:  # first child
            heapq.heappush(heap, entry(f32(-neg + logq[d][0]), d + 1, 0, me, -neg, key))
        if r + 1 < k:  # next sibling
            heapq.heappush(heap, entry(f32(par_lp + logq[d - 1][r + 1]), d, r + 1, par, par_lp, key[1]))

    def rate(n: int, p_n: float) -> float:
        return p_n / (fixed_cost + curve[n])

    p_tree = [1.0]  # p_tree[n - 1] = P(n)
    while heap and len(tokens) < limit:
        p = math.exp(-heap[0][0])
        n = len(tokens)
        if policy.budget is None:
            if not (n < policy.n_min or p * (fixed_cost + curve[n]) > big_p * (curve[n + 1] - curve[n])):
                break
        take()
        p_tree.append(big_p)
    count = len(tokens)
    if policy.budget is None and policy.bucket:  # the better bucket beside the count (count_nodes)
        lo, hi = bucket_pair(count, policy.n_min)
        if lo >= policy.n_min and lo < count and hi <= limit:
            while heap and len(tokens) < hi:
                take()
                p_tree.append(big_p)
            if len(tokens) == hi and rate(hi, p_tree[hi - 1]) > rate(lo, p_tree[lo - 1]):
                count = hi
    n = bucket_size(count, policy)
    return tokens[:n], parents[:n]
