"""The pipeline's calibration reruns when what it must cover changes: n_min, the contexts,
a kernel choice that acts on the device, or the CPU threads.

A decode job refuses a calibration made at another ``n_min`` or for shorter contexts
(:meth:`~bastion.calibration.store.Calibration.check_covers`), so the calibration rule
must rerun first: ``n_min`` and ``n_max`` reach it through ``params:``, and the grid's
contexts follow from the datasets (inputs), ``max_new_tokens`` and the grid (params).
It refuses one of another fingerprint too, whose compared fields (the kernel choices as
they act on the device, and on a CPU the threads the jobs use) are a param of both rules.
"""

from __future__ import annotations

import json

import pytest

from tests.support.pipeline_support import copy_checkout, hardware_key, planned, smk

UNTIL = ["--until", "calibrate_model", "--", "figures/speedup_table.pdf"]


@pytest.mark.slow
def test_calibration_reruns_when_n_min_or_the_contexts_change(tmp_path):
    work = copy_checkout(tmp_path / "work")
    fast = tmp_path / "fast.yaml"  # the tiny grid: this test is about the DAG, not the fit
    fast.write_text("accept_calibration_error: true\nexperiments:\n  tiny:\n    calibration_grid: tiny\n")
    base = ["--configfile", "config.yaml", str(fast)]
    smk(work, "--cores", "1", *base, *UNTIL)
    cal = json.loads((work / "results" / hardware_key(work) / "tiny" / "calibration.json").read_text())
    assert cal["n_min"] == 16 and cal["probe_sizes"] == [2, 8, 32, 128, 512]
    assert cal["max_context"] == cal["grid"]["c_values"][-1]
    assert planned(work, *base, *UNTIL) == {}  # nothing changed: nothing to do

    def plan_with(yaml_text: str) -> dict[str, int]:
        other = tmp_path / "other.yaml"
        other.write_text(yaml_text)
        return planned(work, *base, str(other), *UNTIL)

    assert plan_with("experiments:\n  tiny:\n    n_min: 8\n") == {"calibrate_model": 1}
    assert plan_with("experiments:\n  tiny:\n    n_max: 256\n") == {"calibrate_model": 1}
    assert plan_with("experiments:\n  tiny:\n    max_new_tokens: 4096\n") == {"calibrate_model": 1}

    # the kernel choices that act on a CPU, and the threads, are in the calibration's fingerprint
    assert cal["fingerprint"]["threads"] == 1
    assert cal["fingerprint"]["kernels"] == {"rank": "auto", "blas": "n/a", "drafter": "fused", "row_kernel": "n/a",
                                             "tile_kernel": "n/a"}
    assert plan_with("kernels:\n  rank: torch\n") == {"calibrate_model": 1}
    assert plan_with("kernels:\n  drafter: module\n") == {"calibrate_model": 1}
    assert planned(work, *base, *UNTIL, extra_env={"BASTION_RANK": "torch"}) == {"calibrate_model": 1}
    # the GPU-only ones do not act here: nothing reruns
    assert plan_with("kernels:\n  blas: cublas\n  row_kernel: false\n  tile_kernel: false\n") == {}
    # two threads rerun it where the jobs get them; a dry run plans with --cores 1, which scales them to 1
    assert plan_with("cpu_threads: 2\n") == {}
    assert planned(work, *base, str(tmp_path / "other.yaml"), "--cores", "2", *UNTIL) == {"calibrate_model": 1}
