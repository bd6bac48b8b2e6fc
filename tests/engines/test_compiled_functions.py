"""The compiled engine's layer functions, compiled for real (Inductor's CPU backend), in one process.

On a GPU the layer functions of the target, the DFlash drafter and the EAGLE-3 head are
compiled by ``torch.compile``; here they are compiled the same way for the CPU, so that
what a GPU run relies on is checked where CI runs: every function and shape
specialisation the methods need actually compiles (Dynamo shares one recompile limit
among compiled ``functools.partial`` objects, and past it a function silently runs
uncompiled), and the compiled layers decode exactly what the eager engine does (fp32).
"""

from __future__ import annotations

import shutil

import pytest
import torch

from bastion.engines.eager import EagerDecoder
from bastion.engines.fused_drafter import FusedDrafter
from bastion.engines.fused_eagle3 import FusedEagle3Head
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.engines.static_layers import FusedLayers
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.methods import Eagle3Policy
from bastion.speculative.policy import TreePolicy
from dflash.eagle3.model import Eagle3Head
from dflash.eagle3.train import head_config_for
from tests.support.builders import tiny_drafter, tiny_target

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="Inductor's CPU backend needs a C++ compiler")


def test_every_layer_function_compiles_and_decodes_as_eager():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = tiny_target("qwen3", seed=11, scale=3.0, layers=3)
    target, drafter = Target(model), tiny_drafter(model, block_size=6, seed=8)
    head = Eagle3Head(head_config_for(model.config, 64, [0, 1, 2], None)).eval()  # d2t 0: draft id = target id
    e3 = Eagle3Drafter.bind(head, target, Eagle3Policy(depth=3, top_k=4, total_tokens=16))
    engine = StaticEngine(target, drafter, max_context=128, n_max=32, eagle3=e3)
    # the compiled engine's layers as they are compiled on CUDA (its step functions stay uncompiled here)
    engine.fused = FusedLayers(target, compile=True)
    engine.proposers["dflash"].fused_drafter = FusedDrafter(drafter, compile=True, layers=engine.fused)
    engine.proposers["eagle3"].fused_head = FusedEagle3Head(head, compile=True, layers=engine.fused)
    prompt = list(range(3, 30))
    frames = {}
    for method, policy in (("bastion", TreePolicy(budget=12)), ("dflash", None), ("ar", None), ("eagle3", None)):
        want = EagerDecoder(target, method, drafter, policy, eagle3=e3).generate(prompt, 24)
        got = StaticDecoder(engine, method, policy).generate(prompt, 24)
        assert got.output_ids == want.output_ids, method
        assert [s.committed for s in got.steps] == [s.committed for s in want.steps], method
        frames[method] = counters["frames"]["total"]
    limits = [k for k in counters["unimplemented"] if "recompile limit" in k.lower()]
    assert not limits, limits
    assert counters["frames"]["ok"] == counters["frames"]["total"]
    assert frames["ar"] >= 9  # 5 layer functions, one-token and many-token forms
    # the head's: its layer's function before attention, the root's top-k, a round, the last round, the rerank
    assert frames["eagle3"] - frames["ar"] >= 5, frames
