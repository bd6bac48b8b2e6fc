"""The target model as the decoders see it: one forward over tree tokens.

We drive a Transformers causal LM's own modules (embeddings, rotary embedding, decoder
layers, final norm, LM head) in a short loop instead of calling ``model.forward``, for
three reasons: the tree mask is passed straight to attention with no mask-building
machinery in between; only the tapped layers' hidden states are kept (not all of them);
and the same loop can later be captured in a CUDA graph.  The numerics are those of the
model's own layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bastion.costmodel.roofline import SUPPORTED_FAMILIES
from bastion.models.kv_cache import CompactingCache


class UnsupportedModelError(ValueError):
    """The target is not a family the decoders know how to drive."""


@dataclass
class ForwardOut:
    hidden: torch.Tensor  # [1, s, H] after the final norm
    features: torch.Tensor | None  # [1, s, n_tapped * H] raw tapped hidden states


class Target:
    """Wraps a Hugging Face causal LM (Qwen3 or Llama family)."""

    def __init__(self, model: nn.Module, feature_layers: list[int] | None = None) -> None:
        family = getattr(model.config, "model_type", None)
        if family not in SUPPORTED_FAMILIES:
            raise UnsupportedModelError(
                f"unsupported target model family {family!r}; supported families: {', '.join(SUPPORTED_FAMILIES)}"
            )
        self.model = model
        self.config = model.config
        self.inner = model.model
        self.lm_head = model.get_output_embeddings()
        self.layers = list(self.inner.layers)[: self.config.num_hidden_layers]
        self.num_layers = len(self.layers)
        self.attn_impl = self.config._attn_implementation or "sdpa"
        self.max_positions = int(getattr(self.config, "max_position_embeddings", 1 << 30))
        self.set_feature_layers(feature_layers or [])

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    def set_feature_layers(self, layer_ids: list[int]) -> None:
        """Tap these layers: feature i is ``hidden_states[layer_ids[i] + 1]`` in HF terms."""
        bad = [i for i in layer_ids if not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(f"target layers {bad} do not exist: the target has {self.num_layers} layers (0..{self.num_layers - 1})")
        self.feature_layers = list(layer_ids)
        self._tap = {lid: k for k, lid in enumerate(self.feature_layers)}

    def new_cache(self, capacity: int = 256) -> CompactingCache:
        return CompactingCache(self.num_layers, capacity)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.inner.embed_tokens(ids)

    def _mask(self, mask: torch.Tensor | None) -> torch.Tensor | None:
        """Convert a boolean keep-mask to what the attention implementation expects."""
        if mask is None or self.attn_impl == "sdpa":
            return mask
        if self.attn_impl == "eager":
            zero = torch.zeros((), dtype=self.dtype, device=mask.device)
            neg = torch.full((), torch.finfo(self.dtype).min, dtype=self.dtype, device=mask.device)
            return torch.where(mask, zero, neg)
        raise UnsupportedModelError(
            f"attention implementation {self.attn_impl!r} cannot take a tree mask; use 'sdpa' or 'eager'"
        )

    @torch.no_grad()
    def forward(
        self,
        ids: torch.Tensor,  # [1, s]
        positions: torch.Tensor,  # [1, s]
        mask: torch.Tensor | None,  # [1, 1, s, c + s] bool (True = attend); None = causal from an empty cache
        cache: CompactingCache,
        features: bool = True,
    ) -> ForwardOut:
        if mask is None and cache.length != 0:
            raise ValueError("a causal (mask=None) forward is only valid on an empty cache")
        if mask is None and self.attn_impl != "sdpa":
            s = ids.shape[1]
            mask = torch.ones(s, s, dtype=torch.bool, device=ids.device).tril_()[None, None]
        x = self.embed(ids)
        rope = self.inner.rotary_emb(x, positions)
        attn_mask = self._mask(mask)
        taps: list[torch.Tensor | None] = [None] * len(self.feature_layers)
        for i, layer in enumerate(self.layers):
            x = layer(
                x,
                attention_mask=attn_mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                position_embeddings=rope,
            )
            k = self._tap.get(i)
            if k is not None and features and i != self.num_layers - 1:
                taps[k] = x
        hidden = self.inner.norm(x)
        feats = None
        if features and taps:
            # HF's hidden_states[-1] is the normed output, so tapping the last layer means that.
            feats = torch.cat([hidden if t is None else t for t in taps], dim=-1)
        return ForwardOut(hidden=hidden, features=feats)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM-head logits in the model's dtype (argmax needs no upcast; sampling upcasts)."""
        return self.lm_head(hidden)
