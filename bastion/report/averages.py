"""Averages over datasets that compare like with like.

A panel (one model at one temperature) shows several series: the methods of the table
and the bars, or (hardware, method) pairs in the hardware comparison.  Averaging each
series over whatever datasets it happens to have would set, say, one method's mean over
one easy dataset beside another's over eight: a failed cell would then move an average
without a word.  So within a panel every average is taken over the same datasets, those
where every series of the panel has a result; a series missing from some dataset of the
panel gets no average at all, and a note names what it misses.

Lossy series (a method whose name contains ``lossy``, such as the original release's
argmax acceptance at T > 0) never enter that reckoning: their gaps do not shrink the
lossless methods' datasets.  They are averaged apart, over the lossless methods'
datasets so that the two can be compared (over their own when a panel has no lossless
method), and one missing from some of those gets no average either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Mapping

from bastion.report.datasets import order_datasets

LOSSY_WORD = "lossy"


def is_lossy(method: str) -> bool:
    """Whether a method's acceptance is lossy: its name says so (``bastion_lossy``)."""
    return LOSSY_WORD in str(method)


@dataclass(frozen=True)
class Coverage:
    """Which datasets one group of a panel's series is averaged over, and who gets no average."""

    datasets: tuple[str, ...]  # where every series of the group has a result, in the paper's order
    present: frozenset = frozenset()  # series with at least one result
    missing: Mapping[Hashable, tuple[str, ...]] = field(default_factory=dict)  # series -> datasets it lacks
    lossy: bool = False  # the lossy series' group, averaged apart

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


def within(results: Mapping[Hashable, Iterable[str]], datasets: Iterable[str], lossy: bool = True) -> Coverage:
    """Coverage over given datasets: a series missing any of them gets no average."""
    datasets = tuple(order_datasets(datasets))
    have = {k: set(v) for k, v in results.items() if set(v)}
    missing = {k: tuple(d for d in datasets if d not in v) for k, v in have.items()}
    return Coverage(datasets, frozenset(have), {k: v for k, v in missing.items() if v}, lossy)


def panel_coverage(results: Mapping[Hashable, Iterable[str]],
                   method_of: Callable[[Hashable], str] = str) -> dict[Hashable, Coverage]:
    """Each series' coverage within one panel (``method_of`` names a series' method).

    The lossless series decide the panel's datasets; the lossy ones are held to those
    (see the module docstring).
    """
    lossless = {k: v for k, v in results.items() if not is_lossy(method_of(k))}
    lossy = {k: v for k, v in results.items() if is_lossy(method_of(k))}
    base = coverage(lossless)
    if base.present:
        apart = within(lossy, base.datasets)
    else:
        apart = coverage(lossy)
        apart = Coverage(apart.datasets, apart.present, apart.missing, lossy=True)
    return {k: apart if k in lossy else base for k in results}


def average(values: Mapping[str, float], series: Hashable, cov: Coverage) -> float:
    """The mean of ``dataset -> value`` over the coverage's datasets; NaN where no average is due."""
    if not cov.averaged(series) or not cov.datasets:
        return float("nan")
    vals = [float(values[d]) for d in cov.datasets]
    return sum(vals) / len(vals)


def coverage_notes(panel: str, covs: Mapping[Hashable, Coverage], label: Callable[[Hashable], str],
                   what: str = "method") -> list[str]:
    """One line per group with something missing: which datasets the averages cover, who has none.

    ``what`` names a series in the text ("method", or "method on every hardware").
    """
    notes = []
    seen: list[Coverage] = []
    for cov in covs.values():
        if any(cov is s for s in seen) or not cov.missing or not cov.datasets and cov.lossy:
            continue
        seen.append(cov)
        lacking = "; ".join(f"{label(k)} has no result on {', '.join(ds)}"
                            for k, ds in sorted(cov.missing.items(), key=lambda kv: label(kv[0])))
        if cov.lossy:
            head = f"{panel}: lossy methods are averaged apart, over {', '.join(cov.datasets)}"
        elif cov.datasets:
            head = f"{panel}: averages over {', '.join(cov.datasets)} only (every {what} has a result there)"
        else:
            head = f"{panel}: no average (no dataset has a result for every {what})"
        notes.append(f"{head}; no average for what misses a dataset: {lacking}.")
    return notes


def lossy_notes(methods: Iterable[str], label: Callable[[str], str]) -> list[str]:
    """What a lossy column is, once per figure or table that shows one."""
    lossy = [m for m in dict.fromkeys(methods) if is_lossy(m)]
    if not lossy:
        return []
    names = ", ".join(label(m) for m in lossy)
    return [f"Lossy: {names}, with the original release's acceptance at T > 0 (a draft token is kept where it "
            "equals the target's argmax; only the step's last token is sampled), so the output is not distributed "
            "as the target's samples; averaged apart from the lossless methods, never with them."]
