"""Decoding helpers shared by the engine tests: oracle drafts, a synthetic cost model, AR ids."""

from __future__ import annotations

import torch

from bastion.costmodel.model import CostModel, CostParams, StepOverheads
from bastion.costmodel.roofline import HardwarePeaks, ModelShape
from bastion.engines.eager import EagerDecoder
from bastion.engines.graphs import GraphRunner, warm_up
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy


def oracle_logits(rng: torch.Generator, reference: list[int], prompt_len: int, hit: float, c: int, block: int,
                  vocab: int) -> torch.Tensor:
    """Draft logits [block - 1, vocab] at context ``c``: random, depth d boosted to the true token with probability ``hit``."""
    logits = torch.randn(block - 1, vocab, generator=rng)
    offset = c - prompt_len + 1  # index in the reference of the token at position c + 1
    for d in range(block - 1):
        j = offset + d
        if j < len(reference) and torch.rand((), generator=rng) < hit:
            logits[d, reference[j]] += 8.0
    return logits


class OracleDecoder(EagerDecoder):
    """Drafts from a known continuation: depth d gets the true token with probability ``hit``."""

    def __init__(self, *a, reference: list[int], prompt_len: int, hit: float, seed: int, **kw):
        super().__init__(*a, **kw)
        rng = torch.Generator().manual_seed(seed)
        vocab, block = self.target.config.vocab_size, self.block_size
        if self.spec.drafter == "dflash":  # the drafter's forward replaced by the oracle's draws
            self.proposer.logits = lambda root, c: oracle_logits(rng, reference, prompt_len, hit, c, block, vocab)


def _cost_model(target) -> tuple[CostModel, StepOverheads]:
    """A synthetic but realistic cost model: flat, then rising with tree size."""
    shape = ModelShape.from_config(target.config, 4)
    peaks = HardwarePeaks(flops_per_s=2e9, bytes_per_s=5e9)
    return CostModel(shape, peaks, CostParams(a_c=1.0, b_c=2e-3, a_m=1.0, b_m=2e-3)), StepOverheads(1e-3, 5e-4)


def _ar(target: Target, prompt, n, stops=()):
    return EagerDecoder(target, "ar").generate(prompt, n, stop_token_ids=stops).output_ids


POLICIES = [
    TreePolicy(budget=1),  # tree = root only: AR through the tree path
    TreePolicy(budget=2),
    TreePolicy(budget=17),
    TreePolicy(budget=200, topk=7),
    TreePolicy(n_min=8, n_max=8),  # n_max equal to the bucket: always exactly 8
    TreePolicy(n_min=4, n_max=13),  # n_max not a bucket edge
    TreePolicy(n_min=16, n_max=512),
    TreePolicy(n_min=3, n_max=64, rounding=None),
]


def same_decode(eager, static) -> None:
    """Two decodes agree: tokens, stop reason, and each step's tree size, commit and context."""
    assert static.output_ids == eager.output_ids
    assert static.stop_reason == eager.stop_reason
    assert [(s.tree_size, s.committed, s.context) for s in static.steps] == [
        (s.tree_size, s.committed, s.context) for s in eager.steps
    ]


class PaddingRunner(GraphRunner):
    """Runs every function eagerly but reports graphs as enabled, so that the engine takes the
    paths it takes for graphs on a CPU: the wide drafts padded to a power of two.  A key's first
    call runs the capture's warm-ups too, restoring only ``writes`` after them, as a capture
    does: a function that updates state it does not declare shows here."""

    def __init__(self, device: torch.device, enabled: bool = True, warmup: int = 2) -> None:
        super().__init__(device, enabled=False, warmup=warmup)
        self.enabled, self.keys, self.seen = enabled, [], set()
        self.warming = False  # inside a first call's warm-ups (a recorder may skip what they compute)

    def __call__(self, key, fn, writes=()) -> None:
        if key not in self.seen:
            self.seen.add(key)
            self.warming = True
            warm_up(fn, writes, self.warmup)
            self.warming = False
        self.keys.append(key)
        fn()
