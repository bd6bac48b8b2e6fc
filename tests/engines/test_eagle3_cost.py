"""``python -m benchmarks.eagle3_cost`` in its CPU mode: every section runs and is written."""

from __future__ import annotations

import json

from benchmarks import eagle3_cost


def test_cpu_small_shape(tmp_path):
    data = eagle3_cost.main(["--shape", "small", "--device", "cpu", "--contexts", "24", "--engines", "static,compiled",
                             "--depth", "2", "--topk", "3", "--total-tokens", "10", "--warmup", "0", "--repeats", "1",
                             "--steps", "2", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "eagle3_cost.json").read_text())
    assert saved == data
    assert [r["depth"] for r in data["depth"]] == [0, 1, 2]
    assert data["draft"][0]["nodes"] == data["meta"]["nodes"] == 10
    assert {r["engine"] for r in data["verify"]} == {r["engine"] for r in data["step"]} == {"static", "compiled"}
    assert all(r["verify_ms"] > 0 and r["nodes"] == 10 for r in data["verify"])
    assert all(r["nodes"] == 10 and r["t_draft_ms"] > 0 for r in data["step"])
    assert all(r["step_ms"] >= r["t_draft_ms"] / 2 > 0 for r in data["step"])  # a whole step, another decode
