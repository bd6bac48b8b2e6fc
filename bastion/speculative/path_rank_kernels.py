"""Triton kernels for :mod:`bastion.speculative.path_rank` (imported only where Triton is installed).

Rank by counting, with the counts found by binary search.  A candidate's place in a
stable descending sort is the number of candidates that sort before it: a larger value,
or an equal value earlier in the list.  The candidates are not an arbitrary list:

- In a round, candidate (i, j) is parent i's path extended by token rank j, worth
  ``prev[i] + q[j]`` with both vectors sorted descending.  Column j' of the pruned pair
  grid holds rows 0..R(j')-1 (R = min(rows, take // (j' + 1)), see
  :func:`bastion.speculative.path_rank.candidates`), and down a column the values never increase.
  So the candidates of column j' that come before a given one are a prefix of it, found
  by a binary search: about 128 columns x 9 steps per candidate, where comparing it with
  every other candidate took about 3,500 steps.
- In the final pass, every depth's kept paths are already sorted: the candidates of
  another depth that come before a path are again a prefix of that depth's list.

Each program holds a few candidates against all columns (or all depths), so it knows
their places outright and writes the kept ones there: one launch per round, no atomic
partial counts, no zeroed buffer.  The comparisons are those of the torch reference
(the same fp32 sums, ties broken by list position), so the paths are the same bit for bit.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LANES = 512  # (candidate, column) pairs per program (H200 sweep: 512 beat 1024-4096, docs/performance.md)
WARPS = 4  # warps per program


@triton.jit
def _prefix_before(base, add, v, length, before_tie, ITERS: tl.constexpr, HELD: tl.constexpr):
    """Per lane: how many leading entries of ``base[0..length) + add`` sort before value ``v``.

    ``base`` is sorted descending, so the entries before ``v`` (larger, or equal at a
    position below ``before_tie``) form a prefix; ITERS halvings find its end.  ``base``
    is pointers, or with ``HELD`` one vector [BP] the program holds in registers: then a
    halving gathers from it instead of waiting on a dependent load from memory.
    """
    lo = tl.zeros_like(length)
    hi = length
    for _ in tl.static_range(ITERS):
        active = lo < hi
        mid = (lo + hi) // 2
        if HELD:
            x = tl.reshape(tl.gather(base, tl.reshape(tl.where(active, mid, 0), [mid.numel]), 0), mid.shape) + add
        else:
            x = tl.load(base + mid, mask=active, other=0.0) + add
        right = active & ((x > v) | ((x == v) & (mid < before_tie)))
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(active & ~right, mid, hi)
    return lo


@triton.jit
def _round_kernel(prev_ptr, q_ptr, flat_ptr, out_v_ptr, out_i_ptr, n, rows, take,
                  K: tl.constexpr, BK: tl.constexpr, BI: tl.constexpr, BP: tl.constexpr, ITERS: tl.constexpr):
    """Candidates c = pid*BI.. : place among all candidates of the round; the first ``take`` are stored.

    The parents' values are loaded once into registers and the binary searches gather from
    them: a halving costs a register gather instead of a dependent load from memory.
    """
    c = tl.program_id(0) * BI + tl.arange(0, BI)  # [BI]
    valid = c < n
    f = tl.load(flat_ptr + c, mask=valid, other=0)
    i = (f // K).to(tl.int32)
    j = (f % K).to(tl.int32)
    v = tl.load(prev_ptr + i, mask=valid, other=0.0) + tl.load(q_ptr + j, mask=valid, other=0.0)
    p = tl.arange(0, BP)
    held = tl.load(prev_ptr + p, mask=p < rows, other=0.0)  # [BP]
    col = tl.arange(0, BK)  # [BK] token ranks j'
    q_col = tl.load(q_ptr + col, mask=col < K, other=0.0)
    present = tl.where(col < K, tl.minimum(rows, take // (col + 1)), 0)  # rows in column j'
    length = tl.zeros([BI, BK], dtype=tl.int32) + present[None, :]
    # on a tie, (i', j') comes first if its flat index i' * K + j' is smaller: i' < i + [j' < j]
    tie = i[:, None] + (col[None, :] < j[:, None]).to(tl.int32)
    count = _prefix_before(held, q_col[None, :], v[:, None], length, tie, ITERS, True)
    place = tl.sum(count, axis=1)  # [BI]
    keep = valid & (place < take)
    tl.store(out_v_ptr + place, v, mask=keep)
    tl.store(out_i_ptr + place, f, mask=keep)


@triton.jit
def _final_kernel(v_ptr, f_ptr, depth_ptr, local_ptr, off_ptr, len_ptr, n, m, D,
                  logp_ptr, depth_out_ptr, local_out_ptr, parent_ptr, rank_ptr,
                  K: tl.constexpr, BD: tl.constexpr, BI: tl.constexpr, ITERS: tl.constexpr):
    """Kept paths e = pid*BI.. (depth-major lists, each sorted): place among all; the first ``m`` are stored."""
    e = tl.program_id(0) * BI + tl.arange(0, BI)  # [BI]
    valid = e < n
    v = tl.load(v_ptr + e, mask=valid, other=0.0)
    a = tl.load(depth_ptr + e, mask=valid, other=1).to(tl.int32) - 1  # its list
    r = tl.load(local_ptr + e, mask=valid, other=0).to(tl.int32)  # its position there
    lists = tl.arange(0, BD)
    live = lists < D
    off = tl.load(off_ptr + lists, mask=live, other=0)
    size = tl.load(len_ptr + lists, mask=live, other=0)
    length = tl.zeros([BI, BD], dtype=tl.int32) + size[None, :]
    # on a tie, all of an earlier list's entries come first and none of a later list's
    tie = tl.where(lists[None, :] < a[:, None], size[None, :], 0)
    count = _prefix_before(v_ptr + off[None, :], 0.0, v[:, None], length, tie, ITERS, False)
    count = tl.where(lists[None, :] == a[:, None], r[:, None], count)  # its own list: the entries above it
    place = tl.sum(count, axis=1)
    keep = valid & (place < m)
    f = tl.load(f_ptr + e, mask=valid, other=0)
    tl.store(logp_ptr + place, v, mask=keep)
    tl.store(depth_out_ptr + place, tl.load(depth_ptr + e, mask=valid, other=0), mask=keep)
    tl.store(local_out_ptr + place, tl.load(local_ptr + e, mask=valid, other=0), mask=keep)
    tl.store(parent_ptr + place, f // K, mask=keep)
    tl.store(rank_ptr + place, f % K, mask=keep)


def _iters(longest: int) -> int:
    """Halvings that shrink any range of up to ``longest`` entries to nothing."""
    return max(1, int(longest).bit_length())


def rank_round(prev: torch.Tensor, q: torch.Tensor, flat: torch.Tensor, out_v: torch.Tensor, out_i: torch.Tensor,
               take: int, k: int) -> None:
    """One depth: the best ``take`` of the candidates ``prev[f // k] + q[f % k]`` (f in ``flat``), sorted."""
    n, rows = flat.shape[0], min(prev.shape[0], take)
    bk = triton.next_power_of_2(k)
    bi = max(1, LANES // bk)
    _round_kernel[(triton.cdiv(n, bi),)](prev, q, flat, out_v, out_i, n, rows, take, K=k, BK=bk, BI=bi,
                                         BP=triton.next_power_of_2(rows), ITERS=_iters(rows), num_warps=WARPS)


def rank_final(values: torch.Tensor, flat: torch.Tensor, depth: torch.Tensor, local: torch.Tensor,
               offsets: torch.Tensor, sizes: torch.Tensor, longest: int, m: int, k: int, logp: torch.Tensor,
               depth_out: torch.Tensor, local_out: torch.Tensor, parent: torch.Tensor, rank: torch.Tensor) -> None:
    """All depths together: the best ``m`` kept paths, sorted, split into the tree's columns.

    ``offsets`` and ``sizes`` [D] (int32) locate each depth's sorted list in ``values``;
    ``longest`` is the largest size.
    """
    n, d = values.shape[0], offsets.shape[0]
    bd = triton.next_power_of_2(d)
    bi = max(1, LANES // bd)
    _final_kernel[(triton.cdiv(n, bi),)](values, flat, depth, local, offsets, sizes, n, m, d,
                                         logp, depth_out, local_out, parent, rank,
                                         K=k, BD=bd, BI=bi, ITERS=_iters(longest), num_warps=WARPS)
