"""Small device functions the static engine's step functions share, shaped for CUDA graphs."""

from __future__ import annotations

import math

import torch


def argmax_chunks(vocab: int) -> int:
    """How many equal chunks :func:`row_argmax` splits a ``vocab``-long row into (at most 64)."""
    return math.gcd(int(vocab), 64)


def row_argmax(x: torch.Tensor, chunks: int | None = None) -> torch.Tensor:
    """``x.argmax(dim=-1)`` for [D, V] with a few rows and a long vocabulary, in two stages.

    Compiled, a plain argmax over 15 rows of 151,936 logits runs as 15 programs (40 us on
    an H200); split into chunks it spreads over the GPU.  The first maximum of the first
    chunk holding the row's maximum is the row's first maximum, as ``argmax`` returns.
    A compiled caller passes ``chunks`` (:func:`argmax_chunks` of its vocabulary) as a
    constant: with V a symbolic size, ``math.gcd`` of it broke the caller's graph in two.
    """
    d, v = x.shape
    if chunks is None:
        chunks = argmax_chunks(v)
    width = v // chunks
    best, where = x.view(d, chunks, width).max(dim=-1)  # [D, C] each chunk's first maximum
    chunk = best.argmax(dim=-1, keepdim=True)  # [D, 1]
    return (chunk * width + where.gather(1, chunk))[:, 0]
