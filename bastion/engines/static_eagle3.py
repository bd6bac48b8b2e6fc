"""EAGLE-3 on the static engine: its buffers, its tapped layers, its drafting step.

The head drafts on device state alone, as the DFlash drafter does: its K/V live at fixed
addresses (:class:`~bastion.engines.static_cache.StaticHeadKV`: the context window, then
the tree's entries), and the previous step's accepted count and tokens come from the
readback vector on the device, its features from ``e3_pend``.  So a step's draft is one
function of the attention window, captured as a CUDA graph like the other step
functions, and it runs before the step's one host read.  Its context pass always takes
the path width of pairs (the root and the longest path a step can accept); the pairs past
the accepted count land past the committed length, where the mask hides them until the
next draft writes over them.  The first draft takes in the whole prompt, eagerly.

Every tree has the same node count (:meth:`Eagle3Policy.tree_size
<bastion.speculative.methods.Eagle3Policy.tree_size>`), so verify and commit replay one
graph per attention window, tapping the head's layers into ``e3_features``; commit keeps
the root's and the accepted nodes' states in ``e3_pend`` for the next draft.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bastion.engines.static_cache import StaticHeadKV
from bastion.speculative.tree import Tree

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
    """The verifier's states at the head's taps [nodes, F], the next draft's pairs [width, F], the head's K/V."""
    e3 = engine.eagle3
    dim = len(e3.layer_ids) * int(engine.target.config.hidden_size)
    engine.e3_features = torch.zeros(nodes, dim, dtype=engine.dtype, device=engine.device)
    engine.e3_pend = torch.zeros(width, dim, dtype=engine.dtype, device=engine.device)
    cfg, room = e3.head.config, e3.policy.depth * e3.policy.top_k  # the tree's entries follow the window
    engine.e3_cache = StaticHeadKV(int(cfg.layers.num_key_value_heads), cfg.head_dim, engine.capacity + room,
                                   e3.head.lm_head.weight.dtype, engine.device)


def draft(engine: StaticEngine, kv: int, prompt: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """Draft the step's tree into the tree buffers; the head's context window is ``[0, kv)``.

    ``prompt``: the first draft's pairs (features of positions ``0..P-1`` [P, F], tokens
    ``1..P`` [P]).  Without it, the pairs are the last step's root and accepted drafts
    (features from ``e3_pend``; tokens: the accepted drafts, then the bonus token).
    """
    e3, w = engine.eagle3, engine.eagle3.path_width
    if prompt is not None:
        feats, next_tokens = prompt
        last: int | torch.Tensor = next_tokens.numel() - 1  # the root's pair: the last one
    else:
        back, last = engine.readback, engine.readback[0]  # the accepted count: the root's pair is the next one
        feats = engine.e3_pend[:w]
        next_tokens = torch.where(engine.arange[:w] == last, back[-1], back[2 : 2 + w])
    m = next_tokens.numel()
    pos = engine.length - (last + 1) + engine.arange[:m]  # the pairs' positions, and where their K/V go
    cache = engine.e3_cache
    cache.begin(pos, kv)
    causal = (engine.arange[:kv][None, :] <= pos[:, None])[None, None]  # [1, 1, m, kv]
    out = e3.head(feats.reshape(1, m, -1), next_tokens.reshape(1, m), pos[None], causal, cache)  # [1, m, H]
    root_hidden = out[0, last] if isinstance(last, int) else out[0].index_select(0, last.view(1))[0]
    visible = engine.arange[:kv] < engine.length  # the committed pairs, the new ones included
    write_tree(engine, e3.grow(cache, root_hidden, engine.root.view(1), visible, engine.length))


def write_tree(engine: StaticEngine, tree: Tree) -> None:
    """Put a drafted tree into the engine's tree buffers (verify and commit read them)."""
    n = tree.size
    if n != engine.e3_size:
        raise RuntimeError(f"EAGLE-3 drafted {n} nodes, expected {engine.e3_size}")
    engine.tree_tokens[:n].copy_(tree.tokens)
    engine.tree_parents[:n].copy_(tree.parents)
    engine.tree_depths[:n].copy_(tree.depths)
    engine.tree_anc[:n, :n].copy_(tree.ancestors)
