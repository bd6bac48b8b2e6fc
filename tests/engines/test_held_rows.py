"""The DFlash proposer's rows set aside by steps without a draft, kept on the device.

A step of this project's rule that does not draft sets rows aside before it verifies
(``hold``): the rows the last drafted step kept (as many as its count) go after those set
aside before, in the proposer's wide buffer, and its verify writes its own row after them
(``hold_row``); the next draft takes them all in.  The host only counts.
"""

from __future__ import annotations

import pytest
import torch

from bastion.engines.graphs import GraphRunner
from bastion.engines.static_engine import StaticEngine
from bastion.models.target import Target
from benchmarks.launch_count import cpu_launches
from tests.support.builders import tiny_drafter, tiny_target


@pytest.fixture(scope="module")
def proposer():
    model = tiny_target("qwen3", seed=3)
    engine = StaticEngine(Target(model), tiny_drafter(model, block_size=8), max_context=64, n_max=32, graphs=False)
    return engine.proposers["dflash"]


RUN = GraphRunner(torch.device("cpu"))  # eager: nothing to capture on a CPU


def test_the_first_step_without_a_draft_sets_the_drafted_rows_aside_and_then_its_own(proposer):
    p = proposer
    feat = p.pend.shape[-1]
    p.held.fill_(2)
    p.held_rows = 2
    p.wide.zero_()
    p.pend[0].copy_(torch.arange(8 * feat, dtype=p.pend.dtype).view(8, feat))
    p.pend_count.fill_(3)  # the last commit kept the root and two accepted nodes
    p.hold(RUN, 3)  # the last step drafted
    assert torch.equal(p.wide[0, 2:5], torch.arange(3 * feat, dtype=p.pend.dtype).view(3, feat))
    assert not p.wide[0, :2].any() and not p.wide[0, 5:-1].any()  # nothing else moved (the last row takes the rest)
    assert int(p.held) == 5 and p.held_rows == 6  # the host counts this step's own row already
    p.hold_row(torch.full((1, feat), -1.0, dtype=p.pend.dtype))  # inside its verify
    assert torch.equal(p.wide[0, 5], torch.full((feat,), -1.0, dtype=p.pend.dtype)) and int(p.held) == 6
    p.hold(RUN, 0)  # a second step without a draft: the last one's row is set aside already
    assert int(p.held) == 6 and p.held_rows == 7 and not p.wide[0, 6:-1].any()
    p.hold_row(torch.full((1, feat), -2.0, dtype=p.pend.dtype))
    assert int(p.held) == 7 and p.wide[0, 6, 0] == -2.0
    p.held_rows = 0


def test_rows_that_would_overflow_the_wide_buffer_are_refused_by_the_count(proposer):
    p = proposer
    p.held_rows = 0
    room = p.wide.shape[1] - 1  # the last row takes the writes past the count
    for _ in range(room):
        p.hold(RUN, 0)
    with pytest.raises(RuntimeError, match=rf"{room + 1} context rows \(those set aside .* do not fit the {room} rows"):
        p.hold(RUN, 0)
    p.held_rows = 0


def test_a_prompt_without_a_first_draft_is_held_whole_and_its_first_step_adds_its_own_row(proposer):
    p = proposer
    feat = p.pend.shape[-1]
    p.wide.zero_()
    prompt = torch.arange(1, 5 * feat + 1, dtype=p.pend.dtype).view(1, 5, feat)
    p.pend_count.fill_(7)  # whatever the last prompt left
    p.hold_prompt(prompt)
    assert torch.equal(p.wide[:, :5], prompt) and not p.wide[0, 5:].any()
    assert int(p.held) == 5 and p.held_rows == 5 and int(p.pend_count) == 0
    p.hold(RUN, 0)  # the first step: nothing kept before it
    assert torch.equal(p.wide[:, :5], prompt) and not p.wide[0, 5:-1].any() and int(p.held) == 5
    p.hold_row(torch.ones(1, feat, dtype=p.pend.dtype))
    assert int(p.held) == 6 and p.held_rows == 6 and p.wide[0, 5].eq(1).all()
    p.held_rows = 0


def test_a_step_without_a_draft_runs_three_operators_more_than_an_ar_step():
    """The tap (one concatenation), its row into the wide buffer and the held count: on a GPU each
    operator is a kernel of the step's graphs, which a step of AR's length pays for in full."""
    model = tiny_target("qwen3", seed=3)
    eng = StaticEngine(Target(model), tiny_drafter(model, block_size=8), max_context=64, n_max=32, graphs=False)
    prompt = [5, 7, 9, 11, 13]
    eng.prefill(torch.tensor([prompt]), "dflash", prompt=prompt)
    eng.buffers.root.fill_(3)
    eng.build_root()
    kv = eng.window(len(prompt) + 8)
    ar = cpu_launches(lambda: (eng.verify(1, kv, True, None), eng.commit_root(None)))
    held = cpu_launches(lambda: (eng.verify(1, kv, True, "dflash", True), eng.commit_root("dflash", True)))
    assert held["eager_ops"] - ar["eager_ops"] == 3, (ar, held)  # 9 when the commit moved the rows


def test_a_held_row_given_as_its_layers_parts_is_set_aside_as_their_concatenation(proposer):
    """The compiled engine hands a held row over as each tapped layer's state; off CUDA the parts are
    concatenated and written as a row given whole is (the kernel's own check: tests/engines/test_hold_kernel.py)."""
    p = proposer
    feat, n = p.pend.shape[-1], len(p.layer_ids)
    h = feat // n
    p.wide.zero_()
    p.held.fill_(4)
    parts = [torch.full((1, 1, h), float(j + 1), dtype=p.pend.dtype) for j in range(n)]
    p.hold_row(parts)
    assert int(p.held) == 5
    assert torch.equal(p.wide[0, 4], torch.cat([t.view(h) for t in parts]))
    assert not p.wide[0, :4].any() and not p.wide[0, 5:].any()
    p.held.zero_()
