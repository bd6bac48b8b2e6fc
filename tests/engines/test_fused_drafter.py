"""The compiled engine's drafter functions against the drafter module they replace (CPU, uncompiled).

The functions stack the drafter's weights and project the context and block rows through
k and v together; any slip (a norm applied to the wrong rows, the context's rotary angles
taken from the block's positions, a stale cache entry) changes the block states, so the
states are compared with the module's over several steps of a growing context.
"""

from __future__ import annotations

import pytest
import torch

from bastion.engines.choice import Kernels
from bastion.engines.eager import EagerDecoder
from bastion.engines.fused_drafter import FusedDrafter
from bastion.engines.static_cache import StaticContextKV
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.models.target import Target
from dflash.model import ContextKVCache
from tests.support.builders import tiny_drafter, tiny_target


def _shaken(drafter, seed: int):
    """Every weight perturbed, norms included (their init of ones would hide a missing norm)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in drafter.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return drafter


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family,block", [("qwen3", 8), ("llama", 5)])
def test_fused_drafter_states_equal_the_module(family, block, device):
    """Uncompiled on the CPU; compiled by torch.compile where CUDA is (the GPU run of this file)."""
    model = tiny_target(family, seed=3)
    reference = _shaken(tiny_drafter(model, block_size=block, seed=4), 5).to(device)
    fused_copy = _shaken(tiny_drafter(model, block_size=block, seed=4), 5).to(device)
    fused = FusedDrafter(fused_copy, compile=device == "cuda")  # stacks fused_copy's weights in place
    tol = 1e-5 if device == "cpu" else 1e-3
    feat_dim = len(reference.target_layer_ids) * model.config.hidden_size
    g = torch.Generator().manual_seed(6)
    module_cache = ContextKVCache(len(reference.layers))
    attn = reference.layers[0].self_attn
    static = StaticContextKV(len(reference.layers), attn.num_kv_heads, attn.head_dim, 64, torch.float32,
                             torch.device(device))
    static.kv.normal_()  # stale entries everywhere: the block must overwrite its slots, the mask hide the rest
    length = 0
    for new in (7, 3, block, 1):  # the first draft's prompt, then accepted runs of several lengths
        feats = torch.randn(1, new, feat_dim, generator=g).to(device)
        block_embeds = torch.randn(1, block, model.config.hidden_size, generator=g).to(device)
        ctx_pos = torch.arange(length, length + new, device=device)[None]
        blk_pos = torch.arange(length + new, length + new + block, device=device)[None]
        mask = torch.rand(1, 1, block, length + new + block, generator=g) < 0.8
        mask[..., length + new:] = True  # the block always sees itself
        mask = mask.to(device)
        want = reference(block_embeds, blk_pos, feats, ctx_pos, mask, module_cache)
        # the static cache's window holds the context, then the block at its positions, then stale slots
        window = length + new + block + 5
        static.kv_len = window
        padded = torch.cat([mask, mask.new_zeros(1, 1, block, 5)], dim=-1)
        got = fused(block_embeds, blk_pos, feats, ctx_pos, padded, static)
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
        length += new
        assert module_cache.length == length
    for layer in range(len(reference.layers)):
        for a, b in ((static.kv[layer, 0], module_cache._k[layer]), (static.kv[layer, 1], module_cache._v[layer])):
            torch.testing.assert_close(a[:, :, :length], b[:, :, :length], rtol=tol, atol=tol)


def test_compiled_engine_keeps_a_drafter_it_cannot_fuse():
    """A drafter with attention biases runs as its module, with the same outputs as eager."""
    model = tiny_target("qwen3", seed=11, scale=3.0)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=4, seed=2)
    assert FusedDrafter.supports(drafter)
    attn = drafter.layers[0].self_attn
    attn.q_proj.bias = torch.nn.Parameter(torch.randn(attn.q_proj.out_features))
    assert not FusedDrafter.supports(drafter)
    engine = StaticEngine(target, drafter, max_context=64, n_max=32, fused=True)
    assert engine.fused is not None and engine.proposers["dflash"].fused_drafter is None
    prompt = list(range(5, 17))
    eager = EagerDecoder(target, "dflash", drafter).generate(prompt, 24)
    static = StaticDecoder(engine, "dflash").generate(prompt, 24)
    assert static.output_ids == eager.output_ids
    assert [s.committed for s in static.steps] == [s.committed for s in eager.steps]


def test_drafter_module_keeps_the_drafters_layers(monkeypatch):
    model = tiny_target("qwen3", seed=1)
    target, drafter = Target(model), tiny_drafter(model, block_size=4, seed=2)

    def fused_drafter(**kw):
        return StaticEngine(target, drafter, max_context=32, n_max=16, fused=True, **kw).proposers["dflash"].fused_drafter

    assert fused_drafter(kernels=Kernels(drafter="module")) is None  # the run's kernels.drafter
    assert fused_drafter(kernels=Kernels()) is not None
    assert fused_drafter() is not None
    monkeypatch.setenv("BASTION_DRAFTER", "module")  # an engine made outside a run takes the variable
    assert fused_drafter() is None
