"""DFlash: a block-diffusion draft model over a frozen target's hidden states."""

from .config import DFlashConfig, default_target_layer_ids
from .model import ContextKVCache, DFlashDraftModel

__all__ = ["ContextKVCache", "DFlashConfig", "DFlashDraftModel", "default_target_layer_ids"]
__version__ = "0.1.0"
