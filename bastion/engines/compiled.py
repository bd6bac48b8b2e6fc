"""The ``compiled`` engine: the static engine with fused kernels, decided once when the engine is made.

Everything the static engine preallocates and replays stays as it is; four things change.
The target's layers run as the two functions of :class:`~bastion.engines.static_layers.FusedLayers`
(attention and MLP blocks with their norms and residuals fused), the DFlash drafter's
layers likewise (:class:`~bastion.engines.fused_drafter.FusedDrafter`), as are the EAGLE-3
head's layer and its tree growth (:class:`~bastion.engines.fused_eagle3.FusedEagle3Head`),
and on CUDA the tree phase's small element-wise step functions and the commit are
compiled too (path ranking keeps its own kernels, see :mod:`bastion.speculative.path_rank`):
about 100 launches fewer per step.  On a CPU the same functions run uncompiled, which is how CI checks them
against eager.

A :class:`Compilation` says which of these apply, with the run's kernel settings
(:class:`~bastion.engines.choice.Kernels`: the matrix library, the drafter's layers, the
row and tile kernels); the engine asks it for its layers and wraps its step functions
through :meth:`Compilation.step` once, when it is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from bastion.engines.choice import BLAS_CHOICES, Kernels
from bastion.engines.fused_drafter import FusedDrafter
from bastion.engines.fused_eagle3 import FusedEagle3Head
from bastion.engines.static_layers import FusedLayers


@dataclass(frozen=True)
class Compilation:
    """Which parts of the static engine are fused and which are compiled."""

    fused: bool = False  # the fused target and DFlash drafter layers: the compiled engine
    compile: bool = False  # torch.compile them, and the step functions select, build and commit
    kernels: Kernels = field(default_factory=Kernels)  # the run's kernel settings

    @classmethod
    def choose(cls, fused: bool, device: torch.device, compile: bool | None = None,
               kernels: Kernels | None = None) -> Compilation:
        """The static (``fused`` False) or the compiled engine's choice.

        ``compile`` None: torch.compile on CUDA only.  True compiles on a CPU too, with
        Inductor's C++ backend: how the tests and ``benchmarks/compile_count.py`` see, without a
        GPU, which graphs a GPU run compiles.  ``kernels`` None: the defaults with the
        environment's overrides (:meth:`Kernels.from_environment`).
        """
        kernels = Kernels.from_environment() if kernels is None else kernels
        if not fused:
            return cls(kernels=kernels)
        if device.type == "cuda":
            choose_blas(kernels.blas)
        return cls(fused=True, compile=device.type == "cuda" if compile is None else compile, kernels=kernels)

    def layers(self, target) -> FusedLayers | None:
        """The target's fused layers (the compiled engine), or None: the target's own modules."""
        if not self.fused:
            return None
        return FusedLayers(target, compile=self.compile, rows=self.kernels.row_kernel, tiles=self.kernels.tile_kernel)

    def drafter(self, drafter, layers: FusedLayers | None) -> FusedDrafter | None:
        """The DFlash drafter's fused layers where they compute what it does, or None: its own modules.

        ``kernels.drafter: module`` keeps the drafter's own layers (as the static engine runs them).
        """
        if not self.fused or not FusedDrafter.supports(drafter) or self.kernels.drafter == "module":
            return None
        return FusedDrafter(drafter, compile=self.compile, layers=layers)

    def eagle3_head(self, head, layers: FusedLayers | None) -> FusedEagle3Head | None:
        """The EAGLE-3 head's fused layer and tree growth where they compute what it does, or None: its own modules."""
        if not self.fused or not FusedEagle3Head.supports(head):
            return None
        return FusedEagle3Head(head, compile=self.compile, layers=layers)

    def step(self, fn: Callable) -> Callable:
        """A step function as the engine runs it: compiled (dynamic from the start: a static first
        graph is recompiled at the first new size) or as it is."""
        return torch.compile(fn, dynamic=True) if self.compile else fn


def choose_blas(choice: str = "cublaslt") -> None:
    """Matrix multiplies through cuBLASLt, the default (``kernels.blas: cublas`` keeps cuBLAS's own choice).

    For a tree's few dozen rows cuBLAS picks split-K kernels for the output and down
    projections, each followed by a reduction kernel; cuBLASLt picks one kernel without
    the split.  On an H200 at the Qwen3-8B shape a 32-node verification took 5.55 ms
    against 5.76 ms and 609 launches against 681, with AR's step unchanged
    (docs/performance.md).  The setting is the process's: it applies to every
    graph captured after the compiled engine is made, which calibration and decoding share.
    """
    if choice not in BLAS_CHOICES:
        raise ValueError(f"kernels.blas {choice!r}: use cublaslt (the default) or cublas")
    torch.backends.cuda.preferred_blas_library(choice)
