"""Path ranking: the order is a stable descending sort, and the Triton kernels give it bit for bit.

The tree tests (test_tree.py) check that the ranked paths build the same tree as the
best-first heap; here the ranking itself is pinned down: which of several exactly tied
paths comes first, and that the GPU kernels (run by Triton's interpreter on the CPU, so
CI checks the kernels' own code) equal the torch reference on every output.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from bastion.speculative.path_rank import _rank_numpy, _rank_torch, candidates, layout, top_paths
from bastion.speculative.tree import draft_topk


def _sorted_rows(values: torch.Tensor) -> torch.Tensor:
    return torch.sort(values, dim=-1, descending=True).values.contiguous()


def _all_paths(logq: torch.Tensor):
    """Every path of every depth with its log-prob, summed in the engine's order (depth by depth)."""
    d_max, k = logq.shape
    out = []
    for d in range(1, d_max + 1):
        for ranks in itertools.product(range(k), repeat=d):
            lp = torch.zeros((), dtype=torch.float32)
            for depth, r in enumerate(ranks):
                lp = lp + logq[depth, r]
            out.append((float(lp), d, ranks))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_values_are_the_best_paths_sorted(seed):
    g = torch.Generator().manual_seed(seed)
    logq = _sorted_rows(torch.log_softmax(torch.randn(3, 4, generator=g) * 2, dim=-1))
    m = 20
    logp, depth, local, parent, rank = _rank_torch(logq, m)
    best = sorted((p for p, _, _ in _all_paths(logq)), reverse=True)[:m]
    assert logp.tolist() == pytest.approx(best, abs=1e-6)
    assert torch.all(logp[:-1] >= logp[1:])
    # each path's log-prob is its parent's plus its own token's
    assert torch.all((depth >= 1) & (depth <= 3))
    assert torch.equal(logp[depth == 1], logq[0][rank[depth == 1]])


def test_exact_ties_keep_the_earlier_candidate_first():
    # two tokens with the same probability at every depth: each depth's pairs tie in twos
    logq = torch.tensor([[-0.5, -0.5, -3.0], [-0.5, -0.5, -3.0]])
    logp, depth, local, parent, rank = _rank_torch(logq, 6)
    # depth 1 (candidates earlier in the list) before depth 2 at equal value; within a
    # depth, lower parent first, then lower token rank
    assert logp.tolist() == [-0.5, -0.5, -1.0, -1.0, -1.0, -1.0]
    assert depth.tolist() == [1, 1, 2, 2, 2, 2]
    assert rank.tolist() == [0, 1, 0, 1, 0, 1]
    assert parent.tolist() == [0, 0, 0, 0, 1, 1]


def test_candidates_are_the_pairs_that_can_rank():
    flat = candidates(8, 5, 6, torch.device("cpu"))
    pairs = {(int(f) // 5, int(f) % 5) for f in flat}
    assert pairs == {(i, j) for i in range(8) for j in range(5) if (i + 1) * (j + 1) <= 6}
    assert torch.all(flat[1:] > flat[:-1])  # ascending: the stable order is the full list's
    depth, local = layout(3, 5, 6, torch.device("cpu"))
    assert depth.tolist() == [1] * 5 + [2] * 6 + [3] * 6


def test_dispatch_uses_the_reference_off_cuda():
    logq = _sorted_rows(torch.randn(4, 6))
    assert all(torch.equal(a, b) for a, b in zip(top_paths(logq, 17), _rank_torch(logq, 17)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the dispatch to the compiled kernels needs CUDA")
def test_cuda_dispatch_runs_the_compiled_kernels():
    """On CUDA with Triton, ``top_paths`` runs the kernels (through ``fused.run_triton``), with the reference's paths."""
    from bastion.speculative import fused


    g = torch.Generator().manual_seed(5)
    for d_max, k, m in ((15, 16, 31), (15, 128, 255), (15, 128, 1023), (3, 4, 7)):
        logq = _sorted_rows(torch.log_softmax(torch.randn(d_max, k * 2, generator=g) * 3, dim=-1))[:, :k].cuda()
        tied = (logq * 2).round() / 2  # many exact ties within and across depths
        for q in (logq, tied):
            got, ref = top_paths(q, m), _rank_torch(q, m)
            assert all(torch.equal(a, b) for a, b in zip(got, ref)), (d_max, k, m)
    assert fused._WORKS.get(("path_rank", str(logq.device))) is True


@pytest.mark.parametrize("seed", range(40))
def test_cpu_ranking_equals_the_reference_bit_for_bit(seed):
    """The NumPy rounds (the CPU default) give the torch reference's paths, ties included."""
    g = torch.Generator().manual_seed(seed)
    d_max, k = 1 + seed % 15, 1 + (seed * 7) % 16
    raw = torch.log_softmax(torch.randn(d_max, max(k, 2) * 4, generator=g) * 3, dim=-1)
    if seed % 2:  # coarse values: many exact ties within and across depths
        raw = (raw * 2).round() / 2
    logq = _sorted_rows(raw)[:, :k].contiguous()
    for m in (1, 7, 15, 31, 100):
        ref, got = _rank_torch(logq, m), _rank_numpy(logq, m)
        assert [t.dtype for t in got] == [t.dtype for t in ref]
        assert all(torch.equal(a, b) for a, b in zip(got, ref)), (d_max, k, m)
    assert all(torch.equal(a, b) for a, b in zip(top_paths(logq, 15), _rank_torch(logq, 15)))  # the CPU dispatch


def test_failing_kernels_fall_back_to_the_reference_once(monkeypatch):
    """A GPU that Triton cannot serve: one warning, then the reference's (identical) paths."""
    from bastion.speculative import fused, path_rank

    calls = []

    def broken(logq, m, out=None):
        calls.append(m)
        raise RuntimeError("no kernel image for this device")

    monkeypatch.setattr(fused, "use_triton", lambda device: True)
    monkeypatch.setattr(fused, "_WORKS", {})
    monkeypatch.setattr(path_rank, "_rank_triton", broken)
    logq = _sorted_rows(torch.randn(3, 5))
    with pytest.warns(UserWarning, match=r"Triton kernel 'path_rank' failed on cpu .*no kernel image.*BASTION_RANK=torch"):
        first = top_paths(logq, 9)
    second = top_paths(logq, 9)  # no second attempt, no second warning
    assert calls == [9]
    for got in (first, second):
        assert all(torch.equal(a, b) for a, b in zip(got, _rank_torch(logq, 9)))


def test_draft_topk_equals_log_softmax_topk():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 300, generator=g) * 3
    for temperature in (0.0, 0.7):
        logq, tok = draft_topk(logits, temperature, 16)
        ref = torch.log_softmax(logits / (temperature or 1.0), dim=-1).topk(16, dim=-1)
        assert torch.equal(tok, ref.indices)
        torch.testing.assert_close(logq, ref.values, rtol=0, atol=1e-5)


KERNEL_CHECK = textwrap.dedent("""
    import torch
    from bastion.speculative.path_rank import _rank_torch, _rank_triton
    g = torch.Generator().manual_seed(0)
    cases = []
    # (depths, top-k, paths, values drafted and/or tied).  The interpreter's time grows with the
    # rounds and the candidates (15 depths of 128 took 30 s, as did 3 depths of 300 paths), so
    # the wide cases run 6 rounds, and 300 paths only tied values (the harder order).  The
    # compiled kernels meet the engine's full shapes in test_cuda_dispatch_runs_the_compiled_kernels.
    for d, k, m, kinds in [(6, 128, 63, "dt"), (3, 128, 300, "t"), (4, 8, 31, "dt"), (3, 5, 200, "dt"),
                           (6, 16, 100, "dt"), (2, 3, 1, "dt")]:
        drafted = torch.log_softmax(torch.randn(d, 400, generator=g) * 2, -1).sort(-1, descending=True).values[:, :k]
        tied = (torch.randint(-12, 0, (d, k), generator=g).float() / 2).sort(-1, descending=True).values
        cases += [(values.contiguous(), m) for kind, values in (("d", drafted), ("t", tied)) if kind in kinds]
    # a view of each depth's first 40 of 128 (the tree phase's select writes such views), written into
    # longer buffers, as the static engine's ranking runs it
    wide = torch.log_softmax(torch.randn(6, 400, generator=g) * 2, -1).sort(-1, descending=True).values[:, :128]
    cases.append((wide.contiguous()[:, :40], 63))
    for logq, m in cases:
        ref, got = _rank_torch(logq.contiguous(), m), _rank_triton(logq, m)
        for name, a, b in zip(("logp", "depth", "local", "parent", "rank"), ref, got):
            assert a.dtype == b.dtype and torch.equal(a, b), (tuple(logq.shape), m, name, a[:8], b[:8])
    out = (torch.full((80,), 9.0), *(torch.full((80,), -5, dtype=torch.long) for _ in range(4)))
    got = _rank_triton(*cases[-1], out)
    assert all(torch.equal(a, b) and b.data_ptr() == o.data_ptr() for a, b, o in zip(ref, got, out))
    assert all(bool((o[63:] == o[79]).all()) for o in out), "nothing written past the paths"
    print("kernels equal the reference on", len(cases), "cases")
""")


def test_triton_kernels_equal_the_reference_bit_for_bit():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # the kernels' code, run on the CPU
    proc = subprocess.run([sys.executable, "-c", KERNEL_CHECK], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kernels equal the reference on 12 cases" in proc.stdout
