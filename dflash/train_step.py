"""One training step of a DFlash drafter: the loss of a batch, its metrics and the schedule.

:class:`Trainer` runs the frozen target once over a batch of token windows (its tapped
hidden states are the drafter's context features, its own predictions the labels), then
every anchor's block through the drafter in ONE forward, kept apart by a block mask
(``dflash.train_data.build_block_mask``), exactly as at inference.  The loop around it,
with checkpoints and resume, is :mod:`dflash.train`.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import train_data as td
from .model import DFlashDraftModel


@dataclass
class StepOut:
    loss: torch.Tensor  # scalar, weighted mean cross-entropy
    correct: torch.Tensor  # [N, b-1] bool: draft argmax == target argmax


class Trainer:
    """Holds the frozen target pieces and the drafter; computes the loss of one batch."""

    def __init__(self, target: nn.Module, drafter: DFlashDraftModel, args: argparse.Namespace,
                 device: torch.device, amp_dtype: torch.dtype | None) -> None:
        self.target = target
        self.drafter = drafter
        self.forward_drafter = drafter  # replaced by a compiled wrapper with --compile
        self.embed = target.get_input_embeddings()
        self.lm_head = target.get_output_embeddings()
        self.cfg = drafter.config
        self.b = self.cfg.block_size
        self.args = args
        self.device = device
        self.amp_dtype = amp_dtype
        self.weights = td.position_weights(self.b, args.gamma, device)  # [b-1]

    def autocast(self):
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                              enabled=self.amp_dtype is not None)

    @torch.no_grad()
    def target_pass(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [B, T] -> (features [B, T, nF*H], logits [B, T, V])."""
        out = self.target(input_ids=ids, output_hidden_states=True, use_cache=False)
        hs = out.hidden_states  # L+1 entries; [i+1] is layer i's output, [-1] already normed
        feats = torch.cat([hs[i + 1] for i in self.cfg.target_layer_ids], dim=-1)
        return feats, out.logits

    def step(self, ids: torch.Tensor, anchors: torch.Tensor) -> StepOut:
        """Loss of one batch: ids [B, T], anchors [B, A] (sorted, 1 <= a <= T-b)."""
        b = self.b
        bsz, n_anchor = anchors.shape
        with self.autocast():
            feats, logits = self.target_pass(ids)
        with torch.no_grad():
            hard = td.gather_argmax_labels(logits, anchors, b)  # [B, A, b-1]
            soft = td.gather_soft_labels(logits, anchors, b) if self.args.labels == "soft" else None
            del logits
            # No block looks at positions >= its anchor; a compiled drafter gets a fixed
            # length instead, so shapes stay static and it compiles once.
            ctx_len = ids.shape[1] - b if self.args.compile else int(anchors.max())
            feats = feats[:, :ctx_len].to(next(self.drafter.parameters()).dtype)  # [B, C, nF*H]
            blk_ids = td.block_token_ids(ids, anchors, b, self.cfg.mask_token_id)  # [B, Q=A*b]
            blk_emb = self.embed(blk_ids).to(feats.dtype)  # [B, Q, H]
            blk_pos = td.block_positions(anchors, b)  # [B, Q]
            ctx_pos = torch.arange(ctx_len, device=ids.device).expand(bsz, ctx_len)  # [B, C]
            mask = td.build_block_mask(anchors, ctx_len, b)  # [B, 1, Q, C+Q]
        with self.autocast():
            h = self.forward_drafter(blk_emb, blk_pos, feats, ctx_pos, mask)  # [B, Q, H]
            h = h.view(bsz, n_anchor, b, -1)[:, :, 1:]  # [B, A, b-1, H]: position 0 is the known token
            dl = self.lm_head(h.to(self.lm_head.weight.dtype)).float()  # [B, A, b-1, V]
        if soft is None:
            ce = F.cross_entropy(dl.flatten(0, 2), hard.flatten(), reduction="none").view_as(hard)
        else:
            ce = -(soft * dl.log_softmax(dim=-1)).sum(dim=-1)  # [B, A, b-1]
        w = self.weights
        loss = (ce * w).sum() / (w.sum() * bsz * n_anchor)
        correct = (dl.detach().argmax(dim=-1) == hard).flatten(0, 1)  # [B*A, b-1]
        return StepOut(loss=loss, correct=correct)


class Meter:
    """Running means of loss, per-position accuracy and tau over a log interval."""

    def __init__(self) -> None:
        self.n = 0
        self.loss = 0.0
        self.hits: torch.Tensor | None = None  # [b-1] summed hits
        self.rows = 0
        self.tau = 0.0

    def add(self, out: StepOut) -> None:
        c = out.correct
        self.n += 1
        self.loss += float(out.loss.detach())
        hits = c.float().sum(dim=0).cpu()
        self.hits = hits if self.hits is None else self.hits + hits
        self.rows += c.shape[0]
        self.tau += float(td.expected_acceptance(c)) * c.shape[0]

    def summary(self) -> dict[str, Any]:
        acc = (self.hits / max(self.rows, 1)).tolist() if self.hits is not None else []
        return {"loss": self.loss / max(self.n, 1), "acc": [round(a, 4) for a in acc],
                "tau": self.tau / max(self.rows, 1)}


def lr_lambda(warmup: int, total: int, floor: float):
    """Linear warm-up then cosine decay to ``floor`` * lr (returns the multiplier)."""
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        prog = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * prog))
    return f


@torch.no_grad()
def evaluate(trainer: Trainer, tokens, args: argparse.Namespace) -> dict[str, Any]:
    """Validation loss / accuracy / tau on fixed windows (same draws every call)."""
    gen = torch.Generator().manual_seed(args.seed + 1_000_003)
    meter = Meter()
    trainer.drafter.eval()
    starts = window_starts(tokens, trainer, args)
    for _ in range(args.val_batches):
        ids = td.sample_windows(tokens, args.batch_size, args.seq_len, gen, starts).to(trainer.device)
        anchors = td.sample_anchors(args.batch_size, args.seq_len, trainer.b, args.anchors_per_seq, gen)
        meter.add(trainer.step(ids, anchors.to(trainer.device)))
    trainer.drafter.train()
    return meter.summary()


def window_starts(tokens, trainer: Trainer, args: argparse.Namespace):
    """Where windows may start: document starts with ``--doc-windows`` (None: any offset)."""
    if not getattr(args, "doc_windows", False):
        return None
    eos = trainer.target.config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    if eos is None:
        raise td.DataError("--doc-windows needs the target's eos_token_id")
    return td.documentwindow_starts(tokens, int(eos), args.seq_len)
