"""The analytic roofline of one verification forward, from a model's config.

FLOPs and bytes of a decoder-only transformer verifying ``s`` new tokens over ``c``
cached ones (any Qwen3- or Llama-shaped config: layers, widths, heads, vocabulary, tied
embeddings, dtype), and the device ceilings they are divided by.  The calibrated model
in :mod:`bastion.costmodel.model` scales the four times of :func:`roofline_terms`: matmul
FLOPs, context-free bytes, context bytes (the KV cache) and attention FLOPs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

SUPPORTED_FAMILIES = ("qwen3", "llama")


@dataclass(frozen=True)
class ModelShape:
    """What the roofline needs to know about a decoder-only causal LM."""

    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    dtype_bytes: int

    @classmethod
    def from_config(cls, config: Any, dtype_bytes: int) -> "ModelShape":
        """Read a Hugging Face config object or dict (Qwen3, Llama and look-alikes)."""
        get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
        family = get("model_type")
        if family not in SUPPORTED_FAMILIES:
            raise ValueError(
                f"unsupported model family {family!r}; supported families: {', '.join(SUPPORTED_FAMILIES)}"
            )
        heads = int(get("num_attention_heads"))
        hidden = int(get("hidden_size"))
        return cls(
            num_layers=int(get("num_hidden_layers")),
            hidden=hidden,
            num_heads=heads,
            num_kv_heads=int(get("num_key_value_heads") or heads),
            head_dim=int(get("head_dim") or hidden // heads),
            intermediate=int(get("intermediate_size")),
            vocab=int(get("vocab_size")),
            tied_embeddings=bool(get("tie_word_embeddings", False)),
            dtype_bytes=int(dtype_bytes),
        )

    # Parameter counts (matmul weights only: norm weights are < 0.01 % and ignored).
    @property
    def layer_params(self) -> int:
        h, hd = self.hidden, self.head_dim
        attn = h * self.num_heads * hd + 2 * h * self.num_kv_heads * hd + self.num_heads * hd * h
        return attn + 3 * h * self.intermediate

    @property
    def head_params(self) -> int:
        return self.vocab * self.hidden

    def flops(self, s, c):
        """FLOPs of one forward over ``s`` tokens attending to ``c`` cached plus ``s`` new ones."""
        return self.linear_flops(s) + self.attention_flops(s, c)

    def linear_flops(self, s):
        """Projections, MLP and LM head: 2 FLOPs per weight per token.

        The LM head runs on every token, since every tree node needs its next-token
        distribution.
        """
        return 2.0 * s * (self.num_layers * self.layer_params + self.head_params)

    def attention_flops(self, s, c):
        """QK^T and PV over the full ``c + s`` keys (a masked kernel still does that work)."""
        return self.num_layers * 4.0 * s * (c + s) * self.num_heads * self.head_dim

    def bytes(self, s, c):
        """Bytes moved through device memory by the same forward: :meth:`stream_bytes` + :meth:`cache_bytes`."""
        return self.stream_bytes(s) + self.cache_bytes(s, c)

    def stream_bytes(self, s):
        """The bytes that do not depend on the context.

        Weights once; every projection's input and output once per token; the logits.
        Tied embeddings are read once as the LM head (the lookup reads only ``s`` rows).
        """
        b = self.dtype_bytes
        h, hd, i = self.hidden, self.head_dim, self.intermediate
        weights = b * (self.num_layers * self.layer_params + self.head_params)
        embed_rows = b * s * h
        act_per_token = 4 * h + 2 * (self.num_heads + self.num_kv_heads) * hd + 3 * i
        activations = self.num_layers * b * s * act_per_token
        logits = b * s * self.vocab
        return weights + embed_rows + activations + logits

    def cache_bytes(self, s, c):
        """The bytes that grow with the context: the KV cache read for ``c + s`` keys and
        written for ``s``, and the boolean mask."""
        kv_row = 2 * self.num_kv_heads * self.head_dim * self.dtype_bytes  # K and V of one token in one layer
        return self.num_layers * kv_row * ((c + s) + s) + s * (c + s)


@dataclass(frozen=True)
class HardwarePeaks:
    """Measured ceilings of the device (not datasheet values)."""

    flops_per_s: float  # a large matrix multiply
    bytes_per_s: float  # a large device copy, bytes read + written
    attention_flops_per_s: float | None = None  # a large masked attention; None: the matmul rate

    def __post_init__(self) -> None:
        for k, v in asdict(self).items():
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise ValueError(f"hardware peak {k} must be finite and > 0, got {v}")


class RooflineTerms(NamedTuple):
    """The four roofline times (seconds) the calibrated model scales; arrays broadcast over (s, c)."""

    lin: Any  # projections, MLP and LM head FLOPs at the matmul rate
    stream: Any  # context-free bytes (weights, activations, logits) at the copy bandwidth
    kv: Any  # context bytes (K/V cache read and written, mask) at the copy bandwidth
    att: Any  # attention FLOPs over c + s keys at the masked-attention rate


def roofline_terms(shape: ModelShape, peaks: HardwarePeaks, s, c) -> RooflineTerms:
    """The roofline times of one forward over ``s`` new tokens after ``c`` cached ones."""
    attention_rate = peaks.attention_flops_per_s or peaks.flops_per_s
    return RooflineTerms(
        lin=shape.linear_flops(s) / peaks.flops_per_s,
        stream=shape.stream_bytes(s) / peaks.bytes_per_s,
        kv=shape.cache_bytes(s, c) / peaks.bytes_per_s,
        att=shape.attention_flops(s, c) / attention_rate,
    )
