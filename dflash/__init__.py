"""DFlash: a block-diffusion draft model over a frozen target's hidden states.

Attributes are imported lazily so light submodules (``dflash.hub``, ``dflash.config``)
do not pull in the model code and Transformers' modelling stack.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = ["ContextKVCache", "DFlashConfig", "DFlashDraftModel", "default_target_layer_ids"]

_WHERE = {
    "ContextKVCache": ".model",
    "DFlashDraftModel": ".model",
    "DFlashConfig": ".config",
    "default_target_layer_ids": ".config",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
