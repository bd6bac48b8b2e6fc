"""Lossy columns (a method named ``*lossy*``): marked in every table and figure, averaged apart."""

from __future__ import annotations

import math

from bastion import defaults
from bastion.report import averages, plots, plots_steps, table_formats, tables
from tests.report.test_figures import TITLE, cell, make_steps, pdf_text, write_rows

LOSSY_NOTE = "Lossy: BASTION (lossy), with the original release's acceptance at T > 0"


def test_labels_of_new_and_unknown_methods():
    assert [defaults.method_label(m) for m in ("bastion", "bastion_plus", "bastion_lossy", "bastion-b64")] == \
        ["BASTION", "BASTION+", "BASTION (lossy)", "BASTION (b=64)"]
    # a variant of a known method without a label of its own, and a name nobody knows
    assert defaults.method_label("dflash_lossy") == "DFlash (lossy)"
    assert defaults.method_label("eagle3_tree_v2") == "EAGLE-3 (tree v2)"
    assert defaults.method_label("medusa") == "medusa" and defaults.method_label("medusa_2") == "medusa_2"
    assert tables.method_label("medusa_lossy") == "medusa_lossy"  # says lossy already
    assert averages.is_lossy("bastion_lossy") and not averages.is_lossy("bastion_plus")


def test_a_lossy_label_that_does_not_say_so_is_marked(monkeypatch):
    monkeypatch.setitem(defaults.METHOD_LABELS, "quick_lossy", "Quick")
    assert tables.method_label("quick_lossy") == "Quick (lossy)"
    assert tables.method_label("bastion_plus") == "BASTION+"


def cells_t1(tmp_path, values, name="cells.csv"):
    rows = [cell("m1", d, 1.0, "ar", 1.0, 1.0, 1.0) for d in ("gsm8k", "math500", "mbpp")]
    rows += [cell("m1", d, 1.0, m, s, 2.0) for (m, d), s in values.items()]
    return write_rows(rows, tmp_path / name)


FULL = {(m, d): s for m, base in (("dflash", 1.0), ("bastion", 2.0), ("bastion_plus", 3.0))
        for d, s in zip(("gsm8k", "math500", "mbpp"), (base, base + 0.25, base + 0.5))}
METHODS = ["ar", "dflash", "bastion", "bastion_plus", "bastion_lossy"]


def test_a_lossy_gap_never_shrinks_the_lossless_averages(tmp_path):
    values = {**FULL, ("bastion_lossy", "gsm8k"): 4.0, ("bastion_lossy", "math500"): 5.0}
    out = {k: tmp_path / f"t.{k}" for k in ("csv", "md", "tex", "pdf")}
    table = table_formats.write_speedup_table(cells_t1(tmp_path, values), METHODS, TITLE, *out.values())
    avg = table.loc[tables.AVERAGE]
    # the lossless methods over all three datasets, as if the lossy column were not there
    assert [avg[f"m1/T1/{m}/speedup"] for m in ("dflash", "bastion", "bastion_plus")] == [1.25, 2.25, 3.25]
    assert math.isnan(avg["m1/T1/bastion_lossy/speedup"])  # it misses mbpp, where the lossless ones have results
    notes = tables.table_notes(table)
    assert notes[0].startswith(LOSSY_NOTE) and "never with them" in notes[0]
    assert notes[1] == ("m1, T=1: lossy methods are averaged apart, over gsm8k, math500, mbpp; no average for what "
                        "misses a dataset: BASTION (lossy) has no result on mbpp.")
    md = out["md"].read_text(encoding="utf-8")
    assert "m1, T=1 BASTION (lossy) speedup" in md and "m1, T=1 BASTION+ speedup" in md and LOSSY_NOTE in md
    assert "BASTION (lossy)" in out["tex"].read_text(encoding="utf-8")
    assert LOSSY_NOTE in pdf_text(out["pdf"])


def test_a_lossy_column_is_averaged_over_the_lossless_datasets(tmp_path):
    values = {k: v for k, v in FULL.items() if k != ("dflash", "mbpp")}
    values.update({("bastion_lossy", "gsm8k"): 4.0, ("bastion_lossy", "math500"): 5.0, ("bastion_lossy", "mbpp"): 9.0})
    table = tables.speedup_table(cells_t1(tmp_path, values), METHODS)
    avg = table.loc[tables.AVERAGE]
    # DFlash misses mbpp: the lossless averages are over gsm8k and math500, and so is the lossy one, apart
    assert math.isnan(avg["m1/T1/dflash/speedup"])
    assert (avg["m1/T1/bastion/speedup"], avg["m1/T1/bastion_plus/speedup"]) == (2.125, 3.125)
    assert avg["m1/T1/bastion_lossy/speedup"] == 4.5
    assert [n for n in tables.table_notes(table) if not n.startswith("Lossy:")] == [
        "m1, T=1: averages over gsm8k, math500 only (every method has a result there); no average for what misses a "
        "dataset: DFlash has no result on mbpp."]


def test_a_panel_of_lossy_methods_alone_has_their_own_average(tmp_path):
    values = {("bastion_lossy", "gsm8k"): 4.0, ("bastion_lossy", "math500"): 5.0}
    table = tables.speedup_table(cells_t1(tmp_path, values), METHODS)
    assert table.loc[tables.AVERAGE, "m1/T1/bastion_lossy/speedup"] == 4.5
    assert math.isnan(table.loc[tables.AVERAGE, "m1/T1/bastion/speedup"])


def test_figures_mark_the_lossy_method(tmp_path):
    cells = cells_t1(tmp_path, {**FULL, ("bastion_lossy", "gsm8k"): 4.0})
    bars = tmp_path / "bars.pdf"
    plots.speedup_bars(cells, bars, TITLE)  # the default methods include every one present, lossy too
    text = pdf_text(bars)
    assert "BASTION (lossy)" in text and "BASTION+" in text and LOSSY_NOTE in text
    assert text.count("4.00x") == 1  # its gsm8k bar, and no Average bar: it misses math500 and mbpp
    hw = tmp_path / "hw.pdf"
    plots.hardware_comparison([cells], hw, TITLE)
    assert LOSSY_NOTE in pdf_text(hw) and "BASTION (lossy) on hw-test has no result on math500, mbpp" in pdf_text(hw)
    steps = tmp_path / "acc.pdf"
    plots_steps.acceptance_length(make_steps(tmp_path, methods=("ar", "bastion", "bastion_lossy")), steps, TITLE)
    text = pdf_text(steps)
    assert "BASTION (lossy) (mean \u03c4 =" in text and LOSSY_NOTE in text



def test_a_lossy_method_has_no_column_at_t0(tmp_path):
    """The pipeline decodes the lossy acceptance at T > 0 only (at T = 0 it is its lossless twin):
    the T = 0 panel shows no empty column for it, the T = 1 panel shows it."""
    rows = [cell("m1", d, t, "ar", 1.0, 1.0, 1.0) for d in ("gsm8k", "mbpp") for t in (0.0, 1.0)]
    rows += [cell("m1", d, t, "bastion", 2.0, 3.0) for d in ("gsm8k", "mbpp") for t in (0.0, 1.0)]
    rows += [cell("m1", d, 1.0, "bastion_lossy", 2.5, 3.5) for d in ("gsm8k", "mbpp")]
    table = tables.speedup_table(write_rows(rows, tmp_path / "both.csv"), ["ar", "bastion", "bastion_lossy"])
    assert "m1/T0/bastion_lossy/speedup" not in table.columns and "m1/T0/bastion/speedup" in table.columns
    assert table.loc["Average", "m1/T1/bastion_lossy/speedup"] == 2.5
