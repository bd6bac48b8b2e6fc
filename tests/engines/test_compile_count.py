"""Which graphs decoding compiles after calibration has run (Dynamo's frames, eager backend, CPU).

On a GPU the first decode job of a warm job worker paid for every graph that calibration
had not compiled already (session 13: 11 graphs, 22-27 s; session 14: 5).  The compiled engine's
functions are traced here as a GPU run traces them, with Dynamo's eager backend instead
of Inductor so that only the tracing is paid: calibration's fixed-budget BASTION runs
first, then AR, DFlash and adaptive BASTION, counting the frames each one compiles.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from bastion.engines import compiled
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.models.target import Target
from bastion.speculative.tree import TreePolicy
from tests.support.builders import tiny_drafter, tiny_target


@pytest.fixture
def eager_compile(monkeypatch):
    real = torch.compile

    def traced_only(fn=None, **kw):
        kw["backend"] = "eager"
        return real(fn, **kw)

    monkeypatch.setattr(torch, "compile", traced_only)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _frames(run) -> tuple[int, dict]:
    counters.clear()
    run()
    return counters["frames"]["total"], dict(counters["graph_break"])


def test_decoding_after_calibration_compiles_only_its_own_shapes(eager_compile):
    model = tiny_target("qwen3", seed=11, scale=3.0, layers=3)
    target, drafter = Target(model), tiny_drafter(model, block_size=6, seed=8)
    engine = StaticEngine(target, drafter, max_context=128, n_max=32)
    compiled.fuse(engine, compile=True)
    prompt = list(range(3, 30))

    def calibration():  # the step-constant probes: fixed budgets, several sizes
        for budget in (8, 12, 24):
            StaticDecoder(engine, "bastion", TreePolicy(budget=budget)).generate(prompt, 12)

    frames, breaks = _frames(calibration)
    assert frames > 0 and not breaks
    # AR: nothing.  Its one-token layer calls reuse the tree graphs (traced size-obliviously),
    # and its one-node build and commit are never compiled
    frames, breaks = _frames(lambda: StaticDecoder(engine, "ar").generate(prompt, 8))
    assert (frames, breaks) == (0, {})
    # DFlash: only its chain build (no graph break in the chunked argmax); its commit is BASTION's
    frames, breaks = _frames(lambda: StaticDecoder(engine, "dflash").generate(prompt, 12))
    assert (frames, breaks) == (1, {})
    # adaptive BASTION at widths calibration did not use: no select, build or commit recompiles
    frames, breaks = _frames(lambda: StaticDecoder(engine, "bastion", TreePolicy(budget=16)).generate(prompt, 12))
    assert (frames, breaks) == (0, {})
