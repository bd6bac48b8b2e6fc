"""The ranked paths and the rule's count in one best-first walk that stops where the rule stops (CPU).

On a GPU the tree is ranked, counted and built by a few kernels over fixed shapes
(:func:`~bastion.speculative.path_rank.top_paths`, :func:`~bastion.speculative.rule.count_nodes`,
:func:`~bastion.speculative.tree.paths_tree`).  On a CPU those are about 200 small NumPy
and torch calls a step: fifteen ranking rounds over all ``m`` paths, although the rule
then keeps only the first ``n_min`` or so, and a pointer-doubling ancestor matrix.  Run
right after the drafter's forward, when its weights have pushed the interpreter's and
NumPy's code out of the caches, they cost BASTION about 1 ms more a step than DFlash's
chain on the 2-core CPU (docs/performance.md): a third of what BASTION's
larger τ gains there.

Here the paths come off a heap in exactly the order of ``top_paths`` (the tie order of
:mod:`bastion.speculative.tree`: log-probability, then the shallower path, then the
parent's place, then the token's rank), each path's log-probability the same fp32 sum,
and the rule is tested on each as it comes, in :func:`count_nodes`' fp64 arithmetic.
The walk stops at the rule's first failure (or at the bucket above, when the count must
be weighed against it), so a step of 16 nodes pops 16 paths, not 31.  Every popped path
knows its parent's node index, so the tree's arrays follow without a lookup table.
"""

from __future__ import annotations

import heapq
import math
from array import array
from dataclasses import dataclass
from typing import Callable

import numpy as np

from bastion.speculative.path_rank import ranked_count
from bastion.speculative.policy import TreePolicy
from bastion.speculative.rule import bucket_pair


@dataclass
class Walk:
    """The walk's popped paths as tree nodes (node 0 the root), and the rule's node count."""

    count: int  # nodes the rule keeps (root included): count_nodes' value, or the fixed budget's size
    parents: list[int]  # [popped + 1] node index of each node's parent; parents[0] == -1
    depths: list[int]  # [popped + 1] depth 0..D
    ranks: list[int]  # [popped + 1] the token's rank in its depth's top-K (0 for the root)
    logp: list[float]  # [popped + 1] path log-probabilities (fp32 values; 0 for the root)


class _Frontier:
    """The popped paths as tree nodes, and the heap of their children and next siblings."""

    def __init__(self, logq: list[list[float]], got: int) -> None:
        self.logq, self.d_max = logq, len(logq)
        self.k = len(logq[0]) if self.d_max else 0
        self._f32 = array("f", [0.0])  # assigning rounds a double to fp32 (round to nearest), as the fp32 sum does
        self.parents, self.depths, self.ranks, self.logp = [-1], [0], [0], [0.0]
        self.heap: list[tuple] = []  # (-logp, depth, within-depth key, token rank, parent node)
        if got > 0:
            lp = logq[0][0]
            self.heap.append((-lp, 1, (-lp, (), 0), 0, 0))

    def fp32(self, x: float) -> float:
        self._f32[0] = x
        return self._f32[0]

    def pop(self) -> float:
        """The next path joins as a node; its first child's and next sibling's candidates go on the heap."""
        neg, d, key, r, par = heapq.heappop(self.heap)
        me = len(self.parents)
        self.parents.append(par)
        self.depths.append(d)
        self.ranks.append(r)
        self.logp.append(-neg)
        if d < self.d_max:  # the first child: this path's best extension
            lp = self.fp32(-neg + self.logq[d][0])
            heapq.heappush(self.heap, (-lp, d + 1, (-lp, key, 0), 0, me))
        if r + 1 < self.k:  # the next sibling under the same parent (the within-depth key nests the parent's)
            lp = self.fp32(self.logp[par] + self.logq[d - 1][r + 1])
            heapq.heappush(self.heap, (-lp, d, (-lp, key[1], r + 1), r + 1, par))
        return -neg

    def walk(self, count: int) -> Walk:
        return Walk(count, self.parents, self.depths, self.ranks, self.logp)


def walk(
    logq: list[list[float]],  # [D][K] each depth's top-K log-probabilities (fp32 values), sorted descending
    got: int,  # paths the ranking of m would return: min(m, paths kept); the walk pops at most these
    policy: TreePolicy,
    curve: list[float] | None,  # C(n) seconds for n = 0..got + 1 (fp64); None for a fixed budget
    fixed_cost: float,
) -> Walk:
    """Pop paths best first until the count is settled; see the module docstring."""
    nodes = _Frontier(logq, got)
    if curve is None:  # a fixed budget: its best paths, as many as exist
        want = min(policy.budget - 1, got)
        while len(nodes.parents) <= want:
            nodes.pop()
        return nodes.walk(min(policy.budget, got + 1))
    probs: list[float] = []  # p of each popped path, fp64
    big_p = 1.0  # P of the tree before the candidate joins: the root plus the kept paths
    count = min(got + 1, policy.n_max)  # every ranked path passes (count_nodes' sentinel)
    while len(probs) < got:
        if len(probs) + 1 >= policy.n_max:  # the count is capped at n_max whatever the later paths do
            break
        p = math.exp(nodes.pop())
        probs.append(p)
        n = len(probs)  # the candidate joins a tree of n nodes
        c_n = curve[n]
        if not (n < policy.n_min or p * (fixed_cost + c_n) > big_p * (curve[n + 1] - c_n)):
            count = n
            break
        big_p += p
    if policy.neighbour:
        count = _better_bucket(nodes, probs, count, got, policy, curve, fixed_cost)
    return nodes.walk(count)


def _better_bucket(nodes: _Frontier, probs: list[float], count: int, got: int, policy: TreePolicy,
                   curve: list[float], fixed_cost: float) -> int:
    """The bucket above ``count`` if its expected rate is higher (popping the paths it needs), else ``count``."""
    lo, hi = bucket_pair(count, policy.n_min)
    if not (lo >= policy.n_min and lo < count and hi <= min(policy.n_max, got + 1)):
        return count
    while len(probs) < hi - 1:  # P(hi) needs the first hi - 1 paths
        probs.append(math.exp(nodes.pop()))
    totals = [1.0]  # totals[k - 1] = P(k): count_nodes' running sum, in its order
    for p in probs[: hi - 1]:
        totals.append(totals[-1] + p)
    p_lo, p_hi = totals[lo - 1], totals[hi - 1]
    return hi if p_hi / (fixed_cost + curve[hi]) > p_lo / (fixed_cost + curve[lo]) else count


def rank_walk(logq: np.ndarray, m: int, policy: TreePolicy, curve: Callable[[int], list[float]],
              fixed_cost: float) -> tuple[int, Walk]:
    """The walk over the best ``m`` paths of ``logq`` [D, K] (fp32): (paths the ranking of ``m`` finds, the walk).

    ``curve(n)`` gives C(0..n + 1) at the step's context, asked only for the adaptive
    rule and only as far as the count can read it.  Both engines rank on a CPU here.
    """
    got = ranked_count(logq.shape[0], logq.shape[1], m)
    costs = None if policy.budget is not None else curve(min(policy.n_max, got))
    return got, walk(logq[:, :m].tolist(), got, policy, costs, fixed_cost)


def tree_arrays(w: Walk, tok: np.ndarray, root: int, n: int) -> tuple[np.ndarray, ...]:
    """The ``n``-node tree of a walk's first nodes: tokens, parents, depths [n] int64 and ancestors [n, n] bool.

    ``tok`` [D, K] each depth's top-K tokens.  A node's row of the ancestors matrix is its
    parent's row plus itself; rows are built as integer bit masks (parents pop before
    their children) and unpacked in one call.
    """
    parents = np.asarray(w.parents[:n], dtype=np.int64)
    depths = np.asarray(w.depths[:n], dtype=np.int64)
    tokens = np.empty(n, dtype=np.int64)
    tokens[0] = root
    if n > 1:
        tokens[1:] = tok[depths[1:] - 1, np.asarray(w.ranks[1:n], dtype=np.int64)]
    masks = [1]
    for i in range(1, n):
        masks.append(masks[w.parents[i]] | (1 << i))
    width = (n + 7) // 8
    packed = np.frombuffer(b"".join(x.to_bytes(width, "little") for x in masks), dtype=np.uint8).reshape(n, width)
    ancestors = np.unpackbits(packed, axis=1, count=n, bitorder="little").view(np.bool_)
    return tokens, parents, depths, ancestors
