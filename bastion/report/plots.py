"""The speedup figures: per-dataset bars, the budget ablation, the hardware comparison.

The conventions every figure follows are in :mod:`bastion.report.plot_style`.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from bastion.report.plot_style import (
    COLORS,
    EXTRA_COLORS,
    LOSSY_HATCH,
    SPEEDUP_LABEL,
    color,
    finish_panels,
    panel_figure,
    require,
)
from bastion.defaults import is_adaptive
from bastion.report.drift_check import describe
from bastion.report.averages import average, coverage_notes, finite_datasets, is_lossy, lossy_notes, panel_coverage
from bastion.report.tables import (
    AVERAGE,
    combo_label,
    combos,
    main_methods,
    method_label,
    order_datasets,
    read_csvs,
    title_text,
)


# --------------------------------------------------------------------------- speedup bars


def speedup_bars(cells_csv: str | os.PathLike, out_pdf: str | os.PathLike, title: Mapping[str, Any] | str,
                 methods: Sequence[str] | None = None) -> None:
    """Grouped bars of each method's speedup per dataset, the Average group first.

    The Average compares like with like (:mod:`bastion.report.averages`): a method
    missing from a dataset of the panel has no Average bar, and a note says so.
    """
    what = "speedup_bars"
    df = read_csvs(cells_csv)
    require(df, ["model", "dataset", "temperature", "method", "speedup"], what)
    shown = main_methods(df["method"], methods)
    rows = df[df["method"].isin(shown)]
    if rows.empty:
        raise ValueError(f"{what}: no cells of the methods {list(methods or [])} other than AR "
                         f"(found: {sorted(set(df['method']))})")
    panels = combos(rows)
    datasets = order_datasets(rows["dataset"])
    groups = [AVERAGE] + datasets
    pw = max(5.0, 0.9 + len(groups) * (0.35 + 0.42 * len(shown))) + 1.6
    fig, axes, height = panel_figure(len(panels), pw, 3.8)
    notes = lossy_notes(shown, method_label)
    for k, (model, temp) in enumerate(panels):
        sub = rows[(rows["model"] == model) & (rows["temperature"] == temp)]
        per = {m: sub[sub["method"] == m].groupby("dataset")["speedup"].mean().to_dict() for m in shown}
        covs = panel_coverage({m: finite_datasets(v) for m, v in per.items()})
        notes += coverage_notes(combo_label(model, temp), covs, method_label)
        bars = {m: [average(per[m], m, covs[m])] + [per[m].get(d, np.nan) for d in datasets] for m in shown}
        _draw_bars(axes.flat[k], bars, groups, combo_label(model, temp))
    finish_panels(fig, axes, len(panels), title_text(title, "Speedup over AR"), height, out_pdf, notes)


def _draw_bars(ax, bars: Mapping[str, Sequence[float]], groups: Sequence[str], head: str) -> None:
    """One panel of grouped bars: ``bars`` is method -> a value per group, NaN where none."""
    width = 0.8 / max(len(bars), 1)
    top = 1.0
    for i, (method, vals) in enumerate(bars.items()):
        x = np.arange(len(groups)) + (i - (len(bars) - 1) / 2) * width
        ax.bar(x, vals, width * 0.92, color=color(method, i), label=method_label(method),
               edgecolor="black", linewidth=0.4, hatch=LOSSY_HATCH if is_lossy(method) else None)
        for xi, v in zip(x, vals):
            if np.isfinite(v):
                ax.text(xi, v, f"{v:.2f}x", ha="center", va="bottom", fontsize=7,
                        rotation=90 if len(bars) * len(groups) > 14 else 0)
                top = max(top, v)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="AR (1.00x)")
    ax.set_xticks(np.arange(len(groups)))
    ax.set_xticklabels(groups, rotation=30 if len(groups) > 4 else 0, ha="right" if len(groups) > 4 else "center")
    for lab in ax.get_xticklabels():
        if lab.get_text() == AVERAGE:
            lab.set_fontweight("bold")
    ax.set_ylim(0, top * 1.22)
    ax.set_xlabel("Dataset")
    ax.set_ylabel(SPEEDUP_LABEL)
    ax.set_title(head, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.grid(axis="y", alpha=0.3)


# --------------------------------------------------------------------------- budget ablation


def _budget_of(method: str) -> float:
    try:
        return float(method[len("bastion-b"):])
    except ValueError:
        return float("nan")


def budget_ablation(cells_csv: str | os.PathLike | Sequence[str | os.PathLike], out_pdf: str | os.PathLike,
                    title: Mapping[str, Any] | str, same_size_csv: str | os.PathLike | None = None) -> None:
    """Speedup against a fixed tree budget, averaged over datasets, with each budget rule's point marked.

    ``cells_csv`` may be several files.  The pipeline's ablation job decodes AR, the budget
    rules and the fixed budgets together, prompt by prompt, so a drift of the machine
    touches them alike.  Every mean of a panel is over the same datasets, those where every
    budget, every rule (and DFlash, when present) have a result
    (:mod:`bastion.report.averages`); a note names what misses one.  ``same_size_csv``
    (:mod:`bastion.report.drift_check`) adds a note per rule whose trees all had the size of
    a fixed budget: how far apart their times per token came out.
    """
    what = "budget_ablation"
    df = read_csvs(cells_csv)
    require(df, ["model", "dataset", "temperature", "method", "speedup"], what)
    fixed = _fixed_budgets(df, what)
    if "mean_tree_size" not in df:
        df = df.assign(mean_tree_size=np.nan)
    panels = combos(fixed)
    fig, axes, height = panel_figure(len(panels), 8.4, 3.8)
    notes: list[str] = []
    for k, (model, temp) in enumerate(panels):
        notes += _ablation_panel(axes.flat[k], df, _in_panel(fixed, model, temp), model, temp)
    if same_size_csv is not None:
        checks = pd.read_csv(same_size_csv)
        notes += [f"Same-size check: {describe(row)}" for row in checks.to_dict("records")]
    finish_panels(fig, axes, len(panels), title_text(title, "Tree budget ablation"), height, out_pdf, notes)


def _fixed_budgets(df: pd.DataFrame, what: str) -> pd.DataFrame:
    """The fixed-budget cells (methods ``bastion-b<N>``) with their budget in column ``b``; none is an error."""
    fixed = df[df["method"].str.startswith("bastion-b")].copy()
    fixed["b"] = pd.Series([_budget_of(m) for m in fixed["method"]], index=fixed.index, dtype=float)
    fixed = fixed[np.isfinite(fixed["b"].to_numpy(dtype=float))]
    if fixed.empty:
        raise ValueError(f"{what}: no fixed-budget cells bastion-b<N> (found: {sorted(set(df['method']))})")
    return fixed


def _ablation_panel(ax, df: pd.DataFrame, sub: pd.DataFrame, model: str, temp: float) -> list[str]:
    """One (model, temperature) panel: the fixed budgets' line ``sub``, each rule's point, DFlash and AR;
    returns the panel's coverage notes."""
    budgets = dict(sorted({m: b for m, b in zip(sub["method"], sub["b"])}.items(), key=lambda mb: mb[1]))
    rules = sorted({m for m in _in_panel(df, model, temp)["method"] if is_adaptive(m)})
    shown = _in_panel(df[df["method"].isin([*budgets, *rules, "dflash"])], model, temp)
    per = {m: g.groupby("dataset")[["speedup", "mean_tree_size"]].mean() for m, g in shown.groupby("method")}
    covs = panel_coverage({m: finite_datasets(v["speedup"].to_dict()) for m, v in per.items()})
    xs = _fixed_lines(ax, sub, {b: _mean(per, m, covs) for m, b in budgets.items()})
    for i, rule in enumerate(rules):
        xs += _adaptive_point(ax, rule, i, _mean(per, rule, covs, "mean_tree_size"), _mean(per, rule, covs))
    v = _mean(per, "dflash", covs)
    if np.isfinite(v):
        ax.axhline(v, color=COLORS["dflash"], linestyle=":", linewidth=1.4, label=f"DFlash ({v:.2f}x)")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="AR (1.00x)")
    _budget_axis(ax, xs, sorted(set(sub["b"])))
    ax.set_ylabel(SPEEDUP_LABEL)
    ax.set_title(combo_label(model, temp), fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.grid(alpha=0.3)
    return coverage_notes(combo_label(model, temp), covs, method_label)


def _in_panel(frame: pd.DataFrame, model: str, temp: float) -> pd.DataFrame:
    return frame[(frame["model"] == model) & (frame["temperature"] == temp)]


def _mean(per: Mapping[str, pd.DataFrame], method: str, covs: Mapping[str, Any], column: str = "speedup") -> float:
    """A method's mean of ``column`` over its panel's common datasets; NaN without one."""
    if method not in per:
        return float("nan")
    return average(per[method][column].to_dict(), method, covs[method])


def _fixed_lines(ax, sub: pd.DataFrame, means: Mapping[float, float]) -> list[float]:
    """Each dataset's speedup against the fixed budget (when several) and their mean; returns the budgets."""
    datasets = order_datasets(sub["dataset"])
    if len(datasets) > 1:
        for i, d in enumerate(datasets):
            line = sub[sub["dataset"] == d].groupby("b")["speedup"].mean().sort_index()
            ax.plot(line.index, line.values, "-", linewidth=0.8, alpha=0.55, marker=".",
                    color=EXTRA_COLORS[i % len(EXTRA_COLORS)], label=d)
    ax.plot(list(means), list(means.values()), "o-", color=COLORS["bastion"], linewidth=2.2,
            label="fixed budget, mean over datasets" if len(datasets) > 1 else "fixed budget")
    return sorted(set(sub["b"]))


ADAPTIVE_MARKERS = ("*", "D", "P", "X")


def _adaptive_point(ax, rule: str, i: int, ax_x: float, ax_y: float) -> list[float]:
    """A budget rule at its mean tree size, if it has one; returns that size (or nothing)."""
    if not (np.isfinite(ax_x) and ax_x > 0 and np.isfinite(ax_y)):
        return []
    tint = color(rule, i + 1)
    ax.plot([ax_x], [ax_y], marker=ADAPTIVE_MARKERS[i % len(ADAPTIVE_MARKERS)], markersize=14 if i else 16,
            color=tint, markeredgecolor="black", linestyle="none",
            label=f"{method_label(rule)}, adaptive ({ax_y:.2f}x at {ax_x:.1f} nodes)", zorder=5)
    ax.annotate(method_label(rule), (ax_x, ax_y), textcoords="offset points", xytext=(8, 8 - 14 * i), fontsize=9,
                fontweight="bold", color=tint)
    return [ax_x]


def _budget_axis(ax, xs: Sequence[float], budgets: Sequence[float]) -> None:
    """A log2 x axis labelled at the fixed budgets, wide enough for every point drawn."""
    positive = [x for x in xs if x > 0]
    if positive:
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(budgets))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        lo, hi = min(positive), max(positive)
        ax.set_xlim(lo / 1.4, hi * 1.4)
    ax.set_xlabel("Fixed tree budget (nodes verified per step, log2 scale)")


# --------------------------------------------------------------------------- hardware comparison


def hardware_comparison(cells_csvs: Sequence[str | os.PathLike] | str | os.PathLike,
                        out_pdf: str | os.PathLike, title: Mapping[str, Any] | str,
                        methods: Sequence[str] | None = None) -> None:
    """Average speedup over datasets per hardware key, grouped by method.

    Within a panel every bar averages the same datasets, those where every (hardware,
    method) of the panel has a result; one missing from some of them has no bar, and a
    note says what it misses (:mod:`bastion.report.averages`).
    """
    what = "hardware_comparison"
    df = read_csvs(cells_csvs)
    require(df, ["hardware", "model", "dataset", "temperature", "method", "speedup"], what)
    shown = main_methods(df["method"], methods)
    rows = df[df["method"].isin(shown)]
    if rows.empty:
        raise ValueError(f"{what}: no non-AR cells (found: {sorted(set(df['method']))})")
    hardware = list(dict.fromkeys(sorted(set(rows["hardware"]))))
    panels = combos(rows)
    pw = max(5.0, 1.2 + len(shown) * (0.5 + 0.55 * len(hardware))) + 1.8
    fig, axes, height = panel_figure(len(panels), pw, 3.8)
    notes = lossy_notes(shown, method_label)
    for k, (model, temp) in enumerate(panels):
        sub = rows[(rows["model"] == model) & (rows["temperature"] == temp)]
        per = {(hw, m): sub[(sub["hardware"] == hw) & (sub["method"] == m)].groupby("dataset")["speedup"].mean()
               .to_dict() for hw in hardware for m in shown}
        covs = panel_coverage({key: finite_datasets(v) for key, v in per.items()}, method_of=lambda key: key[1])
        notes += coverage_notes(combo_label(model, temp), covs, lambda key: f"{method_label(key[1])} on {key[0]}",
                                what="method on every hardware")
        vals = {hw: [average(per[(hw, m)], (hw, m), covs[(hw, m)]) for m in shown] for hw in hardware}
        _draw_hardware(axes.flat[k], vals, shown, combo_label(model, temp))
    if isinstance(title, Mapping):
        title = {**title, "hardware": hardware}
    finish_panels(fig, axes, len(panels), title_text(title, "Speedup across hardware"), height, out_pdf, notes)


def _draw_hardware(ax, vals: Mapping[str, Sequence[float]], shown: Sequence[str], head: str) -> None:
    """One panel: a bar per hardware key (``vals``: hardware -> a value per method) in each method's group."""
    width = 0.8 / len(vals)
    top = 1.0
    for i, (hw, ys) in enumerate(vals.items()):
        x = np.arange(len(shown)) + (i - (len(vals) - 1) / 2) * width
        bars = ax.bar(x, ys, width * 0.92, color=EXTRA_COLORS[i % len(EXTRA_COLORS)], label=hw,
                      edgecolor="black", linewidth=0.4)
        for patch, method in zip(bars.patches, shown):
            patch.set_hatch(LOSSY_HATCH if is_lossy(method) else None)
        for xi, v in zip(x, ys):
            if np.isfinite(v):
                ax.text(xi, v, f"{v:.2f}x", ha="center", va="bottom", fontsize=8)
                top = max(top, v)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="AR (1.00x)")
    ax.set_xticks(np.arange(len(shown)))
    ax.set_xticklabels([method_label(m) for m in shown])
    ax.set_ylim(0, top * 1.2)
    ax.set_xlabel("Method")
    ax.set_ylabel("Average speedup over AR (mean over datasets)")
    ax.set_title(head, fontsize=10)
    ax.legend(fontsize=8, title="hardware", title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0)
    ax.grid(axis="y", alpha=0.3)


__all__ = ["budget_ablation", "hardware_comparison", "speedup_bars", "title_text"]
