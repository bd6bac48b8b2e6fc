"""What the row and tile kernel benchmarks share: the compiled references, the best setting, a result row's error and bandwidth.

Both time a product of the Qwen3-8B shape as 36 launches over distinct weights in one CUDA
graph, against ``F.linear`` and against the compiled engine's own arithmetic around it;
these helpers keep the two reports computed the same way.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from bastion.engines.static_layers import _rms

EPS = 1e-6  # the Qwen3 norms' epsilon


def references() -> dict[str, Callable]:
    """The compiled engine's arithmetic around a product, compiled, by fusion: ``fn(x, ln, w, r)``.

    ``norm``: the norm before it; ``residual``: the residual after it; ``glu_residual``
    (row kernel): SiLU-times-up before it and the residual after; ``gated`` (tile kernel):
    the norm before it and SiLU-times-up after.
    """
    def glu(x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, -1)
        return F.silu(gate) * up

    fns = {
        "norm": lambda x, ln, w, r: F.linear(_rms(x, ln, EPS), w),
        "residual": lambda x, ln, w, r: r + F.linear(x, w),
        "glu_residual": lambda x, ln, w, r: r + F.linear(glu(x), w),
        "gated": lambda x, ln, w, r: glu(F.linear(_rms(x, ln, EPS), w)),
    }
    return {name: torch.compile(fn, dynamic=False) for name, fn in fns.items()}


def fastest(timing: dict[tuple, float]) -> tuple:
    """The setting with the least µs (the first of equals); a clear error when none ran."""
    if not timing:
        raise RuntimeError("no kernel setting ran: every one failed to compile or launch (see the lines above)")
    return min(timing, key=timing.get)


def finish_row(row: dict, got: torch.Tensor, ref: torch.Tensor, weight_bytes: int) -> dict:
    """Adds the kernel's largest error relative to the reference's largest value, and each
    timed variant's weight stream in TB/s (``row[<variant>_us]`` for blas, compiled, kernel)."""
    got, ref = got.float(), ref.float()
    row["max_rel_err"] = float((got - ref).abs().max() / ref.abs().max())
    for key in ("blas", "compiled", "kernel"):
        row[key + "_tbs"] = weight_bytes / (row[key + "_us"] * 1e-6) / 1e12
    return row
