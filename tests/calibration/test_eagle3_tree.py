"""The EAGLE-3 tree sweep end to end on the bundled tiny pair (eager engine, a tiny budget)."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bastion.calibration.eagle3_tree import TreeChoice, sweep_trees
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.methods import Eagle3Policy
from dflash.eagle3.checkpoint import Eagle3CheckpointError, read_draft_vocab


@pytest.fixture(scope="module")
def tiny():
    target = Target(AutoModelForCausalLM.from_pretrained(models.tiny_dir("target"), dtype=torch.float32).eval())
    head = models.load_eagle3_head(str(models.tiny_dir("eagle3")), target, "tiny", torch.float32, "cpu")
    tok = AutoTokenizer.from_pretrained(models.tiny_dir("target"))
    first = json.loads((resources.files("bastion") / "data" / "stdlib-heldout.jsonl")
                       .read_text(encoding="utf-8").splitlines()[0])["turns"][0]
    return target, head, tok(first, add_special_tokens=False)["input_ids"]


def test_the_sweep_decodes_each_useful_shape_and_picks_the_fastest(tiny):
    target, head, prompt = tiny
    made: list[Eagle3Policy] = []

    def decoder_for(policy: Eagle3Policy):
        made.append(policy)
        return Engine("eager", target, None, 64, eagle3=Eagle3Drafter.bind(head, target, policy)).decoder("eagle3")

    choice = sweep_trees(decoder_for, [prompt], head.config.draft_vocab_size, max_new_tokens=12, passes=1,
                         shapes=[(2, 2, 3), (1, 1, 3), (2, 2, 6)])
    assert made == [Eagle3Policy(1, 1, 3), Eagle3Policy(2, 2, 6)]  # 2/2/3 is never decoded
    assert [m.policy for m in choice.measured] == made
    assert choice.chosen == max(choice.measured, key=lambda m: m.tokens_per_second)
    for m in choice.measured:  # τ is the decode's own: the same greedy run gives it again
        res = decoder_for(m.policy).generate(prompt, max_new_tokens=12)
        assert m.tau == sum(s.committed for s in res.steps) / len(res.steps)
    assert TreeChoice.from_dict(json.loads(json.dumps(choice.to_dict()))) == choice


def test_the_draft_vocabulary_is_read_without_weights(tmp_path):
    shipped = models.tiny_dir("eagle3")
    assert read_draft_vocab(str(shipped)) == json.loads((shipped / "config.json").read_text())["draft_vocab_size"]
    (tmp_path / "config.json").write_text(json.dumps({"draft_vocab_size": "many"}))
    with pytest.raises(Eagle3CheckpointError, match="draft_vocab_size 'many'"):
        read_draft_vocab(str(tmp_path))
