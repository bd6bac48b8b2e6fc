"""The compiled engine's layer functions, compiled for real (Inductor's CPU backend), in one process.

On a GPU the target's and the drafter's layer functions are compiled by ``torch.compile``;
here they are compiled the same way for the CPU, so that what a GPU run relies on is
checked where CI runs: every function and shape specialisation the methods need actually
compiles (Dynamo shares one recompile limit among compiled ``functools.partial`` objects,
and past it a function silently runs uncompiled), and the compiled layers decode exactly
what the eager engine does (fp32).
"""

from __future__ import annotations

import shutil

import pytest
import torch

from bastion.engines.eager import EagerDecoder
from bastion.engines.fused_drafter import FusedDrafter
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.engines.static_layers import FusedLayers
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
from tests.support.builders import tiny_drafter, tiny_target

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="Inductor's CPU backend needs a C++ compiler")


def test_every_layer_function_compiles_and_decodes_as_eager():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = tiny_target("qwen3", seed=11, scale=3.0, layers=3)
    target, drafter = Target(model), tiny_drafter(model, block_size=6, seed=8)
    engine = StaticEngine(target, drafter, max_context=128, n_max=32)
    # the compiled engine's layers as they are compiled on CUDA (its step functions stay uncompiled here)
    engine.fused = FusedLayers(target, compile=True)
    engine.proposers["dflash"].fused_drafter = FusedDrafter(drafter, compile=True, layers=engine.fused)
    prompt = list(range(3, 30))
    for method, policy in (("bastion", TreePolicy(budget=12)), ("dflash", None), ("ar", None)):
        want = EagerDecoder(target, method, drafter, policy).generate(prompt, 24)
        got = StaticDecoder(engine, method, policy).generate(prompt, 24)
        assert got.output_ids == want.output_ids, method
        assert [s.committed for s in got.steps] == [s.committed for s in want.steps], method
    limits = [k for k in counters["unimplemented"] if "recompile limit" in k.lower()]
    assert not limits, limits
    assert counters["frames"]["ok"] == counters["frames"]["total"] >= 9  # 5 functions, one-token and many-token forms
