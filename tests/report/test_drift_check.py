"""The ablation's same-size check: a rule's constant trees against the fixed budget of that size."""

from __future__ import annotations

import csv

from bastion.report import aggregate, drift_check


def _cell(dataset: str, method: str, tpot: float) -> dict:
    return {"hardware": "hw", "model": "m", "dataset": dataset, "temperature": 0.0, "method": method, "tpot_s": tpot}


def _steps(dataset: str, method: str, sizes: list[int]) -> list[dict]:
    return [{"hardware": "hw", "model": "m", "dataset": dataset, "temperature": 0.0, "method": method,
             "tree_size": s} for s in sizes]


def test_only_constant_trees_with_a_matching_budget_are_checked():
    cells = [_cell("a", "bastion", 1.03), _cell("a", "bastion-b16", 1.0), _cell("a", "bastion_plus", 0.9),
             _cell("b", "bastion", 1.2), _cell("b", "bastion-b16", 1.0), _cell("c", "bastion", 1.0),
             _cell("c", "bastion-b32", 1.0)]
    steps = (_steps("a", "bastion", [16, 16, 16]) + _steps("a", "bastion_plus", [16, 8, 16])
             + _steps("a", "bastion-b16", [16, 16]) + _steps("b", "bastion", [16, 16])
             + _steps("c", "bastion", [16, 16]))
    rows = drift_check.same_size_rows(cells, steps)
    # a: bastion constant at 16 (bastion_plus varies: no row); b: 1.2x is outside; c: no fixed 16 decoded
    assert [(r["dataset"], r["rule"], r["fixed"]) for r in rows] == [("a", "bastion", "bastion-b16"),
                                                                        ("b", "bastion", "bastion-b16")]
    assert abs(rows[0]["time_ratio"] - 1.03) < 1e-12 and rows[0]["within_tolerance"]
    assert not rows[1]["within_tolerance"]
    assert "OUTSIDE 5%" in drift_check.describe(rows[1]) and "every tree 16 nodes" in drift_check.describe(rows[1])


def test_an_empty_check_still_writes_its_header(tmp_path):
    path = tmp_path / "same.csv"
    aggregate.write_csv([], path, drift_check.FIELDS)
    assert next(csv.reader(open(path))) == list(drift_check.FIELDS)
