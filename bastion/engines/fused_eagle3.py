"""The EAGLE-3 head's layer and its tree growth as pure functions, so the compiled engine can fuse them.

A draft at the reference tree (depth 7, top-k 10, 60 nodes) is eight passes of the head's
one Llama layer (the step's context pairs, then seven rounds of ten nodes) and eight top-k's
over the draft vocabulary.  Run as the head's modules, it is 577 operations (norms in
several steps, the concatenated input multiplied three times for q, k and v, rotary, the
cache write, SDPA, the MLP, a full log-softmax over the draft vocabulary, the tree's
bookkeeping; ``python -m benchmarks.eagle3_draft_kernels``), each a kernel of a few
microseconds in the captured graph even where its launch costs nothing.
As for the target (:mod:`bastion.engines.static_layers`) and the DFlash drafter
(:mod:`bastion.engines.fused_drafter`), a pass here is three functions, compiled once on
CUDA for every pass and every row count (dynamic shapes) and run as plain torch on a CPU:

- :func:`head_pre_attention`: the tokens' embeddings gathered, both input norms, one q/k/v
  product over the ``2H`` input (q, k and v stacked by rows), rotary, and the K/V written
  straight into the head's cache;
- grouped attention (the Triton tree-attention kernel on CUDA where it serves);
- :func:`~bastion.engines.static_layers.post_attention` with the raw feature as the
  residual: the output projection, the post-attention norm and the gated MLP.

A round's scoring and the next frontier are one more function (:func:`expand_round`): the
final norm, ``lm_head``, the top-k of the logits with only the k winners normalised
(:func:`bastion.speculative.tree.draft_topk`), cumulative scores, draft-to-target ids, the
frontier and its rows of the tree mask; the rerank of all proposals is a last one
(:func:`rerank`, around that module's own).  What surrounds them is fused too: the step's
pairs from the readback (:func:`step_pairs`), the context's projection and rotary angles
(:func:`context_inputs`), the rounds' masks, angles and cache slots (:func:`round_inputs`)
and the finished tree's ancestors.  The tree's steps are those of
:func:`dflash.eagle3.tree.grow_tree`: the same tree, and on an uncompiled CPU the same
scores to the bit where attention rounds alike and the MLP is a multiple of 32 wide (the
SiLU of a strided half of the gate/up product rounds a row's last elements in scalar code
otherwise; ``tests/engines/test_fused_eagle3.py``).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F

from bastion.engines.static_attention import grouped_attention, with_kernel
from bastion.engines.static_cache import StaticHeadKV
from bastion.engines.static_layers import (
    COMPILED_MATMUL_ROWS,
    FusedLayers,
    _rms,
    after_qkv,
    compile_step_function,
    post_attention,
    joint_weight,
)
from bastion.speculative.accept import Readback
from bastion.speculative.tree import ancestor_matrix, draft_topk
from dflash.eagle3.model import Eagle3Head
from dflash.eagle3.tree import Eagle3Tree, _rerank


def head_pre_attention(ids, feature, table, ln_e, ln_f, wqkv, cos, sin, kv, index, eps: float, head_dim: int,
                       kv_width: int):
    """Tokens ``ids`` [1, s] and features [1, s, H] -> q [1, Hq, s, D]; k (rotated) and v go into
    the head's cache ``kv`` [2, 1, Hkv, capacity, D] at ``index`` [s].

    The layer's input is ``[input_layernorm(embed(ids)) ; hidden_norm(feature)]`` [1, s, 2H],
    multiplied once by ``wqkv``, the q, k and v projections stacked by rows.
    """
    embeds = F.embedding(ids, table).to(feature.dtype)  # [1, s, H]
    x = torch.cat([_rms(embeds, ln_e, eps), _rms(feature, ln_f, eps)], dim=-1)  # [1, s, 2H]
    return after_qkv(F.linear(x, wqkv), None, None, cos, sin, kv, index, eps, head_dim, kv_width)


def head_topk(hidden, norm, lm_head, d2t, eps: float, k: int):
    """Head outputs [r, H] -> each row's ``k`` best draft tokens: log-probabilities [r, k] (fp32,
    descending) and their target-vocabulary ids [r, k].

    The logits' top-k is taken first and only the winners are normalised where that is
    cheaper (:func:`~bastion.speculative.tree.draft_topk`: compiled code, a GPU); on an
    uncompiled CPU it gathers from the full log-softmax, the arithmetic of
    :func:`dflash.eagle3.tree.grow_tree`, so there the scores are its scores to the bit.
    """
    logp, idx = draft_topk(F.linear(_rms(hidden, norm, eps), lm_head), 0.0, k)  # [r, k] each
    return logp, idx + d2t[idx]


def step_pairs(readback, arange, length, width: int, kv: int):
    """The pairs a step's draft reads, from the last step's readback on the device.

    ``readback`` (:class:`~bastion.speculative.accept.Readback`): the accepted count and
    path, then the bonus token; ``arange`` [>= kv]; ``length`` (0-d): the committed
    length.  Returns the root's pair index (0-d; the accepted count), the pairs' next
    tokens [width] (the accepted drafts, then the bonus), their positions [width], their
    causal mask over the window [1, 1, width, kv] and the window's committed entries [kv].
    """
    last = readback[Readback.COUNT]
    ids = torch.where(arange[:width] == last, readback[-1], readback[Readback.PATH : Readback.PATH + width])
    return last, ids, *pair_masks(last, arange, length, width, kv)


def pair_masks(last, arange, length, width: int, kv: int):
    """``width`` pairs whose ``last`` one (0-d or int) is the root's, ending at the committed
    ``length``: their positions [width] (where their K/V go), their causal mask over the
    window [1, 1, width, kv] and the window's committed entries [kv]."""
    pos = length - (last + 1) + arange[:width]
    causal = (arange[:kv][None, :] <= pos[:, None])[None, None]
    return pos, causal, arange[:kv] < length


def context_inputs(features, positions, fc_w, fc_b, rotary):
    """Tapped target states [1, m, 3 Ht] at ``positions`` [1, m] -> the head's input features
    [1, m, H] and their rotary cos, sin [1, m, D]."""
    feature = F.linear(features, fc_w, fc_b)
    cos, sin = rotary(feature, positions)
    return feature, cos, sin


def round_inputs(root_hidden, visible, position, rotary, depth: int, k: int):
    """What the tree's rounds read, made at once: the first frontier's ancestors [k, k] and mask
    [1, 1, k, L + k], every round's rotary cos, sin [1, depth, D] and cache slots [depth, k].

    ``root_hidden`` [H]: the root's head output; ``visible`` [L]: the window's live entries;
    ``position`` (0-d): where the root's children sit.
    """
    dev = root_hidden.device
    anc = torch.eye(k, dtype=torch.bool, device=dev)
    mask = torch.cat([visible.expand(k, -1), anc], dim=1)[None, None]
    cos, sin = rotary(root_hidden.view(1, 1, -1), (position + torch.arange(depth, device=dev))[None])
    slots = (visible.shape[0] + torch.arange(depth * k, device=dev)).view(depth, k)
    return anc, mask, cos, sin, slots


def expand_round(h, front_score, anc, visible, norm, lm_head, d2t, eps: float, k: int, last: bool):
    """One round's proposals below the frontier, and the next frontier.

    ``h`` [1, k, H]: the frontier's head outputs; ``front_score`` [k]: its cumulative
    log-probabilities; ``anc`` [k, k * r]: its ancestors-or-self among the ``r`` rounds'
    tree entries so far; ``visible`` [L]: the context entries every node sees.  Returns the
    proposals' cumulative scores and target ids [k * k] (parent-major), and unless ``last``:
    the next frontier's proposal indices within the round [k], ids, scores, head outputs
    [1, k, H], ancestors [k, k * (r + 1)] and attention mask [1, 1, k, L + k * (r + 1)].
    """
    logp, tok = head_topk(h[0], norm, lm_head, d2t, eps, k)  # [k, k]
    cum, child = (logp + front_score[:, None]).reshape(-1), tok.reshape(-1)  # [k * k]
    if last:
        return cum, child
    best = torch.topk(cum, k)
    rows = best.indices // k  # each new frontier node's parent in the old frontier
    anc = torch.cat([anc[rows], torch.eye(k, dtype=torch.bool, device=anc.device)], dim=1)
    mask = torch.cat([visible.expand(k, -1), anc], dim=1)[None, None]
    return cum, child, best.indices, child[best.indices], best.values, h[:, rows], anc, mask


def rerank(toks: list, scores: list, sels: list, root, total_tokens: int, depth: int, k: int):
    """The best ``total_tokens - 1`` proposals below ``root`` [1] as tokens, parents, scores and depths,
    from each round's proposals (``toks``, ``scores`` [k] then [k * k] each) and the next
    frontier among them (``sels`` [k] each): :func:`dflash.eagle3.tree.grow_tree`'s rerank."""
    front = [torch.arange(k, device=root.device)] + [k + k * k * i + sel for i, sel in enumerate(sels)]
    tree = _rerank(torch.cat(toks), torch.cat(scores), front, root, total_tokens, depth, k)
    return tree.tokens, tree.parents, tree.scores, tree.depths


class FusedEagle3Head:
    """Runs an :class:`~dflash.eagle3.model.Eagle3Head` through the functions above, on the static
    engine's :class:`~bastion.engines.static_cache.StaticHeadKV`.

    The q/k/v and the gate/up weights become views of stacked matrices, so the head module
    keeps working with the same values and no second copy.
    """

    def __init__(self, head: Eagle3Head, compile: bool, layers: FusedLayers | None = None) -> None:
        self.head = head
        layer, cfg = head.midlayer, head.config
        a, m = layer.self_attn, layer.mlp
        self.eps = float(cfg.layers.rms_norm_eps)
        self.head_dim, self.scale = a.head_dim, a.head_dim ** -0.5
        self.pre_w = (head.embedding_table(), layer.input_layernorm.weight, layer.hidden_norm.weight,
                      joint_weight([a.q_proj, a.k_proj, a.v_proj]))
        self.post_w = (joint_weight([a.o_proj]), layer.post_attention_layernorm.weight,
                       joint_weight([m.gate_proj, m.up_proj]), joint_weight([m.down_proj]))
        joint_weight([head.fc])  # the multiplies read through the modules (fc, lm_head), laid out likewise
        joint_weight([head.lm_head])
        self.groups = a.num_heads // a.num_kv_heads  # query heads per K/V head
        wrap = compile_step_function if compile else (lambda f: f)
        self.pre: Callable = wrap(functools.partial(head_pre_attention, eps=self.eps, head_dim=self.head_dim,
                                                    kv_width=a.num_kv_heads * a.head_dim))
        self._wrap, self._trees = wrap, {}  # the tree's functions, per tree shape
        # the step's bookkeeping around the layer, fused as well: run apart, its ~50 small
        # operations were 40% of a 3/1/5 draft's (docs/performance.md, "EAGLE-3")
        self.pairs: Callable = wrap(step_pairs)
        self.inputs: Callable = wrap(functools.partial(context_inputs, rotary=head.rotary_emb))
        self.ancestors: Callable = wrap(ancestor_matrix)
        if layers is not None and layers.eps == self.eps:  # the target's compiled functions compute the same
            self.post, self.attend = layers.post, layers.attend
        else:
            self.post = wrap(functools.partial(post_attention, eps=self.eps))
            self.attend = with_kernel(wrap(functools.partial(grouped_attention, matmul_rows=COMPILED_MATMUL_ROWS)))

    @staticmethod
    def supports(head: Eagle3Head) -> bool:
        """Whether the fused functions compute what ``head`` does (no biases in its layer, a SiLU
        MLP, embeddings looked up in a table)."""
        layer, cfg = head.midlayer, head.config.layers
        a, m = layer.self_attn, layer.mlp
        linears = (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj)
        return (getattr(cfg, "hidden_act", "silu") == "silu" and all(p.bias is None for p in linears)
                and head.embedding_table() is not None)

    def _tree_functions(self, depth: int, k: int, total_tokens: int) -> tuple[Callable, ...]:
        """For one tree shape: the root's top-k, a round's expansion, the last round's (no frontier),
        the rerank and the rounds' inputs, made once."""
        key = (depth, k, total_tokens)
        if key not in self._trees:
            self._trees[key] = (
                self._wrap(functools.partial(head_topk, eps=self.eps, k=k)),
                self._wrap(functools.partial(expand_round, eps=self.eps, k=k, last=False)),
                self._wrap(functools.partial(expand_round, eps=self.eps, k=k, last=True)),
                self._wrap(functools.partial(rerank, total_tokens=total_tokens, depth=depth, k=k)),
                self._wrap(functools.partial(round_inputs, rotary=self.head.rotary_emb, depth=depth, k=k)),
            )
        return self._trees[key]

    def layer(self, ids, feature, cos, sin, kv: torch.Tensor, index, mask) -> torch.Tensor:
        """One pass of the head's layer: pairs (``feature`` [1, s, H], token ``ids`` [1, s]) whose K/V go
        into ``kv`` at ``index`` [s], attending to the window ``[0, mask.shape[-1])`` as ``mask``
        [1, 1, s, window] allows -> outputs [1, s, H] (the next depth's features)."""
        q = self.pre(ids, feature, *self.pre_w, cos, sin, kv, index)  # [1, Hq, s, D]
        window = mask.shape[-1]
        attend = self.attend if self.groups * ids.shape[1] <= COMPILED_MATMUL_ROWS else grouped_attention
        out = attend(q, kv[0, :, :, :window], kv[1, :, :, :window], mask, self.scale)  # [1, s, Hq, D]
        return self.post(feature, out.reshape(1, ids.shape[1], -1), *self.post_w)

    @torch.no_grad()
    def context(self, features, ids, positions, mask, cache: StaticHeadKV) -> torch.Tensor:
        """The head's forward over context pairs, as :meth:`Eagle3Head.forward` with ``cache``:
        tapped target states ``features`` [1, m, 3 Ht] and next tokens ``ids`` [1, m] at
        ``positions`` [1, m], whose K/V go into the cache's window at those positions -> [1, m, H]."""
        feature, cos, sin = self.inputs(features, positions, self.head.fc.weight, self.head.fc.bias)  # [1, m, H]
        return self.layer(ids, feature, cos, sin, cache.kv, positions[0], mask)

    @torch.no_grad()
    def grow(self, cache: StaticHeadKV, root_hidden, root, visible, position, total_tokens: int, depth: int,
             top_k: int) -> Eagle3Tree:
        """:func:`dflash.eagle3.tree.grow_tree` through the fused functions, on the static engine's cache.

        ``visible`` [L] marks the live entries of the cache's window ``[0, L)``; round ``i``'s
        K/V go right after it, at ``L + k i``.  Fixed shapes, no reads to the host.
        """
        k = top_k
        topk, expand, expand_last, finish, inputs = self._tree_functions(depth, k, total_tokens)
        h = self.head
        w = dict(norm=h.norm.weight, lm_head=h.lm_head.weight, d2t=h.d2t)
        score, tok = topk(root_hidden.view(1, -1), **w)  # [1, k] each
        toks, scores, sels = [tok[0]], [score[0]], []  # per round: proposals, and the next frontier among them
        front_tok, front_score = tok[0], score[0]
        front_hidden = root_hidden.view(1, 1, -1).expand(1, k, root_hidden.shape[-1])  # [1, k, H] parents' outputs
        if depth:  # anc [k, k * rounds]: ancestors among the tree's entries; slots [depth, k]: round i's cache entries
            anc, mask, cos, sin, slots = inputs(root_hidden, visible, position)
        for i in range(depth):
            rope = (cos[:, i : i + 1].expand(1, k, -1), sin[:, i : i + 1].expand(1, k, -1))
            out = self.layer(front_tok[None], front_hidden, *rope, cache.kv, slots[i], mask)  # [1, k, H]
            if i + 1 == depth:  # the last round's proposals are never expanded
                cum, child = expand_last(out, front_score, anc, visible, **w)
            else:
                cum, child, sel, front_tok, front_score, front_hidden, anc, mask = expand(out, front_score, anc,
                                                                                          visible, **w)
                sels.append(sel)
            toks.append(child)
            scores.append(cum)
        return Eagle3Tree(*finish(toks, scores, sels, root))
