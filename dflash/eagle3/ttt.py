"""The training-time test: the head unrolled over its own outputs, and its per-step scores.

Why unroll: at inference the head's own output state replaces the target feature below
the root, so a head trained only on target features sees inputs at depth >= 2 it never
saw in training.  EAGLE-3 therefore unrolls the head several times per batch (reference
``eagle/traineagle3/cnets.py``: 7 steps, loss weights ``0.8 ** k``).  Step ``k`` at
position ``t`` reads

* feature: target features at ``t`` (step 0) or the head's step ``k-1`` output at ``t``;
* token: the data token at ``t + 1 + k`` (teacher forcing on tokens);
* keys: step-0 keys of positions ``<= t`` (committed context) plus the keys of steps
  ``1..k`` at ``t`` (its own ancestors), rope position ``t + k`` -- exactly a depth-``k``
  node of the inference tree rooted at token ``t + 1``;
* target: the target's distribution at ``t + 1 + k`` restricted to the draft vocabulary
  (soft cross-entropy), counted only where the target's argmax is in that vocabulary.

So step ``k`` drafts the ``(k + 1)``-th token after the root, the token a DFlash block
predicts at its position ``k + 1``: per-step accuracies of a head and per-position
accuracies of a drafter measured at the same roots compare like for like.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .model import Eagle3Head, _rope


@torch.no_grad()
def target_pass(target: torch.nn.Module, ids: torch.Tensor, layer_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [B, T] -> (tapped features [B, T, 3*Ht], logits [B, T, V]), both fp32."""
    o = target(input_ids=ids, output_hidden_states=True, use_cache=False)
    return torch.cat([o.hidden_states[i + 1] for i in layer_ids], dim=-1).float(), o.logits.float()


@dataclass
class StepScore:
    """One unrolled step's soft cross-entropy (mean over counted positions) and hit count."""

    loss: torch.Tensor  # scalar, differentiable
    hits: torch.Tensor  # scalar long: head argmax == target argmax, over counted positions
    counted: torch.Tensor  # scalar long: positions counted


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


@dataclass
class TargetView:
    """The target's side of every step's score, computed once per batch: it is the same
    tensor at every depth, shifted by the step."""

    in_draft: torch.Tensor  # [B, T] bool: the target's argmax lies in the draft vocabulary
    p: torch.Tensor  # [B, T, Vd] fp32: the target's distribution over the draft vocabulary
    best: torch.Tensor  # [B, T] long: its argmax, as a draft id


@torch.no_grad()
def target_view(head: Eagle3Head, logits: torch.Tensor) -> TargetView:
    """The target's ``logits`` [B, T, V] as the head's steps are scored against them.

    A draft vocabulary as large as the target's holds every token; that is read from the
    shapes, not from ``t2d`` on the device, so a training step does not wait for the device
    here."""
    t2d = head.t2d
    z = logits if head.d2t.numel() == t2d.numel() else logits[..., t2d]
    p = torch.softmax(z.float(), dim=-1)
    return TargetView(t2d[logits.argmax(-1)], p, p.argmax(-1))


def step_scores(head: Eagle3Head, feats: torch.Tensor, ids: torch.Tensor, view: TargetView, steps: int,
                roots: torch.Tensor | None = None, outside_vocab_counts: bool = False) -> list[StepScore]:
    """Score every unrolled step against the target's ``view``; see :func:`ttt_scores`.

    No host synchronisation and no data-dependent branch: the trainer compiles it whole.
    """
    t_len = feats.shape[1]
    scores = []
    for k, h in enumerate(ttt_forward(head, feats, ids, steps)):
        n_pos = t_len - 1 - k  # positions whose step-k label exists
        labelled = view.in_draft[:, 1 + k :]  # [B, n_pos]
        valid = torch.ones_like(labelled) if outside_vocab_counts else labelled
        if roots is not None:
            valid = valid & roots[:, 1 : 1 + n_pos]
        z_k = head.logits(h[:, :n_pos]).float()  # [B, n_pos, Vd]
        ce = F.cross_entropy(z_k.flatten(0, 1), view.p[:, 1 + k :].flatten(0, 1), reduction="none")  # [B * n_pos]
        w = (valid & labelled).flatten()
        hits = ((z_k.detach().argmax(-1) == view.best[:, 1 + k :]) & labelled & valid).sum()
        scores.append(StepScore((ce * w).sum() / w.sum().clamp(min=1), hits, valid.sum()))
    return scores


def ttt_scores(head: Eagle3Head, feats: torch.Tensor, ids: torch.Tensor, logits: torch.Tensor, steps: int,
               roots: torch.Tensor | None = None, outside_vocab_counts: bool = False) -> list[StepScore]:
    """Score every unrolled step against the target's ``logits`` [B, T, V].

    ``roots`` [B, T] bool, if given, restricts the count to positions ``t`` whose root
    (token ``t + 1``) it marks, e.g. roots inside a generated continuation.  Training
    counts only labels inside the draft vocabulary; with ``outside_vocab_counts`` the
    others count too, as misses (a head can never draft them), so heads of different
    vocabularies compare like for like.
    """
    return step_scores(head, feats, ids, target_view(head, logits), steps, roots, outside_vocab_counts)


def weighted_loss(head: Eagle3Head, feats: torch.Tensor, ids: torch.Tensor, view: TargetView,
                  weights: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The training loss: step ``k``'s cross-entropy weighted ``weights[k]`` (weights [S], on the
    batch's device), the head's matmuls under ``dtype`` autocast (fp32: none).  Returns (loss,
    per-step losses [S], per-step accuracies [S]) as device tensors, so a step costs one host
    synchronisation, at its end.  The weights come in as a device tensor made once: a tensor
    made here from a list would be copied from pageable host memory, which waits for the
    device at every step."""
    with torch.autocast(feats.device.type, dtype=dtype, enabled=dtype != torch.float32):
        scores = step_scores(head, feats, ids, view, weights.shape[0])
    losses = torch.stack([s.loss for s in scores])  # [S]
    accs = torch.stack([s.hits.float() / s.counted.clamp(min=1).float() for s in scores])  # [S]
    return (losses * weights).sum(), losses.detach(), accs
