"""Configuration of an EAGLE-3 draft head and the target layers that feed it.

Public EAGLE-3 heads store a Llama ``config.json`` (``architectures:
["LlamaForCausalLMEagle3"]``, ``num_hidden_layers: 1``) plus ``draft_vocab_size`` and,
when the head is narrower or wider than the target, ``target_hidden_size``.  The Llama part
is parsed by Transformers' own ``LlamaConfig`` so that RoPE parameters (``rope_theta``,
``rope_scaling`` incl. ``llama3``) are normalised exactly as Transformers does for a model;
the EAGLE-3 fields live beside it, as in :mod:`dflash.config`.

Tapped layers (the one convention of this package)
--------------------------------------------------
Layer ids here are *output-of-layer* ids, the convention of ``dflash`` and of
``bastion.target.Target.set_feature_layers``: id ``i`` means Hugging Face
``hidden_states[i + 1]`` (``hidden_states[0]`` is the embedding output), i.e. the residual
stream *after* decoder layer ``i`` (0-based).  Features are concatenated in the order of
the ids, low to high.

The EAGLE reference (``eagle/model/modeling_llama_kv.py``, ``modeling_qwen3_kv.py``)
captures the residual stream *entering* decoder layers ``2``, ``L // 2`` and ``L - 3``,
i.e. ``hidden_states[2]``, ``hidden_states[L // 2]``, ``hidden_states[L - 3]``; SGLang's
``set_eagle3_layers_to_capture`` does the same by default.  In our convention that is
``[1, L // 2 - 1, L - 4]``.  SGLang reads explicit ids from the head's
``eagle_config.eagle_aux_hidden_state_layer_ids`` and adds 1 before capturing the input of
that layer, so those ids are already output-of-layer ids and are used as they are.  A
top-level ``eagle_aux_hidden_state_layer_ids`` (vLLM / speculators exports) is in the
``hidden_states`` index convention and is shifted by -1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import LlamaConfig

ARCHITECTURE = "LlamaForCausalLMEagle3"
# Keys that are ours, not LlamaConfig's.
_EAGLE_KEYS = ("draft_vocab_size", "target_hidden_size", "eagle_config", "architectures", "bias", "auto_map")


def default_eagle3_layer_ids(num_target_layers: int) -> list[int]:
    """Reference taps for a target with ``num_target_layers`` layers, output-of-layer ids.

    ``[1, L // 2 - 1, L - 4]`` == HF ``hidden_states`` indices ``[2, L // 2, L - 3]``.
    Targets with fewer than 7 layers would tap a layer twice (the reference then yields
    fewer than three features and ``fc`` cannot apply), so they are refused.
    """
    n = int(num_target_layers)
    ids = [1, n // 2 - 1, n - 4]
    if n < 7 or len(set(ids)) != 3:
        raise ValueError(f"EAGLE-3 taps three distinct layers; a target with {n} layers has too few (need >= 7)")
    return ids


def eagle3_layer_ids(config: "Eagle3Config", target_config: Any) -> list[int]:
    """Output-of-layer ids to pass to ``Target.set_feature_layers`` for this head and target.

    Explicit ids in the head's config win; otherwise the reference taps.  Feature ``i`` of
    the concatenation fed to ``fc`` is HF ``hidden_states[ids[i] + 1]``.
    """
    text = getattr(target_config, "text_config", None) or target_config
    return config.layer_ids(int(text.num_hidden_layers))


@dataclass
class Eagle3Config:
    """Llama layer hyper-parameters (``layers``) plus the EAGLE-3 fields."""

    layers: LlamaConfig
    draft_vocab_size: int
    target_hidden_size: int | None = None
    fc_bias: bool = False
    # Explicit taps in output-of-layer ids (see module docstring); None = reference default.
    target_layer_ids: list[int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # other EAGLE-side keys, kept for saving

    # -- convenient views --------------------------------------------------------------
    @property
    def hidden_size(self) -> int:
        return int(self.layers.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.layers.vocab_size)

    @property
    def feature_size(self) -> int:
        """Width of one tapped target feature (``fc`` reads three of them)."""
        return int(self.target_hidden_size or self.hidden_size)

    @property
    def head_dim(self) -> int:
        hd = getattr(self.layers, "head_dim", None)
        return int(hd or self.hidden_size // self.layers.num_attention_heads)

    def layer_ids(self, num_target_layers: int) -> list[int]:
        """The target layers to tap, output-of-layer ids (explicit ids win)."""
        if self.target_layer_ids:
            ids = [int(i) for i in self.target_layer_ids]
            bad = [i for i in ids if not 0 <= i < num_target_layers]
            if bad:
                raise ValueError(f"tapped layer ids {bad} are outside a target with {num_target_layers} layers")
            return ids
        return default_eagle3_layer_ids(num_target_layers)

    # -- (de)serialisation ---------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Eagle3Config":
        rest = {k: v for k, v in data.items() if k not in _EAGLE_KEYS}
        rest.pop("model_type", None)
        if "draft_vocab_size" not in data:
            raise ValueError("EAGLE-3 config.json has no draft_vocab_size")
        ids = None
        eagle = data.get("eagle_config") or {}
        if eagle.get("eagle_aux_hidden_state_layer_ids"):
            ids = [int(i) for i in eagle["eagle_aux_hidden_state_layer_ids"]]  # SGLang: output-of-layer
        elif data.get("eagle_aux_hidden_state_layer_ids"):
            ids = [int(i) - 1 for i in data["eagle_aux_hidden_state_layer_ids"]]  # hidden_states index
        rest.pop("eagle_aux_hidden_state_layer_ids", None)
        ths = data.get("target_hidden_size")
        return cls(
            layers=LlamaConfig(**rest),
            draft_vocab_size=int(data["draft_vocab_size"]),
            target_hidden_size=int(ths) if ths else None,
            fc_bias=bool(data.get("bias", False)),
            target_layer_ids=ids,
            extra={k: data[k] for k in ("eagle_config",) if k in data},
        )

    @classmethod
    def from_json_file(cls, path: str | Path) -> "Eagle3Config":
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))

    def to_dict(self) -> dict[str, Any]:
        out = self.layers.to_dict()
        out["model_type"] = "llama"
        # Spell RoPE the way every public head (and older Transformers) reads it.
        rp = dict(out.pop("rope_parameters", None) or {})
        if rp:
            out["rope_theta"] = rp.pop("rope_theta", 10000.0)
            out["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
        out["architectures"] = [ARCHITECTURE]
        out["num_hidden_layers"] = 1
        out["draft_vocab_size"] = self.draft_vocab_size
        if self.target_hidden_size:
            out["target_hidden_size"] = self.target_hidden_size
        if self.fc_bias:
            out["bias"] = True
        eagle = dict(self.extra.get("eagle_config") or {})
        if self.target_layer_ids:
            eagle["eagle_aux_hidden_state_layer_ids"] = list(self.target_layer_ids)
        if eagle:
            out["eagle_config"] = eagle
        return out

    def to_json_file(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=2, sort_keys=True)
            fh.write("\n")


def head_config_for(target_cfg: Any, draft_vocab: int, layer_ids: list[int] | None,
                    intermediate: int | None) -> Eagle3Config:
    """A head as wide as the target, with the target's attention shape and RoPE."""
    t = getattr(target_cfg, "text_config", None) or target_cfg
    hd = getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads
    rp = dict(getattr(t, "rope_parameters", None) or {"rope_theta": 10000.0, "rope_type": "default"})
    layers = LlamaConfig(
        hidden_size=t.hidden_size, intermediate_size=intermediate or t.intermediate_size,
        num_attention_heads=t.num_attention_heads, num_key_value_heads=t.num_key_value_heads, head_dim=hd,
        num_hidden_layers=1, vocab_size=t.vocab_size, rms_norm_eps=t.rms_norm_eps, hidden_act="silu",
        max_position_embeddings=t.max_position_embeddings, rope_parameters=rp,
    )
    return Eagle3Config(layers=layers, draft_vocab_size=draft_vocab, target_layer_ids=layer_ids)
