"""The frame every pipeline job that decodes runs in, written once for the decode, cell and tree-choice scripts.

Its order matters: the results-side compile cache is set up before anything compiles, so
later jobs load the kernels; the log catches everything after; the GPU slot is held for
the whole job; and the device is checked against the job's hardware key before any model
loads, so results are never filed under another machine's key.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from bastion.calibration import hardware
from bastion.pipeline import compile_cache
from bastion.pipeline.gpu_slots import pinned
from bastion.pipeline.joblog import job_log


@contextlib.contextmanager
def device_job(log_path: str, hardware_key: str, pattern: str | None, device: str) -> Iterator[None]:
    """Run the body with the compile cache, the job's log, its GPU slot and its device checked."""
    compile_cache.persist(hardware_key)
    with job_log(log_path), pinned(device):
        hardware.check_device(hardware_key, pattern, hardware.resolve_device(device))
        yield
