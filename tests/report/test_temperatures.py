"""T = 0 and T = 1 side by side: from records to the table's column groups and the figures' panels.

Each temperature's speedup is against AR at the same temperature, and every output shows
one column group or panel per (model, temperature).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bastion.report import aggregate, plots, plots_steps, table_formats, tables
from tests.report.test_figures import TITLE, pdf_text


def _rec(method, temperature, dataset, prompt, seconds, acc):
    tokens = 1 + sum(acc)
    return {"hardware": "hw-test", "model": "tiny", "dataset": dataset, "temperature": temperature,
            "method": method, "budget": None, "prompt_index": prompt, "turn": 0, "num_prompt_tokens": 5,
            "num_output_tokens": tokens, "output_ids": list(range(tokens)), "decode_seconds": seconds,
            "prefill_seconds": 0.1, "acceptance_lengths": list(acc), "tree_sizes": [16] * len(acc),
            "contexts": [5 + i for i in range(len(acc))], "stop_reason": "max_new_tokens", "fingerprint": {}}


@pytest.fixture
def aggregated(tmp_path):
    """AR takes 0.1 s a token at T = 0 and 0.2 s at T = 1; the methods' times give round speedups."""
    recs = []
    for d in ("gsm8k", "mbpp"):
        for p in range(2):
            recs.append(_rec("ar", 0.0, d, p, 0.1 * 9, (1,) * 8))
            recs.append(_rec("ar", 1.0, d, p, 0.2 * 9, (1,) * 8))
            recs.append(_rec("dflash", 0.0, d, p, 0.1 * 9 / 2.0, (3, 3, 2)))  # 2x at T = 0
            recs.append(_rec("dflash", 1.0, d, p, 0.2 * 5 / 1.25, (2, 1, 1)))  # 1.25x at T = 1
            recs.append(_rec("bastion", 0.0, d, p, 0.1 * 9 / 3.0, (5, 3)))  # 3x at T = 0
            recs.append(_rec("bastion", 1.0, d, p, 0.2 * 6 / 1.5, (3, 2)))  # 1.5x at T = 1
    src = tmp_path / "recs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = {k: tmp_path / f"{k}.csv" for k in ("prompts", "cells", "steps")}
    aggregate.aggregate([src], out["prompts"], out["cells"], out["steps"])
    return out


def test_the_table_has_one_column_group_per_temperature(tmp_path, aggregated):
    out = {k: tmp_path / f"t.{k}" for k in ("csv", "md", "tex", "pdf")}
    table = table_formats.write_speedup_table(aggregated["cells"], ["ar", "dflash", "bastion"], TITLE, *out.values())
    assert list(table.columns) == [f"tiny/T{t}/{m}/{k}" for t in (0, 1) for m in ("dflash", "bastion")
                                   for k in ("speedup", "tau")]
    expected = {"T0/dflash": (2.0, 8 / 3), "T0/bastion": (3.0, 4.0), "T1/dflash": (1.25, 4 / 3),
                "T1/bastion": (1.5, 2.5)}
    for row in ("gsm8k", "mbpp", tables.AVERAGE):
        for k, (speedup, tau) in expected.items():
            assert table.loc[row, f"tiny/{k}/speedup"] == pytest.approx(speedup), (row, k)
            assert table.loc[row, f"tiny/{k}/tau"] == pytest.approx(tau), (row, k)
    md = out["md"].read_text(encoding="utf-8")
    assert "tiny, T=0 DFlash speedup" in md and "tiny, T=1 BASTION \u03c4" in md
    tex = out["tex"].read_text(encoding="utf-8")
    assert r"\multicolumn{4}{c}{tiny, T=0}" in tex and r"\multicolumn{4}{c}{tiny, T=1}" in tex
    pdf = pdf_text(out["pdf"])
    assert "tiny, T=0" in pdf and "tiny, T=1" in pdf
    assert pd.read_csv(out["csv"], index_col="dataset").loc["Average", "tiny/T1/dflash/speedup"] == pytest.approx(1.25)


def test_the_figures_have_one_panel_per_temperature(tmp_path, aggregated):
    figures = {"bars": lambda o: plots.speedup_bars(aggregated["cells"], o, TITLE, ["ar", "dflash", "bastion"]),
               "acceptance": lambda o: plots_steps.acceptance_length(aggregated["steps"], o, TITLE),
               "position": lambda o: plots_steps.acceptance_by_position(aggregated["steps"], o, TITLE)}
    for name, draw in figures.items():
        out = tmp_path / f"{name}.pdf"
        draw(out)
        text = pdf_text(out)
        assert "tiny, T=0" in text and "tiny, T=1" in text, name
    bars = pdf_text(tmp_path / "bars.pdf")
    for v in ("2.00x", "3.00x", "1.25x", "1.50x"):
        assert bars.count(v) == 3  # the Average bar and each dataset's, in its own temperature's panel
    acceptance = pdf_text(tmp_path / "acceptance.pdf")
    for label in ("DFlash (mean \u03c4 = 2.67, 12 steps)", "BASTION (mean \u03c4 = 4.00, 8 steps)",
                  "DFlash (mean \u03c4 = 1.33, 12 steps)", "BASTION (mean \u03c4 = 2.50, 8 steps)"):
        assert label in acceptance
