"""The hardware key and fingerprint that plan the pipeline's jobs, without importing torch where that is exact.

Importing torch takes seconds, and the workflow needs only two of its answers before any
job runs: the local hardware key (``hardware: auto``) and the compared fingerprint fields
(a rerun trigger).  Where the device is the CPU both follow from torch's version string,
``/proc/cpuinfo`` and package metadata.  It is the CPU for certain when the installed torch
was built without CUDA and ROCm (``torch.cuda.is_available()`` is then always False), which
its ``torch/version.py`` records.  Any other build, or a version file this cannot read,
answers ``None`` here, and the caller asks torch itself (:mod:`bastion.calibration.hardware`).

On a GPU host, importing torch and starting CUDA to read one device name took seconds of
every Snakemake invocation, dry runs included.  With a CUDA build of torch and every GPU
visible to CUDA of one model (so CUDA's device order cannot matter), ``nvidia-smi`` gives
that name, the driver is read as the jobs read it, and the CUDA version is the build's.
Anything else (MIG devices, mixed models, no ``nvidia-smi``) answers ``None``, and torch
decides as before.  A job's own check (:func:`bastion.calibration.hardware.check_device`)
still compares the key with what torch reports.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from bastion.calibration import fingerprint
from bastion.engines.choice import Kernels, engine_for

# dtype names whose torch dtype prints as ``torch.<name>`` (the config schema's choices)
_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class TorchBuild:
    """What the installed torch's ``torch/version.py`` says: ``torch.__version__``,
    ``torch.version.cuda`` and ``torch.version.hip``."""

    version: str
    cuda: str | None
    hip: str | None

    @property
    def cpu_only(self) -> bool:
        """Built without GPU support: torch can only run on the CPU."""
        return self.cuda is None and self.hip is None


@lru_cache(maxsize=1)
def torch_build() -> TorchBuild | None:
    """The installed torch's build, read from its version file without importing torch;
    ``None`` if it is not installed or the file is not the plain assignments it should be."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    fields: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            try:
                fields[target.id] = ast.literal_eval(value)
            except ValueError:
                fields.pop(target.id, None)
    version, cuda, hip = fields.get("__version__"), fields.get("cuda", 0), fields.get("hip", 0)
    if not isinstance(version, str) or not all(v is None or isinstance(v, str) for v in (cuda, hip)):
        return None  # a missing `cuda` or `hip` (0) counts as unreadable
    return TorchBuild(version, cuda, hip)


def cpu_key() -> str:
    """:func:`bastion.calibration.hardware.detect_key` of the CPU."""
    return fingerprint.hardware_key({"device_name": fingerprint._cpu_name(), "device_type": "cpu"})


def cpu_fingerprint(build: TorchBuild, dtype: str, attn_impl: str, engine: str, kernels: Kernels,
                    threads: int) -> dict[str, Any] | None:
    """:func:`bastion.calibration.fingerprint.collect` on the CPU with the configured ``dtype``
    (``auto`` is float32 there), ``engine`` (``auto`` resolved), ``kernels`` (the environment's
    overrides applied) and the ``threads`` a job sets; ``None`` for a dtype name this cannot
    translate without torch."""
    dtype = "float32" if dtype == "auto" else dtype
    if dtype not in _DTYPES:
        return None
    return fingerprint.cpu_collect(build.version, dtype, attn_impl, engine_for(engine, "cpu"), kernels, threads)


def visible_gpu_names() -> list[str] | None:
    """Names of the GPUs CUDA would show this process, from ``nvidia-smi`` (CUDA not started);
    ``None`` without nvidia-smi, or for a ``CUDA_VISIBLE_DEVICES`` entry this does not resolve."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [[c.strip() for c in line.split(",", 2)] for line in out.splitlines() if line.strip()]
    if any(len(r) != 3 for r in rows):
        return None
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return [r[2] for r in rows]
    names = []
    for entry in (e.strip() for e in env.split(",")):
        if not entry:
            break  # CUDA ignores everything from an empty entry on
        match = [r for r in rows if r[0] == entry or (entry.startswith("GPU-") and r[1].startswith(entry))]
        if len(match) != 1:
            return None  # a MIG instance, or an id nvidia-smi does not list
        names.append(match[0][2])
    return names


def gpu_name(build: TorchBuild | None) -> str | None:
    """The name every GPU job will report, where that is certain without torch: a CUDA build
    of torch and every visible GPU one model; else ``None`` (ask torch)."""
    if build is None or build.cuda is None or build.hip is not None:
        return None
    names = visible_gpu_names()
    return names[0] if names and len(set(names)) == 1 else None


def gpu_key(name: str) -> str:
    """:func:`bastion.calibration.hardware.detect_key` of a GPU named ``name``."""
    return fingerprint.hardware_key({"device_name": name, "device_type": "cuda"})


def gpu_fingerprint(build: TorchBuild, name: str, dtype: str, attn_impl: str, engine: str, kernels: Kernels,
                    threads: int) -> dict[str, Any] | None:
    """:func:`bastion.calibration.fingerprint.collect` on that GPU with the configured ``dtype``
    (``auto`` is bfloat16 there), ``engine``, ``kernels`` and ``threads``; ``None`` for a dtype
    name this cannot translate."""
    dtype = "bfloat16" if dtype == "auto" else dtype
    if dtype not in _DTYPES or build.cuda is None:
        return None
    engine = engine_for(engine, "cuda")
    return fingerprint.assemble("cuda", name, driver=fingerprint._nvidia_driver(), cuda=build.cuda,
                                torch_version=build.version, dtype=dtype, attn_impl=attn_impl, engine=engine,
                                kernels=kernels.record("cuda", engine, dtype), threads=threads)
