"""Which graphs decoding compiles after calibration has run (Dynamo's frames, eager backend, CPU).

On a GPU the first decode job of a warm job worker pays for every graph that calibration
has not compiled already (11 graphs and 22-27 s on an H200 when calibration ran only
BASTION's probes).  Calibration's step-constant runs and its AR and DFlash baseline runs
compile everything those methods and BASTION replay.  The compiled engine's functions are traced here as a GPU run
traces them, with Dynamo's eager backend instead of Inductor so that only the tracing is
paid: calibration's runs first, then AR, DFlash and BASTION, counting the frames each compiles.
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch._dynamo.utils import counters

from bastion.calibration.overheads import profile_baselines, profile_overheads
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
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
    engine = StaticEngine(target, drafter, max_context=128, n_max=32, fused=True, compile=True)  # the compiled engine
    prompt = list(range(3, 30))

    def step_constants():  # calibration's fixed-budget BASTION runs, several sizes
        profile_overheads(lambda n: StaticDecoder(engine, "bastion", TreePolicy(budget=n)), (8, 12, 24), prompt, steps=4)

    frames, breaks = _frames(step_constants)
    assert frames > 0 and not breaks
    # what only AR and DFlash run: AR's one-token layer graphs (its one-node build and commit
    # are never compiled) and DFlash's chain build (one graph: no break in the chunked
    # argmax; its commit is BASTION's).  Calibration's baseline runs compile them
    frames, breaks = _frames(lambda: profile_baselines(lambda m: StaticDecoder(engine, m), prompt, steps=6))
    assert (frames, breaks) == (4, {})
    # so decoding compiles nothing for them, nor for BASTION at a width calibration did not use
    # (no select, build or commit recompiles)
    for method, policy in (("ar", None), ("dflash", None), ("bastion", TreePolicy(budget=16))):
        frames, breaks = _frames(functools.partial(StaticDecoder(engine, method, policy).generate, prompt, 12))
        assert (frames, breaks) == (0, {}), method


def test_the_compile_count_benchmark_patches_what_a_run_calls(monkeypatch):
    """benchmarks.compile_count swaps the engine's compilation choice and the runner's calibration
    for the length of one CLI run: both must be what a run calls, with the run's own arguments."""
    import benchmarks.compile_count as bench
    from bastion.engines import compiled
    from bastion.engines.choice import Kernels

    real_calibrate = bench.run_module.calibrate
    seen = {}

    def one_run(argv):
        kernels = Kernels(rank="torch")
        seen["choice"] = compiled.Compilation.choose(True, torch.device("cpu"), kernels=kernels)
        seen["patched"] = bench.run_module.calibrate is not real_calibrate
        return 0

    monkeypatch.setattr(bench.benchmark, "main", one_run)
    assert bench.main([]) == 0
    assert seen["choice"].fused and seen["choice"].compile and seen["choice"].kernels.rank == "torch"
    assert seen["patched"] and bench.run_module.calibrate is real_calibrate  # restored after the run
    assert compiled.Compilation.choose(True, torch.device("cpu")).compile is False
