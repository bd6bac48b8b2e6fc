"""Small device functions the static engine's step functions share, shaped for CUDA graphs."""

from __future__ import annotations

import math

import torch


def row_argmax(x: torch.Tensor) -> torch.Tensor:
    """``x.argmax(dim=-1)`` for [D, V] with a few rows and a long vocabulary, in two stages.

    Compiled, a plain argmax over 15 rows of 151,936 logits runs as 15 programs (40 us on
    an H200); split into chunks it spreads over the GPU.  The first maximum of the first
    chunk holding the row's maximum is the row's first maximum, as ``argmax`` returns.
    """
    d, v = x.shape
    chunks = math.gcd(v, 64)
    best, where = x.view(d, chunks, v // chunks).max(dim=-1)  # [D, C] each chunk's first maximum
    chunk = best.argmax(dim=-1, keepdim=True)  # [D, 1]
    return (chunk * (v // chunks) + where.gather(1, chunk))[:, 0]
