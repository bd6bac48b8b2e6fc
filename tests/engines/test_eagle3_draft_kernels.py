"""``python -m benchmarks.eagle3_draft_kernels`` on a CPU: what one draft runs, unfused and fused, and its table."""

from __future__ import annotations

import json
import shutil

import pytest

from benchmarks import eagle3_draft_kernels

ARGS = ["--device", "cpu", "--shape", "small", "--tree", "2,3,10", "--context", "20", "--iters", "1"]


def test_uncompiled_counts_and_table(tmp_path, capsys):
    rows = eagle3_draft_kernels.main([*ARGS, "--cpu-compile", "off", "--ar-steps", "2", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "eagle3_draft_kernels.json").read_text()) == {"kernels": rows}
    static, fused = rows
    assert (static["engine"], static["fused_head"], fused["engine"], fused["fused_head"]) == (
        "static", False, "compiled", True)
    for r in rows:  # nothing compiled: every operator runs eagerly
        assert r["compiled_calls"] == r["inductor_kernels"] == r["extern_ops"] == 0
        assert r["launches"] == r["eager_ops"] > 0 and r["nodes"] == 10
        assert r["draft_ms"] > 0 and r["draft_per_ar_step"] == round(r["draft_ms"] / r["ar_step_ms"], 3)
    # eagle3_cost.json's whole step joins the row of its shape, engine and context
    cost = tmp_path / "eagle3_cost.json"
    cost.write_text(json.dumps({"meta": {"shape": "small"}, "step": [{"engine": "compiled", "context": 20, "step_ms": 1.5},
                                                                     {"engine": "static", "context": 99, "step_ms": 7}]}))
    capsys.readouterr()
    eagle3_draft_kernels.main(["--table", str(tmp_path / "eagle3_draft_kernels.json"), str(cost),
                               str(tmp_path / "missing.json")])
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 4 and lines[2].startswith("| small | static | no | cpu, float32 | 20 | 2/3/10 |")
    assert f"| {fused['launches']} | 0 Inductor + 0 extern + {fused['launches']} eager;" in lines[3]
    assert lines[2].endswith(f"| {static['draft_per_ar_step']} |  |") and lines[3].endswith("| 1.5 |")
    assert "missing.json" in err


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="Inductor's CPU backend needs a C++ compiler")
def test_compiled_draft_runs_fewer_operations():
    static, fused = eagle3_draft_kernels.main([*ARGS, "--ar-steps", "0"])
    assert static["compiled_calls"] == static["inductor_kernels"] == 0
    assert fused["compiled"] and fused["inductor_kernels"] > 0 and fused["extern_ops"] > 0
    assert fused["compiled_calls"] >= 2 * 3  # three passes of the layer, each at least its two fused functions
    assert fused["launches"] < static["launches"]
    # outside compiled code only the tree's four writes into the engine's buffers and the root's
    # row: the pairs, angles, masks, slots and ancestors run fused (49 such operations before)
    assert fused["eager_ops"] <= 6, fused
