"""The static engine against the eager one, on the CPU (the same code, without CUDA graphs).

The static engine keeps the step's state on the device and reads each step's tokens one
step late, so what could go wrong is bookkeeping: positions, the live-length masks, the
fixed-width KV compaction, the drafter's context, stop and length cuts.  Every test
compares whole outputs, and the per-step tree sizes and accept lengths, with the eager
decoder, which is itself checked against AR and Transformers in test_decoding.py.
"""

from __future__ import annotations

import pytest
import torch

from bastion.costmodel.model import StepOverheads
from bastion.engines.choice import check_engine
from bastion.engines.eager import EagerDecoder
from bastion.engines import static_engine
from bastion.engines.static_cache import ContextTooLongError
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
from tests.support.builders import EOS_ID, tiny_drafter, tiny_target
from tests.support.decoding import POLICIES, OracleDecoder, PaddingRunner, _ar, _cost_model, oracle_logits


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


def _same(eager, static) -> None:
    assert static.output_ids == eager.output_ids
    assert static.stop_reason == eager.stop_reason
    assert [(s.tree_size, s.committed, s.context) for s in static.steps] == [
        (s.tree_size, s.committed, s.context) for s in eager.steps
    ]


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
            _same(eager, static)
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
            _same(eager, static)
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
            _same(eager, static)
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
            _same(*outs)


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


def test_one_host_sync_per_step(monkeypatch):
    """Only the readback read (plus the prefill's first token) crosses to the host."""
    # Path ranking takes NumPy only for tensors already on the CPU (no device to wait for);
    # the torch path is the one a GPU without Triton runs, and the one whose reads count here.
    monkeypatch.setenv("BASTION_RANK", "torch")
    model = tiny_target(seed=3, scale=2.0)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=8)
    cm, ov = _cost_model(model)
    reads = []
    for name in ("item", "tolist", "__int__", "__bool__", "__float__", "cpu", "numpy"):
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _orig=original, _name=name, **kw):
            reads.append(_name)
            return _orig(self, *a, **kw)

        monkeypatch.setattr(torch.Tensor, name, counted)
    engine = StaticEngine(target, drafter, 128, 64)
    for method, policy in (("dflash", None), ("bastion", TreePolicy(n_min=8, n_max=64)), ("bastion", TreePolicy(budget=20))):
        StaticDecoder(engine, method, policy, cm, ov).generate([1, 2, 3], 4)  # allocate lazily-made constants
        reads.clear()
        res = StaticDecoder(engine, method, policy, cm, ov).generate([1, 2, 3], 40)
        # steps + 1 readback reads (the last one finds the end) and the prefill's first token
        assert len(reads) <= len(res.steps) + 2, (method, policy, reads)
        assert len(res.steps) > 3


def test_limits_are_refused_with_the_fix():
    model = tiny_target(seed=1)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=4)
    engine = StaticEngine(target, drafter, 64, 32)
    with pytest.raises(ValueError, match="tree may grow to 64 nodes but the static engine was built for n_max=32"):
        StaticDecoder(engine, "bastion", TreePolicy(budget=64))
    with pytest.raises(ContextTooLongError, match=r"exceed the static engine's buffers \(\d+\); raise its max_context"):
        engine.window(engine.buffers.capacity + 1)
    with pytest.raises(ValueError, match="unknown engine 'turbo'; choose one of: auto, eager, static, compiled"):
        check_engine("turbo")


def test_grouped_attention_equals_repeated_heads():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from bastion.engines.static_attention import grouped_tree_attention

    class Module:  # what the attention interface reads from the calling layer
        num_key_value_groups, is_causal, training = 4, True, False

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 5, 16, generator=gen)  # 8 query heads over 2 K/V heads
    k, v = torch.randn(1, 2, 11, 16, generator=gen), torch.randn(1, 2, 11, 16, generator=gen)
    mask = torch.rand(1, 1, 5, 11, generator=gen) < 0.6
    mask[..., 0] = True  # every row attends somewhere
    ref, _ = sdpa_attention_forward(Module(), q, k, v, mask, scaling=0.25)
    out, _ = grouped_tree_attention(Module(), q, k, v, mask, scaling=0.25)
    assert out.shape == ref.shape == (1, 5, 8, 16)
    torch.testing.assert_close(out, ref)
    wrong, _ = grouped_tree_attention(Module(), q, k, v, mask.flip(-1), scaling=0.25)
    assert not torch.allclose(wrong, ref)


def test_row_argmax_is_the_first_maximum():
    from bastion.engines.kernels import row_argmax

    gen = torch.Generator().manual_seed(0)
    for v in (151936, 260, 97):  # 64 chunks, 4 chunks, one chunk (prime)
        x = torch.randn(5, v, generator=gen)
        assert torch.equal(row_argmax(x), x.argmax(dim=-1))
    ties = torch.zeros(3, 256)
    ties[0, [7, 200]] = 1.0  # equal maxima in different chunks: the first
    ties[1, [5, 6]] = 2.0  # in one chunk: the first
    assert row_argmax(ties).tolist() == [7, 5, 0] == ties.argmax(dim=-1).tolist()


def test_event_timing_is_refused_off_cuda_with_the_fix():
    model = tiny_target(seed=2)
    target = Target(model)
    dec = StaticDecoder(StaticEngine(target, None, 32, 8), "ar")
    with pytest.raises(ValueError, match=r"collect_stats='events' needs a CUDA device, not cpu; use collect_stats=True"):
        dec.generate([1, 2, 3], 4, collect_stats="events")
    with pytest.raises(ValueError, match=r"collect_stats must be True, False or 'events', not 'sync'"):
        dec.generate([1, 2, 3], 4, collect_stats="sync")
    timed = dec.generate([1, 2, 3], 6, collect_stats=True)
    assert all(s.t_verify > 0 and s.t_commit > 0 for s in timed.steps)  # synchronised stamps still fill in
    assert all(s.t_verify == 0 for s in dec.generate([1, 2, 3], 6).steps)  # untimed: nothing measured


def test_ar_on_an_engine_without_a_drafter():
    model = tiny_target(seed=4)
    target = Target(model)
    prompt = [5, 9, 2, 7]
    static = StaticDecoder(StaticEngine(target, None, 32, 8), "ar").generate(prompt, 12)
    assert static.output_ids == EagerDecoder(target, "ar").generate(prompt, 12).output_ids


def test_prefill_memo_restores_exactly_and_only_what_it_kept():
    """A cell's later methods restore the prompt's prefill: same outputs and steps as a fresh engine."""
    model = tiny_target(seed=5, scale=3.0)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=4, seed=3)
    cm, ov = _cost_model(model)
    shared = StaticEngine(target, drafter, 64, 32)
    prompts = [[5, 9, 2, 7, 11, 3], [8, 1, 4]]
    for prompt in prompts:  # every method after the first of a tap set restores the prompt
        for i, (method, policy) in enumerate([("ar", None), ("dflash", None), ("bastion", TreePolicy(n_min=4, n_max=32))]):
            got = StaticDecoder(shared, method, policy, cm, ov).generate(prompt, 24)
            fresh = StaticDecoder(StaticEngine(target, drafter, 64, 32), method, policy, cm, ov).generate(prompt, 24)
            _same(fresh, got)
            assert got.prefill_reused == (method == "bastion")  # ar taps nothing, dflash filled the tap set first
            assert not fresh.prefill_reused
    starved = StaticEngine(target, drafter, 64, 32)
    starved.memo.limit = 0  # nothing fits: every prefill is a forward
    runs = [StaticDecoder(starved, "dflash").generate(prompts[0], 8) for _ in range(2)]
    assert [r.prefill_reused for r in runs] == [False, False] and runs[0].output_ids == runs[1].output_ids


def test_build_traces_as_one_graph_for_every_tree_kind():
    """Compiled ``build`` must not break its graph (a break adds frames, compiled in the first decode job)."""
    model = tiny_target("qwen3", seed=11, scale=3.0)
    target = Target(model)
    engine = StaticEngine(target, tiny_drafter(model, block_size=6, seed=3), max_context=64, n_max=16)
    draft_out, bufs = engine.proposers["dflash"].draft_out, engine.buffers
    draft_out.normal_()
    want = draft_out[:5].argmax(dim=-1)
    build = torch.compile(engine.tree_phase.build, backend="eager", fullgraph=True, dynamic=True)  # a break raises
    build(False, 6)
    assert torch.equal(bufs.tree_tokens[1:6], want)
    bufs.root.fill_(9)
    engine.build_root()
    assert bufs.tree_tokens[0] == 9 and bufs.tree_depths[0] == 0 and bool(bufs.tree_anc[0, 0])


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
        _same(*outs)
        assert all(s.drafted for s in outs[0].steps)
        # the drafts agree to rounding (test_real_drafters_static_equals_eager), so do the fitted factors
        assert eager.fit.shift == pytest.approx(static.fit.shift, rel=1e-6)
    assert eager.fit.shift < -0.1  # random drafts are accepted far less often than their probabilities say


def test_a_tapped_one_node_commit_keeps_what_the_general_commit_keeps():
    """A step of this project's rule that did not draft commits through ``commit_root(taps)``: the root's
    token, length and K/V, and the drafter's next context rows, as the general commit leaves them."""
    model = tiny_target("qwen3", seed=4)
    engine = StaticEngine(Target(model), tiny_drafter(model, block_size=6, seed=2), max_context=64, n_max=16)
    b, dflash = engine.buffers, engine.proposers["dflash"]
    engine.prefill(torch.tensor([[5, 6, 7, 8]]), "dflash")
    b.length.fill_(4)
    b.root.fill_(11)
    engine.build_root()
    engine.verify(1, engine.window(5), True, "dflash")
    before = [t.clone() for t in engine.state()]
    ends = []
    for commit in (lambda: engine.commit(1, "dflash"), lambda: engine.commit_root("dflash")):
        for t, saved in zip(engine.state(), before):
            t.copy_(saved)
        dflash.pend.normal_()  # stale rows from an earlier step: both commits must overwrite all of them
        commit()
        ends.append([t.clone() for t in engine.state()])
    general, root = ends
    kv, length, token, readback, pend, pend_count = range(6)
    assert int(general[length]) == int(root[length]) == 5
    assert torch.equal(general[token], root[token])
    assert torch.equal(general[kv][..., :5, :], root[kv][..., :5, :])  # the committed cache; past it, scratch
    layout = engine.layout
    for r in (general, root):
        assert int(r[readback][layout.COUNT]) == 0
    assert torch.equal(general[readback][layout.bonus:], root[readback][layout.bonus:])
    assert torch.equal(general[pend], root[pend]) and torch.equal(general[pend_count], root[pend_count])
    assert torch.equal(root[pend][0, 0], dflash.tapped()[0])  # the root's own tapped states
