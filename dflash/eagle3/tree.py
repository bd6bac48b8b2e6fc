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

Steps 2 and 3 (:func:`grow_tree`) are tensor operations of fixed shapes that read nothing
back to the host, so an engine can run them on its own fixed-address cache and capture
them in a CUDA graph; :func:`draft_tree` runs all four on an :class:`Eagle3KVCache`.

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


def check_policy(head: Eagle3Head, total_tokens: int, depth: int, top_k: int) -> None:
    if top_k < 1 or depth < 0 or total_tokens < 1:
        raise ValueError(f"need top_k >= 1, depth >= 0, total_tokens >= 1; got {top_k}, {depth}, {total_tokens}")
    if top_k > head.config.draft_vocab_size:
        raise ValueError(f"top_k {top_k} > draft vocabulary {head.config.draft_vocab_size}")


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
    check_policy(head, total_tokens, depth, top_k)
    out = extend_context(head, cache, features, next_tokens)
    dev = out.device
    root = next_tokens.reshape(-1)[-1:].to(dev).long()
    visible = torch.ones(cache.length, dtype=torch.bool, device=dev)
    tree = grow_tree(head, cache, out[0, -1], root, visible, cache.length, total_tokens, depth, top_k)
    cache.rollback()  # the tree's K/V were speculative
    return tree


@torch.no_grad()
def grow_tree(
    head: Eagle3Head,
    cache,
    root_hidden: torch.Tensor,  # [H] head output of the last context pair (it predicts the root's children)
    root: torch.Tensor,  # [1] long, the root's target id
    visible: torch.Tensor,  # [L] bool: which of the cache's first L entries (the context) the nodes see
    position: int | torch.Tensor,  # rope position of the root's children (the head's context length)
    total_tokens: int,
    depth: int,
    top_k: int,
) -> Eagle3Tree:
    """Steps 2 and 3: expand ``depth`` rounds below the root and keep the best nodes.

    ``cache.extend`` must append each round's K/V after the ``L`` context entries and
    return all entries so far (context, then tree), as :class:`Eagle3KVCache` does before
    a rollback.  Every shape depends only on ``L``, ``depth`` and ``top_k``, and no value is
    read back to the host: ``position`` may be a device tensor.
    """
    dev, k = root_hidden.device, top_k
    n_ctx = visible.shape[0]
    logp = torch.log_softmax(head.logits(root_hidden).float(), dim=-1)  # [Vd]
    top = torch.topk(logp, k)
    toks, scores = [head.to_target_ids(top.indices)], [top.values]  # per round: proposed nodes
    front = [torch.arange(k, device=dev)]  # per round: proposal indices of the frontier (the next round's parents)
    front_tok, front_score = toks[0], top.values
    front_hidden = root_hidden.view(1, 1, -1).expand(1, k, root_hidden.shape[-1])  # [1, k, H] parents' outputs
    eye = torch.eye(k, dtype=torch.bool, device=dev)
    # [k, L + k * depth]: the frontier's context row, then its ancestors among the tree entries
    if depth:
        mask = torch.zeros(k, n_ctx + k * depth, dtype=torch.bool, device=dev)
        mask[:, :n_ctx] = visible
        mask[:, n_ctx : n_ctx + k] = eye
        # every round's rope angles at once: round i's nodes sit at position + i
        cos, sin = head.rotary_emb(front_hidden, (position + torch.arange(depth, device=dev))[None])  # [1, depth, D]
    for i in range(depth):
        width = n_ctx + k * (i + 1)
        rope = (cos[:, i : i + 1].expand(1, k, -1), sin[:, i : i + 1].expand(1, k, -1))
        h = head(front_hidden, front_tok[None], None, mask[None, None, :, :width], cache, rope=rope)  # [1, k, H]
        logp = torch.log_softmax(head.logits(h[0]).float(), dim=-1)  # [k, Vd]
        top = torch.topk(logp, k, dim=-1)  # [k, k]
        cum = (top.values + front_score[:, None]).reshape(-1)  # [k * k]
        child = head.to_target_ids(top.indices).reshape(-1)
        toks.append(child)
        scores.append(cum)
        if i + 1 == depth:
            break  # the last round's proposals are never expanded
        best = torch.topk(cum, k)  # the next frontier
        sel, rows = best.indices, best.indices // k
        front.append(k + k * k * i + sel)
        front_tok, front_score, front_hidden = child[sel], best.values, h[:, rows]
        mask[:, n_ctx : width] = mask[rows, n_ctx : width]  # each new node inherits its parent's ancestors
        mask[:, width : width + k] = eye
    return _rerank(torch.cat(toks), torch.cat(scores), front, root, total_tokens, depth, k)


def _rerank(all_tok: torch.Tensor, all_score: torch.Tensor, front: list[torch.Tensor], root: torch.Tensor,
            total_tokens: int, depth: int, k: int) -> Eagle3Tree:
    """Step 3: the ``total_tokens - 1`` best proposals, in proposal order after the root."""
    dev, n_all = all_tok.device, all_tok.numel()
    parent = torch.full((n_all,), -1, dtype=torch.long, device=dev)  # the first round's parent is the root
    if depth:  # round i + 1's proposal j is a child of round i's frontier node j // k
        parent[k:] = torch.stack(front)[:, :, None].expand(depth, k, k).reshape(-1)
    levels = torch.arange(2, depth + 2, device=dev)[:, None].expand(depth, k * k).reshape(-1)
    depths = torch.cat([torch.ones(k, dtype=torch.long, device=dev), levels])
    n_keep = min(total_tokens - 1, n_all)
    order = torch.sort(all_score, descending=True, stable=True).indices[:n_keep]
    keep = torch.sort(order).values  # proposal order: parents before children
    slot = torch.zeros(n_all + 1, dtype=torch.long, device=dev)  # proposal index + 1 -> tree slot (root: 0)
    slot[keep + 1] = torch.arange(1, n_keep + 1, device=dev)
    return Eagle3Tree(
        tokens=torch.cat([root, all_tok[keep]]),
        parents=torch.cat([torch.full((1,), -1, dtype=torch.long, device=dev), slot[parent[keep] + 1]]),
        scores=torch.cat([torch.zeros(1, device=dev), all_score[keep]]),
        depths=torch.cat([torch.zeros(1, dtype=torch.long, device=dev), depths[keep]]),
    )
