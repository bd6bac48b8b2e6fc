"""The budget ablation's own check that it measures trees, not the machine.

When a budget rule's trees all had one size ``s`` in a cell and the ablation also decoded
the fixed budget ``s`` there, the two decoded the same trees (the rule's count is a
ranking of the same paths: a fixed budget of ``s`` takes the first ``s``), so their
times per token may differ only by noise.  Decoded prompt by prompt in one process they
should agree within :data:`TOLERANCE`; a larger gap says the figure's differences are of
the same size as the machine's drift, and the log and the figure say so.  On a 2-core
CPU the paper's rule at ``n_min`` 16 builds 16-node trees at nearly every step, which is
where the check applies.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from bastion.defaults import ablation_method, is_adaptive, method_label

TOLERANCE = 0.05  # the most two decodes of identical trees may differ in time per token
PANEL_KEYS = ("hardware", "model", "dataset", "temperature")
FIELDS = (*PANEL_KEYS, "rule", "tree_size", "fixed", "time_ratio", "within_tolerance")


def same_size_rows(cells: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (cell, rule) whose trees all had one size that a fixed budget of the cell matches."""
    sizes: dict[tuple, set[int]] = defaultdict(set)
    for s in steps:
        if is_adaptive(s["method"]):
            sizes[(*(s[k] for k in PANEL_KEYS), s["method"])].add(int(s["tree_size"]))
    tpot = {(*(c[k] for k in PANEL_KEYS), c["method"]): float(c["tpot_s"]) for c in cells}
    rows = []
    for (*panel, rule), seen in sorted(sizes.items(), key=lambda kv: tuple(map(str, kv[0]))):
        fixed = ablation_method(next(iter(seen))) if len(seen) == 1 else None
        if fixed is None or (*panel, fixed) not in tpot or (*panel, rule) not in tpot:
            continue
        ratio = tpot[(*panel, rule)] / tpot[(*panel, fixed)]
        rows.append({**dict(zip(PANEL_KEYS, panel)), "rule": rule, "tree_size": next(iter(seen)), "fixed": fixed,
                     "time_ratio": ratio, "within_tolerance": abs(ratio - 1.0) <= TOLERANCE})
    return rows


def describe(row: dict[str, Any]) -> str:
    """One line of the check for the job log and the figure's notes."""
    verdict = "within" if row["within_tolerance"] else "OUTSIDE"
    return (f"{method_label(row['rule'])} on {row['dataset']} (T={float(row['temperature']):g}): every tree "
            f"{row['tree_size']} nodes, {row['time_ratio']:.3f}x the time per token of "
            f"{method_label(row['fixed'])} ({verdict} {TOLERANCE:.0%})")
