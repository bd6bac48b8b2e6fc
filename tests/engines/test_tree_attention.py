"""The Triton tree-attention kernel against the engines' reference attention, and its dispatch."""

from __future__ import annotations

import pytest
import torch

from bastion.engines import static_attention
from bastion.engines.static_attention import (
    grouped_attention,
    kernel_serves,
    with_kernel,
)
from tests.support.kernel_check import run_kernel_check

# Runs in a subprocess with TRITON_INTERPRET=1 (the kernels' code on the CPU) unless a GPU is there.
KERNEL_CHECK = r"""
import itertools, torch
from bastion.engines.static_attention import grouped_attention
from bastion.engines import tree_attention_kernel as K

dev = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator().manual_seed(0)
cases, worst, split_cases = 0, 0.0, 0
# (query heads, K/V heads, head dim) x tree rows x window: one query head per K/V head and
# groups of 2-4; AR's single row and trees that span several row blocks; windows that end
# inside a key block; programs=1 keeps every window in one split, 64 splits most of them
for (hq, hkv, d), s, kv, programs in itertools.product(
        [(2, 2, 16), (4, 2, 32), (8, 2, 64)], [1, 5, 17], [24, 130], [1, 7, 64]):
    cap = 192
    q = torch.randn(1, hq, s, d, generator=gen).to(dev)
    cache = torch.randn(2, 1, hkv, cap, d, generator=gen).to(dev)  # the engine's layout: windows are views
    k, v = cache[0, :, :, :kv], cache[1, :, :, :kv]
    length = kv - s - 2
    rows = torch.zeros(s + 3, cap, dtype=torch.bool)  # mask rows of a larger buffer, as the engine keeps them
    mask = rows[:s, :kv]
    mask[:, :length] = True
    anc = (torch.rand(s, s, generator=gen) < 0.4) | torch.eye(s, dtype=torch.bool)
    mask[:, length:length + s] = anc
    mask = mask.to(dev)
    ref = grouped_attention(q, k, v, mask[None, None], 0.3)
    splits, _ = K.key_splits(kv, hkv, programs)
    split_cases += splits > 1
    got = K.tree_attention(q, k, v, mask[None, None], 0.3, programs=programs)
    assert got.shape == ref.shape == (1, s, hq, d), (got.shape, ref.shape)
    err = (got - ref).abs().max().item()
    assert err < 2e-5, (hq, hkv, d, s, kv, programs, err)
    # a row verified alone (AR) gets what it gets inside a tree: the same key splits
    alone = K.tree_attention(q[:, :, :1].contiguous(), k, v, mask[None, None, :1], 0.3, programs=programs)
    gap = (alone[0, 0] - got[0, 0]).abs().max().item()
    assert gap < 1e-5, (hq, hkv, d, s, kv, programs, gap)
    worst = max(worst, err)
    cases += 1
try:  # a layout it cannot read is refused, not misread
    K.tree_attention(q.transpose(2, 3), k, v, mask[None, None], 0.3)
    raise SystemExit("a transposed query was accepted")
except ValueError as exc:
    assert "kernel_layout" in str(exc), exc
print(f"kernel equals the reference on {cases} cases, {split_cases} split, worst {worst:.2e}")
"""


def test_kernel_equals_the_reference_attention():
    proc = run_kernel_check(KERNEL_CHECK)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kernel equals the reference on 54 cases" in proc.stdout
    assert int(proc.stdout.split(",")[1].split()[0]) == 18  # the merge kernel ran: windows of 2+ blocks, 7 or 64 programs


def test_splits_depend_on_the_window_and_heads_only():
    pytest.importorskip("triton")
    from bastion.engines.tree_attention_kernel import BLOCK_N, key_splits

    assert key_splits(768, 8, 132) == (12, 2 * BLOCK_N)  # Qwen3-8B at c = 512 on an H200: 96 programs
    splits, chunk = key_splits(4352, 8, 132)
    assert splits * chunk >= 4352 and (splits - 1) * chunk < 4352 and chunk % BLOCK_N == 0
    assert key_splits(100, 8, 1) == (1, 4 * BLOCK_N)


def _tensors(device="cpu"):
    q = torch.randn(1, 4, 3, 16, device=device)
    cache = torch.randn(2, 1, 2, 40, 16, device=device)
    mask = torch.ones(5, 40, dtype=torch.bool, device=device)[:3, :32]
    return q, cache[0, :, :, :32], cache[1, :, :, :32], mask[None, None]


def test_off_cuda_the_fallback_runs(monkeypatch):
    calls = []

    def fallback(*args):
        calls.append(args)
        return grouped_attention(*args)

    monkeypatch.setattr(static_attention, "run_triton", lambda *a: pytest.fail("no kernel off CUDA"))
    q, k, v, mask = _tensors()
    out = with_kernel(fallback)(q, k, v, mask, 0.25)
    assert len(calls) == 1 and torch.equal(out, grouped_attention(q, k, v, mask, 0.25))


def test_the_kernel_takes_only_the_engines_layouts(monkeypatch):
    q, k, v, mask = _tensors()
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))  # layouts only
    assert kernel_serves(q, k, v, mask)
    assert not kernel_serves(q.transpose(2, 3), k, v, mask)  # query not contiguous
    assert not kernel_serves(q, k.transpose(2, 3), v, mask)
    assert not kernel_serves(q, k, v, mask.float())  # an additive mask is not a boolean one
    assert not kernel_serves(q[..., :12].contiguous(), k[..., :12], v[..., :12], mask)  # head dim 12
