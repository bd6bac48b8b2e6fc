"""The pipeline's torch-free hardware key and fingerprint equal what torch answers, and load no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from bastion.calibration import fingerprint, planning
from bastion.calibration.hardware import detect_key
from bastion.engines.choice import Kernels, resolve_engine


def test_version_file_is_what_torch_reports():
    build = planning.torch_build()
    assert build is not None
    assert (build.version, build.cuda, build.hip) == (str(torch.__version__), torch.version.cuda, torch.version.hip)
    if build.cpu_only:
        assert not torch.cuda.is_available()


@pytest.mark.parametrize("dtype", ["auto", "float32", "bfloat16", "float16"])
@pytest.mark.parametrize("engine", ["auto", "eager", "static", "compiled"])
@pytest.mark.parametrize("kernels", [Kernels(), Kernels("torch", "cublas", "module", False, False)])
def test_cpu_fingerprint_equals_collect(dtype, engine, kernels):
    want = fingerprint.collect(torch.device("cpu"), torch.float32 if dtype == "auto" else getattr(torch, dtype),
                               "sdpa", resolve_engine(engine, "cpu"), kernels)
    assert planning.cpu_fingerprint(planning.torch_build(), dtype, "sdpa", engine, kernels, 1) == want


def test_the_fingerprint_records_the_threads_torch_uses():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        fp = fingerprint.collect(torch.device("cpu"), torch.float32, "sdpa", "compiled", Kernels())
    finally:
        torch.set_num_threads(before)
    assert fp["threads"] == 2
    assert fp == planning.cpu_fingerprint(planning.torch_build(), "auto", "sdpa", "auto", Kernels(), 2)
    one = {**fp, "threads": 1}
    assert fingerprint.differences(one, fp) == ["threads: calibrated with 1, running with 2 (--threads / cpu_threads)"]
    # on a GPU the host's threads are recorded, not compared
    assert fingerprint.differences({**one, "device_type": "cuda"}, {**fp, "device_type": "cuda"}) == []


def test_cpu_key_equals_detect_key():
    assert planning.cpu_key() == detect_key("cpu")


def test_unknown_dtype_name_defers_to_torch():
    assert planning.cpu_fingerprint(planning.torch_build(), "half", "sdpa", "auto", Kernels(), 1) is None


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
            "from bastion.engines.choice import Kernels; "
            "b and planning.cpu_fingerprint(b, 'auto', 'sdpa', 'auto', Kernels(), 1); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


FAKE_SMI = """#!/bin/sh
case "$*" in
  *index,uuid,name*) printf '0, GPU-aaaa1111-0000, NVIDIA H200\\n1, GPU-bbbb2222-0000, NVIDIA H200\\n2, GPU-cccc3333-0000, NVIDIA A100-SXM4-80GB\\n' ;;
  *driver_version*) printf '570.10\\n570.10\\n570.10\\n' ;;
  *) exit 9 ;;
esac
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """An ``nvidia-smi`` on PATH that lists two H200s and an A100 (a real executable, queried as the code queries it)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    fingerprint._nvidia_driver.cache_clear()
    yield
    fingerprint._nvidia_driver.cache_clear()


@pytest.mark.parametrize("visible, names", [
    ("0,1", ["NVIDIA H200", "NVIDIA H200"]),
    ("GPU-bbbb", ["NVIDIA H200"]),  # a UUID prefix, as CUDA accepts it
    ("2", ["NVIDIA A100-SXM4-80GB"]),
    ("1,,2", ["NVIDIA H200"]),  # CUDA ignores everything from an empty entry on
    ("", []),
    ("MIG-0123", None),  # not resolved here: torch decides
    ("7", None),
])
def test_visible_gpu_names_follow_cuda_visible_devices(fake_smi, monkeypatch, visible, names):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert planning.visible_gpu_names() == names


def test_gpu_name_only_where_the_device_order_cannot_matter(fake_smi, monkeypatch):
    cuda_build = planning.TorchBuild("2.11.0+cu128", "12.8", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert planning.gpu_name(cuda_build) is None  # H200s and an A100: CUDA's order decides which is first
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert planning.gpu_name(cuda_build) == "NVIDIA H200"
    assert planning.gpu_key("NVIDIA H200") == "nvidia-h200"
    assert planning.gpu_name(planning.TorchBuild("2.13.0+cpu", None, None)) is None
    assert planning.gpu_name(planning.TorchBuild("2.11.0+rocm6", None, "6.2")) is None


def test_gpu_fingerprint_has_the_fields_a_gpu_job_records(fake_smi):
    build = planning.TorchBuild("2.11.0+cu128", "12.8", None)
    kernels = Kernels(blas="cublas", tile_kernel=False)
    fp = planning.gpu_fingerprint(build, "NVIDIA H200", "auto", "sdpa", "auto", kernels, 4)
    # on the compiled engine in bf16 every choice acts on the GPU
    acting = {"rank": "auto", "blas": "cublas", "drafter": "fused", "row_kernel": True, "tile_kernel": False}
    want = fingerprint.assemble("cuda", "NVIDIA H200", driver="570.10", cuda="12.8", torch_version="2.11.0+cu128",
                                dtype="bfloat16", attn_impl="sdpa", engine="compiled", kernels=acting, threads=4)
    assert fp == want and fp["kernels"] == acting and fp["threads"] == 4
    assert planning.gpu_fingerprint(build, "NVIDIA H200", "half", "sdpa", "auto", kernels, 4) is None


def test_no_nvidia_smi_defers_to_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert planning.visible_gpu_names() is None
    assert planning.gpu_name(planning.TorchBuild("2.11.0+cu128", "12.8", None)) is None
