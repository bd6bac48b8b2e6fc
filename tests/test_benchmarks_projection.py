"""The H200 projection reads only the repository's reference files and labels itself a projection."""

from __future__ import annotations

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
