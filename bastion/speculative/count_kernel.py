"""The budget rule's node count in one Triton kernel (imported only where Triton is installed).

:func:`bastion.speculative.rule.count_nodes` and the cost curve it reads
(:meth:`bastion.costmodel.model.CostModel.curve`) are about 45 tiny element-wise, scan
and reduction kernels.  Inside a CUDA graph each still costs a few microseconds, so on an
H200 the adaptive rule's ``rank`` graph takes 104-115 µs with them against 48-56 µs for a
fixed budget's (docs/performance.md), a difference every adaptive step pays.  Here one program evaluates C(n, c) for every candidate tree
size from the precomputed curve parts, finds the first candidate the rule rejects and
picks the better bucket beside that count.

The arithmetic is the reference's, in fp64 and in the same order, except two things
that may round differently: the running sum of path probabilities (a scan in another
summation order) and multiply-adds the compiler may fuse.  Both change a comparison only
when its two sides agree to about 1e-16 relative, so the counts match the reference's
(checked on the GPU against it, ``tests/speculative/test_count_kernel.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _count_kernel(logp_ptr, n_cand, layers_ptr, kv0_ptr, kv1_ptr, att0_ptr, att1_ptr, c_ptr, coef_ptr, out_ptr,
                  n_min, n_max, neighbour, BLOCK: tl.constexpr):
    j = tl.arange(0, BLOCK)  # candidate j joins a tree of n = j + 1 nodes
    valid = j < n_cand
    p = tl.exp(tl.load(logp_ptr + j, mask=valid, other=float("-inf")).to(tl.float64))
    # P of the tree before candidate j joins: 1 + p_0 + ... + p_{j-1}
    before = tl.where(j == 0, 1.0, tl.exp(tl.load(logp_ptr + j - 1, mask=valid & (j > 0), other=float("-inf"))
                                          .to(tl.float64)))
    big_p = tl.cumsum(before, axis=0)
    c = tl.load(c_ptr).to(tl.float64)
    u_kv = tl.load(coef_ptr + 0)
    u_att = tl.load(coef_ptr + 1)
    f_kv = tl.load(coef_ptr + 2)
    f_att = tl.load(coef_ptr + 3)
    f_peak = tl.load(coef_ptr + 4)
    fixed = tl.load(coef_ptr + 5)
    n = j + 1
    c_n = _cost(layers_ptr, kv0_ptr, kv1_ptr, att0_ptr, att1_ptr, n, valid, c, u_kv, u_att, f_kv, f_att, f_peak)
    c_next = _cost(layers_ptr, kv0_ptr, kv1_ptr, att0_ptr, att1_ptr, n + 1, valid, c, u_kv, u_att, f_kv, f_att, f_peak)
    ok = (n < n_min) | (p * (fixed + c_n) > big_p * (c_next - c_n))
    first_fail = tl.min(tl.where(valid & ~ok, j, n_cand), axis=0)  # n_cand: every candidate passed
    count = tl.minimum(first_fail + 1, n_max)
    # the better bucket beside the count (count_nodes): P(k) and C(k) of k = j + 1 nodes, and
    # of k = n_cand + 1 (every candidate in) from the last lane's "next" values
    lo = (count // n_min) * n_min
    hi = lo + n_min
    fits = (neighbour != 0) & (lo >= n_min) & (lo < count) & (hi <= tl.minimum(n_max, n_cand + 1))
    last = j == n_cand - 1
    p_lo = tl.sum(tl.where(valid & (n == lo), big_p, 0.0), axis=0)
    c_lo = tl.sum(tl.where(valid & (n == lo), c_n, 0.0), axis=0)
    p_hi = tl.sum(tl.where(valid & (n == hi), big_p, 0.0) + tl.where(last & (n + 1 == hi), big_p + p, 0.0), axis=0)
    c_hi = tl.sum(tl.where(valid & (n == hi), c_n, 0.0) + tl.where(last & (n + 1 == hi), c_next, 0.0), axis=0)
    better = p_hi / (fixed + c_hi) > p_lo / (fixed + c_lo)
    tl.store(out_ptr, tl.where(fits & better, hi, count).to(tl.int64))


@triton.jit
def _cost(layers_ptr, kv0_ptr, kv1_ptr, att0_ptr, att1_ptr, n, mask, c, u_kv, u_att, f_kv, f_att, f_peak):
    """C(n, c) as :func:`bastion.costmodel.model.combine` computes it from the precomputed parts."""
    kv = tl.load(kv0_ptr + n, mask=mask, other=0.0) + tl.load(kv1_ptr + n, mask=mask, other=0.0) * c
    att = tl.load(att0_ptr + n, mask=mask, other=0.0) + tl.load(att1_ptr + n, mask=mask, other=0.0) * c
    unfused = u_kv * kv + u_att * att
    fused = tl.maximum(f_kv * kv + f_att * att, f_peak * att)
    return tl.load(layers_ptr + n, mask=mask, other=0.0) + tl.minimum(unfused, fused)


def count_nodes_fused(logp: torch.Tensor, parts: tuple[torch.Tensor, ...], coef: torch.Tensor, c: torch.Tensor,
                      n_min: int, n_max: int, out: torch.Tensor, neighbour: bool = True) -> None:
    """Write the rule's node count (root included) into ``out`` [1] int64, on the device, no sync.

    ``logp`` [N] fp32 candidate log-probabilities, best first; ``parts``: the cost curve's
    (layers, kv0, kv1, att0, att1), each fp64 [>= N + 2]; ``coef`` fp64 [6]: u_kv, u_att,
    f_kv, f_att, f_peak and the step's fixed cost; ``c`` the cached length (0-d integer);
    ``neighbour``: take the count to the better bucket beside it, as :func:`count_nodes` does
    for the ``best-neighbour`` rounding (otherwise the rule's count, rounded by the caller).
    """
    n_cand = logp.shape[0]
    block = max(16, triton.next_power_of_2(n_cand))
    _count_kernel[(1,)](logp, n_cand, *parts, c, coef, out, n_min, n_max, int(neighbour), BLOCK=block, num_warps=4)
