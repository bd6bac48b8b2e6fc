"""Engine names and the choice that ``auto`` makes, importable without loading any model code.

The hardware job and the command line resolve the engine before (or without) building
one; keeping the names here lets them start without importing Transformers.  Torch itself
is imported only by the functions that take its devices, so the pipeline can plan its jobs
without it (:mod:`bastion.calibration.planning`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
