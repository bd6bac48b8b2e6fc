"""The static engine's verification step alone, for the latency grid (:class:`~bastion.engines.base.VerifyProbe`).

Each probe replays exactly the verification graph a decode step of that size and
attention window replays, so the cost model is fitted to what decoding runs.
"""

from __future__ import annotations

from typing import Callable

import torch

from bastion.engines.static_engine import StaticEngine
from bastion.speculative.accept import propose


class StaticProbe:
    """Verification probes on a :class:`StaticEngine` (its buffers and graphs)."""

    def __init__(self, engine: StaticEngine) -> None:
        self.engine, self.target = engine, engine.target

    def reserve(self, tokens: int, nodes: int) -> None:
        """The latency grid's one allocation (growing later would drop captured graphs)."""
        self.engine.ensure_capacity(tokens, nodes=nodes)

    def at_context(self, c: int, room: int, generator: torch.Generator) -> None:
        """Nothing to prefill: the cached values do not change a verification's time."""

    @torch.no_grad()
    def probe(self, tokens: torch.Tensor, c: int, temperature: float = 0.0) -> Callable[[], None]:
        """One verification of a chain of ``tokens`` [s] at context ``c``, exactly as a decode step runs it.

        For the latency grid: the cached context's values do not change the time, so the
        first ``c`` entries are left as they are instead of prefilling ``c`` tokens.
        """
        eng, s = self.engine, tokens.shape[0]
        eng.ensure_capacity(c + s, nodes=s)
        kv, b = eng.window(c + s), eng.buffers
        b.length.fill_(c)
        b.cache.length = c
        b.tree_tokens[:s].copy_(tokens)
        b.tree_anc[:s, :s].copy_(torch.ones(s, s, dtype=torch.bool, device=eng.device).tril_())
        b.tree_depths[:s].copy_(b.arange[:s])
        # as a decode step: the DFlash drafter's layers tapped when the engine has one
        taps, greedy = "dflash" if "dflash" in eng.proposers else None, temperature <= 0
        gen = None if greedy else torch.Generator(device=eng.device).manual_seed(0)
        logits = None if greedy else eng.logits_buffer()  # allocated before the graph that writes it is captured

        def step() -> None:  # at T > 0, as a sampling decode step: logits out, then eager sampling at every node
            eng.runner(("verify", s, kv, greedy, taps), lambda: eng.verify(s, kv, greedy, taps))
            if not greedy:
                eng.buffers.proposals[:s].copy_(propose(logits[:s], temperature, gen))

        return step
