"""EAGLE-3 on every engine: random public-layout heads with a reduced draft vocabulary.

At temperature 0 every engine's ``eagle3`` decode must equal AR (fp32, CPU) for a Qwen3
target and a Llama-3.1-style target with llama3 RoPE scaling, and the compiled engine's
fused head must draft the static engine's trees, buffer for buffer.  Random heads rarely hit,
so an oracle head also plants the target's own continuation in the drafted tree: then
long paths are accepted and the static engine's bookkeeping (the head's context read
back one step late, the fixed tree size) must give the eager engine's steps exactly.
"""

from __future__ import annotations

import pytest
import torch

from bastion.engines import static_engine
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.methods import Eagle3Policy
from tests.support.builders import llama31_target, save_eagle3_head, tiny_target
from tests.support.decoding import PaddingRunner

PROMPT = list(range(5, 29))
NEW = 40


def _pair(tmp_path, family: str, layer_ids=None, policy=None, scale: float = 1.0):
    model = tiny_target("qwen3", layers=8, scale=4.0) if family == "qwen3" else llama31_target(layers=8)
    target = Target(model)
    folder = save_eagle3_head(tmp_path / f"head-{family}", model, draft_vocab=96, layer_ids=layer_ids, scale=scale)
    head = models.load_eagle3_head(str(folder), target, family, torch.float32, "cpu")
    return target, Eagle3Drafter.bind(head, target, policy)


class OracleEagle3(Eagle3Drafter):
    """Drafts with the head (its cache bookkeeping included), then plants the reference path.

    It hooks :meth:`Eagle3Drafter.finish`, which both engines' drafting ends in: the eager
    engine's on the head's growing cache, the static engine's on its fixed buffers.
    """

    reference: list[int]
    prompt_len: int

    def finish(self, tree, position, *fused):
        c = int(position)  # committed pairs == the root's children's position (both engines)
        node, depth = 0, 0
        while True:
            kids = (tree.parents == node).nonzero().flatten()
            j = c - self.prompt_len + 1 + depth  # reference index of the token at depth + 1
            if kids.numel() == 0 or j >= len(self.reference) or (depth % 3 == 2 and c % 2):
                return super().finish(tree, position, *fused)
            ref = self.reference[j]
            if not (tree.tokens[kids] == ref).any():  # siblings must stay distinct
                tree.tokens[kids[0]] = ref
            node = int(kids[(tree.tokens[kids] == ref).nonzero()[0, 0]])
            depth += 1


@pytest.mark.parametrize("family", ["qwen3", "llama31"])
@pytest.mark.parametrize("engine", ["eager", "static", "compiled"])
def test_eagle3_equals_ar_at_t0(tmp_path, family, engine):
    target, e3 = _pair(tmp_path, family)
    assert e3.layer_ids == [1, 3, 4]  # reference taps of an 8-layer target
    eng = Engine(engine, target, None, n_max=64, eagle3=e3)
    ar = eng.decoder("ar").generate(PROMPT, NEW).output_ids
    res = eng.decoder("eagle3").generate(PROMPT, NEW, collect_stats=True)
    assert res.output_ids == ar
    assert all(s.tree_size == e3.tree_size == 60 for s in res.steps)
    if engine != "eager":  # the compiled engine drafts with the fused head, the static one with the module
        assert (eng.static.proposers["eagle3"].fused_head is not None) == (engine == "compiled")


def _recorded_trees(engine: Engine) -> tuple[list[int], list[tuple]]:
    """An EAGLE-3 decode on ``engine`` and the tree buffers after each of its drafts (tokens, parents,
    depths, ancestors)."""
    proposer = engine.static.proposers["eagle3"]
    write, trees = proposer.write_tree, []

    def recording(tree):
        write(tree)
        if getattr(engine.static.runner, "warming", False):  # a capture's warm-ups (PaddingRunner) draft too
            return
        b, n = proposer.bufs, tree.size
        trees.append((b.tree_tokens[:n].clone(), b.tree_parents[:n].clone(), b.tree_depths[:n].clone(),
                      b.tree_anc[:n, :n].clone()))

    proposer.write_tree = recording
    return engine.decoder("eagle3").generate(PROMPT, NEW).output_ids, trees


@pytest.mark.parametrize("engine", ["static", "compiled"])
def test_the_prompts_draft_padded_as_graphs_run_it_drafts_the_same_trees(monkeypatch, tmp_path, engine):
    """Where graphs run, the first draft takes the prompt's 24 pairs padded to 32 (one graph per
    width): the padding's K/V land past the committed length and every tree stays the same."""
    target, e3 = _pair(tmp_path, "qwen3", scale=20.0)
    plain = _recorded_trees(Engine(engine, target, None, n_max=64, eagle3=e3))
    monkeypatch.setattr(static_engine, "GraphRunner", PaddingRunner)
    padded_engine = Engine(engine, target, None, n_max=64, eagle3=e3)
    padded = _recorded_trees(padded_engine)
    assert [k for k in padded_engine.static.runner.keys if k[0] == "eagle3_take_in"] == [("eagle3_take_in", 256, 32)]
    assert padded[0] == plain[0] and len(padded[1]) == len(plain[1]) >= NEW // 4
    for a, b in zip(plain[1], padded[1]):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("family", ["qwen3", "llama31"])
@pytest.mark.parametrize("oracle", [False, True])
def test_the_fused_head_drafts_the_static_engines_trees(tmp_path, family, oracle):
    """Every draft of the compiled engine (fused head) fills the tree buffers exactly as the static
    engine's (the head's modules) does; with the oracle, over long accepted paths.  The head's
    logits are sharpened so that the trees keep nodes of every depth: a slip in a late round shows."""
    policy = Eagle3Policy(depth=4, top_k=3, total_tokens=20) if oracle else None
    target, e3 = _pair(tmp_path, family, policy=policy, scale=20.0)
    ar = Engine("eager", target, None, n_max=64).decoder("ar").generate(PROMPT, NEW).output_ids
    runs = {}
    for engine in ("static", "compiled"):
        drafter = e3
        if oracle:
            drafter = OracleEagle3(e3.head, e3.layer_ids, e3.policy)
            drafter.reference, drafter.prompt_len = ar, len(PROMPT)
        runs[engine] = _recorded_trees(Engine(engine, target, None, n_max=64, eagle3=drafter))
        assert runs[engine][0] == ar, engine
    (_, static), (_, fused) = runs["static"], runs["compiled"]
    assert len(static) == len(fused) >= (5 if oracle else NEW)
    assert max(int(depths.max()) for _, _, depths, _ in static) == e3.policy.depth + 1
    for step, (a, b) in enumerate(zip(static, fused)):
        assert all(torch.equal(x, y) for x, y in zip(a, b)), step


@pytest.mark.parametrize("family", ["qwen3", "llama31"])
def test_accepted_paths_agree_across_engines(tmp_path, family):
    target, e3 = _pair(tmp_path, family, policy=Eagle3Policy(depth=4, top_k=3, total_tokens=20))
    ar = Engine("eager", target, None, n_max=64).decoder("ar").generate(PROMPT, NEW).output_ids
    runs = {}
    for engine in ("eager", "static", "compiled"):
        oracle = OracleEagle3(e3.head, e3.layer_ids, e3.policy)
        oracle.reference, oracle.prompt_len = ar, len(PROMPT)
        res = Engine(engine, target, None, n_max=64, eagle3=oracle).decoder("eagle3").generate(
            PROMPT, NEW, collect_stats=True)
        assert res.output_ids == ar, engine
        runs[engine] = [(s.committed, s.tree_size, s.context) for s in res.steps]
    assert runs["eager"] == runs["static"] == runs["compiled"]
    assert max(c for c, _, _ in runs["eager"]) >= 4  # long paths were accepted
    assert len(runs["eager"]) < NEW // 2


def test_sampling_is_the_same_on_both_engines(tmp_path):
    target, e3 = _pair(tmp_path, "qwen3", layer_ids=[0, 2, 4])
    assert e3.layer_ids == [0, 2, 4]  # explicit taps win
    outs = []
    for engine in ("eager", "static"):
        gen = torch.Generator().manual_seed(7)
        dec = Engine(engine, target, None, n_max=64, eagle3=e3).decoder("eagle3")
        outs.append(dec.generate(PROMPT, 24, temperature=0.8, generator=gen).output_ids)
    assert outs[0] == outs[1]


def test_dflash_and_eagle3_share_one_target(tmp_path):
    """Decoders of both drafters on one target: each taps its own layers at generate time."""
    from tests.support.builders import tiny_drafter

    target, e3 = _pair(tmp_path, "qwen3")
    drafter = tiny_drafter(target.model, block_size=4, layer_ids=[2, 5])
    for engine in ("eager", "static"):
        eng = Engine(engine, target, drafter, n_max=64, eagle3=e3)
        decs = {m: eng.decoder(m) for m in ("ar", "eagle3", "dflash")}
        ar = decs["ar"].generate(PROMPT, 16).output_ids
        for m in ("eagle3", "dflash", "eagle3"):
            assert decs[m].generate(PROMPT, 16).output_ids == ar, (engine, m)


def test_mismatched_head_is_refused_by_name(tmp_path):
    small = tiny_target("qwen3", layers=8, hidden=64)
    wide = tiny_target("qwen3", layers=8, hidden=128)
    folder = save_eagle3_head(tmp_path / "wide-head", wide)
    with pytest.raises(models.DrafterMismatchError, match=r"EAGLE-3 head '.*wide-head' does not fit target 'small'.*fc"):
        models.load_eagle3_head(str(folder), Target(small), "small", torch.float32, "cpu")


def test_missing_head_or_drafter_is_refused():
    target = Target(tiny_target("qwen3", layers=8))
    with pytest.raises(ValueError, match="needs an EAGLE-3 head"):
        Engine("eager", target, None, n_max=64).decoder("eagle3")
    with pytest.raises(ValueError, match="needs an EAGLE-3 head"):
        Engine("static", target, None, n_max=64).decoder("eagle3")


def test_tree_size_is_fixed_by_the_policy():
    assert Eagle3Policy().tree_size() == 60
    assert Eagle3Policy(depth=1, top_k=2, total_tokens=60).tree_size() == 1 + 2 + 4
    assert Eagle3Policy(depth=3, top_k=4, total_tokens=60).tree_size(draft_vocab=2) == 1 + 2 + 12
    assert Eagle3Policy().path_width == 9


def test_the_heads_one_node_keep_equals_its_general_keep(tmp_path):
    """``keep_root`` (a step without a draft) leaves the head's next pairs as ``keep`` of a
    one-node tree does (every kept index 0), whatever stale rows were there before."""
    target, e3 = _pair(tmp_path, "qwen3")
    proposer = Engine("static", target, None, n_max=64, eagle3=e3).static.proposers["eagle3"]
    proposer.features.normal_()
    proposer.pend.normal_()
    proposer.keep(torch.zeros(proposer.pend.shape[0], dtype=torch.long), torch.tensor(0))
    want = proposer.pend.clone()
    proposer.pend.normal_()
    proposer.keep_root()
    assert torch.equal(proposer.pend, want)
