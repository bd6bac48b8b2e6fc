"""The paper's main table (speedup and tau per dataset) from an aggregated ``cells.csv``.

One table, four twins that hold the same strings: ``.csv`` (numbers, one row per dataset
plus ``Average``), ``.md`` (GitHub markdown), ``.tex`` (booktabs) and ``.pdf`` (matplotlib).
Columns are, for each (model, temperature) and each non-AR method, the speedup over AR
(``6.61x``) and the acceptance length tau (``3.59``); AR itself is the 1.00x baseline and
has no column.  A cell without results shows an en dash.

The helpers shared with :mod:`bastion.report.plots` (reading cells, dataset names and order,
method labels, titles) live here too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from bastion.data.registry import LONGBENCH_SUBSETS, OFFLINE_DATASETS, SHORT_DATASETS

MISSING = "\u2013"  # en dash
AVERAGE = "Average"
# The paper's order; datasets it does not name follow alphabetically.
PAPER_ORDER: tuple[str, ...] = (*SHORT_DATASETS, *LONGBENCH_SUBSETS, *OFFLINE_DATASETS)
METRICS = ("speedup", "tau")

_METHOD_LABELS = {"ar": "AR", "dflash": "DFlash", "bastion": "BASTION"}


# --------------------------------------------------------------------------- helpers


def dataset_name(value: Any) -> str:
    """The plain dataset name: ``results/datasets/humaneval-pkg.jsonl`` -> ``humaneval-pkg``."""
    text = str(value)
    if text.endswith(".jsonl"):
        return PurePosixPath(text.replace("\\", "/")).name[: -len(".jsonl")]
    return text


def order_datasets(names: Iterable[str]) -> list[str]:
    """Unique names in the paper's order, the others alphabetically after them."""
    unique = list(dict.fromkeys(names))
    rank = {n: i for i, n in enumerate(PAPER_ORDER)}
    return sorted(unique, key=lambda n: (0, rank[n], "") if n in rank else (1, 0, n))


def temperature_tag(t: Any) -> str:
    """0.0 -> 'T0', 0.7 -> 'T0.7' (the column tag)."""
    return f"T{float(t):g}"


def method_label(method: str) -> str:
    """Display name: ``bastion`` -> ``BASTION``, ``bastion-b64`` -> ``BASTION (b=64)``."""
    if method in _METHOD_LABELS:
        return _METHOD_LABELS[method]
    if method.startswith("bastion-b"):
        return f"BASTION (b={method[len('bastion-b'):]})"
    return method


def _join(values: Any) -> str:
    if values is None:
        return ""
    if isinstance(values, str):
        return values
    return ", ".join(str(v) for v in values)


def title_text(title: Mapping[str, Any] | str | None, what: str = "") -> str:
    """A title naming what is shown, the hardware, the model(s) and the experiment.

    ``title`` is the rules' ``params.title`` dict ``{hardware, experiment, models}`` (any
    key may be missing) or an already formatted string, returned with ``what`` prefixed.
    """
    if title is None:
        return what
    if isinstance(title, str):
        return f"{what}: {title}" if what and title else (what or title)
    parts = []
    if title.get("hardware"):
        parts.append(f"hardware {_join(title['hardware'])}")
    models = title.get("models", title.get("model"))
    if models:
        many = not isinstance(models, str) and len(list(models)) > 1
        parts.append(f"{'models' if many else 'model'} {_join(models)}")
    if title.get("experiment"):
        parts.append(f"experiment {title['experiment']}")
    body = ", ".join(parts)
    return f"{what}: {body}" if what and body else (what or body)


def read_csvs(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Concatenate aggregated CSVs, normalising the cell keys (plain dataset names, float temperatures)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    frames = []
    for p in paths:
        if os.path.getsize(p) == 0:
            continue
        frames.append(pd.read_csv(p, dtype={"hardware": str, "model": str, "dataset": str, "method": str}))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if "dataset" in df:
        df["dataset"] = df["dataset"].map(dataset_name)
    if "temperature" in df:
        df["temperature"] = df["temperature"].astype(float)
    for col in ("hardware", "model", "method"):
        if col in df:
            df[col] = df[col].astype(str)
    return df


def combos(df: pd.DataFrame) -> list[tuple[str, float]]:
    """The (model, temperature) pairs of a frame: models in first-appearance order, temperatures ascending."""
    models = list(dict.fromkeys(df["model"]))
    out = []
    for m in models:
        for t in sorted(set(df.loc[df["model"] == m, "temperature"])):
            out.append((m, float(t)))
    return out


def combo_label(model: str, temperature: float) -> str:
    return f"{model}, T={float(temperature):g}"


# --------------------------------------------------------------------------- the table


def fmt(metric: str, value: Any) -> str:
    """The one formatting of a number, shared by all the twins."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return MISSING
    if not math.isfinite(v):
        return MISSING
    return f"{v:.2f}x" if metric == "speedup" else f"{v:.2f}"


def column_name(model: str, temperature: float, method: str, metric: str) -> str:
    return f"{model}/{temperature_tag(temperature)}/{method}/{metric}"


def speedup_table(cells: str | os.PathLike | pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """Numeric table: index = datasets (+ ``Average``), columns ``model/T<t>/method/metric``.

    ``methods`` are the methods to show (AR is dropped).  Missing cells are NaN; the
    Average row is the mean over the datasets that have a value.  Raises ValueError if
    no cell of any shown method exists.
    """
    df = cells if isinstance(cells, pd.DataFrame) else read_csvs(cells)
    shown = [m for m in dict.fromkeys(methods) if m != "ar"]
    if not shown:
        raise ValueError("speedup table: no non-AR method to show (methods = %r)" % list(methods))
    need = {"model", "dataset", "temperature", "method", "speedup", "tau"}
    if df.empty or not need <= set(df.columns):
        raise ValueError(f"speedup table: the cells have none of the columns {sorted(need)} or no rows")
    rows = df[df["method"].isin(shown)]
    if rows.empty:
        raise ValueError(f"speedup table: no cells for the methods {shown} (found methods: "
                         f"{sorted(set(df['method']))})")
    datasets = order_datasets(df["dataset"])
    table = pd.DataFrame(index=pd.Index(datasets, name="dataset"))
    for model, temp in combos(df):
        sub = rows[(rows["model"] == model) & (rows["temperature"] == temp)]
        for method in shown:
            cell = sub[sub["method"] == method].groupby("dataset")[list(METRICS)].mean()
            for metric in METRICS:
                table[column_name(model, temp, method, metric)] = cell[metric].reindex(datasets).astype(float)
    avg = table.mean(axis=0, skipna=True)
    table.loc[AVERAGE] = avg
    return table


def _parse_column(col: str) -> tuple[str, str, str, str]:
    model, temp, method, metric = col.rsplit("/", 3)
    return model, temp, method, metric


def formatted(table: pd.DataFrame) -> list[list[str]]:
    """The table's strings: one list per row, the dataset first."""
    out = []
    for name, row in table.iterrows():
        out.append([str(name)] + [fmt(_parse_column(c)[3], row[c]) for c in table.columns])
    return out


def _header_groups(table: pd.DataFrame) -> list[tuple[str, str, list[str]]]:
    """[(model/temp tag, method, [metric columns])] in column order."""
    groups: list[tuple[str, str, list[str]]] = []
    for c in table.columns:
        model, temp, method, _ = _parse_column(c)
        key = f"{model}, T={temp[1:]}"
        if groups and groups[-1][0] == key and groups[-1][1] == method:
            groups[-1][2].append(c)
        else:
            groups.append((key, method, [c]))
    return groups


def _metric_header(metric: str) -> str:
    return "speedup" if metric == "speedup" else "\u03c4"


def to_markdown(table: pd.DataFrame, title: str) -> str:
    header = ["Dataset"]
    for key, method, cols in _header_groups(table):
        for c in cols:
            header.append(f"{key} {method_label(method)} {_metric_header(_parse_column(c)[3])}")
    lines = [f"**{title}**", "", "| " + " | ".join(header) + " |",
             "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    for row in formatted(table):
        cells = [f"**{v}**" if row[0] == AVERAGE else v for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Speedup: AR time per output token over the method's (decode phase); "
                 f"\u03c4: tokens committed per verification step; {MISSING}: no result.")
    return "\n".join(lines) + "\n"


_TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                MISSING: "--", "\u03c4": r"$\tau$"}


def tex_escape(text: Any) -> str:
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in str(text))


def to_latex(table: pd.DataFrame, caption: str, label: str = "tab:speedup") -> str:
    groups = _header_groups(table)
    ncols = len(table.columns)
    lines = [r"% Requires \usepackage{booktabs}.", r"\begin{table}[t]", r"\centering", r"\small",
             r"\begin{tabular}{l" + "r" * ncols + "}", r"\toprule"]
    # level 1: model and temperature
    level1, rules1, start = ["Dataset"], [], 2
    combos_ = list(dict.fromkeys(k for k, _, _ in groups))
    for key in combos_:
        width = sum(len(cols) for k, _, cols in groups if k == key)
        level1.append(rf"\multicolumn{{{width}}}{{c}}{{{tex_escape(key)}}}")
        rules1.append(rf"\cmidrule(lr){{{start}-{start + width - 1}}}")
        start += width
    lines.append(" & ".join(level1) + r" \\")
    lines.append(" ".join(rules1))
    # level 2: method
    level2, rules2, start = [""], [], 2
    for _, method, cols in groups:
        level2.append(rf"\multicolumn{{{len(cols)}}}{{c}}{{{tex_escape(method_label(method))}}}")
        rules2.append(rf"\cmidrule(lr){{{start}-{start + len(cols) - 1}}}")
        start += len(cols)
    lines.append(" & ".join(level2) + r" \\")
    lines.append(" ".join(rules2))
    # level 3: metric
    level3 = [""] + ["Speedup" if _parse_column(c)[3] == "speedup" else r"$\tau$" for c in table.columns]
    lines.append(" & ".join(level3) + r" \\")
    lines.append(r"\midrule")
    for row in formatted(table):
        if row[0] == AVERAGE:
            lines.append(r"\midrule")
            lines.append(" & ".join(rf"\textbf{{{tex_escape(v)}}}" for v in row) + r" \\")
        else:
            lines.append(" & ".join(tex_escape(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}",
              rf"\caption{{{tex_escape(caption)}. Speedup: AR time per output token over the method's "
              r"(decode phase); $\tau$: tokens committed per verification step; -- : no result.}",
              rf"\label{{{label}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def to_pdf(table: pd.DataFrame, title: str, out_pdf: str | os.PathLike) -> None:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["pdf.fonttype"] = 42
    matplotlib.rcParams["ps.fonttype"] = 42
    import matplotlib.pyplot as plt

    groups = _header_groups(table)
    header = ["Dataset"]
    for key, method, cols in groups:
        for c in cols:
            header.append(f"{key}\n{method_label(method)}\n{_metric_header(_parse_column(c)[3])}")
    body = formatted(table)
    ncols = len(header)
    # wide enough for the columns, the title (11 pt) and the footnote (8 pt)
    foot = (f"Speedup: AR time per output token over the method's (decode phase);  "
            f"\u03c4: tokens committed per verification step;  {MISSING}: no result")
    width = max(1.5 + 1.1 * (ncols - 1) + 0.4, 0.085 * len(title) + 0.6, 0.062 * len(foot) + 0.5)
    head_h, row_h, title_h, foot_h = 0.62, 0.3, 0.6, 0.4  # inches
    table_h = head_h + row_h * len(body)
    height = title_h + table_h + foot_h + 0.1
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0.0, (foot_h + 0.05) / height, 1.0, table_h / height))
    ax.axis("off")
    tab = ax.table(cellText=body, colLabels=header, loc="upper center", cellLoc="center")
    tab.auto_set_font_size(False)
    tab.set_fontsize(9)
    col_in = [1.5] + [1.1] * (ncols - 1)
    for (r, c), cell in tab.get_celld().items():
        cell.set_width(col_in[c] / width)
        cell.set_height((head_h if r == 0 else row_h) / table_h)
        cell.set_edgecolor("#bbbbbb")
        if r == 0:
            cell.set_facecolor("#e8e8f0")
            cell.set_text_props(fontweight="bold")
        elif body[r - 1][0] == AVERAGE:
            cell.set_facecolor("#f4f4f4")
            cell.set_text_props(fontweight="bold")
        if c == 0 and r > 0:
            cell.set_text_props(ha="left")
            cell.PAD = 0.05
    fig.suptitle(title, fontsize=11, y=1 - 0.2 / height, va="top")
    fig.text(0.5, 0.12 / height, foot, ha="center", va="bottom", fontsize=8, color="#444444")
    Path(out_pdf).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_pdf)
    plt.close(fig)


def to_csv(table: pd.DataFrame, out_csv: str | os.PathLike) -> None:
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out_csv, index=True, index_label="dataset", float_format="%.17g", na_rep="")


def write_speedup_table(cells_csv: str | os.PathLike, methods: Sequence[str], title: Mapping[str, Any] | str,
                        out_csv: str | os.PathLike, out_md: str | os.PathLike, out_tex: str | os.PathLike,
                        out_pdf: str | os.PathLike) -> pd.DataFrame:
    """Build the table from ``cells_csv`` and write its four twins; returns the numeric table."""
    table = speedup_table(cells_csv, methods)
    text = title_text(title, "Speedup over AR and acceptance length \u03c4")
    to_csv(table, out_csv)
    Path(out_md).parent.mkdir(parents=True, exist_ok=True)
    Path(out_md).write_text(to_markdown(table, text), encoding="utf-8")
    Path(out_tex).parent.mkdir(parents=True, exist_ok=True)
    Path(out_tex).write_text(to_latex(table, text), encoding="utf-8")
    to_pdf(table, text, out_pdf)
    return table


__all__ = ["AVERAGE", "MISSING", "PAPER_ORDER", "column_name", "combo_label", "combos", "dataset_name",
           "fmt", "formatted", "method_label", "order_datasets", "read_csvs", "speedup_table", "tex_escape",
           "title_text", "to_csv", "to_latex", "to_markdown", "to_pdf", "write_speedup_table"]
