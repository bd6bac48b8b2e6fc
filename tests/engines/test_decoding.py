"""T = 0 equivalence: DFlash and BASTION emit exactly AR's greedy tokens.

Two kinds of drafts are used.  Real random DFlash drafters exercise the drafter plumbing
(context features, its KV cache, the mask-token block); "oracle" drafts, which put most
of their mass on the target's true greedy continuation, make long acceptances common,
so deep paths, KV compaction at every accept length, stop tokens inside an accepted run
and max_new_tokens cuts are all exercised.  Losslessness must hold for any draft.
"""

from __future__ import annotations

import pytest
import torch

from bastion.engines.base import PositionLimitError
from bastion.engines.eager import EagerDecoder
from bastion.models.target import Target
from bastion.results.records import make_record
from bastion.speculative.policy import TreePolicy
from tests.support.builders import EOS_ID, tiny_drafter, tiny_target
from tests.support.decoding import POLICIES, OracleDecoder, _ar, _cost_model

ADAPTIVE = ("bastion", "bastion_plus", "bastion_lossy")  # the budget rules' methods: each must emit AR's tokens


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_ar_matches_transformers_generate(family):
    model = tiny_target(family, seed=3)
    target = Target(model)
    prompt = torch.randint(0, 250, (17,), generator=torch.Generator().manual_seed(5)).tolist()
    ref = model.generate(torch.tensor([prompt]), max_new_tokens=40, min_new_tokens=40, do_sample=False)[0, 17:]
    assert _ar(target, prompt, 40) == ref.tolist()


@pytest.mark.parametrize("family", ["qwen3", "llama"])
@pytest.mark.parametrize("block_size", [2, 5, 8])
def test_real_drafters_match_ar(family, block_size):
    model = tiny_target(family, seed=11, scale=3.0)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=block_size, seed=block_size)
    cm, ov = _cost_model(model)
    gen = torch.Generator().manual_seed(block_size)
    for p in range(4):
        prompt = torch.randint(0, 250, (int(torch.randint(1, 30, (1,), generator=gen)),), generator=gen).tolist()
        ref = _ar(target, prompt, 48)
        for dec in (
            EagerDecoder(target, "dflash", drafter),
            *(EagerDecoder(target, m, drafter, TreePolicy(n_min=4, n_max=64), cm, ov) for m in ADAPTIVE),
            EagerDecoder(target, "bastion", drafter, TreePolicy(budget=1 + 3 * p)),
        ):
            out = dec.generate(prompt, 48)
            assert out.output_ids == ref, (dec.method, dec.policy, p)
            assert sum(s.committed for s in out.steps) == len(ref) - 1  # first token comes from prefill




@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"b{p.budget}-min{p.n_min}-max{p.n_max}-k{p.topk}")
@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_oracle_trees_match_ar(policy, family):
    model = tiny_target(family, seed=21, scale=2.0)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=8)
    cm, ov = _cost_model(model)
    gen = torch.Generator().manual_seed(7)
    accepted_deep = 0
    for p in range(5):
        prompt = torch.randint(0, 250, (int(torch.randint(2, 25, (1,), generator=gen)),), generator=gen).tolist()
        ref = _ar(target, prompt, 60)
        for method, hit in (("bastion", 0.5), ("bastion", 0.95), ("dflash", 0.9), ("bastion_plus", 0.5),
                            ("bastion_plus", 0.95), ("bastion_lossy", 0.7)):
            dec = OracleDecoder(target, method, drafter, policy, cm, ov,
                                reference=ref, prompt_len=len(prompt), hit=hit, seed=p)
            out = dec.generate(prompt, 60)
            assert out.output_ids == ref, (method, hit, p)
            assert all(s.tree_size <= (policy.budget or policy.n_max) for s in out.steps if method != "dflash")
            accepted_deep += sum(s.committed >= 5 for s in out.steps)
    assert accepted_deep > 5  # the oracle really produced long accepted runs


def test_each_rule_sizes_its_trees_as_its_method_says():
    """The paper's rule rounds down to multiples of n_min; this project's, on a CPU, keeps the count itself
    (from n_min at T = 0)."""
    model = tiny_target(seed=2)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=8)
    cm, ov = _cost_model(model)
    policy = TreePolicy(n_min=6, n_max=100, rounding="best-neighbour")  # the method decides, not the caller
    prompt = list(range(10))
    ref = _ar(target, prompt, 40)
    sizes = {}
    for method in ADAPTIVE:
        dec = OracleDecoder(target, method, drafter, policy, cm, ov, reference=ref, prompt_len=10, hit=0.8, seed=0)
        res = dec.generate(prompt, 40)
        assert res.output_ids == ref
        sizes[method] = [s.tree_size for s in res.steps]
        assert (dec.policy.n_min, dec.policy.rounding) == ((6, "down") if method != "bastion_plus" else (6, None))
    assert all(n % 6 == 0 for m in ("bastion", "bastion_lossy") for n in sizes[m])
    assert any(n % 6 for n in sizes["bastion_plus"]), sizes["bastion_plus"]
    assert min(sizes["bastion_plus"]) >= 6, sizes["bastion_plus"]


@pytest.mark.parametrize("max_new", [1, 2, 3, 7, 8, 9, 16, 33])
def test_max_new_tokens_boundaries(max_new):
    model = tiny_target(seed=4, scale=2.0)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=8)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    ref = _ar(target, prompt, 40)
    for method in ("dflash", "bastion"):
        dec = OracleDecoder(target, method, drafter, TreePolicy(budget=24), reference=ref, prompt_len=8, hit=0.97, seed=1)
        out = dec.generate(prompt, max_new)
        assert out.output_ids == ref[:max_new]
        assert out.stop_reason == "max_new_tokens"
        # exact tau: a cut step counts only what it emitted; the prefill emits the first token
        assert sum(out.acceptance_lengths) == max_new - 1
        if max_new == 2:
            assert out.acceptance_lengths == [1]
        rec = make_record(out, prompt_index=0, turn=0, method=method, base={})
        assert sum(rec["acceptance_lengths"]) == rec["num_output_tokens"] - 1


def test_stop_tokens_inside_accepted_runs():
    model = tiny_target(seed=6, scale=2.0)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=8)
    prompt = [10, 20, 30, 40]
    ref = _ar(target, prompt, 50)
    # every distinct token of the reference becomes, in turn, the stop token
    for stop in sorted(set(ref))[:12]:
        cut = ref.index(stop) + 1
        expect = _ar(target, prompt, 50, stops=[stop])
        assert expect == ref[:cut]
        for method in ("dflash", "bastion"):
            dec = OracleDecoder(target, method, drafter, TreePolicy(budget=32), reference=ref, prompt_len=4, hit=0.97, seed=stop)
            out = dec.generate(prompt, 50, stop_token_ids=[stop, EOS_ID])
            assert out.output_ids == expect, (method, stop)
            assert out.stop_reason == "stop_token"
            assert sum(out.acceptance_lengths) == len(expect) - 1, (method, stop)


def test_statistics_only_when_asked():
    model = tiny_target(seed=8)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=4)
    dec = EagerDecoder(target, "bastion", drafter, TreePolicy(budget=8))
    quiet = dec.generate([1, 2, 3], 12)
    timed = dec.generate([1, 2, 3], 12, collect_stats=True)
    assert quiet.output_ids == timed.output_ids
    assert all(s.t_verify == 0.0 and s.t_draft == 0.0 for s in quiet.steps)
    assert all(s.t_verify > 0.0 and s.t_draft > 0.0 for s in timed.steps)
    assert all(s.tree_size == 8 for s in timed.steps)
    # the static engine's clock: the same refusals, before any work
    with pytest.raises(ValueError, match=r"collect_stats='events' needs a CUDA device, not cpu; use collect_stats=True"):
        dec.generate([1, 2, 3], 12, collect_stats="events")
    with pytest.raises(ValueError, match=r"collect_stats must be True, False or 'events', not 'sync'"):
        dec.generate([1, 2, 3], 12, collect_stats="sync")


def test_prompt_that_does_not_fit_is_refused():
    model = tiny_target(seed=1, max_positions=64)
    target = Target(model)
    drafter = tiny_drafter(model, block_size=8)
    with pytest.raises(PositionLimitError, match=r"60 tokens \+ max_new_tokens 10 \+ block 8 = 78 positions.*64"):
        EagerDecoder(target, "dflash", drafter).generate(list(range(60)), 10)
    assert len(EagerDecoder(target, "ar").generate(list(range(40)), 20).output_ids) == 20


def test_adaptive_needs_calibration():
    model = tiny_target(seed=1)
    with pytest.raises(ValueError, match="calibrated cost model"):
        EagerDecoder(Target(model), "bastion", tiny_drafter(model))
