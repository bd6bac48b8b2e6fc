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

from . import fingerprint


class HardwareMismatchError(RuntimeError):
    """A job runs on a device other than the one its hardware key names."""


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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
