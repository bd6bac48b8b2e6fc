"""One Triton launch for a step without a draft: its tapped states into the rows set aside.

A step of this project's rule that does not draft still taps the target's layers, so that
the next draft can take in its row (:meth:`~bastion.engines.dflash_proposer.StaticDFlash.hold_row`).
In torch that is three kernels after the forward: the concatenation of the tapped layers,
the index-copy at the device's count of rows set aside, and the count's increment.  At
T = 1 on a GPU almost every step of the rule is such a step, each bound by launches, and
on H100s the prompts made of them took up to 6% more time than AR's (the medians of four
decode jobs 1.00-1.06; docs/performance.md, "The tiny pair on a CPU and a GPU").  Here one program reads the count, copies each tapped layer's row
into its slice of the row the count names, and increments the count.

Imported only where Triton is installed.
"""

from __future__ import annotations

from typing import Sequence

import torch
import triton
import triton.language as tl

MAX_TAPS = 8  # tapped layers one launch takes (DFlash drafters tap a handful)


@triton.jit
def _pick(j: tl.constexpr, t0, t1, t2, t3, t4, t5, t6, t7):
    """The ``j``-th pointer, chosen when the kernel compiles."""
    if j == 0:
        return t0
    elif j == 1:
        return t1
    elif j == 2:
        return t2
    elif j == 3:
        return t3
    elif j == 4:
        return t4
    elif j == 5:
        return t5
    elif j == 6:
        return t6
    else:
        return t7


@triton.jit
def _hold_kernel(held_ptr, rows_ptr, stride_row, t0, t1, t2, t3, t4, t5, t6, t7, H,
                 NT: tl.constexpr, BH: tl.constexpr):
    row = tl.load(held_ptr)
    dst = rows_ptr + row * stride_row
    col = tl.arange(0, BH)
    for j in tl.static_range(NT):
        src = _pick(j, t0, t1, t2, t3, t4, t5, t6, t7)
        for start in range(0, H, BH):
            keep = start + col < H
            tl.store(dst + j * H + start + col, tl.load(src + start + col, mask=keep), mask=keep)
    tl.store(held_ptr, row + 1)  # one program: every read of the count came before


def serves(taps: Sequence[torch.Tensor], rows: torch.Tensor) -> bool:
    """Whether one launch can write ``taps`` (one row of H each) into a row of ``rows`` [R, len(taps) * H]."""
    if not 0 < len(taps) <= MAX_TAPS or rows.dim() != 2 or rows.stride(1) != 1:
        return False
    h = taps[0].shape[-1]
    return rows.shape[1] == len(taps) * h and all(
        t.numel() == h and t.is_contiguous() and t.dtype == rows.dtype and t.device == rows.device for t in taps)


def hold_row(taps: Sequence[torch.Tensor], rows: torch.Tensor, held: torch.Tensor) -> None:
    """``rows[held] = cat(taps)`` and ``held += 1`` in one launch; ``held`` a 0-dim integer tensor."""
    h = taps[0].shape[-1]
    ptrs = [*taps, *([taps[0]] * (MAX_TAPS - len(taps)))]
    _hold_kernel[(1,)](held, rows, rows.stride(0), *ptrs, h, NT=len(taps), BH=min(1024, triton.next_power_of_2(h)))
