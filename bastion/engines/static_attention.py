"""Tree attention for grouped-query models without copying K/V per query head.

Transformers' SDPA path, given a mask, expands every K/V head to its query heads
(``repeat_kv``) before calling the kernel: for Qwen3-8B that is four copies of the whole
attention window per layer per step, more memory traffic than the attention itself.
Here the query heads that share a K/V head are folded into the query length instead,
[1, Hq, s, D] -> [1, Hkv, g*s, D], and the mask rows are repeated to match, so the
kernel reads each K/V head once.  Each (head, row) is computed from the same numbers as
before; only the layout changes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from bastion.engines.attention_layout import kernel_layout
from bastion.speculative.fused import run_triton

NAME = "bastion_gqa"

# Up to this many query rows per K/V head (g * s) attention runs as two batched matrix
# multiplies instead of the fused SDPA kernel: with a handful of rows the fused kernel
# does not split the (long) key dimension across the GPU, while a batched GEMM does, so
# for decode-like steps the plain form reads the window at close to full bandwidth.
MATMUL_ROWS = 64


def grouped_attention(query, key, value, mask, scale: float, matmul_rows: int = MATMUL_ROWS):
    """Masked attention of query [1, Hq, s, D] over key/value [1, Hkv, kv, D] -> [1, s, Hq, D].

    ``mask`` [1, 1, s, kv] (bool, True = may attend).  Up to ``matmul_rows`` query rows
    per K/V head it runs as two batched multiplies, beyond that as SDPA.  A pure function
    of tensors, so the compiled engine can fuse the scaling, masking, softmax and casts
    into one kernel.
    """
    b, hq, s, d = query.shape
    hkv = key.shape[1]
    g = hq // hkv
    q = query.reshape(b, hkv, g * s, d)  # query head h = kv_head * g + r
    kv_len = mask.shape[-1]
    if g * s <= matmul_rows:
        scores = torch.matmul(q, key.transpose(-1, -2)).float() * scale  # [1, Hkv, g*s, kv]
        # the mask broadcasts over the g query heads of a K/V head: no [g*s, kv] copy of it
        scores = scores.view(b, hkv, g, s, kv_len).masked_fill(~mask[:, :, None], float("-inf"))
        probs = torch.softmax(scores, dim=-1).view(b, hkv, g * s, kv_len)
        out = torch.matmul(probs.to(value.dtype), value)  # [1, Hkv, g*s, D]
    else:
        rows = mask[:, :, None].expand(b, 1, g, s, kv_len).reshape(b, 1, g * s, kv_len)
        out = F.scaled_dot_product_attention(q, key, value, attn_mask=rows, scale=scale)  # [1, Hkv, g*s, D]
    return out.reshape(b, hq, s, d).transpose(1, 2).contiguous()


def kernel_serves(query, key, value, mask) -> bool:
    """Whether :func:`bastion.engines.tree_attention_kernel.tree_attention` takes these tensors (CUDA only)."""
    return query.device.type == "cuda" and kernel_layout(query, key, value, mask)


def with_kernel(fallback: Callable) -> Callable:
    """``fallback``'s attention, run by the Triton tree-attention kernel where it serves.

    That is CUDA with Triton installed, for tensors laid out as the engines lay them out;
    anywhere else, or when the kernel fails to build on this GPU (decided once, with a
    warning), ``fallback`` runs.  Same signature and result layout as :func:`grouped_attention`.
    """
    def attend(query, key, value, mask, scale: float):
        if kernel_serves(query, key, value, mask):
            out: list[torch.Tensor] = []

            def launch() -> None:
                from bastion.engines.tree_attention_kernel import tree_attention

                out.append(tree_attention(query, key, value, mask, scale))

            if run_triton("tree_attention", query.device, launch):
                return out[0]
        return fallback(query, key, value, mask, scale)

    return attend


def grouped_tree_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Transformers attention-interface signature; returns ([1, s, Hq, D], None)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is None or query.shape[1] == key.shape[1]:  # causal prefill, or no grouping
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return grouped_attention(query, key, value, attention_mask, scale), None


def register() -> str:
    """Make the function known to Transformers under :data:`NAME` (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, grouped_tree_attention)
    return NAME
