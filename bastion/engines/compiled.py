"""The ``compiled`` engine: the static engine with fused kernels.

Everything the static engine preallocates and replays stays as it is; three things change.
The target's layers run as the two functions of :class:`~bastion.engines.static_layers.FusedLayers`
(attention and MLP blocks with their norms and residuals fused), the DFlash drafter's
layers likewise (:class:`~bastion.engines.fused_drafter.FusedDrafter`), and on CUDA the tree
phase's small element-wise step functions are compiled too (path ranking keeps its own
kernels, see :mod:`bastion.speculative.path_rank`): about 100 launches fewer per step.
On a CPU the same functions run uncompiled, which is how CI checks them against eager.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

from bastion.engines.fused_drafter import FusedDrafter
from bastion.engines.static_layers import FusedLayers

if TYPE_CHECKING:
    from bastion.engines.static_engine import StaticEngine


def fuse(engine: StaticEngine, compile: bool | None = None) -> None:
    """Turn a static engine into the compiled one, in place, before any graph is captured.

    ``compile`` None: torch.compile on CUDA only.  True compiles on a CPU too, with
    Inductor's C++ backend: how the tests and ``benchmarks/compile_count.py`` see, without a
    GPU, which graphs a GPU run compiles.
    """
    on = engine.device.type == "cuda" if compile is None else compile
    if engine.device.type == "cuda":
        prefer_blas_lt()
    engine.fused = FusedLayers(engine.target, compile=on)
    # BASTION_DRAFTER=module keeps the drafter's own layers (as the static engine runs them)
    if engine.drafter is not None and FusedDrafter.supports(engine.drafter) and os.environ.get("BASTION_DRAFTER") != "module":
        engine.fused_drafter = FusedDrafter(engine.drafter, compile=on, layers=engine.fused)
    engine.steps_compiled = on
    if on:  # dynamic from the start: a static first graph is recompiled at the first new size
        engine.select = torch.compile(engine.select, dynamic=True)
        engine.build = torch.compile(engine.build, dynamic=True)
        engine.commit = torch.compile(engine.commit, dynamic=True)


def prefer_blas_lt() -> None:
    """Matrix multiplies through cuBLASLt (``BASTION_BLAS=cublas`` keeps cuBLAS's own choice).

    For a tree's few dozen rows cuBLAS picks split-K kernels for the output and down
    projections, each followed by a reduction kernel; cuBLASLt picks one kernel without
    the split.  On an H200 at the Qwen3-8B shape a 32-node verification took 5.55 ms
    against 5.76 ms and 609 launches against 681, with AR's step unchanged
    (docs/performance.md, session 16).  The setting is the process's: it applies to every
    graph captured after the compiled engine is made, which calibration and decoding share.
    """
    choice = os.environ.get("BASTION_BLAS", "cublaslt")
    if choice not in ("cublaslt", "cublas"):
        raise ValueError(f"BASTION_BLAS={choice!r}: use cublaslt (the default) or cublas")
    torch.backends.cuda.preferred_blas_library(choice)
