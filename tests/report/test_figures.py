"""The main table's twins and the figures, on small synthetic aggregates (fast, no model)."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bastion.report import plots, plots_steps, table_formats, tables

TITLE = {"hardware": "hw-test", "experiment": "exp_small", "models": ["m1", "m2"]}
FP = {f"fp_{k}": v for k, v in [("device_name", "CPU"), ("driver", "none"), ("cuda", "none"), ("torch", "2.0"),
                                  ("transformers", "5.0"), ("dtype", "float32"), ("attn_impl", "sdpa"),
                                  ("engine", "eager"), ("bastion", "0.1.0"), ("cuda_visible_devices", ""),
                                  ("host", "vm")]}


# --------------------------------------------------------------------------- PDF text


def pdf_text(path: Path) -> str:
    """The PDF's text with whitespace collapsed: pypdf if installed, else poppler's pdftotext."""
    try:
        import pypdf
    except ImportError:
        pypdf = None
    if pypdf is not None:
        text = "\n".join(page.extract_text() or "" for page in pypdf.PdfReader(str(path)).pages)
    elif shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", str(path), "-"], check=True, capture_output=True, text=True).stdout
    else:
        pytest.skip("neither pypdf nor pdftotext is available to read PDF text")
    return re.sub(r"\s+", " ", text)


def assert_pdf_has(path: Path, *needles: str) -> None:
    assert path.exists() and path.stat().st_size > 1000, f"{path} missing or empty"
    text = pdf_text(path)
    for n in needles:
        assert re.sub(r"\s+", " ", n) in text, f"{n!r} not in the text of {path.name}: {text[:600]!r}"


# --------------------------------------------------------------------------- synthetic inputs


def cell(model, dataset, temp, method, speedup, tau, tree=16.0, hardware="hw-test"):
    budget = method[len("bastion-b"):] if method.startswith("bastion-b") else ""
    tpot = 0.01 / speedup if speedup else float("nan")
    return {"hardware": hardware, "model": model, "dataset": dataset, "temperature": float(temp),
            "method": method, "budget": budget, "responses": 4, "tokens": 256, "decode_seconds": 256 * tpot,
            "tpot_s": tpot, "tau": tau, "mean_tree_size": tree, "tok_per_s": 1 / tpot, **FP, "speedup": speedup}


def write_rows(rows, path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def make_cells(tmp_path: Path, models=("m1", "m2"), temps=(0.0, 1.0), datasets=("mbpp", "zeta-set", "gsm8k"),
               methods=("ar", "dflash", "bastion", "bastion-b16", "bastion-b64"), drop=(), hardware="hw-test",
               name="cells.csv") -> Path:
    rng = np.random.default_rng(0)
    rows = []
    for m in models:
        for d in datasets:
            # datasets as the aggregation wrote them before the rename: a path
            dval = f"results/datasets/{d}.jsonl" if d == "gsm8k" else d
            for t in temps:
                for meth in methods:
                    if (m, d, t, meth) in drop:
                        continue
                    if meth == "ar":
                        rows.append(cell(m, dval, t, meth, 1.0, 1.0, 1.0, hardware))
                    else:
                        b = float(meth[len("bastion-b"):]) if meth.startswith("bastion-b") else 16.0
                        tree = 24.0 if meth == "bastion" else b
                        rows.append(cell(m, dval, t, meth, float(rng.uniform(0.5, 4.0)), float(rng.uniform(1, 6)),
                                         tree, hardware))
    return write_rows(rows, tmp_path / name)


def make_steps(tmp_path: Path, models=("m1",), temps=(0.0,), datasets=("gsm8k", "mbpp"),
               methods=("ar", "dflash", "bastion"), name="steps.csv") -> Path:
    rng = np.random.default_rng(1)
    rows = []
    for m in models:
        for d in datasets:
            for t in temps:
                for meth in methods:
                    for p in range(3):
                        ctx = 50 + 40 * p
                        for s in range(8 + 5 * p):
                            a = 1 if meth == "ar" else int(rng.integers(1, 9))
                            n = 1 if meth == "ar" else (16 if meth == "dflash" else int(rng.choice([16, 32, 64])))
                            rows.append({"hardware": "hw-test", "model": m, "dataset": f"results/datasets/{d}.jsonl",
                                         "temperature": t, "method": meth, "prompt_index": p, "turn": 0, "step": s,
                                         "committed": a, "tree_size": n, "context": ctx})
                            ctx += a
    return write_rows(rows, tmp_path / name)


def make_grid(tmp_path: Path, model: str, heldout: bool = True) -> Path:
    rng = np.random.default_rng(2)
    pts = []
    for i, (s, c) in enumerate((s, c) for s in (8, 16, 32, 64) for c in (64, 256, 1024)):
        lat = 1e-3 * (1 + s / 16 + c / 512)
        pts.append({"s": s, "c": c, "latency_s": lat, "std_s": lat * 0.05, "heldout": heldout and i % 4 == 0,
                    "predicted_s": lat * float(rng.uniform(0.8, 1.2))})
    data = {"fingerprint": {}, "grid": {}, "points": pts, "cost_model": {},
            "report": {"in_sample_mape": 0.1234, "heldout_mape": 0.0987, "heldout_max_ape": 0.2}}
    path = tmp_path / model / "latency_grid.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


# --------------------------------------------------------------------------- helpers


def test_dataset_names_and_order():
    assert tables.dataset_name("results/datasets/humaneval-pkg.jsonl") == "humaneval-pkg"
    assert tables.dataset_name("mt-bench") == "mt-bench"
    assert tables.order_datasets(["zeta", "mbpp", "alpaca", "gsm8k", "abc", "mbpp"]) == \
        ["gsm8k", "mbpp", "alpaca", "abc", "zeta"]


def test_title_text_names_everything():
    text = tables.title_text(TITLE, "Speedup")
    for part in ("Speedup", "hw-test", "m1, m2", "exp_small"):
        assert part in text
    assert tables.title_text("given", "") == "given"


# --------------------------------------------------------------------------- table twins


def write_table(tmp_path, cells, methods=("ar", "dflash", "bastion"), title=TITLE):
    out = {k: tmp_path / f"speedup_table.{k}" for k in ("csv", "md", "tex", "pdf")}
    table_formats.write_speedup_table(cells, list(methods), title, out["csv"], out["md"], out["tex"], out["pdf"])
    return out


def md_rows(md: str) -> list[list[str]]:
    rows = [ln for ln in md.splitlines() if ln.startswith("|")][2:]
    return [[c.strip().strip("*") for c in ln.strip("|").split("|")] for ln in rows]


def test_table_twins_agree(tmp_path):
    cells = make_cells(tmp_path, drop={("m2", "mbpp", 1.0, "dflash")})
    out = write_table(tmp_path, cells)
    num = pd.read_csv(out["csv"], index_col="dataset")
    assert list(num.index) == ["gsm8k", "mbpp", "zeta-set", "Average"]
    assert list(num.columns[:4]) == ["m1/T0/dflash/speedup", "m1/T0/dflash/tau", "m1/T0/bastion/speedup",
                                     "m1/T0/bastion/tau"]
    assert len(num.columns) == 2 * 2 * 2 * 2  # models x temperatures x methods x metrics
    assert not any("/ar/" in c for c in num.columns)
    # the Average row is the mean over the dataset rows, column by column, where every method of the
    # panel has a result; in the panel that lacks DFlash on mbpp, DFlash has no average and BASTION's
    # is over gsm8k and zeta-set only
    body = num.drop(index="Average")
    partial = [c for c in num.columns if c.startswith("m2/T1/")]
    np.testing.assert_allclose(num.loc["Average"].drop(partial).to_numpy(),
                               body.drop(columns=partial).mean().to_numpy())
    assert math.isnan(num.loc["mbpp", "m2/T1/dflash/speedup"])
    assert num.loc["Average", ["m2/T1/dflash/speedup", "m2/T1/dflash/tau"]].isna().all()
    for c in ("m2/T1/bastion/speedup", "m2/T1/bastion/tau"):
        assert num.loc["Average", c] == pytest.approx(body.loc[["gsm8k", "zeta-set"], c].mean())

    expected = [[name] + [tables.fmt(c.rsplit("/", 1)[1], num.loc[name, c]) for c in num.columns]
                for name in num.index]
    assert expected[1][num.columns.get_loc("m2/T1/dflash/speedup") + 1] == tables.MISSING
    assert all(re.fullmatch(r"\d+\.\d\dx", v) for v in expected[0][1::2])
    md = out["md"].read_text(encoding="utf-8")
    assert md_rows(md) == expected
    title = tables.title_text(TITLE, "Speedup over AR and acceptance length \u03c4")
    assert title in md.splitlines()[0]

    tex = out["tex"].read_text(encoding="utf-8")
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"\begin{table}" in tex
    assert r"exp\_small" in tex and "hw-test" in tex and r"\caption{" in tex
    for row in expected:
        line = " & ".join(table_formats.tex_escape(v) for v in row)
        if row[0] == tables.AVERAGE:
            line = " & ".join(rf"\textbf{{{table_formats.tex_escape(v)}}}" for v in row)
        assert line + r" \\" in tex

    text = pdf_text(out["pdf"])
    assert title in text
    tokens = Counter(text.split())
    for row in expected:
        assert not Counter(row) - tokens, f"row {row} not in the PDF text"


def test_table_tex_escapes_and_one_dataset(tmp_path):
    cells = make_cells(tmp_path, models=("m_1",), temps=(0.0,), datasets=("humaneval",),
                       methods=("ar", "bastion"))
    out = write_table(tmp_path, cells, methods=("ar", "dflash", "bastion"),
                      title={"hardware": "gpu_x", "experiment": "e&1", "models": ["m_1"]})
    tex = out["tex"].read_text(encoding="utf-8")
    assert r"m\_1" in tex and r"gpu\_x" in tex and r"e\&1" in tex
    num = pd.read_csv(out["csv"], index_col="dataset")
    assert list(num.index) == ["humaneval", "Average"]
    # dflash has no cells: its columns show the dash everywhere
    assert num["m_1/T0/dflash/speedup"].isna().all()
    assert md_rows(out["md"].read_text(encoding="utf-8"))[0][1] == tables.MISSING
    assert num.loc["Average", "m_1/T0/bastion/tau"] == pytest.approx(num.loc["humaneval", "m_1/T0/bastion/tau"])


def test_table_without_method_rows_raises(tmp_path):
    cells = make_cells(tmp_path, methods=("ar",))
    with pytest.raises(ValueError, match="no cells"):
        write_table(tmp_path, cells)
    with pytest.raises(ValueError, match="non-AR"):
        write_table(tmp_path, make_cells(tmp_path), methods=("ar",))


# --------------------------------------------------------------------------- figures


def test_speedup_bars(tmp_path):
    out = tmp_path / "bars.pdf"
    plots.speedup_bars(make_cells(tmp_path), out, TITLE, ["ar", "dflash", "bastion"])
    assert_pdf_has(out, tables.title_text(TITLE, "Speedup over AR"), "Dataset", plots.SPEEDUP_LABEL, "Average",
                   "gsm8k", "DFlash", "BASTION", "AR (1.00x)", "m2, T=1")
    assert re.search(r"\d+\.\d\dx", pdf_text(out))
    # the Average group comes first
    text = pdf_text(out)
    assert text.index("Average") < text.index("gsm8k") < text.index("mbpp")


def test_speedup_bars_missing_categories(tmp_path):
    cells = make_cells(tmp_path, models=("m1",), temps=(0.0,), datasets=("mbpp",), methods=("ar", "bastion"))
    out = tmp_path / "bars.pdf"
    plots.speedup_bars(cells, out, TITLE, ["ar", "dflash", "bastion"])
    assert_pdf_has(out, "BASTION", "mbpp")
    with pytest.raises(ValueError, match="other than AR"):
        plots.speedup_bars(make_cells(tmp_path, methods=("ar",), name="ar.csv"), out, TITLE, ["ar", "dflash"])


def test_acceptance_length(tmp_path):
    out = tmp_path / "acc.pdf"
    plots_steps.acceptance_length(make_steps(tmp_path, models=("m1", "m2"), temps=(0.0, 1.0)), out, TITLE)
    assert_pdf_has(out, tables.title_text(TITLE, "Acceptance length per step"),
                   "Tokens committed per step", "Fraction of steps", "DFlash (mean \u03c4 =", "m2, T=1")
    only = make_steps(tmp_path, methods=("ar", "bastion"), name="only.csv")
    plots_steps.acceptance_length(only, out, TITLE)
    assert_pdf_has(out, "BASTION (mean")
    with pytest.raises(ValueError, match="no steps"):
        plots_steps.acceptance_length(make_steps(tmp_path, methods=("ar",), name="ar.csv"), out, TITLE)


def test_tree_budget(tmp_path):
    out = tmp_path / "tree.pdf"
    plots_steps.tree_budget(make_steps(tmp_path, temps=(0.0, 1.0)), out, TITLE)
    assert_pdf_has(out, tables.title_text(TITLE, "Adaptive tree budget"), "Decoding step",
                   "Tree size (nodes verified)", "Context length (tokens)", "binned mean", "m1, T=1, BASTION",
                   "distinct sizes")
    single = make_steps(tmp_path, datasets=("mbpp",), methods=("bastion",), name="single.csv")
    plots_steps.tree_budget(single, out, "a plain title", max_responses=1)
    assert_pdf_has(out, "a plain title")
    # every budget rule gets its own row of panels; fixed budgets and other methods none
    rules = make_steps(tmp_path, methods=("ar", "dflash", "bastion", "bastion_plus", "bastion-b16"), name="rules.csv")
    plots_steps.tree_budget(rules, out, TITLE)
    text = pdf_text(out)
    assert "m1, T=0, BASTION+: tree size against context" in text
    assert "m1, T=0, BASTION: tree size against context" in text
    assert "b=16" not in text and "DFlash" not in text
    with pytest.raises(ValueError, match="adaptive budget rule"):
        plots_steps.tree_budget(make_steps(tmp_path, methods=("ar", "dflash", "bastion-b16"), name="nob.csv"), out,
                                TITLE)


def test_budget_ablation(tmp_path):
    out = tmp_path / "ablation.pdf"
    plots.budget_ablation(make_cells(tmp_path), out, TITLE)
    assert_pdf_has(out, tables.title_text(TITLE, "Tree budget ablation"), "Fixed tree budget",
                   plots.SPEEDUP_LABEL, "adaptive", "16", "64")
    # no adaptive and no dflash rows, one dataset: still a figure
    cells = make_cells(tmp_path, models=("m1",), temps=(1.0,), datasets=("gsm8k",),
                       methods=("ar", "bastion-b32"), name="b.csv")
    plots.budget_ablation(cells, out, TITLE)
    assert_pdf_has(out, "fixed budget", "m1, T=1")
    with pytest.raises(ValueError, match="bastion-b"):
        plots.budget_ablation(make_cells(tmp_path, methods=("ar", "dflash", "bastion"), name="n.csv"), out, TITLE)


def test_budget_ablation_from_the_pipelines_two_aggregates(tmp_path):
    """The pipeline's main cells (adaptive, DFlash) and ablation cells (AR again, fixed budgets)."""
    main = make_cells(tmp_path, models=("m1",), temps=(0.0,), methods=("ar", "dflash", "bastion"), name="main.csv")
    fixed = make_cells(tmp_path, models=("m1",), temps=(0.0,), methods=("ar", "bastion-b16", "bastion-b64"),
                       name="fixed.csv")
    out = tmp_path / "two.pdf"
    plots.budget_ablation([main, fixed], out, TITLE)
    adaptive = pd.read_csv(main).query("method == 'bastion'")["speedup"].mean()
    assert_pdf_has(out, f"BASTION, adaptive ({adaptive:.2f}x at 24.0 nodes)", "fixed budget", "16", "64")


def test_budget_ablation_marks_every_budget_rule(tmp_path):
    """The ablation job's own cells: AR, both budget rules and the fixed budgets; each rule is a point of its own."""
    cells = make_cells(tmp_path, models=("m1",), temps=(0.0,),
                       methods=("ar", "bastion", "bastion_plus", "bastion-b16", "bastion-b64"), name="rules.csv")
    out = tmp_path / "rules.pdf"
    plots.budget_ablation(cells, out, TITLE)
    df = pd.read_csv(cells)
    for rule, label in (("bastion", "BASTION"), ("bastion_plus", "BASTION+")):
        mean = df[df["method"] == rule]["speedup"].mean()
        assert f"{label}, adaptive ({mean:.2f}x at" in pdf_text(out)


def test_cost_model_fit(tmp_path):
    out = tmp_path / "fit.pdf"
    grids = [make_grid(tmp_path, "m1"), make_grid(tmp_path, "m2", heldout=False)]
    plots_steps.cost_model_fit(grids, ["m1", "m2"], out, TITLE)
    assert_pdf_has(out, tables.title_text(TITLE, "Cost model fit"), "Measured verification latency (ms)",
                   "Predicted verification latency (ms)", "MAPE 12.3%", "MAPE 9.9%", "identity", "m2",
                   "held-out error 9.9% mean, 20.0% worst")
    # a fit kept past the quality gate says so
    data = json.loads(grids[0].read_text())
    data["report"]["quality_gate"] = {"max_heldout_mape": None, "passed": False, "attempts": []}
    grids[0].write_text(json.dumps(data))
    plots_steps.cost_model_fit(grids[:1], ["m1"], out, TITLE)
    assert_pdf_has(out, "above the calibration quality gate")
    empty = tmp_path / "empty" / "latency_grid.json"
    empty.parent.mkdir()
    empty.write_text(json.dumps({"points": [], "report": {}}))
    with pytest.raises(ValueError, match="no calibration points"):
        plots_steps.cost_model_fit([empty], ["empty"], out, TITLE)


def test_hardware_comparison(tmp_path):
    out = tmp_path / "hw.pdf"
    a = make_cells(tmp_path, hardware="hw-a", name="a.csv")
    b = make_cells(tmp_path, hardware="hw-b", methods=("ar", "bastion"), temps=(0.0,), name="b.csv")
    plots.hardware_comparison([a, b], out, TITLE)
    assert_pdf_has(out, "Speedup across hardware", "hw-a, hw-b", "exp_small", "Method",
                   "Average speedup over AR (mean over datasets)", "DFlash", "BASTION")
    plots.hardware_comparison([b], out, TITLE)
    assert_pdf_has(out, "hw-b")
    with pytest.raises(ValueError, match="no non-AR"):
        plots.hardware_comparison([make_cells(tmp_path, methods=("ar",), name="ar.csv")], out, TITLE)
