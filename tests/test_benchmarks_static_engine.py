"""The static engine's benchmark scripts (GPU measurements there) on a small CPU shape: their
tables fill, and the engines they compare agree."""

from __future__ import annotations

import json


def test_gpu_benchmark_script_runs_on_the_cpu(tmp_path):
    """The H200 measurement script, on a small random shape: its tables fill and engines agree."""
    from benchmarks import static_engine as bench

    assert bench.main(["--shape", "small", "--contexts", "48", "--sizes", "1,8", "--sections", "ar,curve,equiv",
                       "--engines", "static,compiled", "--tokens", "6", "--repeats", "1", "--device", "cpu",
                       "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "static_engine.json").read_text())
    assert "errors" not in data
    assert {r["s"] for r in data["curve"]} == {1, 8} and all(r["compiled_ms"] > 0 for r in data["curve"])
    assert len(data["equiv"]) == 6 and all(r["static_eq_eager"] for r in data["equiv"])


def test_tree_phase_benchmark_runs_on_the_cpu(tmp_path):
    """The tree-phase script (GPU graph replays there) fills its tables on a small CPU shape."""
    from benchmarks import tree_phase as bench

    assert bench.main(["--shape", "small", "--contexts", "48", "--nodes", "32", "--sections", "variants,overhead",
                       "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "static_engine.json").read_text())
    assert "errors" not in data
    names = {r["variant"] for r in data["variants"]}
    assert {"select_softmax", "select_topk_first", "rank_torch_m31", "build_plain_32", "commit_engine_32"} <= names
    assert {(r["method"], r["nodes"]) for r in data["overhead"]} >= {("bastion", 32), ("dflash", 16)}
    assert all(r["overhead_ms"] > 0 for r in data["overhead"])
