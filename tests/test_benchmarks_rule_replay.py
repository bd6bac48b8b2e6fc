"""The replay of tree-size rules is exact: a replayed step commits what decoding commits there."""

from __future__ import annotations

import torch

from benchmarks.rule_replay import positions, replay
from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.speculative.policy import TreePolicy


def test_a_replayed_fixed_budget_commits_what_decoding_commits():
    target_ref, drafter_ref, _ = models.resolve("tiny")
    target = models.load_target(target_ref, torch.float32, "cpu")
    drafter = models.load_drafter(drafter_ref, torch.float32, "cpu")
    builder = PromptBuilder(models.load_tokenizer(target_ref))
    prompt = builder.encode([], datasets.load_prompts("stdlib-heldout", 1, seed=datasets.DEFAULT_SEED)[0]["turns"][0])
    engine = Engine("eager", target, drafter, n_max=64)
    found = positions(engine, prompt, 48)
    assert 20 < len(found) <= 48 and found[0].tau[0] == 1 and all(p.tau[-1] >= p.tau[0] for p in found)
    for budget in (3, 9):
        res = engine.decoder("bastion", TreePolicy(budget=budget)).generate(prompt, 48, 0.0, ())
        k, replayed = 0, []
        while k < len(found):
            replayed.append(int(found[k].tau[budget - 1]))
            k += replayed[-1]
        decoded = [s.committed for s in res.steps][: len(replayed)]
        assert replayed == decoded, (budget, replayed, decoded)
        assert replay([found], lambda pos, cost, b=budget: b, lambda pos, n: 1.0 if n else 0.25)[1] == \
            sum(replayed) / len(replayed)
