"""The target's decoder layers as two pure functions, so ``torch.compile`` can fuse them.

Inside a CUDA graph the launch overhead is gone, but each of the ~45 small kernels a
Transformers Qwen3 layer runs (norms in several steps, rotary embedding, residual adds)
still costs a few microseconds of GPU time: about as much, for a 36-layer 8B model at
batch 1, as streaming its weights.  Written as functions of tensors only, the part before
attention (norm, projections, head norms, rotary, the K/V write into the engine's cache)
and the part after it (output projection, residual, norm, gated MLP) compile once for
every layer and every tree size (dynamic shapes); Inductor fuses the element-wise work
around the matrix multiplies.  The q/k/v and the gate/up projections are each stacked into
one matrix (one multiply instead of three or two); attention is a third compiled function
(:func:`bastion.engines.static_attention.grouped_attention`).

The arithmetic is the Transformers layers' (same operations, same fp32 upcasts); fused
kernels may still round differently in bf16, which is why this path is an option of the
static engine (``fused=True``) and not its default.
"""

from __future__ import annotations

import functools
import warnings
from types import ModuleType
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bastion.engines.static_attention import grouped_attention, with_kernel
from bastion.speculative.fused import use_triton

# Query rows per K/V head up to which the compiled engine's attention runs as two batched
# multiplies with one fused softmax between them.  The fused SDPA kernel does not split a
# long key range over the GPU when there are few query rows, so a 64-token tree at
# context 4096 cost ~3 ms more than at 512 with it; materialised scores of up to 512 rows
# (a 128-token tree with four query heads per K/V head) stay cheap once the softmax is fused.
COMPILED_MATMUL_ROWS = 512


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def pre_attention(x, ln, wqkv, qn, kn, cos, sin, kv, index, eps: float, head_dim: int, kv_width: int):
    """[1, s, H] -> q [1, Hq, s, D] (rotary applied, contiguous); k (rotary applied) and v go
    into one layer's cache ``kv`` [2, 1, Hkv, capacity, D] at positions ``index`` [s].

    ``wqkv`` is the q, k and v projections stacked by rows: one matrix multiply.  The cache
    write is part of the function so that, compiled, the kernel that computes k and v stores
    them straight into the cache, where a separate write cost two more kernels a layer.
    Inductor does that only when the function updates an input tensor itself: an update of
    a view taken inside the function (``kv[0]``) made it copy the layer's whole cache.  q
    leaves its kernel contiguous, so attention's grouped view of it is free.
    """
    return after_qkv(F.linear(_rms(x, ln, eps), wqkv), qn, kn, cos, sin, kv, index, eps, head_dim, kv_width)


def after_qkv(qkv, qn, kn, cos, sin, kv, index, eps: float, head_dim: int, kv_width: int):
    """:func:`pre_attention` from the stacked projection ``qkv`` [1, s, (Hq + 2 Hkv) D] on."""
    b, s, _ = qkv.shape
    q, k, v = qkv.split([qkv.shape[-1] - 2 * kv_width, kv_width, kv_width], dim=-1)
    q, k, v = (t.reshape(b, s, -1, head_dim) for t in (q, k, v))
    if qn is not None:
        q, k = _rms(q, qn, eps), _rms(k, kn, eps)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [1, 1, s, D]
    q = _rotate(q.transpose(1, 2), cos, sin)
    k = _rotate(k.transpose(1, 2), cos, sin)
    kv.index_copy_(3, index, torch.stack([k, v.transpose(1, 2)]))
    return q.contiguous()


def post_attention(x, attn, wo, ln, wgu, wd, eps: float):
    """Residual stream [1, s, H] after attention output [1, s, Hq * D] and the gated MLP.

    ``wgu`` is the gate and up projections stacked by rows: one matrix multiply.
    """
    x = x + F.linear(attn, wo)
    h = _rms(x, ln, eps)
    gate, up = F.linear(h, wgu).chunk(2, dim=-1)
    return x + F.linear(F.silu(gate) * up, wd)


# Dynamo files every compiled ``functools.partial`` under one code object, and that object's
# recompile limit (8 by default) is shared by all of them: the target's three functions and
# the drafter's two, each in a one-token and a many-token specialisation, exceed it, and a
# function past the limit silently runs uncompiled (AR's step, captured last, would run its
# layers eagerly: 967 kernels instead of about 700).
RECOMPILE_LIMIT = 64


def compile_step_function(fn: Callable) -> Callable:
    """``torch.compile(fn, dynamic=True)``, with room for every engine function's specialisations."""
    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"  # torch < 2.7
    setattr(cfg, name, max(getattr(cfg, name), RECOMPILE_LIMIT))
    return torch.compile(fn, dynamic=True)


def joint_weight(linears: list[nn.Linear], columns: bool = True) -> torch.Tensor:
    """The matrix to multiply by for one projection, or for several of the same input stacked
    by rows (one multiply instead of several), laid out for the device's matrix library.

    The matrix becomes the modules' storage: each module's weight is re-pointed to its rows,
    so the model still works (with the same values) and the memory is not doubled.  On a
    CPU a matrix with more outputs than inputs is stored by columns: the same [out, in]
    matrix, its transpose contiguous.  A one-row product by such a weight stored by rows,
    as ``nn.Linear`` keeps it, streamed it at about 10 GB/s on a 2-core EPYC VM (fp32, one
    thread, caches cold), and at 13-25 GB/s stored by columns (the tiny target's q/k/v,
    gate/up and head: 107 -> 77, 269 -> 134 and 605 -> 248 us); its down projection
    (fewer outputs) was faster by rows (106 against 138 us), its square one even.  A
    one-token step of the tiny target went from 8.0 to 6.4-6.7 ms there, and from 8.5-8.6 to
    8.0-8.1 ms on a 2-core Intel Xeon VM.  GPUs keep the rows (cuBLAS
    and the row and tile kernels read them so), as does ``columns=False``.
    """
    first = linears[0].weight
    out_features = sum(m.weight.shape[0] for m in linears)
    columns = columns and first.device.type == "cpu" and out_features > first.shape[1]
    if len(linears) == 1 and not columns and first.is_contiguous():
        return first
    stacked = torch.cat([m.weight.detach() for m in linears], dim=0) if len(linears) > 1 else first.detach()
    stacked = stacked.t().contiguous().t() if columns else stacked.contiguous()  # no copy when already so
    row = 0
    for m in linears:
        n = m.weight.shape[0]
        m.weight = nn.Parameter(stacked[row : row + n], requires_grad=False)
        row += n
    return stacked


def _fast_kernel(weight: torch.Tensor | None, enabled: bool, probe: Callable[[torch.device, torch.dtype], ModuleType],
                 what: str) -> ModuleType | None:
    """The module ``probe`` returns after running its kernels once on this GPU, or None.

    The kernels serve bf16 and fp16 weights on CUDA with Triton, where the run's setting
    has them ``enabled``.  fp32 keeps the matrix library: the fp32 checks
    that speculative outputs equal AR's need AR's row and a tree's rows summed alike.
    Kernels that fail to build on this GPU are found here, once, with a warning.
    """
    if (not enabled or weight is None or weight.dtype not in (torch.bfloat16, torch.float16)
            or not use_triton(weight.device)):
        return None
    try:
        return probe(weight.device, weight.dtype)
    except Exception as exc:  # noqa: BLE001 - any build or launch failure: the matrix library serves
        warnings.warn(f"the Triton {what} failed on {weight.device} ({exc!r:.300}); the matrix library serves")
        return None


def _probe_rows(dev: torch.device, dt: torch.dtype) -> ModuleType:
    from bastion.engines import row_kernels

    x = torch.ones(1, 64, device=dev, dtype=dt)
    w = torch.ones(32, 64, device=dev, dtype=dt)
    row_kernels.row_linear(x, w, ln=x[0], eps=1e-6)
    row_kernels.row_linear(torch.ones(1, 128, device=dev, dtype=dt), w, glu=True, residual=x[:, :32])
    kv = torch.zeros(2, 1, 1, 4, 16, device=dev, dtype=dt)
    row_kernels.row_qkv(torch.ones(1, 2, 48, device=dev, dtype=dt), x[0, :16], x[0, :16], x[:, None, :16].expand(1, 2, 16),
                        x[:, None, :16].expand(1, 2, 16), kv, torch.zeros(2, dtype=torch.long, device=dev), 1e-6, 16, 16)
    return row_kernels


def _probe_tiles(dev: torch.device, dt: torch.dtype) -> ModuleType:
    from bastion.engines import tile_kernels

    x = torch.ones(5, 256, device=dev, dtype=dt)
    w = torch.ones(64, 256, device=dev, dtype=dt)
    tile_kernels.tile_linear(tile_kernels.rms_rows(x, x[0], 1e-6), w, gated=True)  # one K slice and the epilogue
    tile_kernels.tile_linear(x, w, residual=x[:, :64].contiguous(), setting=(16, 32, 64, 2, 4, 2))  # split, reduce
    return tile_kernels


def row_kernel(weight: torch.Tensor | None, enabled: bool = True) -> ModuleType | None:
    """:mod:`bastion.engines.row_kernels` (AR's row) where its kernels serve this model, else None.

    ``kernels.row_kernel: false`` turns them off (``enabled``); see :func:`_fast_kernel`.
    """
    return _fast_kernel(weight, enabled, _probe_rows, "row kernels")


def tile_kernel(weight: torch.Tensor | None, enabled: bool = True) -> ModuleType | None:
    """:mod:`bastion.engines.tile_kernels` (a tree's rows) where its kernels serve this model, else None.

    ``kernels.tile_kernel: false`` turns them off (``enabled``); see :func:`_fast_kernel`.
    """
    return _fast_kernel(weight, enabled, _probe_tiles, "tile kernels")


class FusedLayers:
    """Runs the target's layers through :func:`pre_attention` / :func:`post_attention`.

    ``rows`` / ``tiles``: the run's row and tile kernel settings (where the kernels serve).
    ``columns=False`` keeps every weight stored by rows on a CPU too (:func:`joint_weight`),
    for this project's kernels, which read rows.
    """

    def __init__(self, target, compile: bool, rows: bool = True, tiles: bool = True, columns: bool = True) -> None:
        self.target = target
        cfg = target.config
        self.eps = float(cfg.rms_norm_eps)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        self.weights = []
        for layer in target.layers:
            a, m = layer.self_attn, layer.mlp
            qn, kn = getattr(a, "q_norm", None), getattr(a, "k_norm", None)
            if any(getattr(mod, "bias", None) is not None for mod in (a.q_proj, a.k_proj, a.v_proj, a.o_proj)):
                raise ValueError("fused layers do not support attention biases; use the static engine without fused=True")
            self.weights.append((
                (layer.input_layernorm.weight, joint_weight([a.q_proj, a.k_proj, a.v_proj], columns),
                 None if qn is None else qn.weight, None if kn is None else kn.weight),
                (joint_weight([a.o_proj], columns), layer.post_attention_layernorm.weight,
                 joint_weight([m.gate_proj, m.up_proj], columns), joint_weight([m.down_proj], columns)),
                a,
            ))
        joint_weight([target.lm_head], columns)  # the logits' multiply (a tied embedding table keeps its own rows)
        self.kv_width = int(cfg.num_key_value_heads) * self.head_dim
        # the model's constants are bound, not passed: dynamic shapes then vary only the token count
        pre = functools.partial(pre_attention, eps=self.eps, head_dim=self.head_dim, kv_width=self.kv_width)
        post = functools.partial(post_attention, eps=self.eps)
        self.pre: Callable = compile_step_function(pre) if compile else pre
        self.post: Callable = compile_step_function(post) if compile else post
        # attention of small trees too: the scaling, mask, softmax and casts around its two
        # multiplies fuse.  Larger trees keep the SDPA kernel uncompiled (compiled, it is
        # decomposed into materialised [heads, rows, window] scores; FlexAttention with the
        # tree mask measured 2-4x slower than SDPA there, docs/performance.md).
        # On CUDA with Triton these rows go to one flash-decoding kernel instead (two for long
        # windows: bastion.engines.tree_attention_kernel); the compiled form is its fallback.
        attend = functools.partial(grouped_attention, matmul_rows=COMPILED_MATMUL_ROWS)
        self.attend: Callable = with_kernel(compile_step_function(attend) if compile else attend)
        # one-token forwards (AR's steps) run in the row kernels (bastion.engines.row_kernels)
        pow2 = (self.head_dim & (self.head_dim - 1)) == 0  # row_qkv's halves are Triton ranges
        self.rows = row_kernel(target.lm_head.weight, rows) if compile and pow2 else None
        # and a tree's or a DFlash block's rows (up to tile_kernels.MAX_ROWS) in the tile kernels
        self.tiles = tile_kernel(target.lm_head.weight, tiles) if self.rows is not None else None

    @torch.no_grad()  # as Target.forward: a calibration probe outside a decoder must not build autograd graphs
    def forward(self, ids, positions, mask, cache, features: bool | str):
        """Same contract as :meth:`bastion.models.target.Target.forward` for a masked (tree) forward;
        ``features="parts"``: the tapped layers' states as a list, each [1, s, H], not concatenated."""
        t = self.target
        x = t.embed(ids)
        cos, sin = t.inner.rotary_emb(x, positions)
        taps: list[torch.Tensor | None] = [None] * len(t.feature_layers)
        cfg = t.config
        rows = cfg.num_attention_heads // cfg.num_key_value_heads * ids.shape[1]  # query rows per K/V head
        attend = self.attend if rows <= COMPILED_MATMUL_ROWS else grouped_attention
        s = x.shape[1]
        small = self.rows is not None and x.shape[0] == 1 and s == 1
        tiles = self.tiles is not None and x.shape[0] == 1 and 1 < s <= self.tiles.MAX_ROWS
        for i, (pre_w, post_w, attn_mod) in enumerate(self.weights):
            if small or tiles:  # AR's row or a tree's rows in this project's kernels (SiLU, residuals fused)
                ln, wqkv, qn, kn = pre_w
                if small:
                    qkv = self.rows.row_linear(x[0], wqkv, ln=ln, eps=self.eps)[None]  # [1, 1, (Hq + 2 Hkv) D]
                else:
                    qkv = self.tiles.tile_linear(self.tiles.rms_rows(x[0], ln, self.eps), wqkv)[None]  # [1, s, ...]
                q = self.rows.row_qkv(qkv, qn, kn, cos, sin, cache.kv[i], cache.write_index, self.eps,
                                      self.head_dim, self.kv_width)
            else:
                q = self.pre(x, *pre_w, cos, sin, cache.kv[i], cache.write_index)  # writes the layer's k/v
            k_all, v_all = cache.window(i)
            out = attend(q, k_all, v_all, mask, attn_mod.scaling)  # [1, s, Hq, D]
            if small:
                wo, ln, wgu, wd = post_w
                h = self.rows.row_linear(out.reshape(1, -1), wo, residual=x[0])  # [1, H]
                gu = self.rows.row_linear(h, wgu, ln=ln, eps=self.eps)  # [1, 2 I]
                x = self.rows.row_linear(gu, wd, glu=True, residual=h)[None]
            elif tiles:
                wo, ln, wgu, wd = post_w
                h = self.tiles.tile_linear(out.reshape(s, -1), wo, residual=x[0])  # [s, H]
                act = self.tiles.tile_linear(self.tiles.rms_rows(h, ln, self.eps), wgu, gated=True)  # [s, I]: silu(g) * u
                x = self.tiles.tile_linear(act, wd, residual=h)[None]
            else:
                x = self.post(x, out.reshape(x.shape[0], x.shape[1], -1), *post_w)
            tap = t._tap.get(i)
            if tap is not None and features and i != t.num_layers - 1:
                taps[tap] = x
        hidden = t.inner.norm(x)
        if not (features and taps):
            return hidden, None
        parts = [hidden if v is None else v for v in taps]
        return hidden, parts if features == "parts" else torch.cat(parts, dim=-1)
