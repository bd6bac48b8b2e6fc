"""An EAGLE-3 head as the decoders use it: the head, its tapped target layers, its tree policy.

The head and its tree drafting live in :mod:`dflash.eagle3` (engine-agnostic, no
``bastion`` import); this wrapper turns a drafted :class:`~dflash.eagle3.tree.Eagle3Tree`
into the decoders' :class:`~bastion.speculative.tree.Tree` and knows the pairing the head
reads: pair ``i`` is (the target's tapped feature at position ``p + i``, the committed
token at ``p + i + 1``), ``p`` the head cache's committed length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from bastion.models.target import Target
from bastion.speculative.methods import Eagle3Policy
from bastion.speculative.tree import Tree
from dflash.eagle3.config import eagle3_layer_ids
from dflash.eagle3.model import Eagle3Head, Eagle3KVCache
from dflash.eagle3.tree import Eagle3Tree, draft_tree, grow_tree


@dataclass
class Eagle3Drafter:
    """An EAGLE-3 head bound to its target (embeddings attached, tapped layers resolved)."""

    head: Eagle3Head
    layer_ids: list[int]
    policy: Eagle3Policy = field(default_factory=Eagle3Policy)

    @classmethod
    def bind(cls, head: Eagle3Head, target: Target, policy: Eagle3Policy | None = None) -> "Eagle3Drafter":
        head.attach_target_embeddings(target.inner.embed_tokens)
        policy = policy or Eagle3Policy()
        if policy.top_k > head.config.draft_vocab_size:
            raise ValueError(f"--eagle3-topk {policy.top_k} exceeds the head's draft vocabulary "
                             f"({head.config.draft_vocab_size})")
        return cls(head, eagle3_layer_ids(head.config, target.config), policy)

    @property
    def tree_size(self) -> int:
        """Nodes of every drafted tree (root included): fixed, so shapes are static."""
        return self.policy.tree_size(self.head.config.draft_vocab_size)

    @property
    def path_width(self) -> int:
        return self.policy.path_width

    def new_cache(self) -> Eagle3KVCache:
        return self.head.new_cache()

    @torch.no_grad()
    def tree(self, cache: Eagle3KVCache, features: torch.Tensor, next_tokens: torch.Tensor) -> Tree:
        """Draft a tree rooted at ``next_tokens[-1]`` after committing the pairs (``features`` [m, F], ``next_tokens`` [m])."""
        p = self.policy
        t = draft_tree(self.head, cache, features, next_tokens.reshape(-1), p.total_tokens, p.depth, p.top_k)
        return self.finish(t, cache.length)

    @torch.no_grad()
    def grow(self, cache, root_hidden: torch.Tensor, root: torch.Tensor, visible: torch.Tensor,
             position: torch.Tensor) -> Tree:
        """The tree below ``root`` [1] once the context is in ``cache`` (a static engine's; no host reads).

        ``root_hidden`` [H] is the last context pair's head output, ``visible`` [L] marks
        the live entries of the cache's window, ``position`` (0-d) is the root's children's.
        """
        p = self.policy
        t = grow_tree(self.head, cache, root_hidden, root, visible, position, p.total_tokens, p.depth, p.top_k)
        return self.finish(t, position)

    def finish(self, tree: Eagle3Tree, position: int | torch.Tensor, ancestors: Callable | None = None) -> Tree:
        """The decoders' tree (ancestors compiled) for a drafted one whose root's children sit at ``position``.

        ``ancestors``: the compiled engine's fused copy of
        :func:`~bastion.speculative.tree.ancestor_matrix` (None: the function itself).
        """
        return Tree.from_parents(tree.tokens, tree.parents, self.policy.depth + 1, ancestors)
