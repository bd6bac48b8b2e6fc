"""FlexAttention over a tree mask: a candidate for large trees' attention, kept for measuring.

Measured slower than SDPA on the H200 (docs/performance.md), so the engines do not use it;
``benchmarks.tree_phase --sections attention`` times it beside them.
"""

from __future__ import annotations

import torch

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

    A candidate for large trees (one flash-style kernel reading the boolean mask tile by
    tile, where SDPA given a mask runs its memory-efficient kernel with the mask as a
    bias); measured slower than SDPA on the H200, so the engine does not use it.
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
