"""The row and tile kernel benchmarks' parts on small shapes: the rows they report, and a grid where nothing runs."""

from __future__ import annotations

import pytest

from benchmarks.kernel_bench import fastest
from tests.support.kernel_check import run_kernel_check

# On a CPU the kernels run in Triton's interpreter and graph_us times plain calls; fp32 keeps the check exact.
CHECK = r"""
import torch
from benchmarks import row_kernel_bench as rb, tile_kernel_bench as tb
from benchmarks.kernel_bench import references

rb.L = tb.L = 2  # launches a timed call; the Qwen3-8B shape's 36 would only repeat the same work
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
refs = references()
grid = [(8, 32, 2), (16, 64, 4)]
row = rb.product_row("down", 40, 72, "glu_residual", 2, refs["glu_residual"], grid, dev, torch.float32)
assert tuple(row["kernel_cfg"]) in grid and row["max_rel_err"] < 1e-5, row
assert abs(row["kernel_tbs"] - 40 * 72 * 4 / (row["kernel_us"] * 1e-6) / 1e12) < 1e-9, row
ws = [torch.randn(128, 64, device=dev) * 0.02 for _ in range(2)]  # gate and up stacked: 64 outputs
row = tb.product_row("gate_up", ws, "gated", 16, refs["gated"], seconds=0.0)  # the default setting alone
assert row["tried"] == 1 and row["default_us"] == row["kernel_us"] and row["max_rel_err"] < 1e-5, row
assert row["N"] == 128 and row["blas_tbs"] > 0, row
print("rows", sorted(row))
"""


def test_kernel_benchmarks_report_exact_rows_on_small_shapes():
    done = run_kernel_check(CHECK)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kernel_tbs" in done.stdout and "max_rel_err" in done.stdout


def test_a_grid_where_no_setting_ran_says_so():
    with pytest.raises(RuntimeError, match="no kernel setting ran: every one failed to compile or launch"):
        fastest({})
    assert fastest({(1,): 3.0, (2,): 2.0, (3,): 2.0}) == (2,)  # the first of equals
