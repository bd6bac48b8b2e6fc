"""bastion_plus on the shipped tiny pair: it drafts every step at T = 0, where the gate stays out; at
T = 1, with a drafter that never pays, it falls back to AR steps, on every engine alike.

The costs are a CPU calibration's (the 2-core machine's, rounded): an AR step about 10 ms, a
drafted step of ten nodes about 26 ms, so drafting pays from about 2.6 committed tokens a step.
"""

from __future__ import annotations

import pytest
import torch

from bastion.costmodel.model import CostModel, CostParams, StepOverheads
from bastion.costmodel.roofline import HardwarePeaks, ModelShape
from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.speculative.policy import TreePolicy
from dflash import DFlashDraftModel

PEAKS = HardwarePeaks(flops_per_s=1.13e11, bytes_per_s=7.8e9, attention_flops_per_s=5.9e10)
PARAMS = CostParams(a_c=1.84, b_c=1.48e-2, a_m=0.0, b_m=1.57e-2, u_kv=0.30, u_att=2.2, f_kv=8.7, f_att=1.0, f_peak=0.0)
OVERHEADS = StepOverheads(t_draft=8.5e-3, t_other=0.8e-3, excess=((2, -2.4e-3), (8, -2.4e-3), (32, -2.4e-3)),
                          ar_excess=-5.7e-3)
NEW = 64


@pytest.fixture(scope="module")
def pair():
    target_ref, drafter_ref, _ = models.resolve("tiny")
    target = models.load_target(target_ref, torch.float32, "cpu")
    drafter = models.load_drafter(drafter_ref, torch.float32, "cpu")
    builder = PromptBuilder(models.load_tokenizer(target_ref))
    # prompts on which the shipped drafter pays all along (at the start of humaneval-pkg's first
    # prompt twelve drafted steps commit 1.75 tokens a step, below these costs' 2.4-2.6)
    prompts = [builder.encode([], p["turns"][0]) for p in datasets.load_prompts("stdlib-heldout", 3,
                                                                                   seed=datasets.DEFAULT_SEED)]
    cost = CostModel(ModelShape.from_config(target.config, 4), PEAKS, PARAMS)
    return target, drafter, prompts, builder.stop_ids(target), cost


def _decode(engine: Engine, method: str, prompt, stops, cost) -> object:
    dec = engine.decoder(method, TreePolicy(n_min=16, n_max=256), cost, OVERHEADS)
    return dec.generate(prompt, NEW, 0.0, stops)


@pytest.mark.parametrize("engine_name", ["eager", "compiled"])
def test_the_shipped_drafter_drafts_every_step_at_t0(pair, engine_name):
    target, drafter, prompts, stops, cost = pair
    engine = Engine(engine_name, target, drafter, n_max=256)
    sizes = set()
    for prompt in prompts:
        ar = _decode(engine, "ar", prompt, stops, cost)
        plus = _decode(engine, "bastion_plus", prompt, stops, cost)
        assert plus.output_ids == ar.output_ids
        assert all(s.drafted for s in plus.steps), [s.committed for s in plus.steps]
        sizes.update(s.tree_size for s in plus.steps)
    assert min(sizes) >= 16 and len(sizes) >= 2, sizes  # granularity 1 on a CPU, from n_min at T = 0


def test_a_useless_drafter_falls_back_to_ar_steps_at_t1_only(pair):
    """A randomly initialised drafter of the shipped one's shape: its guesses almost never survive."""
    target, shipped, prompts, stops, cost = pair
    torch.manual_seed(0)
    useless = DFlashDraftModel(shipped.config).eval()
    runs = {}
    for name in ("eager", "compiled"):
        engine = Engine(name, target, useless, n_max=256)
        # one decoder for every prompt, as a run keeps it: later prompts start in AR steps
        plus = engine.decoder("bastion_plus", TreePolicy(n_min=16, n_max=256), cost, OVERHEADS)
        # no stop tokens at T = 1: a sampled stop could end a prompt before the gate has anything to decide
        runs[name] = [plus.generate(p, NEW, 1.0, (), torch.Generator().manual_seed(i)) for i, p in enumerate(prompts)]
        greedy = plus.generate(prompts[0], NEW, 0.0, stops)  # the same decoder at T = 0: no gate, every step drafts
        assert greedy.output_ids == _decode(engine, "ar", prompts[0], stops, cost).output_ids
        assert all(s.drafted for s in greedy.steps) and min(s.tree_size for s in greedy.steps) >= 16
    for plus in runs["eager"]:
        assert sum(not s.drafted for s in plus.steps) > 0.7 * len(plus.steps)  # mostly AR steps
        assert all(s.tree_size == 1 for s in plus.steps if not s.drafted)
    assert runs["eager"][0].steps[0].drafted  # the gate starts out drafting
    last = runs["eager"][-1].steps
    assert not last[0].drafted  # stopped on earlier prompts: this one's rows wait for its first draft ...
    assert any(s.drafted for s in last[1:])  # ... which a probe makes, taking in the prompt's rows with the steps'
    for eager, static in zip(runs["eager"], runs["compiled"]):  # the engines take the same steps
        assert static.output_ids == eager.output_ids
        assert [(s.tree_size, s.committed, s.drafted) for s in static.steps] == \
            [(s.tree_size, s.committed, s.drafted) for s in eager.steps]
