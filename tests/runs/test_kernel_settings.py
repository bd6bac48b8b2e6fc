"""Every kernel choice and the CPU thread count are settings of the run.

Each is a flag (and a config key), checked before torch loads; a ``BASTION_*`` variable
that is set overrides its kernel setting; the choice reaches the engine (not read from
the environment inside it), is recorded in the fingerprint of every record, and a cached
calibration made under another choice is refused, naming the field and ``--recalibrate``.
A choice that does not act on the device (the matrix library on a CPU) is recorded as
``n/a`` and refuses nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bastion.benchmark import main
from bastion.calibration import fingerprint
from bastion.calibration.store import Calibration, calibration_path
from bastion.costmodel.model import CostModel, CostParams, StepOverheads
from bastion.costmodel.roofline import HardwarePeaks, ModelShape
from bastion.engines import static_tree
from bastion.engines.choice import Kernels
from bastion.models import registry
from bastion.runs.checks import UsageError
from bastion.runs.run import DecodeRun
from bastion.runs.session import Session
from bastion.runs.settings import RunSettings

NA = "n/a"
CPU_DEFAULT = {"rank": "auto", "blas": NA, "drafter": "fused", "row_kernel": NA, "tile_kernel": NA}
BASE = ["--model", "tiny", "--dataset", "stdlib-heldout", "--max-samples", "1", "--max-new-tokens", "4", "--quiet",
        "--device", "cpu"]


# ------------------------------------------------------------------------------ the settings, without torch


def test_the_record_names_what_acts_on_the_device_and_n_a_for_the_rest():
    k = Kernels("torch", "cublas", "module", False, True)
    assert k.record("cpu", "compiled", "float32") == {"rank": "torch", "blas": NA, "drafter": "module",
                                                      "row_kernel": NA, "tile_kernel": NA}
    assert k.record("cpu", "static", "float32") == {"rank": "torch", "blas": NA, "drafter": NA, "row_kernel": NA,
                                                    "tile_kernel": NA}  # the static engine fuses no drafter
    assert Kernels().record("cuda", "compiled", "bfloat16") == {"rank": "auto", "blas": "cublaslt", "drafter": "fused",
                                                                "row_kernel": True, "tile_kernel": True}
    assert Kernels().record("cuda", "compiled", "float32")["row_kernel"] == NA  # fp32 keeps the matrix library
    assert Kernels(rank="torch").record("cuda", "compiled", "bfloat16")["row_kernel"] == NA  # no Triton kernel at all
    assert Kernels(row_kernel=False).record("cuda", "compiled", "bfloat16")["tile_kernel"] == NA  # tiles need rows
    assert Kernels().record("cuda", "eager", "bfloat16") == {"rank": "auto", "blas": NA, "drafter": NA,
                                                             "row_kernel": NA, "tile_kernel": NA}


def test_a_gpu_only_choice_leaves_a_cpu_runs_settings_as_they_were():
    gpu_only = Kernels(blas="cublas", row_kernel=False, tile_kernel=False)
    assert gpu_only.effective("cpu", "compiled", "float32") == Kernels()
    # on the GPU they act, but the tile kernels only beside the row kernels
    assert gpu_only.effective("cuda", "compiled", "bfloat16") == Kernels(blas="cublas", row_kernel=False)
    assert Kernels(tile_kernel=False).effective("cuda", "compiled", "bfloat16") == Kernels(tile_kernel=False)
    assert Kernels(rank="torch", drafter="module").effective("cpu", "compiled", "float32") == Kernels("torch", drafter="module")


def test_a_set_variable_overrides_the_setting_and_a_bad_value_is_named():
    k = Kernels(rank="torch", row_kernel=False)
    assert k.overridden({}) == k
    env = {"BASTION_RANK": "auto", "BASTION_ROW_KERNEL": "1", "BASTION_BLAS": "cublas", "BASTION_DRAFTER": " module ",
           "BASTION_TILE_KERNEL": ""}  # an empty variable counts as unset
    assert k.overridden(env) == Kernels("auto", "cublas", "module", True, True)
    assert Kernels().overridden({"BASTION_TILE_KERNEL": "0"}).tile_kernel is False
    for var, value, text in (("BASTION_BLAS", "mkl", "use cublaslt or cublas"), ("BASTION_RANK", "triton", "auto or torch"),
                             ("BASTION_DRAFTER", "fast", "fused or module"), ("BASTION_ROW_KERNEL", "off", "use 1")):
        with pytest.raises(ValueError, match=f"^{var}='{value}' \\(it overrides kernels.") as caught:
            Kernels().overridden({var: value})
        assert text in str(caught.value)
    with pytest.raises(ValueError, match="kernels.drafter 'fast': choose fused or module"):
        Kernels(drafter="fast")
    with pytest.raises(ValueError, match="kernels.row_kernel 'yes': choose true or false"):
        Kernels(row_kernel="yes")


def _settings(**kw) -> RunSettings:
    return RunSettings(model="tiny", dataset="stdlib-heldout", device="cpu", **kw)


def test_bad_flags_and_variables_are_refused_before_torch(monkeypatch):
    for kw, text in ((dict(rank_kernels="triton"), "--rank-kernels 'triton': choose from auto, torch"),
                     (dict(blas="mkl"), "--blas 'mkl': choose from cublaslt, cublas"),
                     (dict(drafter_layers="fast"), "--drafter-layers 'fast': choose from fused, module"),
                     (dict(threads=0), "--threads must be >= 1, got 0")):
        with pytest.raises(UsageError, match=text):
            _settings(**kw).validate()
    monkeypatch.setenv("BASTION_DRAFTER", "fast")
    with pytest.raises(UsageError, match="BASTION_DRAFTER='fast' \\(it overrides kernels.drafter\\)"):
        _settings().validate()


def test_the_variable_wins_over_the_flag_when_the_run_resolves(monkeypatch):
    monkeypatch.setenv("BASTION_DRAFTER", "module")
    monkeypatch.setenv("BASTION_ROW_KERNEL", "0")
    run = _settings(rank_kernels="torch", drafter_layers="fused", hardware="cpu-test").resolve()
    assert (run.rank_kernels, run.drafter_layers, run.row_kernel) == ("torch", "module", False)
    assert run.kernels == Kernels("torch", "cublaslt", "module", False, True)


# ------------------------------------------------------------------------------ the engine and the records


def test_the_kernel_settings_reach_the_engine_and_every_record(tmp_path, monkeypatch):
    """``--rank-kernels torch`` makes the CPU engine build its trees by the torch references
    instead of the host's best-first walk, ``--drafter-layers module`` keeps the drafter's
    module: the same tokens and trees (fp32), another run key, each recorded."""
    walks = []
    real = static_tree.rank_walk
    monkeypatch.setattr(static_tree, "rank_walk", lambda *a, **kw: walks.append(1) or real(*a, **kw))

    def decode(name: str, **kw):
        run = DecodeRun(model="tiny", dataset="stdlib-heldout", max_samples=1, max_new_tokens=24, methods=("bastion",),
                        budget=16, device="cpu", dtype="float32", engine="compiled", quiet=True,
                        output=str(tmp_path / f"{name}.jsonl"), **kw)
        session = Session(run.methods)
        records = run.execute(session)
        (engine,) = [item for key, item in session._items.items() if key[0] == "engine"]
        return records, engine, len(walks)

    fast, fast_engine, walked = decode("default")
    assert walked > 0  # the host's walk ranked every step's paths
    assert fast_engine.kernels == Kernels() and fast_engine.static.proposers["dflash"].fused_drafter is not None
    ref, ref_engine, walked_after = decode("references", rank_kernels="torch", drafter_layers="module", blas="cublas")
    assert walked_after == walked  # the torch references built every tree: no walk
    assert ref_engine.kernels == Kernels("torch", "cublas", "module")
    assert ref_engine.static.proposers["dflash"].fused_drafter is None  # the drafter's own layers
    assert [r["output_ids"] for r in ref] == [r["output_ids"] for r in fast]
    assert [r["tree_sizes"] for r in ref] == [r["tree_sizes"] for r in fast]
    assert {r["fingerprint"]["kernels"]["rank"] for r in ref} == {"torch"}
    assert ref[0]["fingerprint"]["kernels"] == {**CPU_DEFAULT, "rank": "torch", "drafter": "module"}  # blas: n/a
    assert fast[0]["fingerprint"]["kernels"] == CPU_DEFAULT and fast[0]["fingerprint"]["threads"] == 1
    assert ref[0]["run_key"] != fast[0]["run_key"]  # a partial file of the other choice is never resumed


def test_a_run_computes_with_its_threads_and_records_them(tmp_path):
    out = tmp_path / "out.jsonl"
    assert main([*BASE, "--methods", "ar", "--threads", "2", "--output", str(out)]) == 0
    assert torch.get_num_threads() == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records and {r["fingerprint"]["threads"] for r in records} == {2}
    assert records[0]["run_settings"]["fingerprint"]["threads"] == 2  # part of the run key


# ------------------------------------------------------------------------------ a cached calibration


def _cached_calibration(cache: Path) -> Path:
    """A calibration of this CPU with one thread and the default kernels, where the CLI looks for it."""
    here = fingerprint.collect(torch.device("cpu"), torch.float32, "sdpa", "compiled", Kernels())
    assert here["threads"] == 1 and here["kernels"] == CPU_DEFAULT
    config = json.loads((Path(registry.resolve("tiny", None)[0]) / "config.json").read_text())
    model = CostModel(ModelShape.from_config(config, 4), HardwarePeaks(1e10, 1e10), CostParams(1, 0, 1, 0))
    cal = Calibration("tiny", here, model, StepOverheads(1e-3, 1e-3), {"heldout_mape": 0.01}, {},
                      [{"s": 16, "c": 64, "latency_s": 1e-3}], n_min=16, probe_sizes=(32, 128, 512), max_context=100_000)
    path = calibration_path(cache, fingerprint.hardware_key(here), "tiny", "compiled")
    cal.save(path)
    return path


def _error(capsys, *argv: str) -> str:
    assert main([*BASE, "--methods", "bastion", *argv]) == 2
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error:")]
    return line


def test_a_calibration_of_other_threads_or_kernels_is_refused_and_a_gpu_only_choice_is_not(tmp_path, capsys):
    cache = tmp_path / "cache"
    path = _cached_calibration(cache)
    before = path.read_bytes()
    line = _error(capsys, "--threads", "2", "--cache-dir", str(cache))
    assert "threads: calibrated with 1, running with 2 (--threads / cpu_threads)" in line and "--recalibrate" in line
    line = _error(capsys, "--rank-kernels", "torch", "--cache-dir", str(cache))
    assert "kernels.rank: calibrated with 'auto', running with 'torch'" in line and "--recalibrate" in line
    line = _error(capsys, "--drafter-layers", "module", "--cache-dir", str(cache))
    assert "kernels.drafter: calibrated with 'fused', running with 'module'" in line
    assert path.read_bytes() == before  # refused, not replaced
    # the matrix library and the Triton kernels do not act on a CPU: the calibration serves
    out = tmp_path / "out.jsonl"
    assert main([*BASE, "--methods", "bastion", "--blas", "cublas", "--no-row-kernel", "--no-tile-kernel",
                 "--cache-dir", str(cache), "--output", str(out)]) == 0
    assert path.read_bytes() == before
    assert json.loads(out.read_text().splitlines()[0])["fingerprint"]["kernels"] == CPU_DEFAULT
