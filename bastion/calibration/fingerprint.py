"""Software and hardware fingerprints carried by every calibration, profile and result.

A calibrated cost model describes one device running one software stack; reusing it
after a driver, torch, kernel or dtype change silently mis-sizes every tree.  So every
file we write records the fingerprint, and a decode refuses a calibration whose
fingerprint differs, naming the fields and the way to recalibrate.

The run's kernel settings are part of it as they act on the device (``n/a`` where one
does not: the matrix library on a CPU), and so is the number of CPU threads torch uses,
which sets a CPU's step times; on a GPU the threads are recorded but not compared, since
the host only launches the device's work there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import re
import socket
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bastion.engines.choice import Kernels

if TYPE_CHECKING:
    import torch

#: Fields that must match between a calibration and the run that uses it.
COMPARED = ("device_name", "driver", "cuda", "torch", "transformers", "dtype", "attn_impl", "engine", "kernels",
            "threads", "bastion")
# Compared on a CPU only: a GPU's step times do not depend on the host's threads.
CPU_ONLY = ("threads",)
# The setting that chooses a field, named when a calibration made under another one is refused.
SETTING = {"threads": "--threads / cpu_threads", "kernels.rank": "--rank-kernels / kernels.rank",
           "kernels.blas": "--blas / kernels.blas", "kernels.drafter": "--drafter-layers / kernels.drafter",
           "kernels.row_kernel": "--[no-]row-kernel / kernels.row_kernel",
           "kernels.tile_kernel": "--[no-]tile-kernel / kernels.tile_kernel"}


class FingerprintMismatch(RuntimeError):
    """A calibration was made on a different device or software stack, or with other kernel or thread settings."""


@lru_cache(maxsize=1)
def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


@lru_cache(maxsize=1)
def _nvidia_driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return _cpu_name()


def collect(device: torch.device | str, dtype: torch.dtype, attn_impl: str, engine: str = "eager",
            kernels: Kernels | None = None) -> dict[str, Any]:
    """The fingerprint of this process on ``device``, with the ``kernels`` of its engine (None:
    the defaults with the environment's overrides) and the threads torch uses now."""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    cuda = device.type == "cuda"
    dtype_name = str(dtype).removeprefix("torch.")
    kernels = Kernels.from_environment() if kernels is None else kernels
    return assemble(
        device.type, device_name(device), driver=_nvidia_driver() if cuda else "none",
        cuda=torch.version.cuda if cuda else "none", torch_version=torch.__version__,
        dtype=dtype_name, attn_impl=attn_impl, engine=engine,
        kernels=kernels.record(device.type, engine, dtype_name), threads=torch.get_num_threads(),
    )


def cpu_collect(torch_version: str, dtype: str, attn_impl: str, engine: str, kernels: Kernels,
                threads: int) -> dict[str, Any]:
    """What :func:`collect` answers on the CPU, from torch's version string, a dtype's name
    (``float32``...) and the threads a job will set, without importing torch
    (:mod:`bastion.calibration.planning`)."""
    return assemble("cpu", _cpu_name(), driver="none", cuda="none", torch_version=torch_version,
                    dtype=dtype, attn_impl=attn_impl, engine=engine, kernels=kernels.record("cpu", engine, dtype),
                    threads=threads)


def assemble(device_type: str, name: str, *, driver: str, cuda: str, torch_version: str, dtype: str,
             attn_impl: str, engine: str, kernels: dict[str, Any], threads: int) -> dict[str, Any]:
    """The fingerprint's fields, in their order, with this process's package versions and host."""
    # the installed Transformers' version, without importing it (seconds)
    from importlib.metadata import version

    from bastion import __version__

    return {
        "device_type": device_type,
        "device_name": name,
        "driver": driver,
        "cuda": cuda,
        "torch": torch_version,
        "transformers": version("transformers"),
        "dtype": dtype,
        "attn_impl": attn_impl,
        "engine": engine,
        "kernels": kernels,
        "threads": int(threads),
        "bastion": __version__,
        # informational: where the job ran (not compared)
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "host": socket.gethostname(),
        "python": platform.python_version(),
    }


@lru_cache(maxsize=1)
def source_digest() -> str:
    """A hash of the decoding code: every ``.py`` file of ``bastion`` (but its data and report
    layers, which cannot change a decoded token) and of ``dflash``.

    The version string stays put while the code changes; a record of a run resumed after an
    edit would otherwise sit beside records of other code under one run key.
    """
    h = hashlib.sha256()
    for package, skip in (("bastion", ("data", "report")), ("dflash", ())):
        spec = importlib.util.find_spec(package)
        for root in (Path(p) for p in (spec.submodule_search_locations or []) if spec is not None):
            for path in sorted(root.rglob("*.py")):
                rel = path.relative_to(root)
                if rel.parts[0] in skip or "__pycache__" in rel.parts:
                    continue
                h.update(f"{package}/{rel.as_posix()}".encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


def compared(fp: dict[str, Any]) -> tuple[str, ...]:
    """The fields that must match for a run with fingerprint ``fp``: :data:`COMPARED`, less
    :data:`CPU_ONLY` on a GPU."""
    return COMPARED if fp.get("device_type") == "cpu" else tuple(k for k in COMPARED if k not in CPU_ONLY)


def differences(calibrated: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Human-readable list of compared fields that differ (a setting's field with its flag and key)."""
    pairs = []
    for k in compared(current):
        old, new = calibrated.get(k), current.get(k)
        if isinstance(old, dict) and isinstance(new, dict):
            pairs += [(f"{k}.{j}", old.get(j), new.get(j)) for j in {**old, **new}]
        else:
            pairs.append((k, old, new))
    return [
        f"{k}: calibrated with {old!r}, running with {new!r}" + (f" ({SETTING[k]})" if k in SETTING else "")
        for k, old, new in pairs
        if old != new
    ]


def check(calibrated: dict[str, Any], current: dict[str, Any], where: str, how_to_fix: str) -> None:
    diff = differences(calibrated, current)
    if diff:
        raise FingerprintMismatch(
            f"the calibration in {where} was made for a different device, software stack or settings:\n  "
            + "\n  ".join(diff)
            + f"\n{how_to_fix}"
        )


def hardware_key(fingerprint: dict[str, Any]) -> str:
    """A short file-name-safe key for the device, e.g. ``nvidia-h200`` or ``cpu-amd-epyc-7b13``."""
    name = fingerprint["device_name"].lower()
    name = re.sub(r"\(r\)|\(tm\)|cpu @.*|processor|\d+-core", " ", name)
    slug = re.sub(r"[^a-z0-9]+", "-", name).strip("-")
    if fingerprint.get("device_type") == "cpu" and not slug.startswith("cpu"):
        slug = f"cpu-{slug}"
    return slug[:48] or "device"
