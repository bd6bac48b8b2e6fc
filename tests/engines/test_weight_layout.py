"""How the compiled engine lays out the matrices it multiplies by (``joint_weight``).

On a CPU a projection with more outputs than inputs is stored by columns (the BLAS streams
it faster for one row; docs/performance.md, "Where a CPU step goes"); every other one keeps
its rows.  The values never change, and the modules keep working on the same storage.
"""

from __future__ import annotations

import torch
from torch import nn

from bastion.engines.static_layers import FusedLayers, joint_weight
from bastion.models import registry as models


def _linear(out_features: int, in_features: int, seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(in_features, out_features, bias=False)


def _by_columns(w: torch.Tensor) -> bool:
    return w.t().is_contiguous() and not w.is_contiguous()


def test_a_wide_projection_is_stored_by_columns_and_its_module_reads_the_same_storage():
    lin = _linear(96, 32, seed=0)
    before = lin.weight.detach().clone()
    w = joint_weight([lin])
    assert _by_columns(w) and w.shape == (96, 32)
    assert torch.equal(w, before)
    assert lin.weight.data_ptr() == w.data_ptr()  # re-pointed, not copied beside it
    assert joint_weight([lin]).data_ptr() == w.data_ptr()  # a second engine on the same model copies nothing
    x = torch.randn(3, 32)
    assert torch.allclose(lin(x), x @ before.t(), atol=1e-5)


def test_a_narrow_or_square_projection_keeps_its_rows():
    for out_features, in_features in ((32, 96), (48, 48)):
        lin = _linear(out_features, in_features, seed=1)
        weight = lin.weight
        assert joint_weight([lin]) is weight  # nothing to gain by columns: not even a copy
        assert weight.is_contiguous()


def test_stacked_projections_are_stored_by_columns_and_each_module_keeps_its_rows_values():
    q, k, v = _linear(64, 48, 2), _linear(16, 48, 3), _linear(16, 48, 4)
    parts = [m.weight.detach().clone() for m in (q, k, v)]
    w = joint_weight([q, k, v])
    assert _by_columns(w) and w.shape == (96, 48)
    assert torch.equal(w, torch.cat(parts))
    for m, part in zip((q, k, v), parts):
        assert torch.equal(m.weight, part)


def test_columns_false_gives_rows_back_even_after_an_engine_stored_columns():
    lin = _linear(96, 32, seed=5)
    joint_weight([lin])
    w = joint_weight([lin], columns=False)  # this project's kernels read rows
    assert w.is_contiguous() and lin.weight.is_contiguous()
    stacked = joint_weight([_linear(64, 48, 6), _linear(64, 48, 7)], columns=False)
    assert stacked.is_contiguous()


def test_the_fused_target_multiplies_by_columns_while_a_tied_embedding_table_keeps_its_rows():
    target = models.load_target(str(models.tiny_dir("target")), torch.float32, "cpu")  # the bundled pair's: tied
    embeddings = target.model.get_input_embeddings()
    assert target.lm_head.weight is embeddings.weight
    table = embeddings.weight.detach().clone()
    FusedLayers(target, compile=False)
    assert _by_columns(target.lm_head.weight)
    assert embeddings.weight.is_contiguous()
    assert torch.equal(embeddings.weight, table)
    assert torch.equal(target.lm_head.weight, table)
