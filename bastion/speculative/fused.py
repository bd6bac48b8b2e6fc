"""Triton kernels where they work: the first call on a device decides, once.

The step functions that have a Triton form (path ranking, the rule's node count) run it
on CUDA when Triton is installed.  Its first call on a device compiles it; if that fails
(a GPU or Triton build the kernel does not serve), the caller's torch reference runs
instead from then on, after one warning.  ``BASTION_RANK=torch`` forces the references.
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from typing import Callable

import torch

from bastion.defaults import torch_references_forced

_WORKS: dict[tuple[str, str], bool] = {}  # (kernel, device) -> whether its Triton form ran


@functools.cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None  # a file-system search: once per process


def use_triton(device: torch.device) -> bool:
    """Triton kernels on CUDA when Triton is installed (``BASTION_RANK=torch`` forces the references)."""
    if torch_references_forced():
        return False
    return device.type == "cuda" and _triton_installed()


def run_triton(name: str, device: torch.device, call: Callable[[], None]) -> bool:
    """Run ``call`` (a Triton kernel's launch) where Triton serves ``device``; False: use the reference."""
    key = (name, str(device))
    if not use_triton(device) or _WORKS.get(key) is False:
        return False
    if key in _WORKS:
        call()
        return True
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - any compile or launch failure means: use the reference
        _WORKS[key] = False
        warnings.warn(f"the Triton kernel {name!r} failed on {device} ({exc!r:.300}); using the torch reference, "
                      "which gives the same results (set BASTION_RANK=torch to skip the Triton kernels)")
        return False
    _WORKS[key] = True
    return True
