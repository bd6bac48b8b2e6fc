"""The pipeline's torch-free hardware key and fingerprint equal what torch answers, and load no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from bastion.calibration import fingerprint, planning
from bastion.calibration.hardware import detect_key
from bastion.engines.choice import resolve_engine


def test_version_file_is_what_torch_reports():
    build = planning.torch_build()
    assert build is not None
    assert (build.version, build.cuda, build.hip) == (str(torch.__version__), torch.version.cuda, torch.version.hip)
    if build.cpu_only:
        assert not torch.cuda.is_available()


@pytest.mark.parametrize("dtype", ["auto", "float32", "bfloat16", "float16"])
@pytest.mark.parametrize("engine", ["auto", "eager", "static", "compiled"])
def test_cpu_fingerprint_equals_collect(dtype, engine):
    want = fingerprint.collect(torch.device("cpu"), torch.float32 if dtype == "auto" else getattr(torch, dtype),
                               "sdpa", resolve_engine(engine, "cpu"))
    assert planning.cpu_fingerprint(planning.torch_build(), dtype, "sdpa", engine) == want


def test_cpu_key_equals_detect_key():
    assert planning.cpu_key() == detect_key("cpu")


def test_unknown_dtype_name_defers_to_torch():
    assert planning.cpu_fingerprint(planning.torch_build(), "half", "sdpa", "auto") is None


def test_unreadable_version_file_defers_to_torch(tmp_path, monkeypatch):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "torch" / "version.py").write_text("__version__ = compute()\ncuda = None\nhip = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch")
    planning.torch_build.cache_clear()
    try:
        assert planning.torch_build() is None
    finally:
        planning.torch_build.cache_clear()


def test_planning_loads_no_torch():
    code = ("import sys; from bastion.calibration import planning; b = planning.torch_build(); planning.cpu_key(); "
            "b and planning.cpu_fingerprint(b, 'auto', 'sdpa', 'auto'); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
