"""The DFlash drafter's layers as pure functions, so the compiled engine can fuse them.

A drafter step is small work: a 16-token block through a few layers, plus the few context
rows accepted since the last step.  Run as Transformers-style modules it is dominated by
its small kernels, not by its weights: on the H200, at the Qwen3-8B drafter's shape (5
layers), a draft step took 2.16 ms where streaming its weights and the target's head
takes about 0.8 ms.  As for the target (:mod:`bastion.engines.static_layers`), each layer
runs as one function before attention and the shared one after it, compiled once for every
layer on CUDA and run as plain torch functions on a CPU:

- the block's q projection and one k/v projection of the context and block rows
  together (the eager drafter multiplies the context and the block by k and v separately,
  reading those weights twice a layer);
- the norms, head norms and rotary embedding fused around them;
- attention through :func:`bastion.engines.static_attention.grouped_attention`.

The arithmetic is the drafter's own (same operations, same fp32 upcasts); compiled kernels
may round differently in bf16, as the target's fused layers do.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F

from bastion.engines.static_attention import grouped_attention, with_kernel
from bastion.engines.static_layers import (
    COMPILED_MATMUL_ROWS,
    FusedLayers,
    _rms,
    _rotate,
    compile_step_function,
    post_attention,
    joint_weight,
)


def project_context(feats: torch.Tensor, wfc: torch.Tensor, norm: torch.Tensor, eps: float) -> torch.Tensor:
    """Raw tapped target states [1, W, n_taps * H] -> the drafter's context rows [1, W, H]."""
    return _rms(F.linear(feats, wfc), norm, eps)


def draft_pre_attention(x, ctx, ln, wq, wkv, qn, kn, cos, sin, kv, ctx_index, block_index, eps: float,
                        head_dim: int, kv_width: int):
    """Block states x [1, b, H] and context rows ctx [1, W, H] of one layer -> q [1, Hq, b, D].

    The context's k/v go into the layer's cache ``kv`` [2, 1, Hkv, capacity, D] at
    ``ctx_index`` [W], then the block's at ``block_index`` [b] (its positions, right after
    the live context), so attention reads one window of the cache with the block inside
    it: no per-layer concatenation of the whole window with the block (78 us of a 1.31 ms
    Qwen3-8B-shaped draft on an H200, docs/performance.md).  Context rows past the live length are
    padding (the engine always passes a block's worth); the block's write comes second, so
    where the two overlap the block's entries win.  ``cos``/``sin`` [1, W + b, D] cover the
    context positions, then the block's.  The block is normalised by the layer's input
    norm; the context rows arrive normalised.
    """
    bsz, b, _ = x.shape
    w = ctx.shape[1]
    h = _rms(x, ln, eps)
    q = _rms(F.linear(h, wq).reshape(bsz, b, -1, head_dim), qn, eps)
    k, v = F.linear(torch.cat([ctx, h], dim=1), wkv).split(kv_width, dim=-1)  # [1, W + b, kv_width] each
    k = _rms(k.reshape(bsz, w + b, -1, head_dim), kn, eps).transpose(1, 2)
    v = v.reshape(bsz, w + b, -1, head_dim).transpose(1, 2)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [1, 1, W + b, D]
    q = _rotate(q.transpose(1, 2), cos[:, :, w:], sin[:, :, w:])
    k = _rotate(k, cos, sin)
    kv.index_copy_(3, ctx_index, torch.stack([k[:, :, :w], v[:, :, :w]]))
    kv.index_copy_(3, block_index, torch.stack([k[:, :, w:], v[:, :, w:]]))
    return q.contiguous()


class FusedDrafter:
    """Runs a :class:`dflash.DFlashDraftModel` through :func:`draft_pre_attention` and
    :func:`bastion.engines.static_layers.post_attention`.  Called as the model is, except
    that the cache is the static engine's and the block's K/V sit inside its window (so
    the mask spans that window, not the window plus the block).

    The q and the k/v weights, and gate/up, become views of stacked matrices, so the
    drafter module itself keeps working with the same values and no second copy.
    """

    def __init__(self, drafter, compile: bool, layers: FusedLayers | None = None) -> None:
        self.drafter = drafter
        cfg = drafter.config.layers
        self.eps = float(cfg.rms_norm_eps)
        first = drafter.layers[0].self_attn
        self.head_dim = first.head_dim
        self.kv_width = first.num_kv_heads * first.head_dim
        self.scale = self.head_dim ** -0.5
        self.weights = []
        for layer in drafter.layers:
            a, m = layer.self_attn, layer.mlp
            self.weights.append((
                (layer.input_layernorm.weight, joint_weight([a.q_proj]), joint_weight([a.k_proj, a.v_proj]),
                 a.q_norm.weight, a.k_norm.weight),
                (joint_weight([a.o_proj]), layer.post_attention_layernorm.weight,
                 joint_weight([m.gate_proj, m.up_proj]), joint_weight([m.down_proj])),
            ))
        joint_weight([drafter.fc])  # the context projection, read through the module, laid out likewise
        wrap = compile_step_function if compile else (lambda f: f)
        self.project: Callable = wrap(functools.partial(project_context, eps=self.eps))
        self.pre: Callable = wrap(functools.partial(draft_pre_attention, eps=self.eps, head_dim=self.head_dim,
                                                    kv_width=self.kv_width))
        if layers is not None and layers.eps == self.eps:
            # the target's compiled functions compute the same: sharing them saves their compilation
            # (shapes are dynamic, so a drafter as wide as the target reuses the same kernels)
            self.post, attend = layers.post, layers.attend
        else:
            self.post = wrap(functools.partial(post_attention, eps=self.eps))
            attend = with_kernel(wrap(functools.partial(grouped_attention, matmul_rows=COMPILED_MATMUL_ROWS)))
        # as for the target, a compiled attention only up to COMPILED_MATMUL_ROWS query rows per K/V head
        rows = first.num_heads // first.num_kv_heads * drafter.block_size  # query rows per K/V head
        self.attend: Callable = attend if rows <= COMPILED_MATMUL_ROWS else grouped_attention

    @staticmethod
    def supports(drafter) -> bool:
        """Whether the fused functions compute what ``drafter`` does (no biases, SiLU MLP)."""
        cfg = drafter.config.layers
        attn = drafter.layers[0].self_attn if len(drafter.layers) else None
        return (attn is not None and getattr(cfg, "hidden_act", "silu") == "silu"
                and all(p.bias is None for p in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)))

    @torch.no_grad()
    def __call__(self, block_embeds, block_positions, ctx_features, ctx_positions, mask, cache) -> torch.Tensor:
        """Final-norm block states [1, b, H].

        ``cache`` is the static engine's :class:`~bastion.engines.static_cache.StaticContextKV`:
        the context's K/V go in at ``ctx_positions`` [1, W] and the block's at
        ``block_positions`` [1, b] (cache slots are positions), and attention reads the window
        ``[0, cache.kv_len)``, which must hold the block.  ``mask`` [1, 1, b, kv_len]: what each
        block row may see of that window (the live context and the block).
        """
        d = self.drafter
        x = block_embeds
        kv_len = cache.kv_len
        ctx = self.project(ctx_features, d.fc.weight, d.hidden_norm.weight)
        cos, sin = d.rotary_emb(x, torch.cat([ctx_positions, block_positions], dim=1))  # [1, W + b, D]
        for i, (pre_w, post_w) in enumerate(self.weights):
            layer_kv = cache.kv[i]  # [2, 1, Hkv, capacity, D]
            q = self.pre(x, ctx, *pre_w, cos, sin, layer_kv, ctx_positions[0], block_positions[0])
            out = self.attend(q, layer_kv[0, :, :, :kv_len], layer_kv[1, :, :, :kv_len], mask, self.scale)
            x = self.post(x, out.reshape(x.shape[0], x.shape[1], -1), *post_w)
        return d.norm(x)
