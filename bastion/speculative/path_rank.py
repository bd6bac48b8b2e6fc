"""Ranking draft paths: the best ``m`` paths over all depths, in a fixed, exact order.

Given each depth's top-K log-probabilities ``logq`` [D, K] (sorted descending), a path
(r_1..r_d) has log-probability sum_d logq[d, r_d].  The best paths of depth d+1 extend
best paths of depth d, so the search keeps the best ``take`` paths per depth (a round per
depth) and then orders all kept paths together.  Every selection here is a *stable
descending sort* of a candidate list: higher log-probability first, and on exact ties the
earlier candidate first.  That order is fully defined, so the two implementations below
give the same paths bit for bit:

- :func:`_rank_torch`: ``torch.sort`` per round (any device; the reference).
- :func:`_rank_numpy` (CPU): the same rounds in NumPy.  A round is a handful of tiny
  operations, and on a CPU each torch call costs several microseconds of dispatch, so the
  fifteen rounds of a DFlash block took 2.4 ms of a ~60 ms step on one CPU thread; NumPy's
  calls cost a fraction of that.  A stable ascending argsort of the negated sums is the
  same order as a stable descending sort (negation is exact).
- :func:`_rank_triton` (CUDA with Triton): each round gives every candidate its place by
  counting, with binary searches over the parents' values held in registers, the
  candidates that sort before it, and writes the kept ones to their places: one launch
  per round (see :mod:`bastion.speculative.path_rank_kernels`).
  One launch for all rounds, its programs meeting at a grid-wide barrier between rounds,
  was slower on an H200 (docs/performance.md, "Path ranking").
  PyTorch's top-k makes several one-block passes over a few thousand numbers per round;
  fifteen dependent rounds of it cost 0.82 ms of a 512-node step on an H200.

Both read the same fp32 sums ``prev[row] + logq[d, col]``, computed the same way.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from bastion.defaults import torch_references_forced
from bastion.speculative.fused import run_triton

_LAYOUT: dict[tuple[int, int, int, str], tuple[torch.Tensor, torch.Tensor]] = {}


def layout(d_max: int, k: int, m: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Depth and within-depth index of every kept path, in kept order; fixed by (D, K, m), so cached."""
    key = (d_max, k, m, str(device))
    if key not in _LAYOUT:
        sizes = _kept(d_max, k, m)
        depth = torch.cat([torch.full((w,), d + 1, dtype=torch.long) for d, w in enumerate(sizes)])
        local = torch.cat([torch.arange(w) for w in sizes])
        _LAYOUT[key] = (depth.to(device), local.to(device))
    return _LAYOUT[key]


def _kept(d_max: int, k: int, m: int) -> list[int]:
    """Paths kept at each depth: min(m, k ** depth)."""
    sizes, width = [], 1
    for _ in range(d_max):
        width = min(m, width * k)
        sizes.append(width)
    return sizes


@functools.lru_cache(maxsize=1024)
def ranked_count(d_max: int, k: int, m: int) -> int:
    """How many paths :func:`top_paths` returns for ``m``: ``m``, or all there are if fewer."""
    return min(m, sum(_kept(d_max, k, m)))


_CANDIDATES: dict[tuple[int, int, int, str], torch.Tensor] = {}


def candidates(p: int, k: int, take: int, device: torch.device) -> torch.Tensor:
    """Flat indices ``i * k + j`` (ascending) of the (parent i, token j) pairs that can rank in the top ``take``.

    Parents and tokens are both sorted best first, so pair (i, j) is beaten or tied by all
    (i' <= i, j' <= j): (i + 1)(j + 1) pairs.  Only pairs with (i + 1)(j + 1) <= take can
    be among the best ``take``; there are about take * ln(take) of them instead of p * k.
    Dropping the others keeps the stable order of the survivors, so the result is exact.
    """
    key = (p, k, take, str(device))
    if key not in _CANDIDATES:
        rows = [torch.arange(min(k, take // (i + 1))) + i * k for i in range(min(p, take))]
        _CANDIDATES[key] = torch.cat(rows).to(device)
    return _CANDIDATES[key]


def top_paths(logq: torch.Tensor, m: int, out: tuple[torch.Tensor, ...] | None = None) -> tuple[torch.Tensor, ...]:
    """The ``m`` most probable paths over all depths (root excluded), best first.

    ``logq`` [D, K] fp32, each row sorted descending.  Returns (logp, depth, local index,
    parent's local index, token rank), each [min(m, paths kept)]; with ``out`` (five
    buffers of at least that length: fp32, then int64) they are written there and the
    returned tensors are views of it (the Triton kernel writes them in place).
    """
    ranked: list[tuple[torch.Tensor, ...]] = []
    if run_triton("path_rank", logq.device, lambda: ranked.append(_rank_triton(logq, m, out))):
        return ranked[0]
    found = _rank_numpy(logq, m) if logq.device.type == "cpu" and not torch_references_forced() else _rank_torch(logq, m)
    if out is None:
        return found
    for buf, t in zip(out, found):
        buf[: t.shape[0]].copy_(t)
    return tuple(buf[: t.shape[0]] for buf, t in zip(out, found))


def _rank_torch(logq: torch.Tensor, m: int) -> tuple[torch.Tensor, ...]:
    d_max, k = logq.shape
    prev = logq.new_zeros(1)  # depth 0: the root, log-prob 0
    vals, idxs = [], []
    for d in range(d_max):
        take = min(m, prev.shape[0] * k)
        flat = candidates(prev.shape[0], k, take, logq.device)
        v, order = torch.sort(prev[flat // k] + logq[d][flat % k], descending=True, stable=True)
        vals.append(v[:take])
        idxs.append(flat[order[:take]])
        prev = vals[-1]
    all_v, all_i = torch.cat(vals), torch.cat(idxs)
    depth, local = layout(d_max, k, m, logq.device)
    order = torch.sort(all_v, descending=True, stable=True).indices[:m]
    all_i = all_i[order]
    return all_v[order], depth[order], local[order], torch.div(all_i, k, rounding_mode="floor"), all_i % k


_SPLIT: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def _split(p: int, k: int, take: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`candidates` on the CPU as NumPy arrays: (flat index, parent row, token column)."""
    key = (p, k, take)
    if key not in _SPLIT:
        flat = candidates(p, k, take, torch.device("cpu")).numpy()
        _SPLIT[key] = (flat, flat // k, flat % k)
    return _SPLIT[key]


def _rank_numpy(logq: torch.Tensor, m: int) -> tuple[torch.Tensor, ...]:
    """:func:`_rank_torch` in NumPy for CPU tensors: the same fp32 sums, the same stable order."""
    q = logq.detach().numpy()  # [D, K] fp32, shares memory
    d_max, k = q.shape
    prev = np.zeros(1, dtype=q.dtype)
    vals, idxs = [], []
    for d in range(d_max):
        take = min(m, prev.shape[0] * k)
        flat, row, col = _split(prev.shape[0], k, take)
        sums = prev[row] + q[d][col]  # fp32 + fp32, rounded as torch rounds it
        order = np.argsort(-sums, kind="stable")[:take]
        vals.append(sums[order])
        idxs.append(flat[order])
        prev = vals[-1]
    all_v, all_i = np.concatenate(vals), np.concatenate(idxs)
    depth, local = (t.numpy() for t in layout(d_max, k, m, logq.device))
    order = np.argsort(-all_v, kind="stable")[:m]
    all_i = all_i[order]
    return tuple(torch.from_numpy(a) for a in (all_v[order], depth[order], local[order], all_i // k, all_i % k))


def _rank_triton(logq: torch.Tensor, m: int, out: tuple[torch.Tensor, ...] | None = None) -> tuple[torch.Tensor, ...]:
    from bastion.speculative import path_rank_kernels as kern

    d_max, k = logq.shape
    if logq.stride(1) != 1:  # a round reads its depth's row as one vector; a row-strided view serves as it is
        logq = logq.contiguous()
    depth, local = layout(d_max, k, m, logq.device)
    offsets, sizes, longest = _lists(d_max, k, m, logq.device)
    n = depth.shape[0]
    all_v = torch.empty(n, dtype=torch.float32, device=logq.device)  # every round's kept paths, depth-major
    all_i = torch.empty(n, dtype=torch.long, device=logq.device)
    prev, off, p = _root(logq.device), 0, 1
    for d in range(d_max):
        take = min(m, p * k)
        v, i = all_v[off : off + take], all_i[off : off + take]
        kern.rank_round(prev, logq[d], candidates(p, k, take, logq.device), v, i, take, k)
        prev, off, p = v, off + take, take
    got = min(m, n)
    if out is None:
        out = torch.empty(got, dtype=torch.float32, device=logq.device), *(
            torch.empty(got, dtype=torch.long, device=logq.device) for _ in range(4))
    out = tuple(t[:got] for t in out)
    kern.rank_final(all_v, all_i, depth, local, offsets, sizes, longest, got, k, *out)
    return out


_ROOT: dict[str, torch.Tensor] = {}


def _root(device: torch.device) -> torch.Tensor:
    """The root's log-probability [1] (0.0), made once: a fresh one would be a fill kernel in every ranking graph."""
    if str(device) not in _ROOT:
        _ROOT[str(device)] = torch.zeros(1, dtype=torch.float32, device=device)
    return _ROOT[str(device)]


_LISTS: dict[tuple[int, int, int, str], tuple[torch.Tensor, torch.Tensor, int]] = {}


def _lists(d_max: int, k: int, m: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Start and length [D] (int32) of each depth's kept list in the depth-major layout, and the longest."""
    key = (d_max, k, m, str(device))
    if key not in _LISTS:
        sizes = _kept(d_max, k, m)
        starts = [sum(sizes[:d]) for d in range(d_max)]
        as_t = lambda x: torch.tensor(x, dtype=torch.int32).to(device)  # noqa: E731
        _LISTS[key] = (as_t(starts), as_t(sizes), max(sizes))
    return _LISTS[key]
