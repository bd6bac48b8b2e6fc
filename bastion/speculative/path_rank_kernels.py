"""The Triton kernel of :mod:`bastion.speculative.path_rank` (imported only where Triton is installed).

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

Each tile of candidates knows their places outright and writes the kept ones there: no
atomic partial counts, no zeroed buffer.  The comparisons are those of the torch
reference (the same fp32 sums, ties broken by list position), so the paths are the same
bit for bit.

**One launch for all rounds.**  A round reads the list the round before it wrote, so each
round used to be a launch of its own: fifteen tiny launches and a final one for a DFlash
block, each costing about as much as its work inside a CUDA graph.  Here one launch runs
them all.  Its programs (at most one per multiprocessor, so all of them are resident at
once) split each round's tiles and then wait for one another at a grid-wide barrier: a
counter each program raises on arrival (release) and polls until every program has
arrived (acquire).  Reads of the lists go past the multiprocessor's L1 (``.cg``), which
is not coherent across programs.  The last program out resets the counters for the next
launch.  A poll gives up after ``SPIN_LIMIT`` tries and counts the failure in the third
counter, so a broken barrier shows as a test failure, never as a hung GPU.  Under Triton's
interpreter, which runs programs one after another, one program does everything.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

LANES = 512  # (candidate, column) pairs per tile (H200 sweep: 512 beat 1024-4096, docs/performance.md)
WARPS = 4  # warps per program
SPIN_LIMIT = 1 << 20  # polls of a barrier before it gives up (each is an L2 round trip, about a microsecond)


@triton.jit
def _prefix_before(base, add, v, length, before_tie, live, ITERS: tl.constexpr):
    """Per lane: how many leading entries of ``base[0..length) + add`` sort before value ``v``.

    ``base`` (pointers) is sorted descending, so the entries before ``v`` (larger, or equal
    at a position below ``before_tie``) form a prefix; ITERS halvings find its end.  Where
    ``live`` is false every entry reads as 0.0 (the root's log-probability).
    """
    lo = tl.zeros_like(length)
    hi = length
    for _ in tl.static_range(ITERS):
        active = lo < hi
        mid = (lo + hi) // 2
        x = tl.load(base + mid, mask=active & live, other=0.0, cache_modifier=".cg") + add
        right = active & ((x > v) | ((x == v) & (mid < before_tie)))
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(active & ~right, mid, hi)
    return lo


@triton.jit
def _grid_sync(sync_ptr, target, SPIN: tl.constexpr):
    """Wait until the arrival counter reaches ``target``: every program has finished the round."""
    tl.debug_barrier()  # the program's own writes first (the release below covers them)
    tl.atomic_add(sync_ptr, 1, sem="release", scope="gpu")
    seen = tl.atomic_add(sync_ptr, 0, sem="acquire", scope="gpu")
    spins = 0
    while (seen < target) & (spins < SPIN):
        seen = tl.atomic_add(sync_ptr, 0, sem="acquire", scope="gpu")
        spins += 1
    if seen < target:
        tl.atomic_add(sync_ptr + 2, 1)  # gave up: the results are not to be trusted
    tl.debug_barrier()


@triton.jit
def _round_tile(t, q_row, v_ptr, i_ptr, cand_ptr, n, rows, take, prev, out, live,
                K: tl.constexpr, BK: tl.constexpr, BI: tl.constexpr, ITERS: tl.constexpr):
    """Candidates t*BI..: their place among all candidates of the round; the first ``take`` are stored."""
    c = t * BI + tl.arange(0, BI)  # [BI]
    valid = c < n
    f = tl.load(cand_ptr + c, mask=valid, other=0)
    i = (f // K).to(tl.int32)
    j = (f % K).to(tl.int32)
    base = v_ptr + prev  # the parents' list, sorted (the root's 0.0 where not live)
    v = tl.load(base + i, mask=valid & live, other=0.0, cache_modifier=".cg") + tl.load(q_row + j, mask=valid,
                                                                                          other=0.0)
    col = tl.arange(0, BK)  # [BK] token ranks j'
    q_col = tl.load(q_row + col, mask=col < K, other=0.0)
    present = tl.where(col < K, tl.minimum(rows, take // (col + 1)), 0)  # rows in column j'
    length = tl.zeros([BI, BK], dtype=tl.int32) + present[None, :]
    # on a tie, (i', j') comes first if its flat index i' * K + j' is smaller: i' < i + [j' < j]
    tie = i[:, None] + (col[None, :] < j[:, None]).to(tl.int32)
    count = _prefix_before(base + tl.zeros([1, BK], dtype=tl.int32), q_col[None, :], v[:, None], length, tie, live,
                           ITERS)
    place = tl.sum(count, axis=1)  # [BI]
    keep = valid & (place < take)
    tl.store(v_ptr + out + place, v, mask=keep)
    tl.store(i_ptr + out + place, f, mask=keep)


@triton.jit
def _final_tile(t, v_ptr, i_ptr, depth_ptr, local_ptr, start_ptr, size_ptr, n, m, D,
                logp_ptr, depth_out_ptr, local_out_ptr, parent_ptr, rank_ptr,
                K: tl.constexpr, BD: tl.constexpr, BI: tl.constexpr, ITERS: tl.constexpr):
    """Kept paths e = t*BI.. (depth-major lists, each sorted): place among all; the first ``m`` are stored."""
    e = t * BI + tl.arange(0, BI)  # [BI]
    valid = e < n
    v = tl.load(v_ptr + e, mask=valid, other=0.0, cache_modifier=".cg")
    a = tl.load(depth_ptr + e, mask=valid, other=1).to(tl.int32) - 1  # its list
    r = tl.load(local_ptr + e, mask=valid, other=0).to(tl.int32)  # its position there
    lists = tl.arange(0, BD)
    live = lists < D
    off = tl.load(start_ptr + lists, mask=live, other=0)
    size = tl.load(size_ptr + lists, mask=live, other=0)
    length = tl.zeros([BI, BD], dtype=tl.int32) + size[None, :]
    # on a tie, all of an earlier list's entries come first and none of a later list's
    tie = tl.where(lists[None, :] < a[:, None], size[None, :], 0)
    count = _prefix_before(v_ptr + off[None, :], 0.0, v[:, None], length, tie, True, ITERS)
    count = tl.where(lists[None, :] == a[:, None], r[:, None], count)  # its own list: the entries above it
    place = tl.sum(count, axis=1)
    keep = valid & (place < m)
    f = tl.load(i_ptr + e, mask=valid, other=0, cache_modifier=".cg")
    tl.store(logp_ptr + place, v, mask=keep)
    tl.store(depth_out_ptr + place, tl.load(depth_ptr + e, mask=valid, other=0), mask=keep)
    tl.store(local_out_ptr + place, tl.load(local_ptr + e, mask=valid, other=0), mask=keep)
    tl.store(parent_ptr + place, f // K, mask=keep)
    tl.store(rank_ptr + place, f % K, mask=keep)


@triton.jit
def _rank_kernel(q_ptr, q_stride, plan_ptr, cand_ptr, v_ptr, i_ptr, depth_ptr, local_ptr, n_kept, m, D, sync_ptr,
                 logp_ptr, depth_out_ptr, local_out_ptr, parent_ptr, rank_ptr,
                 K: tl.constexpr, BK: tl.constexpr, BI: tl.constexpr, ITERS: tl.constexpr,
                 BD: tl.constexpr, BF: tl.constexpr, ITERS_F: tl.constexpr, SPIN: tl.constexpr):
    """Every round, a grid-wide barrier after each, then the final pass; ``plan_ptr`` [6, D] int32:
    per round its candidates' offset and count, the parents kept, the paths kept, and the start of the
    list it reads and of the list it writes."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    for d in range(0, D):
        c_off = tl.load(plan_ptr + d)
        n = tl.load(plan_ptr + D + d)
        rows = tl.load(plan_ptr + 2 * D + d)
        take = tl.load(plan_ptr + 3 * D + d)
        prev = tl.load(plan_ptr + 4 * D + d)
        out = tl.load(plan_ptr + 5 * D + d)
        for t in range(pid, (n + BI - 1) // BI, programs):
            _round_tile(t, q_ptr + d * q_stride, v_ptr, i_ptr, cand_ptr + c_off, n, rows, take, prev, out, d > 0,
                        K, BK, BI, ITERS)
        _grid_sync(sync_ptr, (d + 1) * programs, SPIN)
    for t in range(pid, (n_kept + BF - 1) // BF, programs):
        _final_tile(t, v_ptr, i_ptr, depth_ptr, local_ptr, plan_ptr + 5 * D, plan_ptr + 3 * D, n_kept, m, D,
                    logp_ptr, depth_out_ptr, local_out_ptr, parent_ptr, rank_ptr, K, BD, BF, ITERS_F)
    left = tl.atomic_add(sync_ptr + 1, 1, sem="acq_rel", scope="gpu")
    if left == programs - 1:  # the last program out: every other one has passed every barrier
        tl.atomic_xchg(sync_ptr, 0)
        tl.atomic_xchg(sync_ptr + 1, 0)


_SYNC: dict[str, torch.Tensor] = {}


def sync_counters(device: torch.device) -> torch.Tensor:
    """The barrier's counters on ``device`` [3] int32: arrivals, departures, polls that gave up."""
    key = str(device)
    if key not in _SYNC:  # made on a warm-up call, outside any graph capture
        _SYNC[key] = torch.zeros(3, dtype=torch.int32, device=device)
    return _SYNC[key]


def _programs(tiles: int, device: torch.device) -> int:
    """Programs of one launch: one per tile up to one per multiprocessor (all resident at once)."""
    if os.environ.get("TRITON_INTERPRET") == "1" or device.type != "cuda":
        return 1  # the interpreter runs programs one after another: a barrier would wait forever
    return max(1, min(tiles, torch.cuda.get_device_properties(device).multi_processor_count))


def _iters(longest: int) -> int:
    """Halvings that shrink any range of up to ``longest`` entries to nothing."""
    return max(1, int(longest).bit_length())


def rank_paths(logq: torch.Tensor, plan: torch.Tensor, cand: torch.Tensor, depth: torch.Tensor, local: torch.Tensor,
               most: tuple[int, int, int], values: torch.Tensor, flat: torch.Tensor, out: tuple[torch.Tensor, ...]
               ) -> None:
    """Every round and the final pass in one launch; the best ``out[0].shape[0]`` paths into ``out``.

    ``logq`` [D, K] (rows sorted, unit stride along K); ``plan`` [6, D] int32 and ``cand`` (the
    rounds' candidates, concatenated) from :func:`bastion.speculative.path_rank.rank_plan`;
    ``depth`` and ``local`` [N] the kept paths' layout; ``most``: the most candidates of a
    round, parents of a round and paths of one depth; ``values`` [N] fp32 and ``flat`` [N]
    int64 hold the kept lists; ``out``: (logp fp32, depth, local, parent, rank int64).
    """
    assert logq.stride(1) == 1, "each depth's log-probabilities must be contiguous"
    d, k = logq.shape
    n_kept = depth.shape[0]
    bk, bd = triton.next_power_of_2(k), triton.next_power_of_2(d)
    bi, bf = max(1, LANES // bk), max(1, LANES // bd)
    grid = _programs(max(triton.cdiv(most[0], bi), triton.cdiv(n_kept, bf)), logq.device)
    _rank_kernel[(grid,)](logq, logq.stride(0), plan, cand, values, flat, depth, local, n_kept, out[0].shape[0], d,
                          sync_counters(logq.device), *out,
                          K=k, BK=bk, BI=bi, ITERS=_iters(most[1]), BD=bd, BF=bf, ITERS_F=_iters(most[2]),
                          SPIN=SPIN_LIMIT, num_warps=WARPS)
