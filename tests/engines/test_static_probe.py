"""The calibration's probe on every engine: what it times, what it leaves behind.

The latency grid is measured through :meth:`Engine.verify_probe`; these tests check that a
probe grows a static engine to the grid's trees and leaves it decoding as before, that at
T > 0 its timed step samples at every node as a decode step does, and that it builds no
autograd graph in the engine's buffers.
"""

from __future__ import annotations

import time

import pytest
import torch

from bastion.engines.eager import EagerDecoder
from bastion.engines.factory import Engine
from bastion.engines.static_decoder import StaticDecoder
from bastion.models.target import Target
from tests.support.builders import tiny_drafter, tiny_target
from tests.support.decoding import _ar


def test_engine_factory_and_static_calibration_probe():
    from bastion.calibration.grid import Grid, probe_grid

    model = tiny_target(seed=2)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=4)
    eng = Engine("static", target, drafter, n_max=4)  # smaller than the grid's trees: the probe grows it
    assert isinstance(eng.decoder("dflash"), StaticDecoder)
    assert isinstance(Engine("eager", target, drafter, n_max=32).decoder("ar"), EagerDecoder)
    assert Engine("compiled", target, drafter, n_max=32).static.fused is not None and eng.static.fused is None
    rows = probe_grid(eng.verify_probe(), Grid.named("tiny"))
    assert [(r["s"], r["c"]) for r in rows] == Grid.named("tiny").points()
    assert all(r["latency_s"] > 0 for r in rows)
    assert eng.static.n_max == max(s for s, _ in Grid.named("tiny").points())
    # at T > 0 the probe also samples at every node, into the logits buffer sized for the grid
    sampled = probe_grid(eng.verify_probe(), Grid.named("tiny"), temperature=1.0)
    assert len(sampled) == len(rows) and all(r["latency_s"] > 0 for r in sampled)
    assert eng.static.logits_buffer().shape[0] >= eng.static.n_max
    # the probe leaves the engine usable for decoding, with the same outputs as before
    assert eng.decoder("ar").generate([1, 2, 3], 10).output_ids == _ar(target, [1, 2, 3], 10)


@pytest.mark.parametrize("name", ["eager", "static", "compiled"])
def test_the_probe_times_the_sampling_at_t_above_0(monkeypatch, name):
    """At T > 0 a probe's timed step samples a token at every node, as a sampling decode step does, so C(n)
    holds that cost: a sampler made deliberately slow shows up in every timed call, and only at T > 0."""
    from bastion.calibration.peaks import sample_times
    from bastion.engines import eager, static_probe

    delay = 0.2
    model = tiny_target(seed=2)
    engine = Engine(name, Target(model), tiny_drafter(model, block_size=4), n_max=16)
    probe, module = engine.verify_probe(), eager if name == "eager" else static_probe
    real, calls = module.propose, []

    def slow(logits, temperature, generator=None):
        calls.append((tuple(logits.shape), temperature))
        time.sleep(delay)
        return real(logits, temperature, generator)

    monkeypatch.setattr(module, "propose", slow)
    probe.reserve(64, nodes=8)
    probe.at_context(16, 8, torch.Generator().manual_seed(0))
    vocab = model.config.vocab_size
    for s, temperature in ((5, 1.0), (8, 0.7), (5, 0.0)):
        calls.clear()
        times = sample_times(probe.probe(torch.arange(1, s + 1), 16, temperature=temperature), torch.device("cpu"), 1, 2)
        if temperature > 0:
            assert calls == [((s, vocab), temperature)] * 3  # the warm-up and both timed calls sample all s nodes
            assert min(times) >= delay, times
        else:
            assert calls == [] and max(times) < delay, times


@pytest.mark.parametrize("name", ["static", "compiled"])
def test_calibration_probe_builds_no_autograd_graph(name):
    """A probe runs outside the decoders' no_grad: buffers must not start chaining autograd graphs.

    (Copying a forward that tracks gradients into an engine buffer gives the buffer a
    grad_fn that keeps that forward's activations alive, one more each probe: on the GPU
    the compiled engine's paper-grid calibration ran out of 140 GB this way.)
    """
    model = tiny_target(seed=2)
    target = Target(model)
    engine = Engine(name, target, tiny_drafter(model, block_size=4), n_max=16)
    eng, probe = engine.static, engine.verify_probe()
    for s, c in ((3, 5), (7, 9)):
        probe.probe(torch.arange(1, s + 1), c)()
    features = eng.proposers["dflash"].features
    assert features.grad_fn is None and not features.requires_grad
    assert not eng.buffers.proposals.requires_grad and eng.buffers.cache.kv.grad_fn is None
