"""Configuration of a DFlash block-diffusion drafter.

The public drafter checkpoints store a Qwen3 ``config.json`` with a few extra fields
(``block_size``, ``num_target_layers`` and a ``dflash_config`` dict holding
``target_layer_ids`` and ``mask_token_id``).  The Qwen3 part is parsed by Transformers'
own ``Qwen3Config`` so that RoPE parameters are normalised exactly as for a target; the
DFlash part lives beside it.  Keeping the two apart (instead of subclassing the config
dataclass) keeps us independent of Transformers' config internals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import Qwen3Config

_DFLASH_KEYS = ("block_size", "num_target_layers", "dflash_config", "architectures", "auto_map")


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """Spread the tapped target layers evenly from layer 1 to layer L-3.

    The public drafters were trained on these layers when their config names none, so a
    config without ``target_layer_ids`` must reproduce exactly this choice.
    """
    if num_target_layers < 1:
        raise ValueError(f"num_target_layers must be >= 1, got {num_target_layers}")
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    span = end - start
    return [int(round(start + i * span / (num_draft_layers - 1))) for i in range(num_draft_layers)]


@dataclass
class DFlashConfig:
    """Qwen3 layer hyper-parameters (``layers``) plus the DFlash fields."""

    layers: Qwen3Config
    block_size: int = 16
    num_target_layers: int | None = None
    target_layer_ids: list[int] = field(default_factory=list)
    mask_token_id: int | None = None

    def __post_init__(self) -> None:
        if self.block_size < 2:
            raise ValueError(f"block_size must be >= 2 (one known token plus masks), got {self.block_size}")
        if not self.target_layer_ids:
            if self.num_target_layers is None:
                raise ValueError(
                    "drafter config has neither dflash_config.target_layer_ids nor num_target_layers; "
                    "add one of them to config.json"
                )
            self.target_layer_ids = default_target_layer_ids(
                int(self.num_target_layers), int(self.layers.num_hidden_layers)
            )
        self.target_layer_ids = [int(i) for i in self.target_layer_ids]

    # -- convenient views of the layer config ------------------------------------------
    @property
    def hidden_size(self) -> int:
        return int(self.layers.hidden_size)

    @property
    def num_hidden_layers(self) -> int:
        return int(self.layers.num_hidden_layers)

    @property
    def vocab_size(self) -> int:
        return int(self.layers.vocab_size)

    # -- (de)serialisation ----------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DFlashConfig":
        rest = {k: v for k, v in data.items() if k not in _DFLASH_KEYS}
        rest.pop("model_type", None)
        dcfg = dict(data.get("dflash_config") or {})
        return cls(
            layers=Qwen3Config(**rest),
            block_size=int(data.get("block_size", 16)),
            num_target_layers=data.get("num_target_layers"),
            target_layer_ids=list(dcfg.get("target_layer_ids") or []),
            mask_token_id=dcfg.get("mask_token_id"),
        )

    @classmethod
    def from_json_file(cls, path: str | Path) -> "DFlashConfig":
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))

    def to_dict(self) -> dict[str, Any]:
        out = self.layers.to_dict()
        out["model_type"] = "qwen3"
        out["architectures"] = ["DFlashDraftModel"]
        out["block_size"] = self.block_size
        out["num_target_layers"] = self.num_target_layers
        out["dflash_config"] = {
            "target_layer_ids": list(self.target_layer_ids),
            "mask_token_id": self.mask_token_id,
        }
        return out

    def to_json_file(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=2, sort_keys=True)
            fh.write("\n")
