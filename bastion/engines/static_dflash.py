"""The DFlash drafter on the static engine: its buffers, its attention window, its drafting step.

The drafter's context K/V live at fixed addresses (:class:`~bastion.engines.static_cache.StaticContextKV`),
one slot per position.  A draft first takes in the features of the nodes the last step
accepted (``pend``, always a block's worth of rows: those past ``pend_count`` are padding
at positions the mask hides), then runs the block (the root and ``b - 1`` mask tokens) at
the positions right after the committed length.  The compiled engine's fused drafter
writes the block's K/V into those slots too, so attention reads one window of the cache;
the drafter module appends them after the window instead.  Nothing here reads a device
value on the host, so the draft is one CUDA graph per window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bastion.defaults import TOPK_LIMIT
from bastion.engines.kernels import argmax_chunks
from bastion.engines.static_cache import StaticContextKV

if TYPE_CHECKING:
    from bastion.engines.static_engine import StaticEngine


def allocate(engine: StaticEngine, nodes: int) -> None:
    """The drafter's K/V, the verifier's tapped states [nodes, F], the next draft's context
    rows [1, b, F], the draft logits [b - 1, V] and the tree phase's top-k and path tables."""
    d, b, dev = engine.drafter, engine.block, engine.device
    long = dict(dtype=torch.long, device=dev)
    dcfg = d.config.layers
    d_head = int(getattr(dcfg, "head_dim", None) or dcfg.hidden_size // dcfg.num_attention_heads)
    engine.dcache = StaticContextKV(d.config.num_hidden_layers, int(dcfg.num_key_value_heads), d_head,
                                    engine.capacity, engine.dtype, dev)
    feat_dim = len(d.target_layer_ids) * int(engine.target.config.hidden_size)
    engine.features = torch.zeros(nodes, feat_dim, dtype=engine.dtype, device=dev)  # verifier's tapped states
    engine.pend = torch.zeros(1, b, feat_dim, dtype=engine.dtype, device=dev)  # accepted nodes' features
    engine.pend_count = torch.zeros((), **long)
    vocab = int(engine.target.lm_head.weight.shape[0])
    engine.draft_out = torch.zeros(b - 1, vocab, dtype=engine.dtype, device=dev)
    engine.argmax_chunks = argmax_chunks(vocab)  # a constant for the compiled build
    # each depth's top-k (k <= 128, the policy's cap); graphs use the [:, :k] view
    engine.logq_all = torch.zeros(b - 1, TOPK_LIMIT, dtype=torch.float32, device=dev)
    engine.top_tok_all = torch.zeros(b - 1, TOPK_LIMIT, **long)
    engine.set_topk(1)
    m = max(nodes - 1, 1)
    engine.paths = {k: torch.zeros(m, **long) for k in ("depth", "local", "par_local", "rank")}
    engine.block_ids = torch.full((b,), int(d.mask_token_id), **long)


def window(engine: StaticEngine, committed: int) -> int:
    """The drafter's attention window when the host has read ``committed`` tokens.

    The device may be a block ahead (the step whose tokens the host has not read yet),
    and the fused drafter's block sits in the window after the live context.
    """
    ahead = 2 * engine.block if engine.fused_drafter is not None else engine.block
    return engine.window(committed + ahead)


def draft_logits(engine: StaticEngine, kv: int, feats: torch.Tensor) -> torch.Tensor:
    """Draft logits [b - 1, V] for depths 1..b-1; ``feats`` [1, W, F] enter the context first,
    and the drafter's K/V window is ``[0, kv)``."""
    e, b, w = engine, engine.block, feats.shape[1]
    start = e.length - e.pend_count  # first new context position
    e.dcache.write_index = start + e.arange[:w]
    e.dcache.kv_len = kv
    block = e.block_ids.clone()
    block[0] = e.root
    pos = e.length + e.arange[:b]
    if e.fused_drafter is not None:  # the block's K/V go into the window, at its positions
        seen = e.arange[:kv] < e.length + b  # the live context, then the block
        mask = seen[None, None, None, :].expand(1, 1, b, kv)
    else:  # the module appends the block's K/V after the window
        live = e.arange[:kv] < e.length  # the context the drafter may see
        mask = torch.cat([live, live.new_ones(b)])[None, None, None, :].expand(1, 1, b, kv + b)
    h = (e.fused_drafter or e.drafter)(e.target.embed(block[None]), pos[None], feats, e.dcache.write_index[None],
                                       mask, e.dcache)
    return e.target.logits(h[0, 1:])
