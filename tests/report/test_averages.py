"""Averages compare like with like: within a panel, over the datasets every method has.

A method present on one dataset only must get no average; the others' averages are over
the datasets all of them share, and every output names what is missing.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from bastion.report import averages, plots, table_formats, tables
from tests.report.test_figures import TITLE, cell, pdf_text, write_rows

# DFlash on three datasets, BASTION on math500 only: the case (BASTION 4.40x on
# math500 alone beside DFlash over the others), with EAGLE-3 on two of the three.
VALUES = {("dflash", "gsm8k"): (2.0, 3.0), ("dflash", "math500"): (3.0, 4.0), ("dflash", "mbpp"): (4.5, 5.0),
          ("bastion", "math500"): (4.4, 6.0),
          ("eagle3", "gsm8k"): (1.5, 2.0), ("eagle3", "math500"): (2.5, 2.5)}
NOTE = ("m1, T=0: averages over math500 only (every method has a result there); no average for what misses a "
        "dataset: BASTION has no result on gsm8k, mbpp; EAGLE-3 has no result on mbpp.")


def partial_cells(tmp_path, values=VALUES, temps=(0.0,), name="cells.csv"):
    rows = []
    for t in temps:
        for d in ("gsm8k", "math500", "mbpp"):
            rows.append(cell("m1", d, t, "ar", 1.0, 1.0, 1.0))
        for (m, d), (speedup, tau) in values.items():
            rows.append(cell("m1", d, t, m, speedup, tau))
    return write_rows(rows, tmp_path / name)


def test_coverage_of_series():
    cov = averages.coverage({"a": ["x", "y", "z"], "b": ["y"], "c": ["y", "z"], "none": []})
    assert cov.datasets == ("y",)
    assert dict(cov.missing) == {"b": ("x", "z"), "c": ("x",)}
    assert cov.averaged("a") and not cov.averaged("b") and not cov.averaged("none")
    assert averages.average({"x": 1.0, "y": 2.0, "z": 6.0}, "a", cov) == 2.0  # over y alone
    assert math.isnan(averages.average({"y": 5.0}, "b", cov))
    # complete series: every dataset, in the paper's order
    full = averages.coverage({"a": ["mbpp", "gsm8k"], "b": ["gsm8k", "mbpp"]})
    assert full.datasets == ("gsm8k", "mbpp") and not full.missing
    assert averages.average({"gsm8k": 1.0, "mbpp": 2.0}, "b", full) == 1.5
    # nothing in common: no averages at all
    apart = averages.coverage({"a": ["x"], "b": ["y"]})
    assert apart.datasets == () and not apart.averaged("a") and not apart.averaged("b")
    assert averages.finite_datasets({"x": 1.0, "y": float("nan"), "z": None, "w": "2"}) == ["x", "w"]


def test_notes_name_what_is_missing():
    covs = averages.panel_coverage({"dflash": ["x", "y"], "bastion": ["y"]})
    assert averages.coverage_notes("m, T=0", covs, str.upper) == [
        "m, T=0: averages over y only (every method has a result there); no average for what misses a dataset: "
        "BASTION has no result on x."]
    covs = averages.panel_coverage({"dflash": ["x"], "bastion": ["y"]})
    assert averages.coverage_notes("m, T=1", covs, str) == [
        "m, T=1: no average (no dataset has a result for every method); no average for what misses a dataset: "
        "bastion has no result on x; dflash has no result on y."]
    assert averages.coverage_notes("m", averages.panel_coverage({"a": ["x"], "b": ["x"]}), str) == []


def test_table_average_row_compares_like_with_like(tmp_path):
    out = {k: tmp_path / f"t.{k}" for k in ("csv", "md", "tex", "pdf")}
    table = table_formats.write_speedup_table(partial_cells(tmp_path), ["ar", "eagle3", "dflash", "bastion"], TITLE,
                                              out["csv"], out["md"], out["tex"], out["pdf"])
    avg = table.loc[tables.AVERAGE]
    # the methods present on only some datasets get no average cell ...
    for m in ("bastion", "eagle3"):
        assert math.isnan(avg[f"m1/T0/{m}/speedup"]) and math.isnan(avg[f"m1/T0/{m}/tau"])
    # ... and DFlash, complete, is averaged over math500 alone: the one dataset every method has
    assert avg["m1/T0/dflash/speedup"] == 3.0 and avg["m1/T0/dflash/tau"] == 4.0
    assert table.loc["math500", "m1/T0/bastion/speedup"] == 4.4  # its value stays in its row
    assert tables.table_notes(table) == [NOTE]
    csv = pd.read_csv(out["csv"], index_col="dataset")
    assert csv.loc["Average", "m1/T0/dflash/speedup"] == 3.0
    assert math.isnan(csv.loc["Average", "m1/T0/bastion/speedup"])
    md = out["md"].read_text(encoding="utf-8")
    average_line = next(ln for ln in md.splitlines() if ln.startswith("| **Average**"))
    assert average_line.count("**\u2013**") == 4 and "**3.00x**" in average_line and "4.40x" not in average_line
    assert NOTE in md
    assert table_formats.tex_escape(NOTE) in out["tex"].read_text(encoding="utf-8")
    pdf = pdf_text(out["pdf"])
    assert "averages over math500 only" in pdf and "EAGLE-3 has no result on mbpp" in pdf


def test_a_complete_table_has_no_notes(tmp_path):
    complete = {k: v for k, v in VALUES.items() if k[0] == "dflash"}
    table = tables.speedup_table(partial_cells(tmp_path, complete), ["dflash"])
    assert table.loc[tables.AVERAGE, "m1/T0/dflash/speedup"] == pytest.approx((2.0 + 3.0 + 4.5) / 3)
    assert tables.table_notes(table) == []


def test_bars_average_like_with_like(tmp_path):
    out = tmp_path / "bars.pdf"
    plots.speedup_bars(partial_cells(tmp_path), out, TITLE, ["ar", "eagle3", "dflash", "bastion"])
    text = pdf_text(out)
    assert "averages over math500 only" in text and "BASTION has no result on gsm8k, mbpp" in text
    # BASTION's 4.40x is drawn once (math500), never as an average; DFlash's 3.00x twice (math500 and Average)
    assert text.count("4.40x") == 1 and text.count("3.00x") == 2
    assert text.count("2.50x") == 1  # EAGLE-3's math500 only, no average bar either


def test_hardware_comparison_averages_like_with_like(tmp_path):
    a = partial_cells(tmp_path, {k: v for k, v in VALUES.items() if k[0] != "eagle3"}, name="a.csv")
    rows = [cell("m1", d, 0.0, m, s, 2.0, hardware="hw-b")
            for (m, d, s) in [("ar", "gsm8k", 1.0), ("ar", "math500", 1.0), ("ar", "mbpp", 1.0),
                              ("dflash", "gsm8k", 1.25), ("dflash", "math500", 1.75), ("dflash", "mbpp", 2.25),
                              ("bastion", "gsm8k", 5.25), ("bastion", "math500", 5.75), ("bastion", "mbpp", 6.25)]]
    b = write_rows(rows, tmp_path / "b.csv")
    out = tmp_path / "hw.pdf"
    plots.hardware_comparison([a, b], out, TITLE, ["ar", "dflash", "bastion"])
    text = pdf_text(out)
    assert "BASTION on hw-test has no result on gsm8k, mbpp" in text
    # every bar is over math500 alone: DFlash 3.00x (hw-test), 1.75x (hw-b); BASTION 5.75x on hw-b, none on hw-test
    for v in ("3.00x", "1.75x", "5.75x"):
        assert v in text
    for v in ("4.40x", "3.17x", "1.75x 1.75x", "5.75x 5.75x"):
        assert v not in text


def test_budget_ablation_means_like_with_like(tmp_path):
    values = {("dflash", "gsm8k"): (2.0, 3.0), ("dflash", "math500"): (3.0, 4.0), ("dflash", "mbpp"): (4.0, 5.0),
              ("bastion", "gsm8k"): (2.25, 6.0), ("bastion", "math500"): (3.25, 6.0), ("bastion", "mbpp"): (8.25, 6.0),
              ("bastion-b16", "gsm8k"): (1.5, 3.0), ("bastion-b16", "math500"): (2.5, 3.0),
              ("bastion-b16", "mbpp"): (6.5, 3.0),
              ("bastion-b64", "gsm8k"): (1.25, 3.0), ("bastion-b64", "math500"): (1.75, 3.0)}
    out = tmp_path / "ablation.pdf"
    plots.budget_ablation(partial_cells(tmp_path, values), out, TITLE)
    text = pdf_text(out)
    assert "averages over gsm8k, math500 only" in text and "BASTION (b=64) has no result on mbpp" in text
    # adaptive BASTION and DFlash over gsm8k and math500: 2.75x and 2.50x, not 4.58x and 3.00x over all three
    assert "BASTION, adaptive (2.75x at 16.0 nodes)" in text and "DFlash (2.50x)" in text
