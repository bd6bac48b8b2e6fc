"""The static engine's parts on the CPU: its host reads, limits, grouped attention, row
argmax, step timing, prefill memo, tree build and one-node commit (whole decodes against
the eager engine: test_static_engine.py).
"""

from __future__ import annotations

import pytest
import torch

from bastion.engines.choice import check_engine
from bastion.engines.eager import EagerDecoder
from bastion.engines.static_cache import ContextTooLongError
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
from tests.support.builders import tiny_drafter, tiny_target
from tests.support.decoding import _cost_model, same_decode


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
            same_decode(fresh, got)
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
