"""Which tensor layouts the Triton tree-attention kernel reads as they are.

Both sides need the answer: :func:`bastion.engines.static_attention.with_kernel` to send
only such tensors to the kernel, and :func:`bastion.engines.tree_attention_kernel.tree_attention`
to refuse any other.  The kernel's module imports Triton at the top, so the shared check
lives here, importable on machines without Triton.
"""

from __future__ import annotations

import torch


def kernel_layout(query, key, value, mask) -> bool:
    """Whether the tree-attention kernel reads these tensors as they are laid out: a contiguous
    query with a power-of-two head dimension of at least 16, key, value and a boolean mask
    contiguous in their last dimension, whole query groups per K/V head."""
    d = query.shape[-1]
    return (query.is_contiguous() and d >= 16 and not d & (d - 1)
            and key.stride(-1) == 1 and value.stride(-1) == 1 and mask.stride(-1) == 1
            and mask.dtype == torch.bool and query.shape[1] % key.shape[1] == 0)
