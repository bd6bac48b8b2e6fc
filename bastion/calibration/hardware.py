"""Hardware keys: naming the device a result belongs to, and checking a job landed on it.

Results live under ``results/{hardware}/...``.  ``auto`` means the local device's own
key (``nvidia-h200``, ``cpu-amd-epyc``...).  On a cluster the user names the key
(``--config hardware=a100``) and the configuration maps it to a device-name pattern; a
job that lands on another device refuses to run, because its numbers would be filed
under the wrong hardware.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from bastion.calibration import fingerprint


class HardwareMismatchError(RuntimeError):
    """A job runs on a device other than the one its hardware key names."""


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(arg: str, local_rank: int | None = None) -> torch.device:
    """``auto``/``cpu``/``cuda``/``cuda:N`` to a concrete device (``local_rank`` under torchrun)."""
    dev = default_device() if arg == "auto" else torch.device(arg)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {arg!r} requested but no CUDA device is visible (check CUDA_VISIBLE_DEVICES)")
        if dev.index is None:
            dev = torch.device("cuda", local_rank if local_rank is not None else torch.cuda.current_device())
        torch.cuda.set_device(dev)
    return dev


def resolve_dtype(arg: str, device: torch.device) -> torch.dtype:
    """``auto`` is bf16 on a GPU and fp32 on the CPU (where bf16 matmuls are emulated)."""
    if arg == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, arg)


def detect_key(device: torch.device | str | None = None) -> str:
    """The hardware key of ``device`` (default: the first GPU, else the CPU)."""
    device = torch.device(device) if device is not None else default_device()
    name = fingerprint.device_name(device)
    return fingerprint.hardware_key({"device_name": name, "device_type": device.type})


def check_device(expected_key: str, pattern: str | None, device: torch.device | str | None = None) -> dict[str, Any]:
    """Verify that this process's device matches ``expected_key``; return its description.

    With a configured ``pattern`` (a regular expression on the device name, e.g. ``A100``)
    the name must match it; without one the detected key must equal ``expected_key``.
    """
    device = torch.device(device) if device is not None else default_device()
    name = fingerprint.device_name(device)
    detected = fingerprint.hardware_key({"device_name": name, "device_type": device.type})
    ok = re.search(pattern, name, re.IGNORECASE) is not None if pattern is not None else detected == expected_key
    if not ok:
        how = (
            f"its pattern {pattern!r} does not match the device name"
            if pattern is not None
            else f"this device's key is {detected!r}; map {expected_key!r} to a device-name pattern under "
            "hardware_keys in config.yaml, or run with --config hardware=auto"
        )
        raise HardwareMismatchError(
            f"this job is filed under hardware key {expected_key!r} but runs on {name!r} ({device.type}): {how}"
        )
    return {"hardware": expected_key, "detected_key": detected, "device_name": name, "device_type": device.type}
