"""GPU jobs keep torch.compile's caches in the results folder, unless the user chose a folder."""

from __future__ import annotations

import os
import subprocess
import sys

from bastion.pipeline import compile_cache


def test_jobs_point_the_cache_into_results_and_keep_the_users_choice(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    monkeypatch.delenv(compile_cache.TRITON_ENV, raising=False)
    used = compile_cache.persist("nvidia-h200")
    assert used == str(tmp_path / "results" / "nvidia-h200" / "compile_cache") == os.environ[compile_cache.ENV]
    assert os.environ[compile_cache.TRITON_ENV] == str(tmp_path / "results" / "nvidia-h200" / "compile_cache" / "triton")
    assert not (tmp_path / "results").exists()  # made only when something compiles
    monkeypatch.setenv(compile_cache.ENV, "/scratch/mine")
    monkeypatch.delenv(compile_cache.TRITON_ENV)
    assert compile_cache.persist("nvidia-h200") == "/scratch/mine" == os.environ[compile_cache.ENV]
    assert os.environ[compile_cache.TRITON_ENV] == "/scratch/mine/triton"
    monkeypatch.setenv(compile_cache.TRITON_ENV, "/scratch/triton")
    compile_cache.persist("nvidia-h200")
    assert os.environ[compile_cache.TRITON_ENV] == "/scratch/triton"


def test_inductor_reads_the_folder_it_was_given(tmp_path):
    """The variables are what torch's and Triton's own cache lookups use (a rename upstream would fail here)."""
    code = ("import os; from bastion.pipeline import compile_cache; compile_cache.persist('hw'); "
            "from torch._inductor.runtime.cache_dir_utils import cache_dir; print(cache_dir()); "
            "import triton; print(triton.knobs.cache.dir)")
    env = {k: v for k, v in os.environ.items() if k not in (compile_cache.ENV, compile_cache.TRITON_ENV)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    folder = tmp_path / "results" / "hw" / "compile_cache"
    assert out.stdout.split() == [str(folder), str(folder / "triton")]  # Inductor's and raw Triton kernels' caches


def test_the_folder_torch_writes_at_import_is_not_taken_for_a_choice(tmp_path):
    """The jobs import the engines (and with them torch._dynamo, which sets the variable to
    torch's /tmp default) before they call persist: the results folder must still win."""
    code = ("import os; import bastion.runs.runner; seen = os.environ.get('TORCHINDUCTOR_CACHE_DIR'); "
            "from bastion.pipeline import compile_cache; "
            "from torch._inductor.runtime.cache_dir_utils import default_cache_dir; "
            "print(seen == default_cache_dir() == compile_cache._torch_default()); "
            "compile_cache.persist('hw'); "
            "from torch._inductor.runtime.cache_dir_utils import cache_dir; print(cache_dir())")
    env = {k: v for k, v in os.environ.items() if k not in (compile_cache.ENV, compile_cache.TRITON_ENV)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", str(tmp_path / "results" / "hw" / "compile_cache")]
