"""One Triton launch for the tree phase's select: each depth's top-k draft log-probabilities.

:func:`bastion.speculative.tree.draft_topk` in torch is a top-k (a multi-pass radix
select and a sort), a log-sum-exp and two copies into the tree phase's buffers: about
33 us of device time a step for the tiny pair's 15 x 4,096 draft logits on an H100, the
top-k alone 27 of them (docs/performance.md, "Where a tree step's time goes").  Here one
program per depth holds its whole row: it takes the log-sum-exp, packs each logit with
its token into one 64-bit key and keeps the k largest keys with ``tl.topk`` (at least two:
a check on an H200 with Triton 3.6 whose first call asked for the top 1 failed there to
compile ``tl.topk``), then writes the log-probabilities (shifted, where asked) and the
tokens straight into the buffers.

The key orders by logit, and on equal logits by lower token id first: a defined order,
so a tree never depends on the kernel's schedule.  ``torch.topk`` leaves the order of
equal logits unspecified; the values agree up to the log-sum-exp's rounding (its sum
runs in another order), which the tests bound.  A row wider than :data:`MAX_VOCAB` is
left to torch: one program cannot hold it, and a form that splits rows was not built.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_VOCAB = 16384  # one program holds the row: 128 KB of 64-bit keys


@triton.jit
def _ordered(x):
    """fp32 -> int32 whose signed order is the floats' order (negatives have their magnitude bits flipped)."""
    bits = x.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _unordered(o):
    """The inverse of :func:`_ordered` (the same flip undoes itself)."""
    return (o ^ ((o >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)


@triton.jit
def _select_kernel(x_ptr, stride_x, V, scale, shift_ptr, logq_ptr, tok_ptr, stride_q, stride_t, k,
                   BV: tl.constexpr, K: tl.constexpr, SCALED: tl.constexpr, SHIFTED: tl.constexpr):
    row = tl.program_id(0)
    col = tl.arange(0, BV)
    x = tl.load(x_ptr + row * stride_x + col, mask=col < V, other=float("-inf")).to(tl.float32)  # [BV]
    s = x / scale if SCALED else x  # as the reference divides
    top = tl.max(s, axis=0)
    lse = top + tl.log(tl.sum(tl.exp(s - top), axis=0))
    # high half: the logit's order; low half: BV - 1 - token, so a lower token wins a tie
    key = (_ordered(x).to(tl.int64) << 32) | (BV - 1 - col).to(tl.int64)
    best = tl.topk(key, K)  # [K] descending
    tok = (BV - 1) - (best & 0xFFFFFFFF)
    val = _unordered((best >> 32).to(tl.int32))
    logq = (val / scale if SCALED else val) - lse
    if SHIFTED:
        logq += tl.load(shift_ptr)
    out = tl.arange(0, K)
    keep = out < k
    tl.store(logq_ptr + row * stride_q + out, logq, mask=keep)
    tl.store(tok_ptr + row * stride_t + out, tok, mask=keep)


def serves(logits: torch.Tensor, k: int) -> bool:
    """Whether the kernel takes this select: a row that fits one program, k no wider than the row."""
    return logits.dim() == 2 and logits.stride(1) == 1 and logits.shape[1] <= MAX_VOCAB and 1 <= k <= logits.shape[1]


def select_topk(logits: torch.Tensor, temperature: float, logq: torch.Tensor, tok: torch.Tensor,
                shift: torch.Tensor | None = None) -> None:
    """Each row's top ``k`` (``logq.shape[1]``) into ``logq`` [D, k] fp32 and ``tok`` [D, k] int64.

    ``logits`` [D, V] (any float dtype, unit stride along V); the log-probabilities are at
    ``temperature`` (0: the drafter's own), plus ``shift`` (a 0-d fp32 tensor) when given.
    """
    d, v = logits.shape
    k = logq.shape[1]
    scale = temperature if temperature > 0 else 1.0
    shift_arg = shift if shift is not None else logq
    _select_kernel[(d,)](logits, logits.stride(0), v, scale, shift_arg, logq, tok, logq.stride(0),
                         tok.stride(0), k, BV=triton.next_power_of_2(v), K=max(2, triton.next_power_of_2(k)),
                         SCALED=scale != 1.0, SHIFTED=shift is not None, num_warps=8)
