"""Triton kernels for :mod:`bastion.path_rank` (imported only where Triton is installed).

Rank by counting: candidate i's place in a stable descending sort is the number of
candidates j with x_j > x_i, or x_j == x_i and j < i.  A program compares ``BI``
candidates with ``TILES`` tiles of ``BJ`` others and adds its partial counts atomically
(integers: the order of the additions does not matter), so a few thousand candidates
are a few million comparisons spread over hundreds of programs.  A second pass moves
each candidate whose place is below the number kept to that place, so the output comes
out sorted.  Two short launches per depth, where a general sort or top-k makes several
passes of one thread block each.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BI = 64  # candidates ranked per program
BJ = 128  # candidates compared per tile
TILES = 4  # tiles per program: the comparisons of one candidate are split over programs
BS = 256  # candidates placed per program of the scatter pass


@triton.jit
def _value(j, valid, prev_ptr, q_ptr, flat_ptr, v_ptr, GATHER: tl.constexpr, K: tl.constexpr):
    """Candidate j's log-prob: prev[f // K] + q[f % K] for f = flat[j] (a round), or v[j] (the final pass)."""
    if GATHER:
        f = tl.load(flat_ptr + j, mask=valid, other=0)
        return tl.load(prev_ptr + f // K, mask=valid, other=0.0) + tl.load(q_ptr + f % K, mask=valid, other=0.0)
    else:
        return tl.load(v_ptr + j, mask=valid, other=0.0)


@triton.jit
def _sorted_before(x_i, i, x_j, j, valid_j):
    """For each i [BI]: how many of the tile's j [BJ] come before it (value descending, then index)."""
    before = (x_j[None, :] > x_i[:, None]) | ((x_j[None, :] == x_i[:, None]) & (j[None, :] < i[:, None]))
    return tl.sum((before & valid_j[None, :]).to(tl.int32), axis=1)


@triton.jit
def _count_kernel(prev_ptr, q_ptr, flat_ptr, v_ptr, place_ptr, n,
                  GATHER: tl.constexpr, K: tl.constexpr, BI: tl.constexpr, BJ: tl.constexpr, TILES: tl.constexpr):
    """Program (a, b): candidates a*BI.. against tiles b*TILES.. ; partial places added atomically."""
    i = tl.program_id(0) * BI + tl.arange(0, BI)
    valid_i = i < n
    x_i = _value(i, valid_i, prev_ptr, q_ptr, flat_ptr, v_ptr, GATHER, K)
    part = tl.zeros([BI], dtype=tl.int32)
    base = tl.program_id(1) * (TILES * BJ)
    for t in tl.static_range(TILES):
        j = base + t * BJ + tl.arange(0, BJ)
        valid_j = j < n
        x_j = _value(j, valid_j, prev_ptr, q_ptr, flat_ptr, v_ptr, GATHER, K)
        part += _sorted_before(x_i, i, x_j, j, valid_j)
    tl.atomic_add(place_ptr + i, part, mask=valid_i)


@triton.jit
def _round_scatter(prev_ptr, q_ptr, flat_ptr, place_ptr, out_v_ptr, out_i_ptr, n, take,
                   K: tl.constexpr, BS: tl.constexpr):
    i = tl.program_id(0) * BS + tl.arange(0, BS)
    valid = i < n
    f = tl.load(flat_ptr + i, mask=valid, other=0)
    x = tl.load(prev_ptr + f // K, mask=valid, other=0.0) + tl.load(q_ptr + f % K, mask=valid, other=0.0)
    place = tl.load(place_ptr + i, mask=valid, other=0)
    keep = valid & (place < take)
    tl.store(out_v_ptr + place, x, mask=keep)
    tl.store(out_i_ptr + place, f, mask=keep)


@triton.jit
def _final_scatter(v_ptr, f_ptr, depth_ptr, local_ptr, place_ptr, n, m,
                   logp_ptr, depth_out_ptr, local_out_ptr, parent_ptr, rank_ptr, K: tl.constexpr, BS: tl.constexpr):
    i = tl.program_id(0) * BS + tl.arange(0, BS)
    valid = i < n
    place = tl.load(place_ptr + i, mask=valid, other=0)
    keep = valid & (place < m)
    f = tl.load(f_ptr + i, mask=valid, other=0)
    tl.store(logp_ptr + place, tl.load(v_ptr + i, mask=valid, other=0.0), mask=keep)
    tl.store(depth_out_ptr + place, tl.load(depth_ptr + i, mask=valid, other=0), mask=keep)
    tl.store(local_out_ptr + place, tl.load(local_ptr + i, mask=valid, other=0), mask=keep)
    tl.store(parent_ptr + place, f // K, mask=keep)
    tl.store(rank_ptr + place, f % K, mask=keep)


def _count_grid(n: int) -> tuple[int, int]:
    return triton.cdiv(n, BI), triton.cdiv(n, BJ * TILES)


def rank_round(prev: torch.Tensor, q: torch.Tensor, flat: torch.Tensor, out_v: torch.Tensor, out_i: torch.Tensor,
               take: int, k: int, place: torch.Tensor) -> None:
    """One depth: the best ``take`` of the candidates ``prev[f // k] + q[f % k]`` (f in ``flat``), sorted.

    ``place`` [len(flat)] int32 must be zero: it receives every candidate's place.
    """
    n = flat.shape[0]
    _count_kernel[_count_grid(n)](prev, q, flat, prev, place, n, GATHER=True, K=k, BI=BI, BJ=BJ, TILES=TILES)
    _round_scatter[(triton.cdiv(n, BS),)](prev, q, flat, place, out_v, out_i, n, take, K=k, BS=BS)


def rank_final(values: torch.Tensor, flat: torch.Tensor, depth: torch.Tensor, local: torch.Tensor, m: int, k: int,
               place: torch.Tensor, logp: torch.Tensor, depth_out: torch.Tensor, local_out: torch.Tensor,
               parent: torch.Tensor, rank: torch.Tensor) -> None:
    """All depths together: the best ``m`` kept paths, sorted, split into the tree's columns."""
    n = values.shape[0]
    _count_kernel[_count_grid(n)](values, values, flat, values, place, n, GATHER=False, K=k, BI=BI, BJ=BJ, TILES=TILES)
    _final_scatter[(triton.cdiv(n, BS),)](values, flat, depth, local, place, n, m, logp, depth_out, local_out,
                                          parent, rank, K=k, BS=BS)
