"""The rule's node count as one Triton kernel (bastion/speculative/count_kernel.py) against
the torch reference :func:`bastion.speculative.rule.count_nodes`, and the engine's dispatch.

The kernel runs under Triton's interpreter on the CPU where Triton is installed, and on
the GPU as compiled code where there is one; without Triton the check is skipped (CI's
CPU build has none), and the dispatch test shows the reference serving instead.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from tests.support.kernel_check import run_kernel_check

KERNEL_CHECK = textwrap.dedent("""
    import itertools, torch
    from transformers import AutoConfig
    from bastion.costmodel.model import CostModel, CostParams
    from bastion.costmodel.roofline import HardwarePeaks, ModelShape
    from bastion.models.registry import tiny_dir
    from bastion.speculative.count_kernel import count_nodes_fused
    from bastion.speculative.policy import TreePolicy
    from bastion.speculative.rule import count_nodes
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = ModelShape.from_config(AutoConfig.from_pretrained(tiny_dir("target")), 2)
    peaks = HardwarePeaks(flops_per_s=7e14, bytes_per_s=4e12, attention_flops_per_s=2e14)
    models = [
        CostModel(shape, peaks, CostParams(0.88, 3.5e-3, 1.53, 0.0, u_kv=7.7, u_att=2.9, f_kv=25.0, f_att=0.16, f_peak=0.91)),
        CostModel(shape, peaks, CostParams(2.0, 3e-3, 1.1, 5e-3, u_kv=4.0, u_att=2.0, f_kv=30.0, f_att=0.2, f_peak=1.0)),
        CostModel(shape, peaks, CostParams(10.4, 4.1e-4, 7.8, 3.8e-4, u_kv=74.9, u_att=4.4, f_kv=82.0, f_att=1e-10,
                                           f_peak=15.8)).with_extra([(64, 1.4e-4), (256, 1.9e-4), (1024, 1.9e-4)]),
    ]
    g = torch.Generator().manual_seed(0)
    cases = agree = raised = 0
    counts = set()
    for model, n_cand, n_min, n_max, c, fixed, scale in itertools.product(
            models, (1, 7, 31, 127, 255), (1, 8, 32), (256, 64), (0, 97, 1500), (1e-4, 6e-4), (0.3, 2.0)):
        if n_cand > n_max - 1:
            continue
        logp = (-torch.rand(n_cand, generator=g).mul(scale).cumsum(0)).to(dev)  # sorted path log-probs
        length = torch.tensor(c, device=dev)
        p = model.params
        coef = torch.tensor([p.u_kv, p.u_att, p.f_kv, p.f_att, p.f_peak, fixed], dtype=torch.float64, device=dev)
        got = {}
        # "down" and None (no rounding) count alike, the rounding comes after: the kernel sees
        # neighbour=False for both, so "down" stands for the two
        for rounding in ("best-neighbour", "down"):
            policy = TreePolicy(n_min=n_min, n_max=n_max, rounding=rounding)
            ref = int(count_nodes(logp, policy, model.curve(length, n_max, device=dev), fixed))
            out = torch.full((3,), -1, dtype=torch.long, device=dev)
            count_nodes_fused(logp, model.curve_parts(n_max, dev), coef, length, n_min, n_max, out[1:2],
                              neighbour=policy.neighbour)
            got[rounding] = out.tolist()
            assert got[rounding][0] == got[rounding][2] == -1, got  # only its own element written
            assert got[rounding][1] == ref, (n_cand, n_min, n_max, c, fixed, scale, rounding, got[rounding][1], ref)
            counts.add(ref)
        raised += got["best-neighbour"][1] > got["down"][1]  # the bucket above the rule's count won
        cases += 1
    print("fused count equals the reference on", cases, "cases,", len(counts), "distinct counts,", raised, "raised")
""")


def test_fused_count_equals_the_reference():
    proc = run_kernel_check(KERNEL_CHECK, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fused count equals the reference on" in proc.stdout
    distinct, raised = (int(part.split()[0]) for part in proc.stdout.split(",")[1:3])
    assert distinct > 10  # the cases reach many different counts, not one boundary
    assert raised > 5  # and counts the kernel had to take to the bucket above


def test_the_engine_counts_with_the_reference_where_triton_does_not_serve(monkeypatch):
    """On the CPU (or a GPU Triton cannot serve) `rank` writes the reference's count."""
    from bastion.speculative import fused

    launched = []
    monkeypatch.setattr(fused, "use_triton", lambda device: True)
    monkeypatch.setattr(fused, "_WORKS", {})

    def broken():
        launched.append(1)
        raise RuntimeError("no kernel image for this device")

    with pytest.warns(UserWarning, match=r"Triton kernel 'count_nodes' failed on cpu .*no kernel image.*BASTION_RANK=torch"):
        assert fused.run_triton("count_nodes", torch.device("cpu"), broken) is False
    assert fused.run_triton("count_nodes", torch.device("cpu"), broken) is False  # decided once: no second try
    assert launched == [1]
    monkeypatch.setattr(fused, "use_triton", lambda device: False)
    assert fused.run_triton("other", torch.device("cpu"), broken) is False and launched == [1]
