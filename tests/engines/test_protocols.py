"""Every engine's decoder and verification probe implement the shared protocols."""

from __future__ import annotations

import pytest

from bastion.engines.base import Decoder, VerifyProbe
from bastion.engines.choice import resolve_engine
from bastion.engines.factory import Engine
from bastion.models.target import Target
from bastion.speculative.methods import method_spec
from bastion.speculative.policy import TreePolicy
from tests.support.builders import tiny_drafter, tiny_target


@pytest.mark.parametrize("name", ["eager", "static", "compiled"])
def test_each_engine_makes_protocol_decoders_and_probes(name):
    model = tiny_target(seed=1)
    engine = Engine(name, Target(model), tiny_drafter(model, block_size=4), n_max=16)
    for method in ("ar", "dflash", "bastion"):
        dec = engine.decoder(method, TreePolicy(n_min=4, budget=8))
        assert isinstance(dec, Decoder) and dec.method == method
    assert isinstance(engine.verify_probe(), VerifyProbe)


def test_auto_engine_and_unknown_names():
    assert resolve_engine("auto", "cuda") == "compiled"
    assert resolve_engine("auto", "cpu") in ("eager", "static", "compiled")
    assert resolve_engine("static", "cuda") == "static"
    with pytest.raises(ValueError, match="unknown engine 'fast'; choose one of: auto, eager, static, compiled"):
        resolve_engine("fast", "cpu")
    with pytest.raises(ValueError, match="unknown method 'medusa'"):
        method_spec("medusa")
