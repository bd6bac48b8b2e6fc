"""The DFlash draft model: Qwen3-style layers with KV injection.

A drafter predicts a whole block of future tokens in one forward.  Its queries come only
from the block ``[last committed token, mask, mask, ...]`` (embedded with the *target's*
embeddings); its keys and values come from both the target's context features and the
block, with no causal mask.  The context features are the target's hidden states of a
few layers, concatenated, projected by ``fc`` and normalised by ``hidden_norm``; the same
projected features feed every draft layer.  Only the context part of each layer's K/V is
cached between steps: the block is new every step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3MLP,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    rotate_half,
)

from . import checkpoint
from .config import DFlashConfig


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [B, heads, S, D] by per-token angles ``cos``/``sin`` [B, S, D]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


class ContextKVCache:
    """K/V of the context part for every draft layer, preallocated and grown by doubling.

    Growing by doubling keeps appends amortised O(new tokens) instead of re-copying the
    whole context every step (as a ``torch.cat`` cache would).
    """

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.length = 0
        self._k: list[torch.Tensor | None] = [None] * num_layers
        self._v: list[torch.Tensor | None] = [None] * num_layers

    def reset(self) -> None:
        self.length = 0

    def crop(self, length: int) -> None:
        """Forget everything after ``length`` context tokens."""
        self.length = min(self.length, length)

    def extend(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``k_new``/``v_new`` [1, kv_heads, m, D] after the committed length.

        Returns views [1, kv_heads, length + m, D].  ``length`` itself advances only in
        :meth:`advance`, after every layer has appended the same ``m`` tokens.
        """
        m = k_new.shape[2]
        need = self.length + m
        buf = self._k[layer]
        if buf is None or buf.shape[2] < need or buf.dtype != k_new.dtype or buf.device != k_new.device:
            cap = max(need, 64 if buf is None else 2 * buf.shape[2])
            shape = (k_new.shape[0], k_new.shape[1], cap, k_new.shape[3])
            new_k = k_new.new_empty(shape)
            new_v = v_new.new_empty(shape)
            if buf is not None and self.length:
                new_k[:, :, : self.length] = buf[:, :, : self.length]
                new_v[:, :, : self.length] = self._v[layer][:, :, : self.length]
            self._k[layer], self._v[layer] = new_k, new_v
        k_buf, v_buf = self._k[layer], self._v[layer]
        k_buf[:, :, self.length : need] = k_new
        v_buf[:, :, self.length : need] = v_new
        return k_buf[:, :, :need], v_buf[:, :, :need]

    def advance(self, m: int) -> None:
        self.length += m


class DFlashAttention(nn.Module):
    """Non-causal attention of block queries over [context ; block] keys and values."""

    def __init__(self, config: DFlashConfig, layer_idx: int) -> None:
        super().__init__()
        cfg = config.layers
        self.layer_idx = layer_idx
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        self.num_heads = int(cfg.num_attention_heads)
        self.num_kv_heads = int(cfg.num_key_value_heads)
        bias = bool(getattr(cfg, "attention_bias", False))
        hidden = int(cfg.hidden_size)
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=cfg.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=cfg.rms_norm_eps)

    def _kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, s, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, s, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return _rope(k, cos, sin), v  # [B, kv_heads, S, D] each

    def forward(
        self,
        x: torch.Tensor,  # [B, Q, H] normalised block states
        ctx: torch.Tensor,  # [B, C, H] projected context features (new ones only when cached)
        rope_q: tuple[torch.Tensor, torch.Tensor],  # cos, sin [B, Q, D]
        rope_c: tuple[torch.Tensor, torch.Tensor],  # cos, sin [B, C, D]
        mask: torch.Tensor | None = None,  # [B, 1, Q, C_total + Q] bool, True = attend
        cache: ContextKVCache | None = None,
    ) -> torch.Tensor:
        b, q_len, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, q_len, self.num_heads, self.head_dim)).transpose(1, 2)
        q = _rope(q, *rope_q)  # [B, heads, Q, D]
        k_blk, v_blk = self._kv(x, *rope_q)
        k_ctx, v_ctx = self._kv(ctx, *rope_c)
        if cache is not None:
            k_ctx, v_ctx = cache.extend(self.layer_idx, k_ctx, v_ctx)
        k = torch.cat([k_ctx, k_blk], dim=2)  # [B, kv_heads, C_total + Q, D]
        v = torch.cat([v_ctx, v_blk], dim=2)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=self.head_dim**-0.5, enable_gqa=self.num_kv_heads != self.num_heads
        )  # [B, heads, Q, D]
        return self.o_proj(out.transpose(1, 2).reshape(b, q_len, self.num_heads * self.head_dim))


class DFlashDecoderLayer(nn.Module):
    def __init__(self, config: DFlashConfig, layer_idx: int) -> None:
        super().__init__()
        cfg = config.layers
        self.self_attn = DFlashAttention(config, layer_idx)
        self.mlp = Qwen3MLP(cfg)
        self.input_layernorm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, x, ctx, rope_q, rope_c, mask=None, cache=None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), ctx, rope_q, rope_c, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraftModel(nn.Module):
    """Block-diffusion drafter over a frozen target's features.

    The drafter owns no embeddings and no LM head: block tokens are embedded with the
    target's input embeddings and draft logits come from the target's ``lm_head``.
    """

    def __init__(self, config: DFlashConfig) -> None:
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.layers = nn.ModuleList(DFlashDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = Qwen3RMSNorm(hidden, eps=config.layers.rms_norm_eps)
        self.fc = nn.Linear(len(config.target_layer_ids) * hidden, hidden, bias=False)
        self.hidden_norm = Qwen3RMSNorm(hidden, eps=config.layers.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config.layers)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        cache_dir: str | None = None,
    ) -> "DFlashDraftModel":
        """Load a drafter from a local folder or a Hugging Face repo id (no remote code), strictly."""
        folder, config = checkpoint.read_config(name_or_path, cache_dir)
        with torch.device("meta"):
            model = cls(config)
        expected = {k: tuple(t.shape) for k, t in model.state_dict().items()}
        model.load_state_dict(checkpoint.matching_state(folder, expected, dtype), strict=True, assign=True)
        # Buffers (RoPE frequencies) are not in the checkpoint: rebuild them on the real device.
        model.rotary_emb = type(model.rotary_emb)(config.layers)
        return model.to(device=device).eval()

    def save_pretrained(self, folder: str) -> None:
        """Write ``config.json`` and ``model.safetensors`` in the public checkpoints' layout."""
        checkpoint.write_checkpoint(self.config, self.state_dict(), folder)

    # -- properties the decoders need --------------------------------------------------
    @property
    def block_size(self) -> int:
        return self.config.block_size

    @property
    def target_layer_ids(self) -> list[int]:
        return self.config.target_layer_ids

    @property
    def mask_token_id(self) -> int | None:
        return self.config.mask_token_id

    def new_cache(self) -> ContextKVCache:
        return ContextKVCache(self.config.num_hidden_layers)

    def project_context(self, features: torch.Tensor) -> torch.Tensor:
        """Raw concatenated target hidden states [B, C, n_tapped * H] -> [B, C, H]."""
        return self.hidden_norm(self.fc(features))

    def forward(
        self,
        block_embeds: torch.Tensor,  # [B, Q, H] target embeddings of the block(s)
        block_positions: torch.Tensor,  # [B, Q] absolute positions
        ctx_features: torch.Tensor,  # [B, C, n_tapped * H] raw target hidden states
        ctx_positions: torch.Tensor,  # [B, C]
        mask: torch.Tensor | None = None,  # [B, 1, Q, C_total + Q] bool; None = attend everything
        cache: ContextKVCache | None = None,
    ) -> torch.Tensor:
        """Return the final-norm hidden states of the block [B, Q, H].

        With a ``cache``, ``ctx_features`` are only the context tokens added since the
        last call; they are appended to the cache, which advances by their number.
        """
        ctx = self.project_context(ctx_features)
        x = block_embeds
        rope_q = self.rotary_emb(x, block_positions)
        rope_c = self.rotary_emb(x, ctx_positions)
        for layer in self.layers:
            x = layer(x, ctx, rope_q, rope_c, mask, cache)
        if cache is not None:
            cache.advance(ctx.shape[1])
        return self.norm(x)
