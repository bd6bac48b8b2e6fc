"""Running a Triton kernel's check script: compiled on a GPU where there is one, else in Triton's interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch


def run_kernel_check(code: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (``TRITON_INTERPRET=1`` without CUDA: the kernels' code on the CPU).

    A subprocess, because Triton reads ``TRITON_INTERPRET`` when it is imported.  Skips the
    calling test where Triton is not installed.
    """
    pytest.importorskip("triton")
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout,
                          check=False)
