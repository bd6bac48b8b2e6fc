"""The target's KV cache, with in-place compaction after tree verification.

Transformers' ``DynamicCache`` re-concatenates the whole cache at every step and has no
way to keep a scattered subset of the newest entries.  This cache preallocates per-layer
buffers (grown by doubling), appends in place, and after a verification keeps only the
accepted tree nodes, moved to contiguous positions right after the context.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class CompactingLayer(CacheLayerMixin):
    """One layer's K/V buffers [1, kv_heads, capacity, head_dim] and a fill length."""

    is_compileable = False
    is_sliding = False

    def __init__(self, capacity: int = 256, **kwargs) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_empty((b, h, self.capacity, d))
        self.values = value_states.new_empty((b, h, self.capacity, value_states.shape[-1]))
        self.is_initialized = True

    def _reserve(self, need: int) -> None:
        if need <= self.keys.shape[2]:
            return
        cap = max(need, 2 * self.keys.shape[2])
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_empty((old.shape[0], old.shape[1], cap, old.shape[3]))
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        s = key_states.shape[2]
        end = self.length + s
        self._reserve(end)
        self.keys[:, :, self.length : end] = key_states
        self.values[:, :, self.length : end] = value_states
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def crop(self, length: int) -> None:
        self.length = min(self.length, length)

    def keep(self, start: int, index: torch.Tensor) -> None:
        """Move entries ``start + index`` to ``start .. start + len(index)`` and drop the rest."""
        m = index.shape[0]
        src = index + start
        for buf in (self.keys, self.values):
            buf[:, :, start : start + m] = buf.index_select(2, src)
        self.length = start + m


class CompactingCache(Cache):
    """A Transformers ``Cache`` of :class:`CompactingLayer`, one per decoder layer."""

    def __init__(self, num_layers: int, capacity: int = 256) -> None:
        super().__init__(layers=[CompactingLayer(capacity) for _ in range(num_layers)])

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].length

    @property
    def length(self) -> int:
        return self.layers[0].length

    def crop(self, length: int) -> None:
        for layer in self.layers:
            layer.crop(length)

    def keep(self, start: int, index: torch.Tensor) -> None:
        """After a verification over ``start ..``, keep the tree nodes ``index`` (in path order)."""
        for layer in self.layers:
            layer.keep(start, index)
