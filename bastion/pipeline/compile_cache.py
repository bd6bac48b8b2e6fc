"""torch.compile's caches in the results folder, so later jobs load kernels instead of compiling them.

A GPU job on the compiled engine spends most of its overhead in ``torch.compile`` and
CUDA graph capture (the tiny experiment's decode job on an H200: about 45 of its 72 s,
docs/performance.md).  Inductor and Triton cache what they compile, by default under
``/tmp`` of the machine that compiled it: on a cluster the next job usually lands on
another node, or the same node after ``/tmp`` was cleaned, and compiles everything
again.  Pointed into ``results/{hardware}/compile_cache`` (a shared file system on a
cluster), the caches serve every later job of that hardware key: the other methods'
jobs, reruns after a change, jobs on other nodes.

The caches key their entries by the code traced, the shapes, the torch and Triton
versions and the GPU, and write them atomically, so one folder per hardware key is safe
for concurrent jobs.  Dynamo's tracing and the graph captures are not cached: a job
still pays for those.  A ``TORCHINDUCTOR_CACHE_DIR`` the user set wins.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "TORCHINDUCTOR_CACHE_DIR"  # Triton's cache lives under it unless TRITON_CACHE_DIR is set


def folder(hardware: str) -> Path:
    """Where a hardware key's jobs keep their compile caches."""
    return Path("results") / hardware / "compile_cache"


def persist(hardware: str) -> str:
    """Point torch.compile's caches at :func:`folder` (before anything compiles); returns the folder used."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    path = folder(hardware).resolve()  # made by Inductor when it first writes (never on a CPU run)
    os.environ[ENV] = str(path)
    return str(path)
