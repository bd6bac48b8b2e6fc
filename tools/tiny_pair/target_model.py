"""The tiny target's architecture and its language-model loss, from the training run's arguments.

The target is a stock ``Qwen3ForCausalLM`` so that the decoding engines load it as they
would a published checkpoint; only its size comes from the command line.
"""

from __future__ import annotations


def build_model(args, vocab_size: int, eos_id: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        max_position_embeddings=args.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta},
        rms_norm_eps=args.rms_norm_eps,
        tie_word_embeddings=True,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        use_cache=True,
    )
    return Qwen3ForCausalLM(cfg)


def lm_loss(model, ids):
    """Mean next-token cross-entropy of ``ids`` [B, T] (fp32 logits)."""
    import torch.nn.functional as F

    logits = model(input_ids=ids, use_cache=False).logits  # [B, T, V]
    return F.cross_entropy(logits[:, :-1].float().flatten(0, 1), ids[:, 1:].flatten())


def evaluate(model, windows, batch_size: int, device, autocast, max_tokens: int = 0) -> float:
    """Mean token NLL over ``windows`` [N, T] (evenly strided subset when capped)."""
    import torch

    n = windows.shape[0]
    if max_tokens:
        keep = max(1, min(n, max_tokens // windows.shape[1]))
        windows = windows[torch.linspace(0, n - 1, keep).long()]
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, windows.shape[0], batch_size):
            ids = windows[i : i + batch_size].to(device)
            with autocast():
                loss = lm_loss(model, ids)
            k = ids.shape[0] * (ids.shape[1] - 1)
            total += float(loss) * k
            count += k
    model.train(was_training)
    return total / max(count, 1)
