"""torch.compile's and Triton's caches in the results folder, for later jobs to load instead of compiling.

Inductor and Triton cache what they compile, by default under ``/tmp`` or the home
folder of the machine that compiled it: on a cluster the next job usually lands on
another node, or the same node after ``/tmp`` was cleaned.  Pointed into
``results/{hardware}/compile_cache`` (a shared file system on a cluster), the caches are
where every later job of that hardware key can find them: the other methods' jobs,
reruns after a change, jobs on other nodes.

The caches key their entries by the code traced, the shapes, the torch and Triton
versions and the GPU, and write them atomically, so one folder per hardware key is safe
for concurrent jobs.  Dynamo's tracing and the graph captures are not cached: a job
still pays for those.  A ``TORCHINDUCTOR_CACHE_DIR`` or ``TRITON_CACHE_DIR`` the user
set wins.

Measured on the tiny experiment's decode job on an H200 (docs/performance.md, session
10), this folder alone saved nothing: 81-106 s with it, 83-94 s without.  The machine's
own caches, kept whole, saved 39 of 90 s, so something they hold outside this folder is
what a rerun reuses.  The folder is kept: it costs nothing, and whether it pays for
larger models, whose graphs take longer to compile, has not been measured.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "TORCHINDUCTOR_CACHE_DIR"
TRITON_ENV = "TRITON_CACHE_DIR"


def folder(hardware: str) -> Path:
    """Where a hardware key's jobs keep their compile caches."""
    return Path("results") / hardware / "compile_cache"


def persist(hardware: str) -> str:
    """Point torch.compile's and Triton's caches at :func:`folder` (before anything compiles); returns the folder used.

    Triton's own cache is set too: Inductor points it under its folder only when its first
    kernel loads, so a ``@triton.jit`` kernel launched earlier (path ranking's) would
    compile into ``~/.triton`` of the node and again on the next one.  Either variable
    the user set wins.
    """
    path = os.environ.get(ENV) or str(folder(hardware).resolve())  # made when first written (never on a CPU run)
    os.environ[ENV] = path
    os.environ.setdefault(TRITON_ENV, str(Path(path) / "triton"))
    return path
