"""The compiled engine's EAGLE-3 head functions against the head module and ``grow_tree`` (CPU, fp32, uncompiled).

The functions stack the head's weights, gather the embeddings themselves, write K/V into
the static cache and take each round's top-k from the logits; a norm applied to the wrong
input, the context's rotary angles taken from the wrong positions, a round's K/V in the
wrong slots or a mask row inherited from the wrong parent changes the outputs, the cache
or the tree.  Their attention is the engines' grouped form, not the head's SDPA call: with
it the outputs agree to rounding and the trees exactly; with the head's SDPA call put in
its place, everything else agrees to the bit (MLP widths that are multiples of 32), the
scores the tree is ranked by included.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bastion.engines import fused_eagle3
from bastion.engines.fused_eagle3 import FusedEagle3Head, head_topk
from bastion.engines.static_cache import StaticHeadKV
from bastion.models.target import Target
from dflash.eagle3.model import Eagle3Head
from dflash.eagle3.train import head_config_for
from dflash.eagle3.tree import grow_tree
from tests.support.builders import llama31_target, tiny_target


def _heads(family: str, draft_vocab: int, mlp: int | None = None, seed: int = 3):
    """A target and two copies of one random head (every weight perturbed, norms included): one for
    the module, one whose weights the fused head stacks."""
    model = tiny_target("qwen3", layers=8, seed=seed) if family == "qwen3" else llama31_target(layers=8)
    cfg = head_config_for(model.config, draft_vocab, None, mlp)
    copies = []
    for _ in range(2):
        torch.manual_seed(seed)
        head = Eagle3Head(cfg)
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for p in head.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=g))
            used = torch.sort(torch.randperm(cfg.vocab_size, generator=g)[:draft_vocab]).values
            head.d2t.copy_(used - torch.arange(draft_vocab))
        head.attach_target_embeddings(model.model.embed_tokens)
        copies.append(head.eval())
    return Target(model), copies[0], copies[1]


def _caches(head: Eagle3Head, capacity: int) -> tuple[StaticHeadKV, StaticHeadKV]:
    """Two static head caches with the same stale entries everywhere (the mask must hide them)."""
    cfg = head.config
    a = StaticHeadKV(int(cfg.layers.num_key_value_heads), cfg.head_dim, capacity, torch.float32, torch.device("cpu"))
    b = StaticHeadKV(int(cfg.layers.num_key_value_heads), cfg.head_dim, capacity, torch.float32, torch.device("cpu"))
    a.kv.normal_(generator=torch.Generator().manual_seed(9))
    b.kv.copy_(a.kv)
    return a, b


def _error(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest difference relative to the largest value."""
    return float((got - want).abs().max() / want.abs().max())


def _sdpa(query, key, value, mask, scale):
    """The head module's attention call, in the fused functions' layout ([1, s, Hq, D])."""
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale,
                                          enable_gqa=True).transpose(1, 2)


def _draft(head, fused, caches, steps, window: int, tree=(7, 10, 60)):
    """Context passes then a grown tree on both caches, for pairs of ``steps`` lengths; yields both sides."""
    g = torch.Generator().manual_seed(5)
    feat_dim = 3 * head.config.feature_size
    length = 0
    for m in steps:
        feats = torch.randn(1, m, feat_dim, generator=g)
        ids = torch.randint(0, head.config.vocab_size, (1, m), generator=g)
        pos = torch.arange(length, length + m)
        length += m
        mask = (torch.arange(window)[None, :] <= pos[:, None])[None, None]  # [1, 1, m, window]
        for cache in caches:
            cache.begin(pos, window)
        visible, root, position = torch.arange(window) < length, ids[0, -1:], torch.tensor(length)
        depth, k, total = tree
        with torch.no_grad():
            want = head(feats, ids, pos[None], mask, caches[0])  # [1, m, H]
            got = fused.context(feats, ids, pos[None], mask, caches[1])
            want_tree = grow_tree(head, caches[0], want[0, -1], root, visible, position, total, depth, k)
            got_tree = fused.grow(caches[1], got[0, -1], root, visible, position, total, depth, k)
        yield want, got, want_tree, got_tree


@pytest.mark.parametrize("family,vocab,mlp", [("qwen3", 96, None), ("llama31", 64, 80)])
def test_fused_head_drafts_the_modules_trees(family, vocab, mlp):
    _, head, copy = _heads(family, vocab, mlp)
    fused = FusedEagle3Head(copy, compile=False)
    caches = _caches(head, 64 + 7 * 10)
    for want, got, want_tree, got_tree in _draft(head, fused, caches, (11, 9, 3, 9), window=64):
        assert _error(got, want) < 1e-5
        assert torch.equal(got_tree.tokens, want_tree.tokens)
        assert torch.equal(got_tree.parents, want_tree.parents)
        assert torch.equal(got_tree.depths, want_tree.depths)
        assert _error(got_tree.scores, want_tree.scores) < 1e-5
    assert _error(caches[1].kv, caches[0].kv) < 1e-5


@pytest.mark.parametrize("family,tree,vocab,mlp", [("qwen3", (7, 10, 60), 96, None), ("llama31", (3, 4, 20), 96, 64),
                                                  ("qwen3", (0, 5, 60), 96, None), ("qwen3", (2, 3, 10), "all", 192)])
def test_with_the_heads_attention_everything_else_is_bit_exact(family, tree, vocab, mlp):
    """Norms, stacked products, rotary, cache slots, MLP, top-k, masks and rerank: the module's to the bit,
    for a reduced or the whole draft vocabulary and MLPs narrower or wider than the target's (128).

    The MLP widths are multiples of 32: the SiLU of the stacked gate/up product's half, a strided
    view, is evaluated row by row, and on a CPU a row's last elements, past its whole blocks of
    vectors, take a scalar path that rounds differently from the vector one (``test_fused_head_drafts_the_modules_trees``
    covers a width of 80).  The shipped heads' widths (384, 896) and the public ones' are such multiples."""
    if vocab == "all":
        vocab = tiny_target("qwen3", layers=8, seed=3).config.vocab_size
    _, head, copy = _heads(family, vocab, mlp)
    fused = FusedEagle3Head(copy, compile=False)
    FusedEagle3Head(head, compile=False)  # the module's weights stored as the fused head's: the same products
    fused.attend = _sdpa
    caches = _caches(head, 48 + tree[0] * tree[1])
    for want, got, want_tree, got_tree in _draft(head, fused, caches, (10, 9, 1), window=48, tree=tree):
        assert torch.equal(got, want)
        for name in ("tokens", "parents", "depths", "scores"):
            assert torch.equal(getattr(got_tree, name), getattr(want_tree, name)), name
    assert torch.equal(caches[1].kv, caches[0].kv)


def test_topk_gives_the_log_softmax_scores_to_the_bit():
    """Uncompiled on a CPU the winners' scores are gathered from the full log-softmax: grow_tree's values."""
    _, head, _ = _heads("qwen3", 96)
    h = 4 * torch.randn(10, head.config.hidden_size, generator=torch.Generator().manual_seed(1))
    for rows in (h[:1], h):
        want = torch.log_softmax(head.logits(rows).float(), dim=-1).topk(7, dim=-1)
        logp, ids = head_topk(rows, head.norm.weight, head.lm_head.weight, head.d2t, head.norm.variance_epsilon, 7)
        assert torch.equal(logp, want.values)
        assert torch.equal(ids, head.to_target_ids(want.indices))


def test_compiled_topk_normalises_the_winners_to_rounding(monkeypatch):
    """Compiled (and on a GPU) only the k winners are normalised: x - logsumexp(x) instead of
    log_softmax's (x - max) - log(sum(exp(x - max))).  The tokens are the same; the scores move
    by rounding only."""
    _, head, _ = _heads("qwen3", 96)
    h = 4 * torch.randn(10, head.config.hidden_size, generator=torch.Generator().manual_seed(2))
    args = (head.norm.weight, head.lm_head.weight, head.d2t, head.norm.variance_epsilon, 10)
    exact = head_topk(h, *args)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    winners = head_topk(h, *args)
    assert torch.equal(winners[1], exact[1])
    ulp = torch.finfo(torch.float32).eps * torch.logsumexp(head.logits(h).float(), -1, keepdim=True).abs()
    assert ((winners[0] - exact[0]).abs() <= 4 * ulp.clamp(min=1.0)).all()


def test_heads_the_functions_cannot_run_are_left_to_the_module():
    _, head, _ = _heads("qwen3", 32)
    assert FusedEagle3Head.supports(head)
    head.midlayer.mlp.down_proj.bias = torch.nn.Parameter(torch.zeros(head.config.hidden_size))
    assert not FusedEagle3Head.supports(head)
    _, head, _ = _heads("qwen3", 32)
    head.attach_target_embeddings(lambda ids: torch.zeros(*ids.shape, head.config.hidden_size))
    assert head.embedding_table() is None and not FusedEagle3Head.supports(head)


def test_the_fused_head_shares_the_targets_compiled_functions():
    from bastion.engines.static_layers import FusedLayers

    target, _, copy = _heads("qwen3", 32)
    layers = FusedLayers(target, compile=False)
    fused = FusedEagle3Head(copy, compile=False, layers=layers)
    assert fused.post is layers.post and fused.attend is layers.attend
    assert fused_eagle3.FusedEagle3Head(copy, compile=False).post is not layers.post
