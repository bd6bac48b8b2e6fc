"""The static engine against the eager one, on the CPU (the same code, without CUDA graphs).

The static engine keeps the step's state on the device and reads each step's tokens one
step late, so what could go wrong is bookkeeping: positions, the live-length masks, the
fixed-width KV compaction, the drafter's context, stop and length cuts.  The tests compare
whole outputs, and the per-step tree sizes and accept lengths, with the eager decoder,
which is itself checked against AR and Transformers in test_decoding.py (and the CPU's
tree walk with the torch references).  The engine's parts alone: test_static_parts.py.
"""

from __future__ import annotations

import pytest
import torch

from bastion.costmodel.model import StepOverheads
from bastion.engines.eager import EagerDecoder
from bastion.engines import static_engine
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
from tests.support.builders import EOS_ID, tiny_drafter, tiny_target
from tests.support.decoding import POLICIES, OracleDecoder, PaddingRunner, _ar, _cost_model, oracle_logits, same_decode


def oracle_engine(*a, reference: list[int], prompt_len: int, hit: float, seed: int, **kw) -> StaticEngine:
    """A static engine whose DFlash drafts are exactly :class:`OracleDecoder`'s (same generator, same calls)."""
    engine = StaticEngine(*a, **kw)
    drafts = engine.proposers["dflash"]
    rng, vocab = torch.Generator().manual_seed(seed), engine.target.config.vocab_size
    # a test may read the device: the CPU has no graphs to break
    drafts.draft_logits = lambda kv, feats: oracle_logits(rng, reference, prompt_len, hit, int(drafts.bufs.length),
                                                          engine.block, vocab)
    return engine


def recording_decoder(*a, **kw) -> EagerDecoder:
    """An eager decoder that keeps every step's draft logits in ``.drafts``."""
    dec = EagerDecoder(*a, **kw)
    dec.drafts = []
    if dec.spec.drafter == "dflash":  # AR drafts nothing
        logits = dec.proposer.logits
        dec.proposer.logits = lambda root, c: _kept(dec.drafts, logits(root, c))
    return dec


def recording_engine(*a, **kw) -> StaticEngine:
    """A static engine that keeps every step's draft logits in ``.drafts`` (CPU only: no graphs to break)."""
    engine = StaticEngine(*a, **kw)
    drafts = engine.proposers["dflash"]
    engine.drafts, logits = [], drafts.draft_logits
    # a capture's warm-ups draft too (PaddingRunner): only what the step itself drafts is kept
    drafts.draft_logits = lambda kv, feats: _kept([] if getattr(engine.runner, "warming", False) else engine.drafts,
                                                  logits(kv, feats))
    return engine


def _kept(store: list, logits: torch.Tensor) -> torch.Tensor:
    store.append(logits.clone())
    return logits


@pytest.mark.parametrize("family,block_size,fused,padded", [
    ("qwen3", 2, False, False), ("qwen3", 8, False, False), ("llama", 2, False, False), ("llama", 8, False, False),
    ("qwen3", 8, True, False), ("llama", 5, True, False), ("qwen3", 8, True, True), ("llama", 2, False, True)])
def test_real_drafters_static_equals_eager(monkeypatch, family, block_size, fused, padded):
    """``padded``: the prompts' and the catch-ups' drafts as graphs run them, their rows padded in ``wide``."""
    if padded:
        monkeypatch.setattr(static_engine, "GraphRunner", PaddingRunner)
    model = tiny_target(family, seed=11, scale=3.0)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=block_size, seed=block_size)
    cm, ov = _cost_model(model)
    # fused: the layers as the two functions torch.compile fuses on a GPU (run uncompiled here)
    engine = recording_engine(target, drafter, max_context=32, n_max=64, fused=fused)  # too small: it must grow
    assert (engine.proposers["dflash"].fused_drafter is not None) == fused  # the drafter's functions too (tests/engines/test_fused_drafter.py)
    gen = torch.Generator().manual_seed(block_size)
    policies = [("ar", None), ("dflash", None), ("bastion", TreePolicy(n_min=4, n_max=64)), ("bastion", TreePolicy(budget=7)),
                ("bastion_plus", TreePolicy(n_min=4, n_max=64)), ("bastion_lossy", TreePolicy(n_min=4, n_max=64))]
    skipped = 0  # steps of bastion_plus without a draft: random drafters rarely pay (its gate acts at T > 0)
    for p in range(3):
        prompt = torch.randint(0, 250, (int(torch.randint(1, 30, (1,), generator=gen)),), generator=gen).tolist()
        for method, policy in policies:
            dec = recording_decoder(target, method, drafter, policy, cm, ov)
            engine.drafts.clear()
            t = 1.0 if method == "bastion_plus" else 0.0
            eager = dec.generate(prompt, 40, t, (), torch.Generator().manual_seed(p))
            static = StaticDecoder(engine, method, policy, cm, ov).generate(prompt, 40, t, (),
                                                                           torch.Generator().manual_seed(p))
            same_decode(eager, static)
            # the drafts themselves agree: same drafter context, positions and masks, also where
            # a draft first takes in the steps that did not draft (the static engine drafts once
            # more, after the last commit, and drops it, unless that step falls back to AR)
            extra = len(engine.drafts) - len(dec.drafts)
            assert extra in ((0, 1) if method == "bastion_plus" else (int(method != "ar"),)), (method, extra)
            for a, b in zip(dec.drafts, engine.drafts):
                torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
            assert [s.drafted for s in static.steps] == [s.drafted for s in eager.steps]
            skipped += sum(not s.drafted for s in static.steps if method == "bastion_plus")
    assert engine.buffers.max_context >= 30 + 40  # grew past its initial size
    assert skipped > 0
    wide = [k for k in getattr(engine.runner, "keys", []) if k[0] == "take_in"]
    assert bool(wide) == padded and all(k[2] >= block_size and k[2] & (k[2] - 1) == 0 for k in wide), wide


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"b{p.budget}-min{p.n_min}-max{p.n_max}-k{p.topk}")
def test_oracle_trees_static_equals_eager(policy):
    """Long accepted runs: compaction at every accept length, deep paths, widened searches."""
    model = tiny_target("qwen3", seed=21, scale=2.0)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=8)
    cm, ov = _cost_model(model)
    gen = torch.Generator().manual_seed(7)
    deep = 0
    for p in range(3):
        prompt = torch.randint(0, 250, (int(torch.randint(2, 25, (1,), generator=gen)),), generator=gen).tolist()
        ref = _ar(target, prompt, 60)
        for method, hit in (("bastion", 0.5), ("bastion", 0.95), ("dflash", 0.9), ("bastion_plus", 0.9)):
            kw = dict(reference=ref, prompt_len=len(prompt), hit=hit, seed=p)
            eager = OracleDecoder(target, method, drafter, policy, cm, ov, **kw).generate(prompt, 60)
            engine = oracle_engine(target, drafter, 128, max(policy.limit, 8), **kw)
            static = StaticDecoder(engine, method, policy, cm, ov).generate(prompt, 60)
            same_decode(eager, static)
            assert static.output_ids == ref
            deep += sum(s.committed >= 5 for s in static.steps)
    assert deep > 5


@pytest.mark.parametrize("max_new", [1, 2, 7, 8, 9, 33])
def test_max_new_tokens_and_stop_tokens(max_new):
    model = tiny_target(seed=6, scale=2.0)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=8)
    prompt = [10, 20, 30, 40]
    ref = _ar(target, prompt, 50)
    for stop in [None, *sorted(set(ref[:max_new]))[:4]]:
        stops = [] if stop is None else [stop, EOS_ID]
        kw = dict(reference=ref, prompt_len=4, hit=0.97, seed=max_new)
        for method in ("dflash", "bastion"):
            eager = OracleDecoder(target, method, drafter, TreePolicy(budget=24), **kw).generate(prompt, max_new, stop_token_ids=stops)
            engine = oracle_engine(target, drafter, 64, 24, **kw)
            static = StaticDecoder(engine, method, TreePolicy(budget=24)).generate(prompt, max_new, stop_token_ids=stops)
            same_decode(eager, static)
            for res in (eager, static):  # exact tau: only emitted tokens count; the prefill emits the first
                assert sum(res.acceptance_lengths) == len(res.output_ids) - 1, (method, stop, max_new)
            if max_new == 2 and len(static.output_ids) == 2:
                assert static.acceptance_lengths == [1]


def test_sampling_follows_the_same_draws():
    """At T > 0 both engines draw from the caller's generator in the same order: same tokens."""
    model = tiny_target(seed=9, scale=1.5)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=6)
    cm, ov = _cost_model(model)
    engine = StaticEngine(target, drafter, 128, 64)
    adaptive = TreePolicy(n_min=4, n_max=64)
    for method, policy in (("ar", None), ("dflash", None), ("bastion", adaptive), ("bastion_plus", adaptive),
                           ("bastion_lossy", adaptive)):
        for seed in range(3):
            outs = []
            for dec in (EagerDecoder(target, method, drafter, policy, cm, ov), StaticDecoder(engine, method, policy, cm, ov)):
                outs.append(dec.generate([5, 6, 7], 30, temperature=0.8, generator=torch.Generator().manual_seed(seed)))
            same_decode(*outs)


def test_the_cpu_walk_builds_the_torch_references_trees(monkeypatch):
    """The CPU's best-first walk and the torch references (what a GPU without Triton runs)
    build the same trees: at T > 0 the draws depend on every tree, so equal tokens and
    equal tree sizes at every step say the trees were equal."""
    model = tiny_target(seed=9, scale=6.0)  # peaked drafts: the count varies from step to step
    target = Target(model)
    drafter = tiny_drafter(model, block_size=6)
    cm, _ = _cost_model(model)
    ov = StepOverheads(1e-2, 1e-2)
    engine = StaticEngine(target, drafter, 128, 64)
    sizes = set()
    for policy in (TreePolicy(n_min=2, n_max=64), TreePolicy(n_min=2, n_max=64, rounding=None), TreePolicy(budget=9)):
        for seed in range(3):
            runs = []
            for forced in (False, True):
                with monkeypatch.context() as m:
                    if forced:
                        m.setenv("BASTION_RANK", "torch")
                    dec = StaticDecoder(engine, "bastion", policy, cm, ov)
                    runs.append(dec.generate([5, 6, 7], 30, temperature=0.8, generator=torch.Generator().manual_seed(seed)))
            walked, reference = runs
            assert walked.output_ids == reference.output_ids, (policy, seed)
            assert [s.tree_size for s in walked.steps] == [s.tree_size for s in reference.steps], (policy, seed)
            sizes.update(s.tree_size for s in walked.steps)
    assert len(sizes) > 3  # the adaptive rule chose several sizes: the count was exercised, not only the budget


def test_bastion_plus_learns_the_same_correction_of_its_surrogate_on_both_engines():
    """At T > 0 this project's rule fits a per-depth factor to what its trees accepted, one step late on
    both engines; the trees, draws and factors stay the same (drafting made cheap here, so it never stops)."""
    model = tiny_target(seed=9, scale=6.0)  # peaked drafts: confident, and mostly wrong
    target = Target(model)
    drafter = tiny_drafter(model, block_size=6)
    cm, _ = _cost_model(model)
    ov = StepOverheads(0.1, 0.0, ar_excess=0.2)  # nodes cheap next to a step, an AR step dearer than any
    engine = StaticEngine(target, drafter, 128, 64)
    policy = TreePolicy(n_min=4, n_max=64)
    eager, static = EagerDecoder(target, "bastion_plus", drafter, policy, cm, ov), \
        StaticDecoder(engine, "bastion_plus", policy, cm, ov)
    for seed in range(3):
        outs = [dec.generate([5, 6, 7], 60, temperature=1.0, generator=torch.Generator().manual_seed(seed))
                for dec in (eager, static)]
        same_decode(*outs)
        assert all(s.drafted for s in outs[0].steps)
        # the drafts agree to rounding (test_real_drafters_static_equals_eager), so do the fitted factors
        assert eager.fit.shift == pytest.approx(static.fit.shift, rel=1e-6)
    assert eager.fit.shift < -0.1  # random drafts are accepted far less often than their probabilities say
