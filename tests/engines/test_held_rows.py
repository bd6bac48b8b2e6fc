"""The DFlash proposer's rows set aside by steps without a draft, kept on the device.

A step of this project's rule that does not draft commits through ``keep_root(hold=True)``:
the rows the last commit kept (as many as its count) go after those set aside before, in
the proposer's wide buffer, and the next draft takes them all in.  The host only counts.
"""

from __future__ import annotations

import pytest
import torch

from bastion.engines.static_engine import StaticEngine
from bastion.models.target import Target
from tests.support.builders import tiny_drafter, tiny_target


@pytest.fixture(scope="module")
def proposer():
    model = tiny_target("qwen3", seed=3)
    engine = StaticEngine(Target(model), tiny_drafter(model, block_size=8), max_context=64, n_max=32, graphs=False)
    return engine.proposers["dflash"]


def test_a_held_step_appends_the_kept_rows_after_those_held_before(proposer):
    p = proposer
    feat = p.pend.shape[-1]
    p.held.fill_(2)
    p.wide.zero_()
    p.pend[0].copy_(torch.arange(8 * feat, dtype=p.pend.dtype).view(8, feat))
    p.pend_count.fill_(3)  # the last commit kept the root and two accepted nodes
    p.features[0].fill_(-1.0)
    p.keep_root(hold=True)
    assert torch.equal(p.wide[0, 2:5], torch.arange(3 * feat, dtype=p.pend.dtype).view(3, feat))
    assert not p.wide[0, :2].any() and not p.wide[0, 5:-1].any()  # nothing else moved (the last row takes the rest)
    assert int(p.held) == 5 and int(p.pend_count) == 1
    assert torch.equal(p.pend[0], torch.full_like(p.pend[0], -1.0))  # the root's states, for the next step
    p.keep_root()  # a drafted one-node step keeps the root and sets nothing aside
    assert int(p.held) == 5


def test_rows_that_would_overflow_the_wide_buffer_are_refused_by_the_count(proposer):
    p = proposer
    p.held_rows = 0
    room = p.wide.shape[1] - 1  # the last row takes the writes past the count
    p.hold(room - 1)
    with pytest.raises(RuntimeError, match=rf"{room + 1} context rows \(those set aside .* do not fit the {room} rows"):
        p.hold(1)
    p.held_rows = 0


def test_a_prompt_without_a_first_draft_is_held_whole_and_its_first_commit_adds_nothing(proposer):
    p = proposer
    feat = p.pend.shape[-1]
    p.wide.zero_()
    prompt = torch.arange(1, 5 * feat + 1, dtype=p.pend.dtype).view(1, 5, feat)
    p.pend_count.fill_(7)  # whatever the last prompt left
    p.hold_prompt(prompt)
    assert torch.equal(p.wide[:, :5], prompt) and not p.wide[0, 5:].any()
    assert int(p.held) == 5 and p.held_rows == 5 and int(p.pend_count) == 0
    p.hold(0)  # the first step's commit: nothing kept before it
    p.keep_root(hold=True)
    assert torch.equal(p.wide[:, :5], prompt) and not p.wide[0, 5:-1].any()
    assert int(p.held) == 5 and int(p.pend_count) == 1  # its own row goes with the next held step
    p.held_rows = 0
