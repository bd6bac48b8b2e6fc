"""The Triton select (each depth's top-k log-probabilities) against ``draft_topk``, and its dispatch."""

from __future__ import annotations

import pytest
import torch

from bastion.engines.static_tree import TreePhase
from tests.support.kernel_check import run_kernel_check

# Runs in a subprocess with TRITON_INTERPRET=1 (the kernel's code on the CPU) unless a GPU is there.
KERNEL_CHECK = r"""
import itertools, torch
from bastion.speculative.select_kernel import select_topk, serves
from bastion.speculative.tree import draft_topk

dev = "cuda" if torch.cuda.is_available() else "cpu"
g = torch.Generator().manual_seed(0)
cases, worst = 0, 0.0
for (d, v), k, t, dtype, shifted in itertools.product([(3, 1000)], [1, 24], [0.0, 0.7], [torch.float32, torch.bfloat16],
                                                     [False, True]):
    x = (torch.randn(d, v, generator=g) * 3).to(dtype)
    x[0, 9] = x[0, 7] = x[0].max() + 1  # an exact tie at the top
    x[1, 500:520] = x[1].max() + 1  # twenty tied tokens: the cut falls inside them at k = 1 ... 19
    x = x.to(dev)
    buf_q = torch.full((d, 128), 9.0, device=dev)  # the tree phase's row-strided buffers
    buf_t = torch.full((d, 128), -1, dtype=torch.long, device=dev)
    shift = torch.tensor(-0.25, device=dev) if shifted else None
    select_topk(x, t, buf_q[:, :k], buf_t[:, :k], shift)
    logq, tok = buf_q[:, :k], buf_t[:, :k]
    ref_q, ref_t = draft_topk(x, t, k)
    ref_q = ref_q - 0.25 if shifted else ref_q
    err = (logq - ref_q).abs().max().item()
    assert err < 2e-5, (k, t, dtype, shifted, err)  # the log-sum-exp sums in another order
    kept = x.float().gather(1, tok)
    assert torch.equal(kept, x.float().gather(1, ref_t)), "another set of logits kept"
    assert bool((kept[:, 1:] <= kept[:, :-1]).all()), "not sorted"
    tied = kept[:, 1:] == kept[:, :-1]
    assert bool((tok[:, 1:] > tok[:, :-1])[tied].all()), "equal logits not in token order"
    assert tok[0, 0].item() == 7 and tok[1, 0].item() == 500, (tok[0, :2], tok[1, :2])
    assert bool((buf_q[:, k:] == 9.0).all()) and bool((buf_t[:, k:] == -1).all()), "wrote past k"
    worst = max(worst, err)
    cases += 1
assert serves(torch.zeros(2, 8), 8) and not serves(torch.zeros(2, 8), 9)
assert not serves(torch.zeros(2, 20000), 4) and not serves(torch.zeros(8, 2).t(), 1)
print(f"select equals draft_topk on {cases} cases, worst {worst:.2e}")
"""


def test_kernel_equals_draft_topk():
    proc = run_kernel_check(KERNEL_CHECK)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "select equals draft_topk on 16 cases" in proc.stdout


def test_off_cuda_the_torch_select_runs(monkeypatch):
    from bastion.engines import static_tree

    monkeypatch.setattr(static_tree, "run_triton", lambda *a: pytest.fail("no kernel off CUDA"))
    phase = TreePhase(torch.device("cpu"), compiled=False)
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(1))
    phase.draft_out = logits
    phase.logq_all = torch.zeros(4, 128)
    phase.top_tok_all = torch.zeros(4, 128, dtype=torch.long)
    phase.shift = torch.tensor(0.5)
    phase.set_topk(6)
    phase.select(0.0, shifted=True)
    want = torch.log_softmax(logits, dim=-1).topk(6, dim=-1)
    assert torch.allclose(phase.logq, want.values + 0.5, atol=1e-6)
    assert torch.equal(phase.top_tok, want.indices)
