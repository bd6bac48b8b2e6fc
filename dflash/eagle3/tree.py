"""EAGLE-3 dynamic tree drafting (engine-agnostic; returns plain tensors).

One drafting step, as in the reference ``Model.topK_genrate`` (``eagle/model/cnets.py``):

1. *Context*: the new committed pairs (target feature of position ``t``, token ``t + 1``)
   go through the head once, causally, and their K/V are committed to the head's cache.
   The last pair's output predicts the children of the root (the last committed token,
   whose own target feature is not known yet).
2. *Expansion*, ``depth`` times: the head runs once over the frontier of ``top_k`` nodes;
   each node's feature is its parent's head output, each node attends to the committed
   context and to its own ancestors (a tree mask over the speculative cache entries).
   Every frontier node proposes its ``top_k`` best children, scored by cumulative
   log-probability; the ``top_k`` best of those ``top_k**2`` become the next frontier.
3. *Rerank*: of all proposed nodes, the ``total_tokens - 1`` best by cumulative
   log-probability are kept (ties broken towards earlier nodes, so a parent always ranks
   before its children and the kept set is a tree), in proposal order after the root.
4. The speculative K/V of the tree are rolled back: the cache keeps only committed pairs.

Reference defaults (``EaModel.from_pretrained`` in ``eagle/model/ea_model.py``):
``total_token=60`` (tree size including the root), ``depth=7``, ``top_k=10``.  Note that
``depth`` expansions give drafts up to ``depth + 1`` tokens below the root.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .model import Eagle3Head, Eagle3KVCache

DEFAULT_TOTAL_TOKENS = 60
DEFAULT_DEPTH = 7
DEFAULT_TOP_K = 10


@dataclass
class Eagle3Tree:
    """A drafted tree in topological order (parents before children), root first."""

    tokens: torch.Tensor  # [n] long, target-vocabulary ids; tokens[0] = root
    parents: torch.Tensor  # [n] long, index into tokens; parents[0] = -1
    scores: torch.Tensor  # [n] float32 cumulative log-probabilities; root 0
    depths: torch.Tensor  # [n] long; root 0

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


@torch.no_grad()
def extend_context(
    head: Eagle3Head,
    cache: Eagle3KVCache,
    features: torch.Tensor,  # [m, 3*Ht] (or [1, m, 3*Ht]) target features of positions p..p+m-1
    next_tokens: torch.Tensor,  # [m] target ids of positions p+1..p+m
) -> torch.Tensor:
    """Commit ``m`` context pairs to the head's cache; return their outputs [1, m, H]."""
    m = next_tokens.numel()
    feats = features.reshape(1, m, -1)
    cache.rollback()
    pos = (cache.length + torch.arange(m, device=feats.device))[None]  # [1, m]
    out = head(feats, next_tokens.reshape(1, m), pos, None, cache)
    cache.commit()
    return out


@torch.no_grad()
def draft_tree(
    head: Eagle3Head,
    cache: Eagle3KVCache,
    features: torch.Tensor,  # [m, 3*Ht] target features of the new committed positions
    next_tokens: torch.Tensor,  # [m] the token after each of them; next_tokens[-1] = root
    total_tokens: int = DEFAULT_TOTAL_TOKENS,
    depth: int = DEFAULT_DEPTH,
    top_k: int = DEFAULT_TOP_K,
) -> Eagle3Tree:
    """Draft one EAGLE-3 tree of at most ``total_tokens`` nodes (root included).

    ``features[i]`` is the target's tapped state at committed position ``p + i`` and
    ``next_tokens[i]`` the committed token at ``p + i + 1``, where ``p = cache.length``
    (0 at the first call, which passes the whole prompt: features of positions
    ``0..P-1`` and tokens ``1..P-1`` plus the target's first new token).  The root of the
    tree is ``next_tokens[-1]``.  After verification, the next call passes the features of
    the accepted path (root and accepted drafts) and the tokens following them (accepted
    drafts and the target's bonus token).
    """
    if top_k < 1 or depth < 0 or total_tokens < 1:
        raise ValueError(f"need top_k >= 1, depth >= 0, total_tokens >= 1; got {top_k}, {depth}, {total_tokens}")
    if top_k > head.config.draft_vocab_size:
        raise ValueError(f"top_k {top_k} > draft vocabulary {head.config.draft_vocab_size}")
    out = extend_context(head, cache, features, next_tokens)
    dev = out.device
    root = next_tokens.reshape(-1)[-1:].to(dev).long()
    k = top_k
    logp = torch.log_softmax(head.logits(out[0, -1]).float(), dim=-1)  # [Vd]
    top = torch.topk(logp, k)
    toks = [head.to_target_ids(top.indices)]  # per round: proposed nodes' target ids
    scores = [top.values]
    parent = [torch.full((k,), -1, dtype=torch.long, device=dev)]  # -1 = root
    depths = [torch.ones(k, dtype=torch.long, device=dev)]
    front_idx = torch.arange(k, device=dev)  # proposal indices of the frontier
    front_tok, front_score = toks[0], top.values
    front_hidden = out[:, -1:].expand(1, k, out.shape[-1])  # [1, k, H] parents' outputs
    tree_mask = torch.eye(k, dtype=torch.bool, device=dev)  # [k, k * (i + 1)] over tree entries
    n_prop = k
    for i in range(depth):
        ctx = torch.ones(k, cache.length, dtype=torch.bool, device=dev)
        mask = torch.cat([ctx, tree_mask], dim=1)[None, None]  # [1, 1, k, length + k * (i + 1)]
        pos = torch.full((1, k), cache.length + i, dtype=torch.long, device=dev)
        h = head(front_hidden, front_tok[None], pos, mask, cache)  # [1, k, H]
        logp = torch.log_softmax(head.logits(h[0]).float(), dim=-1)  # [k, Vd]
        top = torch.topk(logp, k, dim=-1)  # [k, k]
        cum = (top.values + front_score[:, None]).reshape(-1)  # [k * k]
        child = head.to_target_ids(top.indices).reshape(-1)
        toks.append(child)
        scores.append(cum)
        parent.append(front_idx.repeat_interleave(k))
        depths.append(torch.full((k * k,), i + 2, dtype=torch.long, device=dev))
        sel = torch.topk(cum, k).indices  # next frontier, [k]
        rows = sel // k
        front_idx, front_tok, front_score = n_prop + sel, child[sel], cum[sel]
        front_hidden = h[:, rows]
        tree_mask = torch.cat([tree_mask[rows], torch.eye(k, dtype=torch.bool, device=dev)], dim=1)
        n_prop += k * k
    cache.rollback()  # the tree's K/V were speculative

    all_tok, all_score = torch.cat(toks), torch.cat(scores)
    all_parent, all_depth = torch.cat(parent), torch.cat(depths)
    n_keep = min(total_tokens - 1, all_tok.numel())
    order = torch.sort(all_score, descending=True, stable=True).indices[:n_keep]
    keep = torch.sort(order).values  # proposal order: parents before children
    slot = torch.full((all_tok.numel(),), -1, dtype=torch.long, device=dev)
    slot[keep] = torch.arange(1, n_keep + 1, device=dev)
    par = all_parent[keep]
    par = torch.where(par < 0, torch.zeros_like(par), slot[par.clamp(min=0)])
    neg1 = torch.full((1,), -1, dtype=torch.long, device=dev)
    return Eagle3Tree(
        tokens=torch.cat([root, all_tok[keep]]),
        parents=torch.cat([neg1, par]),
        scores=torch.cat([torch.zeros(1, device=dev), all_score[keep]]),
        depths=torch.cat([torch.zeros(1, dtype=torch.long, device=dev), all_depth[keep]]),
    )
