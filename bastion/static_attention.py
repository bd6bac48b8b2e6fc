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

import torch
import torch.nn.functional as F

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
    rows = mask[:, :, None].expand(b, 1, g, s, kv_len).reshape(b, 1, g * s, kv_len)
    if g * s <= matmul_rows:
        scores = torch.matmul(q, key.transpose(-1, -2)).float() * scale  # [1, Hkv, g*s, kv]
        probs = torch.softmax(scores.masked_fill(~rows, float("-inf")), dim=-1)
        out = torch.matmul(probs.to(value.dtype), value)  # [1, Hkv, g*s, D]
    else:
        out = F.scaled_dot_product_attention(q, key, value, attn_mask=rows, scale=scale)  # [1, Hkv, g*s, D]
    return out.reshape(b, hq, s, d).transpose(1, 2).contiguous()


# Block size of the FlexAttention block mask (a multiple of the kernel's tiles).
FLEX_BLOCK = 128


def flex_blocks(s: int, kv: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-mask tables that list every (query block, key block) pair as partial.

    A tree's block structure changes from step to step (the live length moves within the
    window, the tree's shape differs) while a captured graph replays fixed tensors; with
    every block partial, the mask tensor alone decides, so one table serves every step of
    a shape.  Returns ``kv_num_blocks`` [1, 1, Qb] and ``kv_indices`` [1, 1, Qb, Kb].
    """
    qb, kb = -(-s // FLEX_BLOCK), -(-kv // FLEX_BLOCK)
    num = torch.full((1, 1, qb), kb, dtype=torch.int32, device=device)
    idx = torch.arange(kb, dtype=torch.int32, device=device).repeat(1, 1, qb, 1)
    return num, idx


def flex_tree_attention(query, key, value, mask, scale: float, blocks: tuple[torch.Tensor, torch.Tensor]):
    """Masked attention as :func:`grouped_attention` computes it, through FlexAttention.

    For large trees: compiled, FlexAttention is one flash-style kernel that reads the
    boolean mask tile by tile, where SDPA given a mask falls back to its slower
    memory-efficient kernel with the mask as an additive bias.  ``blocks`` comes from
    :func:`flex_blocks` (built once per forward, shared by the layers).
    query [1, Hq, s, D], key/value [1, Hkv, kv, D], mask [1, 1, s, kv] -> [1, s, Hq, D].
    """
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    allowed = mask[0, 0]  # [s, kv]
    s, kv = allowed.shape

    def keep(b, h, q_idx, kv_idx):
        return allowed[q_idx, kv_idx]

    block_mask = BlockMask.from_kv_blocks(*blocks, BLOCK_SIZE=FLEX_BLOCK, mask_mod=keep, seq_lengths=(s, kv),
                                          compute_q_blocks=False)
    out = flex_attention(query, key, value, block_mask=block_mask, scale=scale, enable_gqa=True)  # [1, Hq, s, D]
    return out.transpose(1, 2).contiguous()


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
