"""DFlash: a block-diffusion draft model over a frozen target's hidden states.

Attributes are imported lazily so light submodules (``dflash.hub``, ``dflash.config``)
do not pull in the model code and Transformers' modelling stack.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = [
    "ContextKVCache",
    "DFlashConfig",
    "DFlashDraftModel",
    "Eagle3CheckpointError",
    "Eagle3Config",
    "Eagle3Head",
    "Eagle3KVCache",
    "Eagle3Tree",
    "check_fits_target",
    "default_eagle3_layer_ids",
    "default_target_layer_ids",
    "draft_tree",
    "eagle3_layer_ids",
    "load_eagle3",
    "save_eagle3",
]

_WHERE = {
    "ContextKVCache": ".model",
    "DFlashDraftModel": ".model",
    "DFlashConfig": ".config",
    "default_target_layer_ids": ".config",
    "Eagle3Config": ".eagle3.config",
    "default_eagle3_layer_ids": ".eagle3.config",
    "eagle3_layer_ids": ".eagle3.config",
    "Eagle3Head": ".eagle3.model",
    "Eagle3KVCache": ".eagle3.model",
    "Eagle3CheckpointError": ".eagle3.checkpoint",
    "check_fits_target": ".eagle3.checkpoint",
    "load_eagle3": ".eagle3.checkpoint",
    "save_eagle3": ".eagle3.checkpoint",
    "Eagle3Tree": ".eagle3.tree",
    "draft_tree": ".eagle3.tree",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
