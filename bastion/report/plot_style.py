"""Shared look of the figures: Agg backend, text kept as text, colours, layout helpers.

Every function writes one PDF (one figure, one panel per (model, temperature) where the
data has several), with text kept as text (``pdf.fonttype`` 42) so titles and labels can
be searched and extracted.  ``title`` is the rules' ``params.title`` dict
``{hardware, experiment, models}`` or a ready string.  A function whose input lacks every
row it needs raises ValueError; missing categories (a method, a dataset, a temperature)
are simply left out of the figure.  Notes (what an average leaves out) go below the
panels, in the PDF's text like the rest.
"""

from __future__ import annotations

import math
import os
import textwrap
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

SPEEDUP_LABEL = "Speedup over AR (time per output token)"
COLORS = {"eagle3": "#55A868", "dflash": "#4C72B0", "bastion": "#DD8452", "ar": "#7f7f7f",
          "bastion_plus": "#C44E52", "bastion_lossy": "#937860"}
EXTRA_COLORS = ["#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974", "#64B5CD"]
LOSSY_HATCH = "//"  # a lossy method's bars, besides its "(lossy)" label
MAX_SCATTER = 20000  # points drawn per scatter, beyond that a sample


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["pdf.fonttype"] = 42
    matplotlib.rcParams["ps.fonttype"] = 42
    import matplotlib.pyplot as plt

    return plt


def color(method: str, i: int) -> str:
    return COLORS.get(method, EXTRA_COLORS[i % len(EXTRA_COLORS)])


def grid_shape(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = min(n, max_cols)
    return math.ceil(n / cols), cols


def save(fig, out_pdf: str | os.PathLike) -> None:
    plt = pyplot()
    Path(out_pdf).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_pdf)
    plt.close(fig)


def suptitle(fig, text: str, height_in: float) -> None:
    """The figure title on one line, widening the figure if the title would not fit."""
    need = 0.095 * len(text) + 0.6  # inches at 12 pt
    if fig.get_figwidth() < need:
        fig.set_figwidth(need)
    fig.suptitle(text, fontsize=12, y=1 - 0.12 / height_in, va="top")


def require(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    if df.empty:
        raise ValueError(f"{what}: the input has no rows")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: the input lacks the columns {missing}")


def log2_axis(ax, axis: str, values: np.ndarray) -> None:
    """log2 scale when the values span a factor 4 or more, else a linear axis from 0."""
    values = values[np.isfinite(values) & (values > 0)]
    if values.size and values.max() / values.min() >= 4:
        from matplotlib.ticker import FuncFormatter

        getattr(ax, f"set_{axis}scale")("log", base=2)
        getattr(ax, f"{axis}axis").set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    elif values.size:
        getattr(ax, f"set_{axis}lim")(0, values.max() * 1.2)


def finish_panels(fig, axes, n_panels: int, title: str, height: float, out_pdf: str | os.PathLike,
                  notes: Sequence[str] = ()) -> None:
    """Blank the unused panels, put the title above the grid and the notes below it, lay out and save."""
    for ax in axes.flat[n_panels:]:
        ax.axis("off")
    suptitle(fig, title, height)  # first: it may widen the figure, which the notes then fill
    lines = wrapped(notes, fig.get_figwidth())
    foot = 0.15 + 0.15 * len(lines) if lines else 0.0  # inches below the panels
    total = height + foot
    if lines:
        fig.set_figheight(total)
        suptitle(fig, title, total)
        fig.text(0.01, 0.08 / total, "\n".join(lines), ha="left", va="bottom", fontsize=7.5, color="#444444",
                 linespacing=1.3)
    fig.tight_layout(rect=(0, foot / total, 1, 1 - 0.38 / total))
    save(fig, out_pdf)


def wrapped(notes: Sequence[str], width_in: float) -> list[str]:
    """Notes as lines that fit a figure ``width_in`` inches wide at 7.5 pt."""
    chars = max(40, int((width_in - 0.3) / 0.058))
    return [line for note in notes for line in textwrap.wrap(note, chars, break_on_hyphens=False)]


def panel_figure(n_panels: int, panel_width: float, row_height: float, max_cols: int = 2):
    """A grid of panels (one per (model, temperature)); returns (fig, axes [rows, cols], height)."""
    nr, nc = grid_shape(n_panels, max_cols)
    height = 0.6 + row_height * nr
    fig, axes = pyplot().subplots(nr, nc, figsize=(panel_width * nc, height), squeeze=False)
    return fig, axes, height
