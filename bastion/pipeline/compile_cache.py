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

A variable holding torch's own default is not taken for a choice: importing
``torch._dynamo`` (which the engines do) writes that default, ``/tmp/torchinductor_<user>``,
into ``TORCHINDUCTOR_CACHE_DIR`` itself, so :func:`persist`, called after those imports,
would otherwise keep it, and this folder would save nothing while a kept ``/tmp`` saved 39
of a 90 s decode job (docs/performance.md).  On an H200, with this folder warm and the
node's own caches deleted, the tiny experiment's calibration job takes 35-42 s instead of
74-77 s, its decode job 41-50 s instead of 64-74 s.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
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
    chosen = os.environ.get(ENV)
    if chosen and chosen != _torch_default():
        path = chosen
    else:
        path = str(folder(hardware).resolve())  # made when first written (never on a CPU run)
    os.environ[ENV] = path
    os.environ.setdefault(TRITON_ENV, str(Path(path) / "triton"))
    return path


def _torch_default() -> str | None:
    """The folder torch writes into ``TORCHINDUCTOR_CACHE_DIR`` when nobody chose one.

    Importing torch._dynamo sets the variable to this (``cache_dir()`` in
    ``torch/_inductor/runtime/cache_dir_utils.py``, torch 2.13), so a variable equal to it
    is torch's, not the user's.  The same formula as torch's ``default_cache_dir()``,
    tested against it; computed here so that this module never imports torch.
    """
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers): torch would fail the same way
        return None
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
