"""EAGLE-3 on the static engine: its buffers, its tapped layers, its eager drafting.

EAGLE-3's head runs several times a step with a data-dependent top-k, and its context
grows by the accepted count the host has just read, so it drafts eagerly, outside the
CUDA graphs, after the step's read, and writes its tree into the engine's tree buffers.
Every tree has the same node count (:meth:`Eagle3Policy.tree_size
<bastion.speculative.methods.Eagle3Policy.tree_size>`), so verify and commit replay one
graph per attention window, tapping the head's layers into ``e3_features``; commit keeps
the root's and the accepted nodes' states in ``e3_pend`` for the next draft.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from bastion.engines.static_engine import StaticEngine


def tap_sets(drafter, eagle3) -> dict[str, list[int]]:
    """The target layers each drafter reads, by the name verify and commit take."""
    sets = {}
    if drafter is not None:
        sets["dflash"] = list(drafter.target_layer_ids)
    if eagle3 is not None:
        sets["eagle3"] = list(eagle3.layer_ids)
    return sets


def allocate(engine: StaticEngine, nodes: int, width: int) -> None:
    """The verifier's states at the head's taps [nodes, F] and the next draft's pairs [width, F]."""
    dim = len(engine.eagle3.layer_ids) * int(engine.target.config.hidden_size)
    engine.e3_features = torch.zeros(nodes, dim, dtype=engine.dtype, device=engine.device)
    engine.e3_pend = torch.zeros(width, dim, dtype=engine.dtype, device=engine.device)


def draft(engine: StaticEngine, cache, feats: torch.Tensor, next_tokens: torch.Tensor) -> None:
    """Draft a tree after the pairs (``feats`` [m, F], ``next_tokens`` [m]) into the tree buffers."""
    tree = engine.eagle3.tree(cache, feats, next_tokens)
    n = tree.size
    if n != engine.e3_size:
        raise RuntimeError(f"EAGLE-3 drafted {n} nodes, expected {engine.e3_size}")
    engine.tree_tokens[:n].copy_(tree.tokens)
    engine.tree_parents[:n].copy_(tree.parents)
    engine.tree_depths[:n].copy_(tree.depths)
    engine.tree_anc[:n, :n].copy_(tree.ancestors)
