"""Prompts the static engine has prefilled, kept so the other methods of a job skip the forward.

A cell job (``decode_jobs: cell`` or ``model``) decodes every method over the same
prompts on one engine.  The prompt's prefill is the same causal forward for all of them:
the same K/V, the same last hidden state and, for methods that tap the same layers, the
same features.  On the 2-core CPU the tiny experiment spent about 20 s of its decode job
on 112 prefills of 16 prompts; with the memo each prompt is prefilled once per tap set.

What is kept is an exact copy, so a restored prefill decodes to the same bits as a fresh
one.  Decode times never include the prefill, so no reported speed changes; the records
of a restored prefill say so (``prefill_reused``), since their ``prefill_seconds`` is the
copy's time.

The memo is bounded in bytes and never evicts.  A cell decodes prompt by prompt, so a
prompt is reused right after its first prefill; but on multi-turn sets its methods run
one after another, each over all prompts, and there keeping the first prompts that fit
helps every later method, where evicting old entries for new ones would help none (the
paper's long prompts at 8B simply do not fit, and nothing is kept).  The cost: in a
prompt-by-prompt cell whose prompts outgrow the bound, only the first ones are reused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bastion.engines.static_buffers import StepBuffers
from bastion.models.target import Target

# Bytes of K/V, hidden states and features the memo may hold (device memory).
MEMO_BYTES = 256 << 20


@dataclass
class Prefilled:
    kv: torch.Tensor  # [L, 2, 1, kv_heads, P, D]: the target's cache over the prompt
    hidden: torch.Tensor  # [1, H]: the last position's final hidden state
    features: torch.Tensor | None  # [1, P, F]: the tapped layers' states, or None

    @property
    def nbytes(self) -> int:
        parts = (self.kv, self.hidden) + ((self.features,) if self.features is not None else ())
        return sum(t.numel() * t.element_size() for t in parts)


class PrefillMemo:
    """Exact prefill results by (tap set, prompt tokens), up to ``limit`` bytes in all."""

    def __init__(self, limit: int = MEMO_BYTES) -> None:
        self.limit = limit
        self.used = 0
        self._items: dict[tuple, Prefilled] = {}

    @staticmethod
    def key(prompt, taps: str | None) -> tuple | None:
        """The key of a prompt as the caller gave it (token ids, or a CPU tensor of them).

        A tensor on an accelerator gives None (not kept): reading it would cost the host
        synchronisation the decode loop is built to avoid.
        """
        if isinstance(prompt, torch.Tensor):
            if prompt.device.type != "cpu":
                return None
            prompt = prompt.reshape(-1).tolist()
        return taps, tuple(int(t) for t in prompt)

    def fits(self, nbytes: int) -> bool:
        return self.used + nbytes <= self.limit

    def restore(self, key: tuple | None, kv: torch.Tensor) -> Prefilled | None:
        """Copy a kept prompt's K/V into the cache ``kv`` [L, 2, 1, kv_heads, capacity, D]; None if not kept."""
        kept = None if key is None else self._items.get(key)
        if kept is not None:
            kv[..., : kept.kv.shape[-2], :].copy_(kept.kv)
        return kept

    def prefill(self, target: Target, bufs: StepBuffers, ids: torch.Tensor, taps: str | None,
                prompt=None) -> tuple[Prefilled, bool]:
        """The prompt ``ids`` [1, P] into the empty cache of ``bufs``, with features for ``taps`` (None: none).

        A causal forward (eager, one-off shapes), or the exact copy of one kept for the same
        prompt and taps; returns it and whether it was a copy.  ``prompt`` is the caller's
        host copy of the ids, the key (None: neither looked up nor kept).
        """
        p = ids.shape[1]
        key = None if prompt is None else self.key(prompt, taps)
        done = self.restore(key, bufs.cache.kv)
        reused = done is not None
        if done is None:
            bufs.cache.length = 0
            bufs.cache.write_index = bufs.arange[:p]
            bufs.cache.kv_len = p
            out = target.forward(ids, bufs.arange[:p][None], None, bufs.cache, features=taps is not None)
            done = self.keep(key, bufs.cache.kv[:, :, :, :, :p], out.hidden[0, -1:], out.features)
        bufs.length.fill_(p)
        bufs.cache.length = p
        return done, reused

    def keep(self, key: tuple | None, kv: torch.Tensor, hidden: torch.Tensor, features: torch.Tensor | None) -> Prefilled:
        """A fresh prefill's results; copies are kept if they fit (checked before copying anything)."""
        fresh = Prefilled(kv, hidden, features)
        if key is not None and key not in self._items and self.fits(fresh.nbytes):
            self._items[key] = Prefilled(kv.clone(), hidden.clone(), None if features is None else features.clone())
            self.used += fresh.nbytes
        return fresh

