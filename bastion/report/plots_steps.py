"""Per-step and calibration figures: acceptance lengths, tree budgets, the cost-model fit.

The conventions every figure follows are in :mod:`bastion.report.plot_style`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from bastion.defaults import BASELINE, METHODS, is_adaptive
from bastion.report.averages import is_lossy, lossy_notes
from bastion.report.plot_style import (
    COLORS,
    EXTRA_COLORS,
    LOSSY_HATCH,
    MAX_SCATTER,
    color,
    finish_panels,
    log2_axis,
    panel_figure,
    pyplot,
    require,
)
from bastion.report.tables import (
    combo_label,
    combos,
    main_methods,
    method_label,
    read_csvs,
    title_text,
)

if TYPE_CHECKING:
    import pandas as pd

# --------------------------------------------------------------------------- acceptance length


def _drafting_steps(steps_csv: str | os.PathLike, what: str) -> tuple[pd.DataFrame, list[str]]:
    """(the steps of the drafting methods a main figure shows, those methods), refused when there are none."""
    df = read_csvs(steps_csv)
    require(df, ["model", "temperature", "method", "committed"], what)
    shown = main_methods(df["method"])
    rows = df[df["method"].isin(shown)]
    if rows.empty:
        drafting = [m for m in METHODS if m != BASELINE]
        raise ValueError(f"{what}: no steps of a drafting method ({', '.join(drafting)}; found: "
                         f"{sorted(set(df['method']))})")
    return rows, shown


def acceptance_length(steps_csv: str | os.PathLike, out_pdf: str | os.PathLike,
                      title: Mapping[str, Any] | str) -> None:
    """Distribution of tokens committed per step of each drafting method (EAGLE-3, DFlash, BASTION, ...)."""
    rows, shown = _drafting_steps(steps_csv, "acceptance_length")
    panels = combos(rows)
    fig, axes, height = panel_figure(len(panels), 6.2, 3.6)
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
            shade = color(method, i)
            ax.bar(x, frac, width * 0.95, color=shade, alpha=0.85, edgecolor="black", linewidth=0.3,
                   hatch=LOSSY_HATCH if is_lossy(method) else None,
                   label=f"{method_label(method)} (mean \u03c4 = {tau:.2f}, {acc.size} steps)")
            ax.axvline(tau, color=shade, linestyle="--", linewidth=1.2)
        step = max(1, math.ceil(hi / 16))
        ax.set_xticks(np.arange(1, hi + 1, step))
        ax.set_xlabel("Tokens committed per step (acceptance length)")
        ax.set_ylabel("Fraction of steps")
        ax.set_title(combo_label(model, temp), fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    finish_panels(fig, axes, len(panels), title_text(title, "Acceptance length per step"), height, out_pdf,
                  lossy_notes(shown, method_label))


# --------------------------------------------------------------------------- acceptance by position


def reach_fractions(committed: np.ndarray) -> np.ndarray:
    """Fraction of steps whose accepted path reaches depth k, for k = 1..max: [max depth].

    A step commits its accepted draft tokens plus the target's own next token, so its
    path reaches depth ``committed - 1``; a step that accepted nothing (``committed`` 1)
    reaches none.
    """
    depth = np.asarray(committed, dtype=np.int64) - 1  # [steps]
    if depth.size == 0 or depth.max() < 1:
        return np.zeros(0)
    reached = np.bincount(depth.clip(min=0), minlength=int(depth.max()) + 1)[::-1].cumsum()[::-1]  # steps >= d
    return reached[1:] / depth.size


def acceptance_by_position(steps_csv: str | os.PathLike, out_pdf: str | os.PathLike,
                           title: Mapping[str, Any] | str) -> None:
    """Per method, the fraction of steps whose accepted path reaches each depth (one panel per model and T).

    Where the acceptance-length histogram says how often a step commits n tokens, this
    says how far down the draft survives: the k-th point is the chance that the k-th
    drafted position is accepted in a step.
    """
    rows, shown = _drafting_steps(steps_csv, "acceptance_by_position")
    panels = combos(rows)
    fig, axes, height = panel_figure(len(panels), 6.2, 3.6)
    for k, (model, temp) in enumerate(panels):
        ax = axes.flat[k]
        sub = rows[(rows["model"] == model) & (rows["temperature"] == temp)]
        deepest = 1
        for i, method in enumerate(shown):
            committed = sub.loc[sub["method"] == method, "committed"].to_numpy(dtype=int)
            if committed.size == 0:
                continue
            frac = reach_fractions(committed)
            depths = np.arange(1, frac.size + 1)
            deepest = max(deepest, frac.size)
            ax.plot(depths, frac, marker="o", markersize=3.5, color=color(method, i),
                    linestyle="--" if is_lossy(method) else "-",
                    label=f"{method_label(method)} ({committed.size} steps)")
        ax.set_xticks(np.arange(1, deepest + 1, max(1, math.ceil(deepest / 16))))
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("Depth k of the accepted path (draft position)")
        ax.set_ylabel("Fraction of steps reaching depth k")
        ax.set_title(combo_label(model, temp), fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    finish_panels(fig, axes, len(panels), title_text(title, "Acceptance by position"), height, out_pdf,
                  lossy_notes(shown, method_label))


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


def tree_budget(steps_csv: str | os.PathLike, out_pdf: str | os.PathLike, title: Mapping[str, Any] | str,
                max_responses: int = 6) -> None:
    """Each budget rule's tree size over the steps of the longest responses and against the context.

    One row of two panels per (model, temperature, rule): the rules (``bastion``,
    ``bastion_plus``, ...) decide differently, and one panel per rule keeps each readable.
    """
    what = "tree_budget"
    df = read_csvs(steps_csv)
    require(df, ["model", "dataset", "temperature", "method", "prompt_index", "turn", "step", "tree_size",
                  "context"], what)
    rows = df[[is_adaptive(m) for m in df["method"]]]
    if rows.empty:
        raise ValueError(f"{what}: no steps of an adaptive budget rule (found: {sorted(set(df['method']))})")
    panels = [(model, temp, rule) for model, temp in combos(rows)
              for rule in sorted(set(rows[(rows["model"] == model) & (rows["temperature"] == temp)]["method"]))]
    plt = pyplot()
    height = 0.6 + 3.6 * len(panels)
    fig, axes = plt.subplots(len(panels), 2, figsize=(12.5, height), squeeze=False)
    for k, (model, temp, rule) in enumerate(panels):
        sub = rows[(rows["model"] == model) & (rows["temperature"] == temp) & (rows["method"] == rule)]
        name = f"{combo_label(model, temp)}, {method_label(rule)}"
        _tree_steps(axes[k][0], sub, name, max_responses)
        _tree_contexts(axes[k][1], sub, name, color(rule, k))
    finish_panels(fig, axes, axes.size, title_text(title, "Adaptive tree budget"), height, out_pdf)


def _tree_steps(ax, sub, name: str, max_responses: int) -> None:
    """The tree size step by step for the longest responses of one rule's panel."""
    keys = ["dataset", "prompt_index", "turn"]
    lengths = sub.groupby(keys).size().sort_values(ascending=False, kind="stable")
    for i, key in enumerate(lengths.index[:max_responses]):
        d, p, t = key
        resp = sub[(sub["dataset"] == d) & (sub["prompt_index"] == p) & (sub["turn"] == t)].sort_values("step")
        label = f"{d} #{p}" + (f" turn {t}" if int(t) else "")
        ax.step(resp["step"], resp["tree_size"], where="post", linewidth=1.2, label=label,
                color=EXTRA_COLORS[i % len(EXTRA_COLORS)])
    log2_axis(ax, "y", sub["tree_size"].to_numpy(dtype=float))
    ax.set_xlabel("Decoding step")
    ax.set_ylabel("Tree size (nodes verified)")
    sizes = sub["tree_size"].nunique()
    ax.set_title(f"{name}: {min(max_responses, len(lengths))} longest responses ({sizes} distinct sizes)",
                 fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)


def _tree_contexts(ax, sub, name: str, tint: str) -> None:
    """Every step's tree size against its context (sampled when many), with binned means."""
    pts = sub if len(sub) <= MAX_SCATTER else sub.sample(MAX_SCATTER, random_state=0)
    ax.scatter(pts["context"], pts["tree_size"], s=6, alpha=0.25, color=tint,
               label=f"steps ({len(sub)}{', sampled' if len(sub) > MAX_SCATTER else ''})", rasterized=True)
    cx, cy = _binned_means(sub["context"].to_numpy(dtype=float), sub["tree_size"].to_numpy(dtype=float))
    ax.plot(cx, cy, "o-", color="black", linewidth=1.5, markersize=4, label="binned mean")
    log2_axis(ax, "y", sub["tree_size"].to_numpy(dtype=float))
    ax.set_xlabel("Context length (tokens)")
    ax.set_ylabel("Tree size (nodes verified)")
    ax.set_title(f"{name}: tree size against context", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


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
    fig, axes, height = panel_figure(len(panels), 5.2, 4.2, max_cols=3)
    for k, (name, pts, report) in enumerate(panels):
        _fit_panel(axes.flat[k], name, pts, report)
    finish_panels(fig, axes, len(panels), title_text(title, "Cost model fit"), height, out_pdf)


def _fit_panel(ax, name: str, pts: Sequence[Mapping[str, Any]], report: Mapping[str, Any]) -> None:
    """One model's predicted against measured latencies: fit points, held-out points, the identity."""
    meas = np.array([p["latency_s"] for p in pts], dtype=float) * 1e3
    pred = np.array([p["predicted_s"] for p in pts], dtype=float) * 1e3
    held = np.array([bool(p.get("heldout")) for p in pts])

    def _pct(key: str, mask: np.ndarray) -> float:
        v = report.get(key)
        if v is not None and np.isfinite(v):
            return 100.0 * float(v)
        return 100.0 * float(np.mean(np.abs(pred[mask] - meas[mask]) / meas[mask])) if mask.any() else np.nan

    in_mape, out_mape = _pct("in_sample_mape", ~held), _pct("heldout_mape", held)
    ax.scatter(meas[~held], pred[~held], s=18, color=COLORS["dflash"], alpha=0.75,
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
    worst = report.get("heldout_max_ape")
    head = f"{name}: held-out error {out_mape:.1f}% mean" if held.any() else f"{name}: MAPE {in_mape:.1f}%"
    if held.any() and worst is not None:
        head += f", {100 * worst:.1f}% worst"
    gate = report.get("quality_gate") or {}
    if gate and not gate.get("passed", True):
        head += "\n(above the calibration quality gate; accepted by override)"
    ax.set_title(head, fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
