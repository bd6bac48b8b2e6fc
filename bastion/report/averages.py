"""Averages over datasets that compare like with like.

A panel (one model at one temperature) shows several series: the methods of the table
and the bars, or (hardware, method) pairs in the hardware comparison.  Averaging each
series over whatever datasets it happens to have would set, say, one method's mean over
one easy dataset beside another's over eight: a failed cell would then move an average
without a word.  So within a panel every average is taken over the same datasets, those
where every series of the panel has a result; a series missing from some dataset of the
panel gets no average at all, and a note names what it misses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Mapping

from bastion.report.datasets import order_datasets

@dataclass(frozen=True)
class Coverage:
    """Which datasets one group of a panel's series is averaged over, and who gets no average."""

    datasets: tuple[str, ...]  # where every series of the group has a result, in the paper's order
    present: frozenset = frozenset()  # series with at least one result
    missing: Mapping[Hashable, tuple[str, ...]] = field(default_factory=dict)  # series -> datasets it lacks

    def averaged(self, series: Hashable) -> bool:
        return series in self.present and series not in self.missing


def coverage(results: Mapping[Hashable, Iterable[str]]) -> Coverage:
    """Coverage of series -> the datasets where that series has a result (a finite value).

    Series without any result are not part of the panel: they neither shrink the common
    datasets nor get an average.
    """
    have = {k: set(v) for k, v in results.items()}
    have = {k: v for k, v in have.items() if v}
    if not have:
        return Coverage(())
    union = set().union(*have.values())
    common = set.intersection(*have.values())
    missing = {k: tuple(order_datasets(union - v)) for k, v in have.items() if union - v}
    return Coverage(tuple(order_datasets(common)), frozenset(have), missing)


def finite_datasets(values: Mapping[str, Any]) -> list[str]:
    """The datasets of ``dataset -> value`` whose value is a finite number."""
    out = []
    for d, v in values.items():
        try:
            if math.isfinite(float(v)):
                out.append(d)
        except (TypeError, ValueError):
            continue
    return out


def panel_coverage(results: Mapping[Hashable, Iterable[str]],
                   method_of: Callable[[Hashable], str] = str) -> dict[Hashable, Coverage]:
    """Each series' coverage within one panel (``method_of`` names a series' method)."""
    cov = coverage(results)
    return {k: cov for k in results}


def average(values: Mapping[str, float], series: Hashable, cov: Coverage) -> float:
    """The mean of ``dataset -> value`` over the coverage's datasets; NaN where no average is due."""
    if not cov.averaged(series) or not cov.datasets:
        return float("nan")
    vals = [float(values[d]) for d in cov.datasets]
    return sum(vals) / len(vals)


def coverage_notes(panel: str, covs: Mapping[Hashable, Coverage], label: Callable[[Hashable], str],
                   what: str = "method") -> list[str]:
    """One line per group with something missing: which datasets the averages cover, who has none.

    ``what`` names a series in the text ("method", or "method and hardware").
    """
    notes = []
    seen: list[Coverage] = []
    for cov in covs.values():
        if any(cov is s for s in seen) or not cov.missing:
            continue
        seen.append(cov)
        lacking = "; ".join(f"{label(k)} has no result on {', '.join(ds)}"
                            for k, ds in sorted(cov.missing.items(), key=lambda kv: label(kv[0])))
        if cov.datasets:
            head = f"{panel}: averages over {', '.join(cov.datasets)} only (every {what} has a result there)"
        else:
            head = f"{panel}: no average (no dataset has a result for every {what})"
        notes.append(f"{head}; no average for what misses a dataset: {lacking}.")
    return notes
