"""The fidelity benchmark's comparison (benchmarks/bastion_fidelity.py), without the original release:
method ``bastion``'s tree step against this project's heap oracle, and the tie classification."""

from __future__ import annotations

import torch

from bastion.costmodel.model import StepOverheads
from bastion.engines.eager import EagerDecoder
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
from bastion.speculative.tree import build_tree_heap
from benchmarks.bastion_fidelity import N_MAX, Case, compare, ours, paths, synthetic, verdict
from tests.support.builders import tiny_drafter, tiny_target
from tests.support.decoding import _cost_model


def test_the_bastion_rule_builds_the_heap_oracle_s_trees():
    """The literal best-first loop with the paper's rounding, the calibrated C(n) and T_draft + T_other."""
    model = tiny_target(seed=3)
    cost, _ = _cost_model(model)
    ov = StepOverheads(4e-3, 1e-3)
    decoder = EagerDecoder(Target(model), "bastion", tiny_drafter(model, block_size=6), TreePolicy(), cost, ov)

    def oracle(case: Case, n_min: int) -> list[tuple[int, ...]]:
        tokens, parents = build_tree_heap(case.root, torch.log_softmax(case.logits, -1),
                                          TreePolicy(n_min=n_min, n_max=N_MAX, rounding="down"),
                                          cost.curve(case.context, N_MAX), ov.t_draft + ov.t_other)
        return paths(tokens, parents)

    cases = synthetic(12, 5, int(model.config.vocab_size), (16, 300))
    counts = compare(cases, (2, 16), oracle, ours(decoder))
    assert sum(len(c["sizes"]) for c in counts.values()) == 48
    assert all(c["identical"] == len(c["sizes"]) for c in counts.values()), counts
    sizes = {len(ours(decoder)(case, 2)) for case in cases}
    assert len(sizes) > 3  # the rule decided: many sizes, not the floor alone


def test_trees_that_differ_only_in_tied_nodes_are_a_tie():
    logits = torch.full((2, 8), -10.0)
    logits[0, 1] = logits[0, 2] = 2.0  # two depth-1 drafts of one probability
    logits[0, 3] = 3.0
    logits[1, 4] = 5.0
    one = [(), (3,), (3, 4), (1,)]
    other = [(), (3,), (3, 4), (2,)]
    assert verdict(one, one, logits) == "identical"
    assert verdict(one, other, logits) == "tie"
    assert verdict(one, [(), (3,), (3, 4), (5,)], logits) == "different"  # token 5 is far less probable
    assert verdict(one, one[:3], logits) == "different"  # another size
