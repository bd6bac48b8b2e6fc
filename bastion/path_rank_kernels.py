"""Triton kernels for :mod:`bastion.path_rank` (imported only where Triton is installed).

Rank by counting: candidate i's place in a stable descending sort is the number of
candidates j with x_j > x_i, or x_j == x_i and j < i.  A program takes ``BI`` candidates
and sweeps all of them in tiles of ``BJ``; with a few thousand candidates that is a few
million comparisons spread over the GPU, in one launch, where a sort or a top-k makes
several launches of one thread block each.  A candidate whose place is below the number
kept writes itself there, so the output comes out sorted.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BI = 64  # candidates ranked per program
BJ = 128  # candidates compared per tile


@triton.jit
def _sorted_before(x_i, i, x_j, j, valid_j):
    """For each i [BI]: how many of the tile's j [BJ] come before it (value descending, then index)."""
    before = (x_j[None, :] > x_i[:, None]) | ((x_j[None, :] == x_i[:, None]) & (j[None, :] < i[:, None]))
    return tl.sum((before & valid_j[None, :]).to(tl.int32), axis=1)


@triton.jit
def _round_kernel(prev_ptr, q_ptr, flat_ptr, out_v_ptr, out_i_ptr, n_cand, take,
                  K: tl.constexpr, BI: tl.constexpr, BJ: tl.constexpr):
    i = tl.program_id(0) * BI + tl.arange(0, BI)
    valid_i = i < n_cand
    f_i = tl.load(flat_ptr + i, mask=valid_i, other=0)
    x_i = tl.load(prev_ptr + f_i // K, mask=valid_i, other=0.0) + tl.load(q_ptr + f_i % K, mask=valid_i, other=0.0)
    place = tl.zeros([BI], dtype=tl.int32)
    for start in range(0, n_cand, BJ):
        j = start + tl.arange(0, BJ)
        valid_j = j < n_cand
        f_j = tl.load(flat_ptr + j, mask=valid_j, other=0)
        x_j = tl.load(prev_ptr + f_j // K, mask=valid_j, other=0.0) + tl.load(q_ptr + f_j % K, mask=valid_j, other=0.0)
        place += _sorted_before(x_i, i, x_j, j, valid_j)
    keep = valid_i & (place < take)
    tl.store(out_v_ptr + place, x_i, mask=keep)
    tl.store(out_i_ptr + place, f_i, mask=keep)


@triton.jit
def _final_kernel(v_ptr, f_ptr, depth_ptr, local_ptr, n, m,
                  logp_ptr, depth_out_ptr, local_out_ptr, parent_ptr, rank_ptr,
                  K: tl.constexpr, BI: tl.constexpr, BJ: tl.constexpr):
    i = tl.program_id(0) * BI + tl.arange(0, BI)
    valid_i = i < n
    x_i = tl.load(v_ptr + i, mask=valid_i, other=0.0)
    place = tl.zeros([BI], dtype=tl.int32)
    for start in range(0, n, BJ):
        j = start + tl.arange(0, BJ)
        valid_j = j < n
        x_j = tl.load(v_ptr + j, mask=valid_j, other=0.0)
        place += _sorted_before(x_i, i, x_j, j, valid_j)
    keep = valid_i & (place < m)
    f_i = tl.load(f_ptr + i, mask=valid_i, other=0)
    tl.store(logp_ptr + place, x_i, mask=keep)
    tl.store(depth_out_ptr + place, tl.load(depth_ptr + i, mask=valid_i, other=0), mask=keep)
    tl.store(local_out_ptr + place, tl.load(local_ptr + i, mask=valid_i, other=0), mask=keep)
    tl.store(parent_ptr + place, f_i // K, mask=keep)
    tl.store(rank_ptr + place, f_i % K, mask=keep)


def rank_round(prev: torch.Tensor, q: torch.Tensor, flat: torch.Tensor, out_v: torch.Tensor, out_i: torch.Tensor,
               take: int, k: int) -> None:
    """One depth: the best ``take`` of the candidates ``prev[f // k] + q[f % k]`` (f in ``flat``), sorted."""
    n = flat.shape[0]
    _round_kernel[(triton.cdiv(n, BI),)](prev, q, flat, out_v, out_i, n, take, K=k, BI=BI, BJ=BJ)


def rank_final(values: torch.Tensor, flat: torch.Tensor, depth: torch.Tensor, local: torch.Tensor, m: int, k: int,
               logp: torch.Tensor, depth_out: torch.Tensor, local_out: torch.Tensor, parent: torch.Tensor,
               rank: torch.Tensor) -> None:
    """All depths together: the best ``m`` kept paths, sorted, split into the tree's columns."""
    n = values.shape[0]
    _final_kernel[(triton.cdiv(n, BI),)](values, flat, depth, local, n, m, logp, depth_out, local_out, parent, rank,
                                         K=k, BI=BI, BJ=BJ)
