"""Tiny random models and tokenizers built inside the tests (float32, CPU).

Nothing here is downloaded: targets are randomly initialised Qwen3 or Llama models,
drafters are randomly initialised DFlash models, and the tokenizer is a byte-level BPE
with no merges (every byte is a token) plus the special tokens the harness needs.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from dflash import DFlashConfig, DFlashDraftModel

BYTE_VOCAB = 256
EOS_ID, MASK_ID = 256, 257


def tiny_target(family: str = "qwen3", vocab: int = 260, layers: int = 6, hidden: int = 64, seed: int = 0,
                max_positions: int = 2048, scale: float = 1.0):
    """A random causal LM; ``scale`` sharpens its next-token distributions."""
    torch.manual_seed(seed)
    common = dict(
        hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=hidden // 4, vocab_size=vocab, max_position_embeddings=max_positions,
        tie_word_embeddings=False, eos_token_id=EOS_ID if vocab > EOS_ID else None,
    )
    if family == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**common))
    elif family == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    else:
        raise ValueError(family)
    model.config._attn_implementation = "sdpa"
    if scale != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(scale)
    return model.eval()


def tiny_drafter(target, block_size: int = 8, layers: int = 2, seed: int = 1, mask_id: int | None = None,
                 layer_ids: list[int] | None = None) -> DFlashDraftModel:
    torch.manual_seed(seed)
    tc = target.config
    cfg = DFlashConfig(
        layers=Qwen3Config(
            hidden_size=tc.hidden_size, intermediate_size=tc.intermediate_size, num_hidden_layers=layers,
            num_attention_heads=tc.num_attention_heads, num_key_value_heads=tc.num_key_value_heads,
            head_dim=tc.hidden_size // tc.num_attention_heads, vocab_size=tc.vocab_size,
            max_position_embeddings=tc.max_position_embeddings,
        ),
        block_size=block_size,
        num_target_layers=tc.num_hidden_layers,
        target_layer_ids=layer_ids or [],
        mask_token_id=(tc.vocab_size - 1) if mask_id is None else mask_id,
    )
    return DFlashDraftModel(cfg).eval()


def byte_tokenizer():
    """A byte-level fast tokenizer: ids 0..255 are bytes, 256 = EOS, 257 = mask."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet(), key=lambda ch: ord(ch))
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    assert len(vocab) == BYTE_VOCAB
    vocab["<|endoftext|>"] = EOS_ID
    vocab["<|mask|>"] = MASK_ID
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|mask|>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   mask_token="<|mask|>", clean_up_tokenization_spaces=False)


def save_pair(folder: Path, family: str = "qwen3", block_size: int = 8, seed: int = 0) -> tuple[Path, Path]:
    """Write a random target (+ byte tokenizer) and drafter in Hugging Face / DFlash layouts."""
    target = tiny_target(family, vocab=260, seed=seed)
    t_dir, d_dir = folder / "target", folder / "drafter"
    target.save_pretrained(t_dir)
    byte_tokenizer().save_pretrained(t_dir)
    tiny_drafter(target, block_size=block_size, mask_id=MASK_ID).save_pretrained(str(d_dir))
    return t_dir, d_dir


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_theta": 500_000.0}


def llama31_target(layers: int = 8, vocab: int = 260, hidden: int = 64, seed: int = 0):
    """A random Llama-3.1-style target: llama3 RoPE scaling, theta 500k."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, vocab_size=vocab,
                      max_position_embeddings=2048, tie_word_embeddings=False, eos_token_id=EOS_ID,
                      rope_parameters=dict(LLAMA3_ROPE))
    model = LlamaForCausalLM(cfg)
    model.config._attn_implementation = "sdpa"
    return model.eval()


def save_eagle3_head(folder: Path, target, draft_vocab: int = 96, seed: int = 2, layer_ids: list[int] | None = None,
                     layout: str = "eagle", scale: float = 1.0) -> Path:
    """Write a random EAGLE-3 head for ``target`` in a public layout, with a reduced draft vocabulary.

    The draft vocabulary is a random subset of the target's (``d2t``/``t2d`` as the
    releases store them); RoPE is the target's.  ``scale`` sharpens the head's logits.
    """
    from dflash.eagle3.checkpoint import save_eagle3
    from dflash.eagle3.model import Eagle3Head
    from dflash.eagle3.train import head_config_for

    g = torch.Generator().manual_seed(seed)
    vocab = int(target.config.vocab_size)
    cfg = head_config_for(target.config, draft_vocab, layer_ids, None)
    torch.manual_seed(seed)
    head = Eagle3Head(cfg)
    used = torch.sort(torch.randperm(vocab, generator=g)[:draft_vocab]).values
    with torch.no_grad():
        head.d2t.copy_(used - torch.arange(draft_vocab))
        head.t2d.zero_()
        head.t2d[used] = True
        head.lm_head.weight.mul_(scale)
    save_eagle3(head, folder, layout=layout)
    return Path(folder)
