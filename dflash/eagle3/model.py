"""The EAGLE-3 draft head: one Llama-style decoder layer over [token embedding ; feature].

Per position ``t`` the head reads a pair: the *feature* of position ``t`` and the token
embedding of token ``t + 1``.  For committed context the feature is ``fc`` applied to the
target's three tapped hidden states (``[3 * Ht] -> [H]``); during tree drafting it is the
head's own output hidden state at the parent node (``fc`` is skipped, exactly as the
reference does when the feature is already ``H`` wide).  Inside the layer:

    x    = [input_layernorm(embed) ; hidden_norm(feature)]        # [.., 2H]
    h    = feature + o_proj(attn(q(x), k(x), v(x)))               # residual = raw feature
    out  = h + mlp(post_attention_layernorm(h))                   # fed back at the next depth
    logits = lm_head(norm(out))                                    # over the draft vocabulary

Draft ids map to target ids with ``target = draft + d2t[draft]``; ``t2d[target]`` says
whether a target id is in the draft vocabulary.  The head's own KV cache holds one entry
per pair; :class:`Eagle3KVCache` separates committed entries (target features) from
speculative ones (tree nodes) so tree drafting can be rolled back for free.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, rotate_half

from .config import Eagle3Config


# cuDNN's attention builds an execution plan per new shape, about 40 ms of host time on an
# H200: the head's context grows every step, so each of its calls met a new shape and
# drafting cost ~300 ms a step (docs/performance.md, "EAGLE-3").  The other kernels
# take any shape at no set-up cost.
_NOT_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [B, heads, S, D] by per-token angles ``cos``/``sin`` [B, S, D]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


class Eagle3KVCache:
    """K/V of the head's single layer: ``length`` committed entries, then speculative ones.

    Appends go after ``total`` (committed + speculative).  :meth:`commit` makes everything
    appended so far permanent, :meth:`rollback` forgets the speculative tail (tree nodes),
    :meth:`crop` and :meth:`keep` mirror :class:`dflash.model.ContextKVCache` for decoders
    that roll back or compact their own context.  Storage grows by doubling.
    """

    def __init__(self) -> None:
        self.length = 0  # committed entries
        self.total = 0  # committed + speculative entries
        self._k: torch.Tensor | None = None  # [B, kv_heads, cap, D]
        self._v: torch.Tensor | None = None

    def reset(self) -> None:
        self.length = self.total = 0

    def extend(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``k_new``/``v_new`` [B, kv_heads, m, D]; return views [B, kv_heads, total, D]."""
        m = k_new.shape[2]
        need = self.total + m
        buf = self._k
        if buf is None or buf.shape[2] < need or buf.dtype != k_new.dtype or buf.device != k_new.device:
            cap = max(need, 64 if buf is None else 2 * buf.shape[2])
            shape = (k_new.shape[0], k_new.shape[1], cap, k_new.shape[3])
            new_k, new_v = k_new.new_empty(shape), v_new.new_empty(shape)
            if buf is not None and self.total:
                new_k[:, :, : self.total] = buf[:, :, : self.total]
                new_v[:, :, : self.total] = self._v[:, :, : self.total]
            self._k, self._v = new_k, new_v
        self._k[:, :, self.total : need] = k_new
        self._v[:, :, self.total : need] = v_new
        self.total = need
        return self._k[:, :, :need], self._v[:, :, :need]

    def commit(self) -> None:
        self.length = self.total

    def rollback(self) -> None:
        """Forget speculative entries (the tree drafted since the last commit)."""
        self.total = self.length

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` committed entries."""
        self.length = self.total = min(self.length, int(length))

    def keep(self, indices: torch.Tensor | list[int]) -> None:
        """Keep exactly these entries (of ``[0, total)``), in this order, as committed context."""
        idx = torch.as_tensor(indices, dtype=torch.long)
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.total):
            raise IndexError(f"keep indices must lie in [0, {self.total}), got {idx.tolist()}")
        if self._k is not None and idx.numel():
            idx = idx.to(self._k.device)
            n = idx.numel()
            self._k[:, :, :n] = self._k.index_select(2, idx)
            self._v[:, :, :n] = self._v.index_select(2, idx)
        self.length = self.total = int(idx.numel())


class Eagle3Attention(nn.Module):
    """Attention whose q/k/v read ``2H``-wide inputs; GQA and an optional boolean mask."""

    def __init__(self, config: Eagle3Config) -> None:
        super().__init__()
        cfg = config.layers
        h = config.hidden_size
        self.head_dim = config.head_dim
        self.num_heads = int(cfg.num_attention_heads)
        self.num_kv_heads = int(cfg.num_key_value_heads)
        bias = bool(getattr(cfg, "attention_bias", False))
        self.q_proj = nn.Linear(2 * h, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(2 * h, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(2 * h, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=bias)

    def forward(
        self,
        x: torch.Tensor,  # [B, Q, 2H]
        rope: tuple[torch.Tensor, torch.Tensor],  # cos, sin [B, Q, D]
        mask: torch.Tensor | None,  # [B, 1, Q, K] bool, True = attend; None = causal over new
        cache: Eagle3KVCache | None,
    ) -> torch.Tensor:
        b, q_len, _ = x.shape
        q = _rope(self.q_proj(x).view(b, q_len, self.num_heads, self.head_dim).transpose(1, 2), *rope)
        k = _rope(self.k_proj(x).view(b, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2), *rope)
        v = self.v_proj(x).view(b, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        past = 0
        if cache is not None:
            past = cache.total
            k, v = cache.extend(k, v)  # [B, kv_heads, K, D]
        if mask is None:
            keys = torch.arange(k.shape[2], device=x.device)
            mask = (keys[None, :] <= (past + torch.arange(q_len, device=x.device))[:, None])[None, None]
        with sdpa_kernel(_NOT_CUDNN) if x.is_cuda else nullcontext():
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=self.head_dim**-0.5, enable_gqa=self.num_kv_heads != self.num_heads
            )  # [B, heads, Q, D]
        return self.o_proj(out.transpose(1, 2).reshape(b, q_len, self.num_heads * self.head_dim))


class Eagle3Layer(nn.Module):
    """The reference ``midlayer``: norms of both inputs, attention over their concat, MLP."""

    def __init__(self, config: Eagle3Config) -> None:
        super().__init__()
        cfg, h = config.layers, config.hidden_size
        self.self_attn = Eagle3Attention(config)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(h, eps=cfg.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(h, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(h, eps=cfg.rms_norm_eps)

    def forward(self, embeds, feature, rope, mask=None, cache=None) -> torch.Tensor:
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(feature)], dim=-1)  # [B, Q, 2H]
        h = feature + self.self_attn(x, rope, mask, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Head(nn.Module):
    """EAGLE-3 draft head; tensor names match the public ``midlayer.*`` layout."""

    def __init__(self, config: Eagle3Config, with_embeddings: bool = False) -> None:
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.fc = nn.Linear(3 * config.feature_size, h, bias=config.fc_bias)
        self.midlayer = Eagle3Layer(config)
        self.norm = LlamaRMSNorm(h, eps=config.layers.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.embed_tokens = nn.Embedding(config.vocab_size, h) if with_embeddings else None
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(config.vocab_size, dtype=torch.bool))
        self.rotary_emb = LlamaRotaryEmbedding(config.layers)
        self._target_embed: Callable[[torch.Tensor], torch.Tensor] | None = None

    # -- embeddings ----------------------------------------------------------------------
    def attach_target_embeddings(self, embed: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Use the target's input embeddings (an ``nn.Embedding`` or callable) for tokens.

        Stored without registering it, so the head's ``state_dict`` stays the checkpoint's.
        A checkpoint that ships its own ``embed_tokens`` keeps using it, as the references do.
        """
        object.__setattr__(self, "_target_embed", embed)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids (target vocabulary) [..] -> embeddings [.., H]."""
        if self.embed_tokens is not None:
            return self.embed_tokens(ids)
        if self._target_embed is None:
            raise RuntimeError("this EAGLE-3 head ships no embed_tokens; call attach_target_embeddings(target embed)")
        return self._target_embed(ids)

    def embedding_table(self) -> torch.Tensor | None:
        """The weight [V, H] that :meth:`embed` looks tokens up in, or None when it is another callable.

        A fused head gathers rows of it inside its own kernels instead of calling :meth:`embed`.
        """
        embed = self.embed_tokens if self.embed_tokens is not None else self._target_embed
        return embed.weight if isinstance(embed, nn.Embedding) else None

    # -- pieces the drafting loop needs ----------------------------------------------------
    def new_cache(self) -> Eagle3KVCache:
        return Eagle3KVCache()

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """Concatenated tapped target states [.., 3 * Ht] -> head features [.., H]."""
        return self.fc(features)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Head output states [.., H] -> draft-vocabulary logits [.., Vd]."""
        return self.lm_head(self.norm(hidden))

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary ids -> target-vocabulary ids (``draft + d2t[draft]``)."""
        return draft_ids + self.d2t[draft_ids]

    def forward(
        self,
        features: torch.Tensor,  # [B, Q, 3*Ht] target features, or [B, Q, H] head outputs
        token_ids: torch.Tensor,  # [B, Q] target-vocab ids of the NEXT token of each position
        positions: torch.Tensor | None,  # [B, Q] rope positions (None: ``rope`` given)
        mask: torch.Tensor | None = None,  # [B, 1, Q, K] bool over cached + new; None = causal
        cache: Eagle3KVCache | None = None,
        embeds: torch.Tensor | None = None,  # [B, Q, H] precomputed embeddings of token_ids
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,  # precomputed cos, sin [B, Q, D]
    ) -> torch.Tensor:
        """Return the layer output [B, Q, H] (pre-``norm``; the next depth's feature).

        With a ``cache`` the new K/V are appended as speculative entries; call
        ``cache.commit()`` to keep them or ``cache.rollback()`` to drop them.
        """
        feature = self.project(features) if features.shape[-1] != self.config.hidden_size else features
        if embeds is None:
            embeds = self.embed(token_ids)
        embeds = embeds.to(feature.dtype)
        if rope is None:
            rope = self.rotary_emb(feature, positions)
        return self.midlayer(embeds, feature, rope, mask, cache)
