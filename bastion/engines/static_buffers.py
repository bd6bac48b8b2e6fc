"""The static engine's own state: every buffer its step functions share, allocated in one place.

CUDA graphs replay on the addresses they were captured with, so the buffers are made
once, sized to the longest context plus the largest tree (and the drafter block written
past it), and replaced together (dropping the graphs) only when a request outgrows them.
The drafters and the tree phase keep their own buffers (:mod:`bastion.engines.dflash_proposer`,
:mod:`bastion.engines.eagle3_proposer`, :mod:`bastion.engines.static_tree`) and read or
write these through the one object they are handed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bastion.engines.static_cache import ContextTooLongError, StaticKVCache
from bastion.models.target import Target
from bastion.speculative.accept import Readback
from bastion.speculative.tree import Tree


WIDE_ROWS = 1024  # the most context rows a first draft or a catch-up takes in through a captured graph


def padded_width(rows: int, least: int, most: int) -> int:
    """The rows a draft over ``rows`` context rows takes where graphs run: the next power of two,
    at least ``least``, so that one graph per width serves every prompt of that size; 0 past
    ``most`` (the proposer's wide buffer), where the draft runs eagerly instead."""
    width = max(least, 1 << (rows - 1).bit_length())
    return width if width <= most else 0


def round_up(x: int, k: int) -> int:
    return -(-x // k) * k


@dataclass
class StepBuffers:
    """What a step reads and writes on the device, at fixed addresses."""

    max_context: int  # the longest context the buffers take
    n_max: int  # the largest tree they take
    kv_block: int  # attention windows are multiples of this
    capacity: int  # KV slots: the context, the largest tree and a drafter block past it, rounded up
    layout: Readback  # the readback vector's layout
    cache: StaticKVCache  # the target's K/V [L, 2, 1, kv_heads, capacity, D]
    length: torch.Tensor  # [] committed tokens in the target's cache
    root: torch.Tensor  # [] last committed token, not yet seen by the target
    readback: torch.Tensor  # [layout.size] what the host reads once a step
    readback_host: torch.Tensor  # [layout.size] its page-locked host copy: the read is a direct DMA
    read_event: torch.cuda.Event | None  # polled by the read on CUDA (see graphs.read_to_host)
    tree_tokens: torch.Tensor  # [n_max] the verified tree: tokens (node 0 the root) ...
    tree_parents: torch.Tensor  # [n_max] ... parents ...
    tree_depths: torch.Tensor  # [n_max] ... depths ...
    tree_anc: torch.Tensor  # [n_max, n_max] ... and the ancestors-or-self matrix
    mask: torch.Tensor  # [n_max, capacity] the verification's attention mask rows
    positions: torch.Tensor  # [n_max] the tree tokens' positions
    write_index: torch.Tensor  # [n_max] the cache slots their K/V go to
    proposals: torch.Tensor  # [n_max] the target's token at every node
    samples: torch.Tensor  # [n_max] its sampled token at every node, when the walk follows the argmax (lossy)
    arange: torch.Tensor  # [max(n_max, capacity)] 0, 1, 2, ...: device indices without a host copy
    logits: torch.Tensor | None = None  # [n_max, V] the verifier's logits at T > 0, made on first use

    @classmethod
    def allocate(cls, target: Target, max_context: int, n_max: int, block: int, kv_block: int,
                 layout: Readback) -> StepBuffers:
        """Buffers for contexts up to ``max_context`` and trees up to ``n_max`` nodes."""
        cfg, dev = target.config, target.device
        capacity = round_up(max_context + n_max + block, kv_block)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        cache = StaticKVCache(target.num_layers, int(cfg.num_key_value_heads), head_dim, capacity, target.dtype, dev)
        long = dict(dtype=torch.long, device=dev)
        return cls(
            max_context=max_context, n_max=n_max, kv_block=kv_block, capacity=capacity, layout=layout, cache=cache,
            length=torch.zeros((), **long), root=torch.zeros((), **long),
            readback=torch.zeros(layout.size, **long),
            readback_host=torch.zeros(layout.size, dtype=torch.long, pin_memory=dev.type == "cuda"),
            read_event=torch.cuda.Event() if dev.type == "cuda" else None,
            tree_tokens=torch.zeros(n_max, **long), tree_parents=torch.zeros(n_max, **long),
            tree_depths=torch.zeros(n_max, **long), tree_anc=torch.zeros(n_max, n_max, dtype=torch.bool, device=dev),
            mask=torch.zeros(n_max, capacity, dtype=torch.bool, device=dev),
            positions=torch.zeros(n_max, **long), write_index=torch.zeros(n_max, **long),
            proposals=torch.zeros(n_max, **long), samples=torch.zeros(n_max, **long), arange=torch.arange(max(n_max, capacity), **long),
        )

    def window(self, tokens: int) -> int:
        """The attention window that covers ``tokens`` positions."""
        if tokens > self.capacity:
            raise ContextTooLongError(
                f"{tokens} positions exceed the static engine's buffers ({self.capacity}); "
                "raise its max_context or shorten the prompt / --max-new-tokens"
            )
        return min(self.capacity, round_up(tokens, self.kv_block))

    def tree(self, n: int) -> Tree:
        """The first ``n`` nodes of the tree buffers, as views."""
        return Tree(self.tree_tokens[:n], self.tree_parents[:n], self.tree_depths[:n], self.tree_anc[:n, :n])

    def write_tree(self, tree: Tree) -> None:
        """Put a tree of ``tree.size`` nodes into the tree buffers (verify and commit read them)."""
        n = tree.size
        self.tree_tokens[:n].copy_(tree.tokens)
        self.tree_parents[:n].copy_(tree.parents)
        self.tree_depths[:n].copy_(tree.depths)
        self.tree_anc[:n, :n].copy_(tree.ancestors)

    def logits_buffer(self, vocab: int, dtype: torch.dtype) -> torch.Tensor:
        """The verifier's logits [n_max, V] for T > 0 (allocated before any graph that writes them)."""
        if self.logits is None or self.logits.shape[0] < self.n_max:
            self.logits = torch.zeros(self.n_max, vocab, dtype=dtype, device=self.arange.device)
        return self.logits
