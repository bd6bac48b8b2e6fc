"""Train a small EAGLE-3 head against a frozen target with the *training-time test*.

Why unroll: at inference the head's own output state replaces the target feature below
the root, so a head trained only on target features sees inputs at depth >= 2 it never
saw in training.  EAGLE-3 therefore unrolls the head ``--ttt-steps`` times per batch
(reference ``eagle/traineagle3/cnets.py``: 7 steps, loss weights ``0.8 ** k``,
``main.py``).  Step ``k`` at position ``t`` reads

* feature: target features at ``t`` (step 0) or the head's step ``k-1`` output at ``t``;
* token: the data token at ``t + 1 + k`` (teacher forcing on tokens);
* keys: step-0 keys of positions ``<= t`` (committed context) plus the keys of steps
  ``1..k`` at ``t`` (its own ancestors), rope position ``t + k`` -- exactly a depth-``k``
  node of the inference tree rooted after position ``t``;
* target: the target's distribution at ``t + 1 + k`` restricted to the draft vocabulary
  (soft cross-entropy), counted only where the target's argmax is in that vocabulary.

The loss is normalised by the number of counted positions per step (the reference divides
by all positions).  Data loading and the target pass reuse :mod:`dflash.train_data` /
:mod:`dflash.train_setup`.  The draft vocabulary is the full target vocabulary or its
``--draft-vocab-size`` most frequent tokens in ``--data`` (reference ``d2t``/``t2d``).

Usage::

    python -m dflash.eagle3.train --target DIR --data ids.npy --out runs/eagle3 --steps 500
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import LlamaConfig

from .. import train_data as td
from .. import train_setup as ts
from .checkpoint import save_eagle3
from .config import Eagle3Config
from .model import Eagle3Head, _rope


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dflash.eagle3.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="HF repo id or local folder of the target causal LM")
    p.add_argument("--data", required=True, help=".npy / .bin (uint16) token ids, or a text file")
    p.add_argument("--out", required=True, help="output folder: head/ (public layout) and train_log.jsonl")
    p.add_argument("--draft-vocab-size", type=int, help="keep the N most frequent data tokens (default: all)")
    p.add_argument("--target-layer-ids", help="comma-separated output-of-layer ids (default: reference taps)")
    p.add_argument("--intermediate-size", type=int, help="head MLP width (default: the target's)")
    p.add_argument("--ttt-steps", type=int, default=7, help="training-time-test unroll length")
    p.add_argument("--step-decay", type=float, default=0.8, help="loss weight of unroll step k: decay**k")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--grad-clip", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--target-dtype", default="auto", help="auto (bf16 GPU / fp32 CPU), bf16, fp32")
    p.add_argument("--layout", choices=("eagle", "angelslim"), default="eagle")
    p.add_argument("--log-every", type=int, default=10)
    return p


def vocab_maps(tokens: np.ndarray, vocab: int, n: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(d2t [n], t2d [vocab]) for the ``n`` most frequent ids (ties: lower id); all if None."""
    if n is None or n >= vocab:
        return torch.zeros(vocab, dtype=torch.long), torch.ones(vocab, dtype=torch.bool)
    counts = np.bincount(np.asarray(tokens, dtype=np.int64), minlength=vocab)[:vocab]
    used = np.sort(np.argsort(-counts, kind="stable")[:n])
    d2t = torch.from_numpy(used - np.arange(n)).long()
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[torch.from_numpy(used)] = True
    return d2t, t2d


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


def ttt_forward(head: Eagle3Head, feats: torch.Tensor, ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Unroll the head ``steps`` times; return each step's output states [B, T, H].

    feats [B, T, 3*Ht] target features, ids [B, T] tokens.  Step ``k`` at position ``t``
    equals a depth-``k`` tree node after committed context ``0..t`` (see module docstring).
    """
    b, t_len, _ = feats.shape
    attn, layer = head.midlayer.self_attn, head.midlayer
    nh, nkv, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    rep = nh // nkv
    pos = torch.arange(t_len, device=feats.device)
    causal = pos[None, :] <= pos[:, None]  # [T, T]
    feature = head.project(feats)  # [B, T, H]
    keys: list[torch.Tensor] = []  # per step [B, nh, T, D]
    vals: list[torch.Tensor] = []
    outs = []
    for k in range(steps):
        tok = torch.zeros_like(ids)
        tok[:, : t_len - 1 - k] = ids[:, 1 + k :]  # token t+1+k
        x = torch.cat([layer.input_layernorm(head.embed(tok)), layer.hidden_norm(feature)], dim=-1)
        cos, sin = head.rotary_emb(feature, (pos + k)[None].expand(b, -1))
        q = _rope(attn.q_proj(x).view(b, t_len, nh, d).transpose(1, 2), cos, sin)
        kk = _rope(attn.k_proj(x).view(b, t_len, nkv, d).transpose(1, 2), cos, sin).repeat_interleave(rep, 1)
        vv = attn.v_proj(x).view(b, t_len, nkv, d).transpose(1, 2).repeat_interleave(rep, 1)
        keys.append(kk)
        vals.append(vv)
        s0 = (q @ keys[0].transpose(-1, -2)) * d**-0.5  # [B, nh, T, T] committed context
        s0 = s0.masked_fill(~causal, float("-inf"))
        diag = [((q * kj).sum(-1) * d**-0.5)[..., None] for kj in keys[1:]]  # own chain, [B, nh, T, 1]
        p = torch.softmax(torch.cat([s0, *diag], dim=-1).float(), dim=-1).to(q.dtype)
        out = p[..., :t_len] @ vals[0]
        for j, vj in enumerate(vals[1:]):
            out = out + p[..., t_len + j : t_len + j + 1] * vj
        h = feature + attn.o_proj(out.transpose(1, 2).reshape(b, t_len, nh * d))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        outs.append(h)
        feature = h  # the head's own output feeds the next step
    return outs


def ttt_losses(head: Eagle3Head, feats: torch.Tensor, ids: torch.Tensor, logits: torch.Tensor,
               steps: int) -> tuple[list[torch.Tensor], list[float]]:
    """Per-step soft cross-entropies and argmax accuracies; logits [B, T, V] of the target."""
    b, t_len, _ = feats.shape
    t2d = head.t2d
    losses, accs = [], []
    for k, h in enumerate(ttt_forward(head, feats, ids, steps)):
        with torch.no_grad():
            tgt = torch.zeros_like(logits)
            tgt[:, : t_len - 1 - k] = logits[:, 1 + k :]  # target distribution at t+1+k
            valid = torch.zeros(b, t_len, dtype=torch.bool, device=feats.device)
            valid[:, : t_len - 1 - k] = True
            valid &= t2d[tgt.argmax(-1)]
            p_tgt = torch.softmax(tgt[..., t2d].float(), dim=-1)  # [B, T, Vd]
        logp = torch.log_softmax(head.logits(h).float(), dim=-1)
        n = valid.sum().clamp(min=1)
        losses.append((-(p_tgt * logp).sum(-1) * valid).sum() / n)
        accs.append(float(((logp.argmax(-1) == p_tgt.argmax(-1)) & valid).sum() / n))
    return losses, accs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    target = ts.load_target(args.target, ts.resolve_dtype(args.target_dtype, device), device)
    tokens = td.load_token_ids(args.data, ts.load_tokenizer(args.target), cache_dir=args.out)
    tcfg = getattr(target.config, "text_config", None) or target.config
    vocab = int(tcfg.vocab_size)
    d2t, t2d = vocab_maps(tokens, vocab, args.draft_vocab_size)
    cfg = head_config_for(target.config, int(d2t.numel()), ts.parse_layer_ids(args.target_layer_ids),
                          args.intermediate_size)
    layer_ids = cfg.layer_ids(int(tcfg.num_hidden_layers))
    head = Eagle3Head(cfg).to(device)
    with torch.no_grad():
        head.d2t.copy_(d2t)
        head.t2d.copy_(t2d)
    head.attach_target_embeddings(target.get_input_embeddings())
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed)
    weights = [args.step_decay**k for k in range(args.ttt_steps)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    history: list[dict[str, Any]] = []
    with open(out / "train_log.jsonl", "w", encoding="utf-8") as log:
        for step in range(1, args.steps + 1):
            ids = td.sample_windows(tokens, args.batch_size, args.seq_len, gen).to(device)
            with torch.no_grad():
                o = target(input_ids=ids, output_hidden_states=True, use_cache=False)
                feats = torch.cat([o.hidden_states[i + 1] for i in layer_ids], dim=-1).float()
                logits = o.logits.float()
            losses, accs = ttt_losses(head, feats, ids, logits, args.ttt_steps)
            loss = sum(w * l for w, l in zip(weights, losses))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
            opt.step()
            row = {"step": step, "loss": loss.item(), "step_losses": [l.item() for l in losses], "acc": accs}
            history.append(row)
            log.write(json.dumps(row) + "\n")
            if args.log_every and (step % args.log_every == 0 or step == 1):
                print(f"step {step}: loss {row['loss']:.4f} acc0 {accs[0]:.3f}", file=sys.stderr)
            if not math.isfinite(row["loss"]):
                raise ts.TrainSetupError(f"loss became {row['loss']} at step {step}")
    save_eagle3(head.cpu(), out / "head", layout=args.layout)
    return {"history": history, "head_dir": str(out / "head"), "layer_ids": layer_ids}


def cli(argv: list[str] | None = None) -> int:
    try:
        main(argv)
    except (ts.TrainSetupError, td.DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
