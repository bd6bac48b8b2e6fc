"""Fixed-address KV buffers for the static engine.

A CUDA graph replays kernels on the addresses it was captured with, so nothing the graph
touches may be reallocated, and nothing it depends on may be a Python number that
changes between steps.  These caches are therefore allocated once, sized to the largest
context the engine accepts plus the largest tree, and every position that changes from
step to step (where to write, how many entries are live) is a device tensor.  What stays
a Python number is only the attention window ``kv_len``: the graph for a window reads
``[0, kv_len)`` of the buffer and a mask hides what is not live, so attention reads the
live context rounded up to a window, not the whole buffer.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class ContextTooLongError(ValueError):
    """A prompt plus its generation does not fit the engine's preallocated buffers."""


def _write_window(kv: torch.Tensor, index: torch.Tensor, kv_len: int, k: torch.Tensor, v: torch.Tensor):
    """Put ``k``/``v`` [1, H, s, D] at positions ``index`` of one layer's ``kv`` [2, 1, H, cap, D].

    Returns the K and V views of the attention window ``[0, kv_len)``.
    """
    kv[0].index_copy_(2, index, k)
    kv[1].index_copy_(2, index, v)
    return kv[0, :, :, :kv_len], kv[1, :, :, :kv_len]


class _StaticLayer(CacheLayerMixin):
    """One layer's view of :class:`StaticKVCache` for Transformers' cache protocol."""

    is_compileable = False
    is_sliding = False

    def __init__(self, owner: "StaticKVCache", index: int) -> None:
        super().__init__()
        self.owner, self.index = owner, index
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return self.owner.write(self.index, key_states, value_states)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.kv_len, 0

    def get_seq_length(self) -> int:
        return self.owner.length

    def get_max_length(self) -> int:
        return self.owner.capacity


class StaticKVCache(Cache):
    """The target's K/V for all layers in one buffer [L, 2, 1, kv_heads, capacity, head_dim].

    Before a forward the engine sets ``write_index`` (device, [s]: where the new tokens'
    K/V go) and ``kv_len`` (Python: how much of the buffer attention reads).  ``length``
    is the host's copy of the committed length, used only for checks; the device's copy
    lives with the decoding state.
    """

    def __init__(self, num_layers: int, kv_heads: int, head_dim: int, capacity: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__(layers=[_StaticLayer(self, i) for i in range(num_layers)])
        self.num_layers, self.capacity = num_layers, capacity
        self.kv = torch.zeros((num_layers, 2, 1, kv_heads, capacity, head_dim), dtype=dtype, device=device)
        self.write_index = torch.zeros(0, dtype=torch.long, device=device)
        self.kv_len = 0
        self.length = 0

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Put ``k``/``v`` [1, kv_heads, s, D] at ``write_index``; return the window views."""
        return _write_window(self.kv[layer], self.write_index, self.kv_len, k, v)

    def window(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The K and V views [1, kv_heads, kv_len, D] attention reads (after the layer's write)."""
        return self.kv[layer, 0, :, :, : self.kv_len], self.kv[layer, 1, :, :, : self.kv_len]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def keep(self, start: torch.Tensor, index: torch.Tensor) -> None:
        """Move entries ``start + index`` [w] to ``start .. start + w`` (all layers, one gather).

        ``start`` is a 0-d device tensor.  Entries past the accepted path in ``index`` are
        copied too (fixed width keeps the shapes static); they land in slots past the new
        committed length, which nothing reads before they are overwritten.
        """
        w = index.shape[0]
        moved = self.kv.index_select(4, start + index)  # [L, 2, 1, H, w, D]
        self.kv.index_copy_(4, start + torch.arange(w, device=index.device), moved)


class StaticContextKV:
    """The drafter's context K/V, per layer [1, kv_heads, capacity, head_dim], fixed addresses.

    It speaks the drafter's cache protocol (``extend``/``advance``): ``extend`` writes the
    new context entries at ``write_index`` and returns the ``[0, kv_len)`` window; the
    caller's mask hides entries at and past the live length.  ``advance`` does nothing:
    the live length is a device tensor the engine moves by the accepted count, which the
    host does not know when the drafter runs.
    """

    def __init__(self, num_layers: int, kv_heads: int, head_dim: int, capacity: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.num_layers, self.capacity = num_layers, capacity
        self.kv = torch.zeros((num_layers, 2, 1, kv_heads, capacity, head_dim), dtype=dtype, device=device)
        self.write_index = torch.zeros(0, dtype=torch.long, device=device)
        self.kv_len = 0

    def extend(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _write_window(self.kv[layer], self.write_index, self.kv_len, k_new, v_new)

    def advance(self, m: int) -> None:
        pass


class StaticHeadKV:
    """The EAGLE-3 head's K/V [2, 1, kv_heads, capacity, head_dim] at fixed addresses.

    A draft first writes its context pairs at ``write_index`` inside the window
    ``[0, kv_len)`` (:meth:`begin`; the caller's mask hides what is not live), then appends
    the tree's entries after the window, at offsets fixed by the round.  Nothing is rolled
    back: the next draft writes over the tree's entries.  ``extend`` is the head's cache
    protocol (:class:`dflash.eagle3.model.Eagle3KVCache`): it returns every entry so far.
    """

    def __init__(self, kv_heads: int, head_dim: int, capacity: int, dtype: torch.dtype, device: torch.device) -> None:
        self.capacity = capacity
        self.kv = torch.zeros((2, 1, kv_heads, capacity, head_dim), dtype=dtype, device=device)
        self.write_index: torch.Tensor | None = None
        self.total = 0  # entries the attention reads: the window, then the tree so far

    def begin(self, write_index: torch.Tensor, kv_len: int) -> None:
        """The next ``extend`` writes context pairs at ``write_index`` within the window ``[0, kv_len)``."""
        self.write_index, self.total = write_index, kv_len

    def extend(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.write_index is not None:  # the context pass
            _write_window(self.kv, self.write_index, self.total, k_new, v_new)
            self.write_index = None
        else:  # a round of tree nodes, after the window
            end = self.total + k_new.shape[2]
            self.kv[0, :, :, self.total : end] = k_new
            self.kv[1, :, :, self.total : end] = v_new
            self.total = end
        return self.kv[0, :, :, : self.total], self.kv[1, :, :, : self.total]
