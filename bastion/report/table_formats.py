"""The speedup table's four twins: CSV, Markdown, LaTeX and a PDF page.

Formatting only; what the table holds is :func:`bastion.report.tables.speedup_table`.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from bastion.report.tables import (
    AVERAGE,
    MISSING,
    fmt,
    method_label,
    parse_column,
    speedup_table,
    table_notes,
    title_text,
)

# What the numbers are, as bastion.report.aggregate computes them.
DEFINITIONS = ("Speedup: the ratio of mean times per output token, AR's over the method's, in the decode phase; "
               "each mean is over the responses (a response's decode seconds over its output tokens), as the "
               "original release's benchmark computes it: not total seconds over total tokens, nor a mean of "
               "per-response ratios. "
               "\u03c4: tokens committed per target forward, pooled over every step of every response "
               f"(total committed over total steps). {MISSING}: no result.")


def formatted(table: pd.DataFrame) -> list[list[str]]:
    """The table's strings: one list per row, the dataset first."""
    out = []
    for name, row in table.iterrows():
        out.append([str(name)] + [fmt(parse_column(c)[3], row[c]) for c in table.columns])
    return out


def _header_groups(table: pd.DataFrame) -> list[tuple[str, str, list[str]]]:
    """[(model/temp tag, method, [metric columns])] in column order."""
    groups: list[tuple[str, str, list[str]]] = []
    for c in table.columns:
        model, temp, method, _ = parse_column(c)
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
            header.append(f"{key} {method_label(method)} {_metric_header(parse_column(c)[3])}")
    lines = [f"**{title}**", "", "| " + " | ".join(header) + " |",
             "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    for row in formatted(table):
        cells = [f"**{v}**" if row[0] == AVERAGE else v for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    for note in [DEFINITIONS, *table_notes(table)]:
        lines += ["", note]
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
    level3 = [""] + ["Speedup" if parse_column(c)[3] == "speedup" else r"$\tau$" for c in table.columns]
    lines.append(" & ".join(level3) + r" \\")
    lines.append(r"\midrule")
    for row in formatted(table):
        if row[0] == AVERAGE:
            lines.append(r"\midrule")
            lines.append(" & ".join(rf"\textbf{{{tex_escape(v)}}}" for v in row) + r" \\")
        else:
            lines.append(" & ".join(tex_escape(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines += [rf"\par\smallskip{{\footnotesize {tex_escape(note)}}}" for note in table_notes(table)]
    lines += [rf"\caption{{{tex_escape(caption)}. {tex_escape(DEFINITIONS)}}}", rf"\label{{{label}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _footer(table: pd.DataFrame, width_in: float) -> list[str]:
    """The definitions and the table's notes, wrapped to the page (8 pt: about 0.062 inch a character)."""
    chars = max(40, int((width_in - 0.5) / 0.062))
    notes = [DEFINITIONS, *table_notes(table)]
    return [line for note in notes for line in textwrap.wrap(note, chars, break_on_hyphens=False)]


def to_pdf(table: pd.DataFrame, title: str, out_pdf: str | os.PathLike) -> None:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["pdf.fonttype"] = 42
    matplotlib.rcParams["ps.fonttype"] = 42
    import matplotlib.pyplot as plt

    header = ["Dataset"]
    for key, method, cols in _header_groups(table):
        for c in cols:
            header.append(f"{key}\n{method_label(method)}\n{_metric_header(parse_column(c)[3])}")
    body = formatted(table)
    ncols = len(header)
    # wide enough for the columns and the title (11 pt); the notes below wrap
    width = max(1.5 + 1.1 * (ncols - 1) + 0.4, 0.085 * len(title) + 0.6, 7.0)
    foot = _footer(table, width)
    head_h, row_h, title_h, foot_h = 0.62, 0.3, 0.6, 0.25 + 0.15 * len(foot)  # inches
    table_h = head_h + row_h * len(body)
    height = title_h + table_h + foot_h + 0.1
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0.0, (foot_h + 0.05) / height, 1.0, table_h / height))
    ax.axis("off")
    tab = ax.table(cellText=body, colLabels=header, loc="upper center", cellLoc="center")
    tab.auto_set_font_size(False)
    tab.set_fontsize(9)
    _style_cells(tab, body, [1.5] + [1.1] * (ncols - 1), width, head_h, row_h, table_h)
    fig.suptitle(title, fontsize=11, y=1 - 0.2 / height, va="top")
    fig.text(0.5, 0.12 / height, "\n".join(foot), ha="center", va="bottom", fontsize=8, color="#444444",
             linespacing=1.3)
    Path(out_pdf).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_pdf)
    plt.close(fig)


def _style_cells(tab: Any, body: Sequence[Sequence[str]], col_in: Sequence[float], width: float, head_h: float,
                 row_h: float, table_h: float) -> None:
    """Sizes in inches, a shaded bold header and Average row, datasets flush left."""
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
