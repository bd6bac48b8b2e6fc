"""The H200 projection reads only the repository's reference files and labels itself a projection."""

from __future__ import annotations

import json

from benchmarks import projection


def test_projection_from_the_shipped_references(tmp_path):
    ar, dfl, source = projection.step_costs(None)
    assert (ar, dfl) == (5.321, 8.159) and source.startswith("benchmarks/reference/")
    rows = projection.project(ar, dfl)
    gsm8k = next(r for r in rows if r["dataset"] == "gsm8k")
    assert round(gsm8k["dflash"], 1) == round(1e3 * 6.55 / 8.159, 1)  # tau / step time
    assert round(gsm8k["bastion_over_dflash"], 4) == round(6.92 / 4.96, 4)  # the paper's ratio
    assert rows[-1]["dataset"] == "average" and len(rows) == 9
    out = tmp_path / "p.md"
    assert projection.main(["--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("**Projection, not a measurement**") and "1,160 tok/s" in text


def test_eagle3_row_from_measured_step_costs_and_published_tau(tmp_path):
    parts, source = projection.eagle3_step_cost(None)
    assert parts == {"draft": 2.48, "verify": 6.44, "commit": 0.08} and "6a7bdaf" in source
    step = sum(parts.values())
    rows = projection.project(5.321, 8.159, step)
    gsm8k = next(r for r in rows if r["dataset"] == "gsm8k")
    assert gsm8k["eagle3_tau"] == 2.89 and round(gsm8k["eagle3"], 3) == round(1e3 * 2.89 / step, 3)
    assert round(gsm8k["eagle3_speedup"], 4) == round(2.89 * 5.321 / step, 4) and gsm8k["eagle3_paper"] == 3.10
    assert round(rows[-1]["eagle3_paper"], 2) == 2.70  # the paper's average, from its per-dataset figures
    measured = tmp_path / "eagle3_cost.json"
    measured.write_text(json.dumps({
        "draft": [{"context": 2048, "draft_ms": 9.0}, {"context": 512, "draft_ms": 2.2}],
        "verify": [{"engine": "static", "context": 512, "verify_ms": 9.0, "commit_ms": 0.1},
                   {"engine": "compiled", "context": 512, "verify_ms": 6.0, "commit_ms": 0.05}]}))
    assert projection.eagle3_step_cost(str(measured)) == ({"draft": 2.2, "verify": 6.0, "commit": 0.05}, str(measured))
    with_steps = tmp_path / "eagle3_cost_steps.json"
    with_steps.write_text(json.dumps({**json.loads(measured.read_text()), "step": [
        {"engine": "static", "context": 512, "t_draft_ms": 4.5, "t_tree_ms": 0.1, "t_verify_ms": 10.9,
         "t_accept_ms": 0.0, "t_commit_ms": 0.1},
        {"engine": "compiled", "context": 2048, "t_draft_ms": 2.6, "t_tree_ms": 0.04, "t_verify_ms": 6.8,
         "t_accept_ms": 0.01, "t_commit_ms": 0.04},
        {"engine": "compiled", "context": 512, "t_draft_ms": 2.5, "t_tree_ms": 0.04, "t_verify_ms": 6.4,
         "t_accept_ms": 0.01, "t_commit_ms": 0.03}]}))
    parts, _ = projection.eagle3_step_cost(str(with_steps))  # the compiled step's parts at its shortest context
    assert (parts["draft"], parts["verify"], round(parts["commit"], 6)) == (2.5, 6.4, 0.08)
    out = tmp_path / "p.md"
    assert projection.main(["--eagle3-measured", str(measured), "--out", str(out)]) == 0
    text = out.read_text()
    assert "EAGLE-3 step at the 7/10/60 tree 8.25 ms" in text and "| 2.70x |" in text
    assert "its draft is 2.20 of its 8.25 ms step" in text
