"""Model shapes for benchmarks with random weights (no downloads needed)."""

from __future__ import annotations

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from dflash import DFlashConfig, DFlashDraftModel

SHAPES = {
    # Qwen3-8B: 36 layers, hidden 4096, 32 q / 8 kv heads of 128, MLP 12288, vocab 151936
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                     rope_theta=1_000_000, tie_word_embeddings=False),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                     rope_theta=1_000_000, tie_word_embeddings=True),
    "small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=6, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, vocab_size=4096, max_position_embeddings=8192,
                  tie_word_embeddings=True),
}
DRAFT_LAYERS = {"qwen3-8b": 5, "qwen3-4b": 5, "small": 2}


def random_pair(shape: str, device: torch.device, dtype: torch.dtype, block_size: int = 16, seed: int = 0):
    """A randomly initialised target and a DFlash drafter of the public drafters' shape."""
    torch.manual_seed(seed)
    cfg = Qwen3Config(**SHAPES[shape])
    with torch.device(device):
        target = Qwen3ForCausalLM(cfg).to(dtype)
    target.config._attn_implementation = "sdpa"
    dcfg = DFlashConfig(
        layers=Qwen3Config(**{**SHAPES[shape], "num_hidden_layers": DRAFT_LAYERS[shape]}),
        block_size=block_size,
        num_target_layers=cfg.num_hidden_layers,
        mask_token_id=cfg.vocab_size - 1,
    )
    with torch.device(device):
        drafter = DFlashDraftModel(dcfg).to(dtype)
    return target.eval(), drafter.eval()


# EAGLE-3 heads of the public releases for these targets: one Llama layer as wide as the
# target (AngelSlim's Qwen3 heads keep Qwen3's head_dim 128), a 32k draft vocabulary.
EAGLE3_DRAFT_VOCAB = {"qwen3-8b": 32000, "qwen3-4b": 32000, "small": 1024}


def random_target(shape: str, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """A randomly initialised Qwen3 target of a named shape."""
    torch.manual_seed(seed)
    with torch.device(device):
        target = Qwen3ForCausalLM(Qwen3Config(**SHAPES[shape])).to(dtype)
    target.config._attn_implementation = "sdpa"
    return target.eval()


def random_eagle3_head(shape: str, target, device: torch.device, dtype: torch.dtype, seed: int = 1):
    """A random EAGLE-3 head of the public heads' shape for ``target`` (draft vocabulary: the first ids)."""
    from dflash.eagle3.model import Eagle3Head
    from dflash.eagle3.train import head_config_for

    vd = min(EAGLE3_DRAFT_VOCAB[shape], int(target.config.vocab_size))
    layer_ids = [0, 2, 4] if target.config.num_hidden_layers < 7 else None
    cfg = head_config_for(target.config, vd, layer_ids, None)
    torch.manual_seed(seed)
    with torch.device(device):
        head = Eagle3Head(cfg).to(dtype)
    head.t2d.zero_()
    head.t2d[:vd] = True  # d2t = 0: draft id i is target id i
    return head.eval()
