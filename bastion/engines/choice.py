"""Engine names, the choice that ``auto`` makes, and the kernel settings, importable without loading any model code.

The hardware job and the command line resolve the engine and its kernels (:class:`Kernels`)
before (or without) building one; keeping them here lets them start without importing
Transformers.  Torch itself
is imported only by the functions that take its devices, so the pipeline can plan its jobs
without it (:mod:`bastion.calibration.planning`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    import torch

ENGINES = ("eager", "static", "compiled")
ENGINE_CHOICES = ("auto", *ENGINES)
# ``auto`` on a CPU: the engine that measured fastest there for the tiny pair.  Its fused
# layers (stacked q/k/v and gate/up multiplies, run uncompiled on a CPU) made AR 10-15%
# faster than ``static`` and speculative steps no slower (docs/performance.md,
# "engine: auto on the CPU"); on CUDA it is always ``compiled``.
CPU_ENGINE = "compiled"


def check_engine(name: str) -> str:
    if name not in ENGINE_CHOICES:
        raise ValueError(f"unknown engine {name!r}; choose one of: {', '.join(ENGINE_CHOICES)}")
    return name


def resolve_engine(name: str, device: torch.device | str) -> str:
    """The engine that runs: ``auto`` is the fastest correct one for the device."""
    if check_engine(name) != "auto":
        return name
    import torch

    return engine_for(name, torch.device(device).type)


def engine_for(name: str, device_type: str) -> str:
    """:func:`resolve_engine` for a device type (``cuda``, ``cpu``), without torch."""
    if check_engine(name) != "auto":
        return name
    return "compiled" if device_type == "cuda" else CPU_ENGINE


def sync(device: torch.device) -> None:
    """Wait for the device (a no-op on the CPU): the boundary every host-side timer needs."""
    if device.type == "cuda":
        import torch  # already loaded: the device is torch's

        torch.cuda.synchronize(device)


# The environment variables that override a run's kernel settings (see :meth:`Kernels.overridden`).
KERNEL_ENV = {"rank": "BASTION_RANK", "blas": "BASTION_BLAS", "drafter": "BASTION_DRAFTER",
              "row_kernel": "BASTION_ROW_KERNEL", "tile_kernel": "BASTION_TILE_KERNEL"}
RANK_CHOICES = ("auto", "torch")
BLAS_CHOICES = ("cublaslt", "cublas")
DRAFTER_CHOICES = ("fused", "module")
NOT_APPLIED = "n/a"  # a choice recorded for a device or engine it does not act on


@dataclass(frozen=True)
class Kernels:
    """Which kernels and code paths the engine runs: every field a setting of the run.

    They change which kernels run, not what is computed (in fp32 the tokens are the same
    either way), but they change step times, so each one is recorded in the fingerprint,
    as :meth:`record` resolves it for the device, and a calibration made under another
    choice is not reused.  The config's ``kernels:`` keys are the field names.

    - ``rank``: ``auto`` runs the fastest exact path of the tree and rule maths (Triton
      kernels on CUDA, the best-first walk or NumPy on a CPU); ``torch`` runs their torch
      references everywhere, as a GPU without Triton does (on CUDA, no Triton kernel at all).
    - ``blas``: the compiled engine's matrix library on CUDA, ``cublaslt`` or ``cublas``.
    - ``drafter``: the compiled engine's DFlash drafter, ``fused`` functions or its own ``module`` layers.
    - ``row_kernel`` / ``tile_kernel``: the compiled engine's Triton row (AR's one-row
      forwards) and tile (a tree's or a block's rows) kernels, on CUDA in bf16 and fp16
      (the tile kernels run only beside the row kernels).
    """

    rank: str = "auto"
    blas: str = "cublaslt"
    drafter: str = "fused"
    row_kernel: bool = True
    tile_kernel: bool = True

    def __post_init__(self) -> None:
        for name, value, choices in (("rank", self.rank, RANK_CHOICES), ("blas", self.blas, BLAS_CHOICES),
                                     ("drafter", self.drafter, DRAFTER_CHOICES)):
            if value not in choices:
                raise ValueError(f"kernels.{name} {value!r}: choose {' or '.join(choices)}")
        for name in ("row_kernel", "tile_kernel"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"kernels.{name} {getattr(self, name)!r}: choose true or false")

    def overridden(self, environ: Mapping[str, str]) -> Kernels:
        """These settings with the ``BASTION_*`` variables of ``environ`` (:data:`KERNEL_ENV`) in
        their place: a variable that is set wins over the config key and the flag."""
        changes: dict[str, Any] = {}
        for name, var in KERNEL_ENV.items():
            text = environ.get(var, "").strip()
            if not text:
                continue
            if name in ("row_kernel", "tile_kernel"):
                if text not in ("0", "1"):
                    raise ValueError(f"{var}={text!r} (it overrides kernels.{name}): use 1 (the kernels) or 0 "
                                     "(the matrix library), or unset it")
                changes[name] = text == "1"
            else:
                choices = {"rank": RANK_CHOICES, "blas": BLAS_CHOICES, "drafter": DRAFTER_CHOICES}[name]
                if text not in choices:
                    raise ValueError(f"{var}={text!r} (it overrides kernels.{name}): use {' or '.join(choices)}, "
                                     "or unset it")
                changes[name] = text
        return replace(self, **changes)

    @classmethod
    def from_environment(cls) -> Kernels:
        """The defaults with the environment's overrides: an engine made outside a run (a
        benchmark, a test) takes these."""
        return cls().overridden(os.environ)

    def applies(self, device_type: str, engine: str, dtype: str) -> dict[str, bool]:
        """Which choices act on an engine of this name (resolved) on this device type, in this dtype."""
        cuda, compiled = device_type == "cuda", engine == "compiled"
        rows = cuda and compiled and dtype in ("bfloat16", "float16") and self.rank != "torch"
        return {"rank": True, "blas": cuda and compiled, "drafter": compiled, "row_kernel": rows,
                "tile_kernel": rows and self.row_kernel}

    def effective(self, device_type: str, engine: str, dtype: str) -> Kernels:
        """These settings with the choices that do not act here at their defaults: a change of
        a GPU-only choice leaves a CPU run's settings, and so its jobs, as they were."""
        default = Kernels()
        applies = self.applies(device_type, engine, dtype)
        return replace(self, **{k: getattr(default, k) for k, on in applies.items() if not on})

    def record(self, device_type: str, engine: str, dtype: str) -> dict[str, Any]:
        """The choices as they act here, for the fingerprint: ``n/a`` where one does not act."""
        applies = self.applies(device_type, engine, dtype)
        return {k: getattr(self, k) if on else NOT_APPLIED for k, on in applies.items()}
