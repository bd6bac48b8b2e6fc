"""One clock on every engine: the first draft, over the whole prompt, is decode time, never prefill time.

The original release's harness times the prefill alone and starts the decode clock before
the drafter's first call; every engine here must do the same, or the fast engines' speedups
gain the first draft's time.  A drafter made deliberately slow on its whole-prompt call
shows on which side of the clock that call lands.
"""

from __future__ import annotations

import time

import pytest
import torch

from bastion.engines.choice import ENGINES
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
from tests.support.builders import save_eagle3_head, tiny_drafter, tiny_target

DELAY = 0.5  # seconds; many times a tiny prefill
PROMPT = list(range(5, 29))  # 24 tokens: longer than a block or a path, so the whole-prompt call stands out


class _DelayedOnPrompt:
    """Wraps a drafter callable: sleeps before the call whose context (argument ``index``) spans the prompt."""

    def __init__(self, fn, index: int, slowed: list[int]) -> None:
        self.fn, self.index, self.slowed = fn, index, slowed

    def __call__(self, *args, **kwargs):
        delay(args, self.index, self.slowed)
        return self.fn(*args, **kwargs)


def delay(args: tuple, index: int, slowed: list[int]) -> None:
    width = args[index].shape[1]  # [1, context rows, F]
    if width == len(PROMPT):
        slowed.append(width)
        time.sleep(DELAY)


def _slow_first_draft(engine: Engine, method: str) -> list[int]:
    """Make the drafter of ``method`` sleep on its whole-prompt call; returns the calls it slowed."""
    slowed: list[int] = []
    if method == "eagle3":  # the head's forward: (features [1, m, F], tokens, ...) on every engine
        engine.eagle3.head.register_forward_pre_hook(lambda module, args: delay(args, 0, slowed))
        if engine.name == "compiled":  # the compiled engine's fused head takes the pairs the same way
            head = engine.static.proposers["eagle3"].fused_head
            assert head is not None
            head.context = _DelayedOnPrompt(head.context, 0, slowed)
        return slowed
    # the drafter module (eager, static): (block, positions, context features [1, W, F], ...)
    engine.drafter.register_forward_pre_hook(lambda module, args: delay(args, 2, slowed))
    if engine.name == "compiled":  # the compiled engine calls its fused layers instead, the same way
        drafts = engine.static.proposers["dflash"]
        assert drafts.fused_drafter is not None
        drafts.fused_drafter = _DelayedOnPrompt(drafts.fused_drafter, 2, slowed)
    return slowed


@pytest.mark.parametrize("method", ["dflash", "bastion", "eagle3"])
@pytest.mark.parametrize("name", ENGINES)
def test_the_first_draft_is_decode_time(tmp_path, name, method):
    model = tiny_target("qwen3", layers=8, scale=4.0)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=4, seed=2)
    folder = save_eagle3_head(tmp_path / "head", model, draft_vocab=96)
    e3 = Eagle3Drafter.bind(models.load_eagle3_head(str(folder), target, "qwen3", torch.float32, "cpu"), target)
    engine = Engine(name, target, drafter, n_max=64, eagle3=e3)
    dec = engine.decoder(method, TreePolicy(budget=8) if method == "bastion" else None)
    fast = dec.generate(PROMPT, 12, collect_stats=True)  # untouched (and a warm-up)
    slowed = _slow_first_draft(engine, method)
    res = dec.generate(PROMPT, 12, collect_stats=True)
    assert res.output_ids == fast.output_ids
    assert slowed == [len(PROMPT)]  # one call took in the whole prompt, and it was slowed
    assert res.prefill_seconds < DELAY <= res.decode_seconds, (res.prefill_seconds, res.decode_seconds)
    assert res.steps[0].t_draft >= DELAY  # the first step's draft, as on the eager engine
