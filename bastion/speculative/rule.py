"""The budget rule's arithmetic: how many ranked paths a tree keeps, and how widely to rank.

:mod:`bastion.speculative.tree` states the rule and builds the trees; this module holds
the count itself (:func:`count_nodes`: the cumulative-sum form of the rule, in torch or,
on a CPU, in NumPy with the same values), the bucket rounding, and the ranking widths the
adaptive search starts from and widens to.  The static engine's ``rank`` step and the
eager engine's tree construction both count here, so they agree to the bit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from bastion.defaults import torch_references_forced

if TYPE_CHECKING:
    from bastion.speculative.policy import TreePolicy


def count_nodes(
    logp: torch.Tensor,  # [N] candidate log-probs, best first
    policy: TreePolicy,
    cost_curve: torch.Tensor | None,  # [>= N + 2] C(n) in seconds, index n
    fixed_cost: float,
) -> torch.Tensor:
    """Number of nodes (root included) the rule keeps, as a 0-d tensor (no host sync).

    The rule's test for candidate j, ``p_j (F + C(n)) > P(n) (C(n+1) - C(n))``, is exactly
    "the expected rate P/(F + C) of the tree with it beats the rate without it".  With the
    ``best-neighbour`` rounding a count that is not a multiple of ``n_min`` is then taken
    to whichever bucket beside it has the higher rate, when the bucket above fits the
    ranked candidates and ``n_max``: rounding down every time throws away up to
    ``n_min - 1`` nodes the rule found worth their cost (docs/performance.md).  Any count
    left as it is goes through :func:`bucket_size` (down to a bucket, or kept when the
    policy has no rounding).

    On a CPU the same arithmetic runs in NumPy: a dozen tiny operations where torch's
    twenty-odd cost more in dispatch than in arithmetic.  Both engines count through here,
    so they still agree; ``BASTION_RANK=torch`` keeps the torch path (a GPU's without Triton).
    """
    if logp.device.type == "cpu" and not torch_references_forced() and not torch.compiler.is_compiling():
        return _count_nodes_host(logp, policy, cost_curve, fixed_cost)
    avail = logp.shape[0] + 1
    p = logp.double().exp()  # [N] fp64; candidate j joins a tree of n = j + 1 nodes
    big_p = torch.cumsum(torch.cat([p.new_ones(1), p[:-1]]), 0)  # P of the tree before candidate j joins: 1 + p_0 + ...
    n = torch.arange(1, avail, device=logp.device)
    curve = cost_curve.double()  # the difference C(n+1) - C(n) and the comparison in fp64
    c_n, c_next = curve[n], curve[n + 1]
    ok = (n < policy.n_min) | (p * (fixed_cost + c_n) > big_p * (c_next - c_n))
    fail = torch.cat([~ok, ok.new_ones(1)])  # sentinel: "fails" once candidates run out
    first_fail = fail.int().argmax()  # index of the first failing candidate
    count = torch.clamp(first_fail + 1, max=policy.n_max)
    if not policy.neighbour or avail == 1:
        return count
    # the better bucket: P(k) = total[k - 1] for k = 1 .. N + 1 nodes, C(k) = curve[k]
    total = torch.cat([big_p, big_p[-1:] + p[-1:]])  # [N + 1]
    lo, hi = bucket_pair(count, policy.n_min)
    fits = (lo >= policy.n_min) & (lo < count) & (hi <= min(policy.n_max, avail))
    hi_c = hi.clamp(max=avail)  # an index in range whether or not it fits
    rate_lo = total[lo.clamp(min=1) - 1] / (fixed_cost + curve[lo])
    rate_hi = total[hi_c - 1] / (fixed_cost + curve[hi_c])
    return torch.where(fits & (rate_hi > rate_lo), hi, count)


def _count_nodes_host(logp: torch.Tensor, policy: TreePolicy, cost_curve: torch.Tensor, fixed_cost: float) -> torch.Tensor:
    """:func:`count_nodes` in NumPy, for CPU tensors: the same fp64 steps in the same order."""
    p = np.exp(logp.numpy().astype(np.float64))  # [N]
    big_p = np.cumsum(np.concatenate(([1.0], p[:-1])))
    n = np.arange(1, p.shape[0] + 1)
    curve = cost_curve.numpy().astype(np.float64, copy=False)
    c_n, c_next = curve[n], curve[n + 1]
    ok = (n < policy.n_min) | (p * (fixed_cost + c_n) > big_p * (c_next - c_n))
    fails = np.flatnonzero(~ok)
    first_fail = int(fails[0]) if fails.size else p.shape[0]  # "fails" once candidates run out
    count = min(first_fail + 1, policy.n_max)
    lo, hi = bucket_pair(count, policy.n_min)
    if policy.neighbour and lo >= policy.n_min and lo < count and hi <= min(policy.n_max, p.shape[0] + 1):
        total = np.concatenate((big_p, big_p[-1:] + p[-1:]))  # P(k) = total[k - 1]
        if total[hi - 1] / (fixed_cost + curve[hi]) > total[lo - 1] / (fixed_cost + curve[lo]):
            count = hi
    return torch.tensor(count)


def bucket_pair(count: int | torch.Tensor, n_min: int) -> tuple:
    """The buckets either side of a node count: (the multiple of ``n_min`` at or below it, the next one)."""
    lo = (count // n_min) * n_min
    return lo, lo + n_min


def bucket_size(n: int, policy: TreePolicy) -> int:
    """An adaptive node count as a tree size: rounded down to a multiple of ``n_min`` (never
    below the count when it is under ``n_min``), or kept when the policy has no rounding.

    With the ``best-neighbour`` rounding :func:`count_nodes` already returns the bucket
    above when that one is better, so this rounds down only counts whose upper bucket lost
    or could not be evaluated.
    """
    if policy.budget is not None or policy.rounding is None or n < policy.n_min:
        return n
    return bucket_pair(n, policy.n_min)[0]


def search_width(hint: int, policy: TreePolicy) -> int:
    """Paths to rank first for the adaptive rule: the hint rounded up to a power of two (few shapes)."""
    m = max(hint, policy.n_min) - 1
    return max(1, min(policy.n_max - 1, 1 << max(0, math.ceil(math.log2(max(m, 1))))))


def wider_search(m: int, got: int, n: int, policy: TreePolicy) -> int | None:
    """The next ranking width when the rule kept every ranked path and more exist; None when exact.

    Ranking only the best ``m`` paths is exact unless the rule accepted all ``got == m``
    of them; then it is repeated four times wider (up to ``n_max - 1``).  It is also
    repeated when the count ``n`` is not a bucket because the bucket above it needed more
    paths than were ranked (:func:`count_nodes` could not weigh it); with ``n_min`` and the
    ranking widths powers of two that does not happen.
    """
    if got != m or m >= policy.n_max - 1:
        return None
    if n - 1 >= got:
        return min(policy.n_max - 1, 4 * m)
    lo, hi = bucket_pair(n, policy.n_min)
    if policy.neighbour and policy.budget is None and policy.n_min <= lo < n and got + 1 < hi <= policy.n_max:
        return min(policy.n_max - 1, max(4 * m, hi - 1))
    return None
