"""The paper's main table (speedup and tau per dataset) from an aggregated ``cells.csv``.

One table, four twins that hold the same strings (written by
:mod:`bastion.report.table_formats`): ``.csv`` (numbers, one row per dataset plus
``Average``), ``.md`` (GitHub markdown), ``.tex`` (booktabs) and ``.pdf`` (matplotlib).
Columns are, for each (model, temperature) and each non-AR method, the speedup over AR
(``6.61x``) and the acceptance length tau (``3.59``); AR itself is the 1.00x baseline and
has no column.  A cell without results shows an en dash.

The helpers shared with :mod:`bastion.report.plots` (reading cells, dataset names and order,
method labels, titles) live here too.  Averages compare like with like
(:mod:`bastion.report.averages`): within a panel, over the datasets every method has.
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from bastion.defaults import ABLATION_PREFIX, BASELINE, METHODS, temperature_tag
from bastion.defaults import method_label as display_name
from bastion.report.averages import average, coverage_notes, finite_datasets, is_lossy, lossy_notes, panel_coverage
from bastion.report.datasets import PAPER_ORDER, dataset_name, order_datasets

MISSING = "\u2013"  # en dash
AVERAGE = "Average"
METRICS = ("speedup", "tau")

# --------------------------------------------------------------------------- helpers


def _join(values: Any) -> str:
    if values is None:
        return ""
    if isinstance(values, str):
        return values
    return ", ".join(str(v) for v in values)


def method_label(method: str) -> str:
    """A method's name in tables and figures: its display name, marked ``(lossy)`` where it is lossy."""
    label = display_name(method)
    return label if not is_lossy(method) or "lossy" in label.lower() else f"{label} (lossy)"


def main_methods(present: Iterable[str], methods: Sequence[str] | None = None) -> list[str]:
    """The methods to show, present ones only: ``methods`` in their order, or by default the known
    drafting methods in :data:`~bastion.defaults.METHODS` order, then any others by name; never AR,
    and by default never the ablation's fixed budgets."""
    present = list(dict.fromkeys(present))
    if methods is None:
        pref = [m for m in METHODS if m != BASELINE]
        methods = [m for m in pref if m in present] + sorted(
            m for m in present if m not in pref and not m.startswith(ABLATION_PREFIX))
    return [m for m in dict.fromkeys(methods) if m != BASELINE and m in present]


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

    ``methods`` are the methods to show (AR is dropped; a lossy one only in panels of
    T > 0, where it differs from its lossless twin).  Missing cells are NaN.  In each
    (model, temperature) panel the Average row is every method's mean over the same
    datasets, those where every method of the panel has a result; a method missing from
    some of the panel's datasets gets none (NaN), and ``table.attrs["notes"]`` says what is
    missing (:mod:`bastion.report.averages`).  Raises ValueError if no cell of any shown
    method exists.
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
    averages: dict[str, float] = {}
    notes: list[str] = []
    for model, temp in combos(df):
        sub = rows[(rows["model"] == model) & (rows["temperature"] == temp)]
        # a lossy acceptance is its lossless twin at T = 0, where no run decodes it: no column there
        panel = [m for m in shown if float(temp) > 0 or not is_lossy(m)]
        notes += _panel_columns(table, averages, sub, model, temp, panel)
    table.loc[AVERAGE] = pd.Series(averages, dtype=float)
    table.attrs["notes"] = lossy_notes([m for m in shown if m in set(rows["method"])], method_label) + notes
    return table


def _panel_columns(table: pd.DataFrame, averages: dict[str, float], sub: pd.DataFrame, model: str,
                   temp: float, shown: Sequence[str]) -> list[str]:
    """Add one panel's columns to ``table`` and their averages to ``averages``; returns its notes."""
    per = {m: sub[sub["method"] == m].groupby("dataset")[list(METRICS)].mean() for m in shown}
    covs = panel_coverage({m: finite_datasets(per[m]["speedup"].to_dict()) for m in shown})
    for method in shown:
        for metric in METRICS:
            col = column_name(model, temp, method, metric)
            table[col] = per[method][metric].reindex(table.index).astype(float)
            averages[col] = average(per[method][metric].to_dict(), method, covs[method])
    return coverage_notes(combo_label(model, temp), covs, method_label)


def table_notes(table: pd.DataFrame) -> list[str]:
    """The notes :func:`speedup_table` attached: what the averages leave out, and why."""
    return list(table.attrs.get("notes", []))


def parse_column(col: str) -> tuple[str, str, str, str]:
    model, temp, method, metric = col.rsplit("/", 3)
    return model, temp, method, metric


__all__ = ["AVERAGE", "MISSING", "PAPER_ORDER", "column_name", "combo_label", "combos", "dataset_name",
           "fmt", "main_methods", "method_label", "order_datasets", "parse_column", "read_csvs", "speedup_table",
           "table_notes", "title_text"]
