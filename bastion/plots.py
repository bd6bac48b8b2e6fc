"""The paper's figures from the aggregated CSVs and the calibration grids.

Every function writes one PDF (one figure, one panel per (model, temperature) where the
data has several), with text kept as text (``pdf.fonttype`` 42) so titles and labels can
be searched and extracted.  ``title`` is the rules' ``params.title`` dict
``{hardware, experiment, models}`` or a ready string.  A function whose input lacks every
row it needs raises ValueError; missing categories (a method, a dataset, a temperature)
are simply left out of the figure.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from .tables import (
    AVERAGE,
    combo_label,
    combos,
    method_label,
    order_datasets,
    read_csvs,
    title_text,
)

SPEEDUP_LABEL = "Speedup over AR (time per output token)"
_COLORS = {"dflash": "#4C72B0", "bastion": "#DD8452", "ar": "#7f7f7f"}
_EXTRA_COLORS = ["#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974", "#64B5CD"]
MAX_SCATTER = 20000


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["pdf.fonttype"] = 42
    matplotlib.rcParams["ps.fonttype"] = 42
    import matplotlib.pyplot as plt

    return plt


def _color(method: str, i: int) -> str:
    return _COLORS.get(method, _EXTRA_COLORS[i % len(_EXTRA_COLORS)])


def _grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = min(n, max_cols)
    return math.ceil(n / cols), cols


def _save(fig, out_pdf: str | os.PathLike) -> None:
    plt = _pyplot()
    Path(out_pdf).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_pdf)
    plt.close(fig)


def _suptitle(fig, text: str, height_in: float) -> None:
    """The figure title on one line, widening the figure if the title would not fit."""
    need = 0.095 * len(text) + 0.6  # inches at 12 pt
    if fig.get_figwidth() < need:
        fig.set_figwidth(need)
    fig.suptitle(text, fontsize=12, y=1 - 0.12 / height_in, va="top")


def _require(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    if df.empty:
        raise ValueError(f"{what}: the input has no rows")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: the input lacks the columns {missing}")


def _main_methods(df: pd.DataFrame, methods: Sequence[str] | None) -> list[str]:
    """Non-AR, non-ablation methods to show, in the given order (or dflash, bastion, others)."""
    present = list(dict.fromkeys(df["method"]))
    if methods is None:
        pref = ["dflash", "bastion"]
        methods = [m for m in pref if m in present] + sorted(
            m for m in present if m not in pref and not m.startswith("bastion-b"))
    return [m for m in dict.fromkeys(methods) if m != "ar" and m in present]


# --------------------------------------------------------------------------- speedup bars


def speedup_bars(cells_csv: str | os.PathLike, out_pdf: str | os.PathLike, title: Mapping[str, Any] | str,
                 methods: Sequence[str] | None = None) -> None:
    """Grouped bars of each method's speedup per dataset, the Average group first."""
    what = "speedup_bars"
    df = read_csvs(cells_csv)
    _require(df, ["model", "dataset", "temperature", "method", "speedup"], what)
    shown = _main_methods(df, methods)
    rows = df[df["method"].isin(shown)]
    if rows.empty:
        raise ValueError(f"{what}: no cells of the methods {list(methods or [])} other than AR "
                         f"(found: {sorted(set(df['method']))})")
    panels = combos(rows)
    datasets = order_datasets(rows["dataset"])
    groups = [AVERAGE] + datasets
    nr, nc = _grid(len(panels), 2)
    pw = max(5.0, 0.9 + len(groups) * (0.35 + 0.42 * len(shown))) + 1.6
    plt = _pyplot()
    height = 0.6 + 3.8 * nr
    fig, axes = plt.subplots(nr, nc, figsize=(pw * nc, height), squeeze=False)
    width = 0.8 / max(len(shown), 1)
    for k, (model, temp) in enumerate(panels):
        ax = axes.flat[k]
        sub = rows[(rows["model"] == model) & (rows["temperature"] == temp)]
        top = 1.0
        for i, method in enumerate(shown):
            per = sub[sub["method"] == method].groupby("dataset")["speedup"].mean()
            vals = [per.mean() if len(per) else np.nan] + [per.get(d, np.nan) for d in datasets]
            x = np.arange(len(groups)) + (i - (len(shown) - 1) / 2) * width
            ax.bar(x, vals, width * 0.92, color=_color(method, i), label=method_label(method),
                   edgecolor="black", linewidth=0.4)
            for xi, v in zip(x, vals):
                if np.isfinite(v):
                    ax.text(xi, v, f"{v:.2f}x", ha="center", va="bottom", fontsize=7,
                            rotation=90 if len(shown) * len(groups) > 14 else 0)
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
        ax.set_title(combo_label(model, temp), fontsize=10)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    _suptitle(fig, title_text(title, "Speedup over AR"), height)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.38 / height))
    _save(fig, out_pdf)


# --------------------------------------------------------------------------- acceptance length


def acceptance_length(steps_csv: str | os.PathLike, out_pdf: str | os.PathLike,
                      title: Mapping[str, Any] | str) -> None:
    """Distribution of tokens committed per step, DFlash against adaptive BASTION."""
    what = "acceptance_length"
    df = read_csvs(steps_csv)
    _require(df, ["model", "temperature", "method", "committed"], what)
    shown = [m for m in ("dflash", "bastion") if m in set(df["method"])]
    rows = df[df["method"].isin(shown)]
    if rows.empty:
        raise ValueError(f"{what}: no steps of dflash or bastion (found: {sorted(set(df['method']))})")
    panels = combos(rows)
    nr, nc = _grid(len(panels), 2)
    plt = _pyplot()
    height = 0.6 + 3.6 * nr
    fig, axes = plt.subplots(nr, nc, figsize=(6.2 * nc, height), squeeze=False)
    for k, (model, temp) in enumerate(panels):
        ax = axes.flat[k]
        sub = rows[(rows["model"] == model) & (rows["temperature"] == temp)]
        hi = int(sub["committed"].max())
        width = 0.8 / len(shown)
        for i, method in enumerate(shown):
            acc = sub.loc[sub["method"] == method, "committed"].to_numpy(dtype=int)
            if acc.size == 0:
                continue
            frac = np.bincount(acc, minlength=hi + 1)[1:] / acc.size
            x = np.arange(1, hi + 1) + (i - (len(shown) - 1) / 2) * width
            tau = acc.mean()
            color = _color(method, i)
            ax.bar(x, frac, width * 0.95, color=color, alpha=0.85, edgecolor="black", linewidth=0.3,
                   label=f"{method_label(method)} (mean \u03c4 = {tau:.2f}, {acc.size} steps)")
            ax.axvline(tau, color=color, linestyle="--", linewidth=1.2)
        step = max(1, math.ceil(hi / 16))
        ax.set_xticks(np.arange(1, hi + 1, step))
        ax.set_xlabel("Tokens committed per step (acceptance length)")
        ax.set_ylabel("Fraction of steps")
        ax.set_title(combo_label(model, temp), fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    _suptitle(fig, title_text(title, "Acceptance length per step"), height)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.38 / height))
    _save(fig, out_pdf)


# --------------------------------------------------------------------------- tree budget


def _binned_means(x: np.ndarray, y: np.ndarray, bins: int = 12) -> tuple[np.ndarray, np.ndarray]:
    if x.size == 0:
        return np.array([]), np.array([])
    lo, hi = float(x.min()), float(x.max())
    if hi <= lo:
        return np.array([lo]), np.array([float(y.mean())])
    edges = np.linspace(lo, hi, bins + 1)
    idx = np.clip(np.digitize(x, edges) - 1, 0, bins - 1)
    centers, means = [], []
    for b in range(bins):
        m = idx == b
        if m.any():
            centers.append(float(x[m].mean()))
            means.append(float(y[m].mean()))
    return np.array(centers), np.array(means)


def _log2_axis(ax, axis: str, values: np.ndarray) -> None:
    """log2 scale when the values span a factor 4 or more, else a linear axis from 0."""
    values = values[np.isfinite(values) & (values > 0)]
    if values.size and values.max() / values.min() >= 4:
        from matplotlib.ticker import FuncFormatter

        getattr(ax, f"set_{axis}scale")("log", base=2)
        getattr(ax, f"{axis}axis").set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    elif values.size:
        getattr(ax, f"set_{axis}lim")(0, values.max() * 1.2)


def tree_budget(steps_csv: str | os.PathLike, out_pdf: str | os.PathLike, title: Mapping[str, Any] | str,
                max_responses: int = 6) -> None:
    """Adaptive BASTION's tree size over the steps of the longest responses and against the context."""
    what = "tree_budget"
    df = read_csvs(steps_csv)
    _require(df, ["model", "dataset", "temperature", "method", "prompt_index", "turn", "step", "tree_size",
                  "context"], what)
    rows = df[df["method"] == "bastion"]
    if rows.empty:
        raise ValueError(f"{what}: no steps of adaptive bastion (found: {sorted(set(df['method']))})")
    panels = combos(rows)
    plt = _pyplot()
    height = 0.6 + 3.6 * len(panels)
    fig, axes = plt.subplots(len(panels), 2, figsize=(12.5, height), squeeze=False)
    for k, (model, temp) in enumerate(panels):
        sub = rows[(rows["model"] == model) & (rows["temperature"] == temp)]
        left, right = axes[k]
        keys = ["dataset", "prompt_index", "turn"]
        lengths = sub.groupby(keys).size().sort_values(ascending=False, kind="stable")
        for i, key in enumerate(lengths.index[:max_responses]):
            d, p, t = key
            resp = sub[(sub["dataset"] == d) & (sub["prompt_index"] == p) & (sub["turn"] == t)].sort_values("step")
            label = f"{d} #{p}" + (f" turn {t}" if int(t) else "")
            left.step(resp["step"], resp["tree_size"], where="post", linewidth=1.2, label=label,
                      color=_EXTRA_COLORS[i % len(_EXTRA_COLORS)])
        _log2_axis(left, "y", sub["tree_size"].to_numpy(dtype=float))
        left.set_xlabel("Decoding step")
        left.set_ylabel("Tree size (nodes verified)")
        left.set_title(f"{combo_label(model, temp)}: {min(max_responses, len(lengths))} longest responses",
                       fontsize=10)
        left.legend(fontsize=7, ncol=2)
        left.grid(alpha=0.3)

        pts = sub if len(sub) <= MAX_SCATTER else sub.sample(MAX_SCATTER, random_state=0)
        right.scatter(pts["context"], pts["tree_size"], s=6, alpha=0.25, color=_COLORS["bastion"],
                      label=f"steps ({len(sub)}{', sampled' if len(sub) > MAX_SCATTER else ''})", rasterized=True)
        cx, cy = _binned_means(sub["context"].to_numpy(dtype=float), sub["tree_size"].to_numpy(dtype=float))
        right.plot(cx, cy, "o-", color="black", linewidth=1.5, markersize=4, label="binned mean")
        _log2_axis(right, "y", sub["tree_size"].to_numpy(dtype=float))
        right.set_xlabel("Context length (tokens)")
        right.set_ylabel("Tree size (nodes verified)")
        right.set_title(f"{combo_label(model, temp)}: tree size against context", fontsize=10)
        right.legend(fontsize=8)
        right.grid(alpha=0.3)
    _suptitle(fig, title_text(title, "BASTION adaptive tree budget"), height)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.38 / height))
    _save(fig, out_pdf)


# --------------------------------------------------------------------------- budget ablation


def _budget_of(method: str) -> float:
    try:
        return float(method[len("bastion-b"):])
    except ValueError:
        return float("nan")


def budget_ablation(cells_csv: str | os.PathLike, out_pdf: str | os.PathLike,
                    title: Mapping[str, Any] | str) -> None:
    """Speedup against a fixed tree budget, averaged over datasets, with the adaptive point marked."""
    what = "budget_ablation"
    df = read_csvs(cells_csv)
    _require(df, ["model", "dataset", "temperature", "method", "speedup"], what)
    fixed = df[df["method"].str.startswith("bastion-b")].copy()
    fixed["b"] = pd.Series([_budget_of(m) for m in fixed["method"]], index=fixed.index, dtype=float)
    fixed = fixed[np.isfinite(fixed["b"].to_numpy(dtype=float))]
    if fixed.empty:
        raise ValueError(f"{what}: no fixed-budget cells bastion-b<N> (found: {sorted(set(df['method']))})")
    adaptive = df[df["method"] == "bastion"]
    dflash = df[df["method"] == "dflash"]
    panels = combos(fixed)
    nr, nc = _grid(len(panels), 2)
    plt = _pyplot()
    height = 0.6 + 3.8 * nr
    fig, axes = plt.subplots(nr, nc, figsize=(8.4 * nc, height), squeeze=False)
    for k, (model, temp) in enumerate(panels):
        ax = axes.flat[k]
        sel = (fixed["model"] == model) & (fixed["temperature"] == temp)
        sub = fixed[sel]
        datasets = order_datasets(sub["dataset"])
        budgets = sorted(set(sub["b"]))
        if len(datasets) > 1:
            for i, d in enumerate(datasets):
                line = sub[sub["dataset"] == d].groupby("b")["speedup"].mean().sort_index()
                ax.plot(line.index, line.values, "-", linewidth=0.8, alpha=0.55, marker=".",
                        color=_EXTRA_COLORS[i % len(_EXTRA_COLORS)], label=d)
        mean = sub.groupby(["b", "dataset"])["speedup"].mean().groupby("b").mean().sort_index()
        ax.plot(mean.index, mean.values, "o-", color=_COLORS["bastion"], linewidth=2.2,
                label="fixed budget, mean over datasets" if len(datasets) > 1 else "fixed budget")
        xs = list(budgets)
        a = adaptive[(adaptive["model"] == model) & (adaptive["temperature"] == temp)]
        if not a.empty and "mean_tree_size" in a:
            per = a.groupby("dataset")[["mean_tree_size", "speedup"]].mean()
            ax_x, ax_y = float(per["mean_tree_size"].mean()), float(per["speedup"].mean())
            if np.isfinite(ax_x) and ax_x > 0 and np.isfinite(ax_y):
                ax.plot([ax_x], [ax_y], marker="*", markersize=16, color="#C44E52", markeredgecolor="black",
                        linestyle="none", label=f"adaptive BASTION ({ax_y:.2f}x at {ax_x:.1f} nodes)", zorder=5)
                ax.annotate("adaptive", (ax_x, ax_y), textcoords="offset points", xytext=(8, 8), fontsize=9,
                            fontweight="bold", color="#C44E52")
                xs.append(ax_x)
        dfl = dflash[(dflash["model"] == model) & (dflash["temperature"] == temp)]
        if not dfl.empty:
            v = float(dfl.groupby("dataset")["speedup"].mean().mean())
            if np.isfinite(v):
                ax.axhline(v, color=_COLORS["dflash"], linestyle=":", linewidth=1.4, label=f"DFlash ({v:.2f}x)")
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="AR (1.00x)")
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
        ax.set_ylabel(SPEEDUP_LABEL)
        ax.set_title(combo_label(model, temp), fontsize=10)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    _suptitle(fig, title_text(title, "Tree budget ablation"), height)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.38 / height))
    _save(fig, out_pdf)


# --------------------------------------------------------------------------- cost model fit


def _log_axes_125(ax, lo: float, hi: float) -> None:
    """Log x and y axes labelled at 1-2-5 values in plain numbers (no overlapping minor labels)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
             for m in (1, 2, 5)]
    ticks = [t for t in ticks if lo <= t <= hi]
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def cost_model_fit(grid_jsons: Sequence[str | os.PathLike], models: Sequence[str] | None,
                   out_pdf: str | os.PathLike, title: Mapping[str, Any] | str) -> None:
    """Predicted against measured verification latency, one panel per model's calibration grid."""
    what = "cost_model_fit"
    if isinstance(grid_jsons, (str, os.PathLike)):
        grid_jsons = [grid_jsons]
    grid_jsons = list(grid_jsons)
    names = list(models) if models is not None and len(models) == len(grid_jsons) else \
        [Path(p).parent.name for p in grid_jsons]
    panels = []
    for name, path in zip(names, grid_jsons):
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        pts = [p for p in data.get("points", [])
               if p.get("predicted_s") is not None and p.get("latency_s") is not None]
        if pts:
            panels.append((name, pts, data.get("report", {})))
    if not panels:
        raise ValueError(f"{what}: no calibration points with a prediction in {[str(p) for p in grid_jsons]}")
    nr, nc = _grid(len(panels), 3)
    plt = _pyplot()
    height = 0.6 + 4.2 * nr
    fig, axes = plt.subplots(nr, nc, figsize=(5.2 * nc, height), squeeze=False)
    for k, (name, pts, report) in enumerate(panels):
        ax = axes.flat[k]
        meas = np.array([p["latency_s"] for p in pts], dtype=float) * 1e3
        pred = np.array([p["predicted_s"] for p in pts], dtype=float) * 1e3
        held = np.array([bool(p.get("heldout")) for p in pts])

        def _pct(key: str, mask: np.ndarray) -> float:
            v = report.get(key)
            if v is not None and np.isfinite(v):
                return 100.0 * float(v)
            return 100.0 * float(np.mean(np.abs(pred[mask] - meas[mask]) / meas[mask])) if mask.any() else np.nan

        in_mape, out_mape = _pct("in_sample_mape", ~held), _pct("heldout_mape", held)
        ax.scatter(meas[~held], pred[~held], s=18, color=_COLORS["dflash"], alpha=0.75,
                   label=f"fit points ({int((~held).sum())}), MAPE {in_mape:.1f}%")
        if held.any():
            extra = report.get("heldout_max_ape")
            mx = f", max {100 * extra:.1f}%" if extra is not None else ""
            ax.scatter(meas[held], pred[held], s=46, marker="^", color="#C44E52", edgecolor="black",
                       linewidth=0.5, label=f"held out ({int(held.sum())}), MAPE {out_mape:.1f}%{mx}", zorder=4)
        both = np.concatenate([meas, pred])
        both = both[np.isfinite(both) & (both > 0)]
        lo, hi = both.min() / 1.15, both.max() * 1.15
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="identity (y = x)")
        if hi / lo > 10:
            _log_axes_125(ax, lo, hi)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal", adjustable="box")
        ax.set_xlabel("Measured verification latency (ms)")
        ax.set_ylabel("Predicted verification latency (ms)")
        ax.set_title(f"{name}: held-out MAPE {out_mape:.1f}%" if held.any() else f"{name}: MAPE {in_mape:.1f}%",
                     fontsize=10)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    _suptitle(fig, title_text(title, "Cost model fit"), height)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.38 / height))
    _save(fig, out_pdf)


# --------------------------------------------------------------------------- hardware comparison


def hardware_comparison(cells_csvs: Sequence[str | os.PathLike] | str | os.PathLike,
                        out_pdf: str | os.PathLike, title: Mapping[str, Any] | str,
                        methods: Sequence[str] | None = None) -> None:
    """Average speedup over datasets per hardware key, grouped by method."""
    what = "hardware_comparison"
    df = read_csvs(cells_csvs)
    _require(df, ["hardware", "model", "dataset", "temperature", "method", "speedup"], what)
    shown = _main_methods(df, methods)
    rows = df[df["method"].isin(shown)]
    if rows.empty:
        raise ValueError(f"{what}: no non-AR cells (found: {sorted(set(df['method']))})")
    hardware = list(dict.fromkeys(sorted(set(rows["hardware"]))))
    panels = combos(rows)
    nr, nc = _grid(len(panels), 2)
    plt = _pyplot()
    height = 0.6 + 3.8 * nr
    pw = max(5.0, 1.2 + len(shown) * (0.5 + 0.55 * len(hardware))) + 1.8
    fig, axes = plt.subplots(nr, nc, figsize=(pw * nc, height), squeeze=False)
    width = 0.8 / len(hardware)
    for k, (model, temp) in enumerate(panels):
        ax = axes.flat[k]
        sub = rows[(rows["model"] == model) & (rows["temperature"] == temp)]
        top = 1.0
        for i, hw in enumerate(hardware):
            h = sub[sub["hardware"] == hw]
            vals = [h[h["method"] == m].groupby("dataset")["speedup"].mean().mean() for m in shown]
            x = np.arange(len(shown)) + (i - (len(hardware) - 1) / 2) * width
            ax.bar(x, vals, width * 0.92, color=_EXTRA_COLORS[i % len(_EXTRA_COLORS)], label=hw,
                   edgecolor="black", linewidth=0.4)
            for xi, v in zip(x, vals):
                if np.isfinite(v):
                    ax.text(xi, v, f"{v:.2f}x", ha="center", va="bottom", fontsize=8)
                    top = max(top, v)
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="AR (1.00x)")
        ax.set_xticks(np.arange(len(shown)))
        ax.set_xticklabels([method_label(m) for m in shown])
        ax.set_ylim(0, top * 1.2)
        ax.set_xlabel("Method")
        ax.set_ylabel("Average speedup over AR (mean over datasets)")
        ax.set_title(combo_label(model, temp), fontsize=10)
        ax.legend(fontsize=8, title="hardware", title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  borderaxespad=0)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    if isinstance(title, Mapping):
        title = {**title, "hardware": hardware}
    _suptitle(fig, title_text(title, "Speedup across hardware"), height)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.38 / height))
    _save(fig, out_pdf)


__all__ = ["acceptance_length", "budget_ablation", "cost_model_fit", "hardware_comparison", "speedup_bars",
           "title_text", "tree_budget"]
