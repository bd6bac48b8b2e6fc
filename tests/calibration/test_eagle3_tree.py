"""The EAGLE-3 tree sweep end to end on the bundled tiny pair (eager engine, a tiny budget)."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bastion.calibration.eagle3_tree import DROP_BELOW, WARM_UP_TOKENS, TreeChoice, measure_trees, sweep_trees
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.eagle3_tree import choose_tree
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


def test_the_sweep_decodes_each_useful_shape_and_chooses_by_the_rule(tiny):
    target, head, prompt = tiny
    made: list[Eagle3Policy] = []

    def decoder_for(policy: Eagle3Policy):
        made.append(policy)
        return Engine("eager", target, None, 64, eagle3=Eagle3Drafter.bind(head, target, policy)).decoder("eagle3")

    choice = sweep_trees(decoder_for, [prompt], head.config.draft_vocab_size, max_new_tokens=12, passes=1,
                         shapes=[(2, 2, 3), (1, 1, 3), (2, 2, 6)])
    assert made == [Eagle3Policy(1, 1, 3), Eagle3Policy(2, 2, 6)]  # 2/2/3 is never decoded
    assert [m.policy for m in choice.measured] == made
    assert choice.chosen == choose_tree(choice.measured)
    for m in choice.measured:  # τ is the decode's own: the same greedy run gives it again
        res = decoder_for(m.policy).generate(prompt, max_new_tokens=12)
        assert m.tau == sum(s.committed for s in res.steps) / len(res.steps)
        assert m.prompts == 1
    assert TreeChoice.from_dict(json.loads(json.dumps(choice.to_dict()))) == choice


class _Logged:
    """A real decoder that notes each decode and reports ``slower`` milliseconds a token as its time.

    A set time, not the clock's: which shape falls behind must not depend on how busy the
    machine is while the test runs (the eager 2/2/6 and 1/1/3 decode at about one rate).
    """

    def __init__(self, name: str, decoder, log: list, slower: float = 1.0):
        self.name, self.decoder, self.log, self.slower = name, decoder, log, slower

    def generate(self, prompt, max_new_tokens):
        self.log.append((self.name, len(prompt), max_new_tokens))
        res = self.decoder.generate(prompt, max_new_tokens=max_new_tokens)
        return dataclasses.replace(res, decode_seconds=1e-3 * self.slower * len(res.output_ids))


def test_shapes_take_turns_prompt_by_prompt_and_one_far_behind_stops_after_the_first(tiny):
    target, head, prompt = tiny
    prompts = [prompt, prompt[:-3], prompt[:-6]]
    policies = [Eagle3Policy(1, 1, 3), Eagle3Policy(2, 2, 6)]
    log: list = []
    decoders = [_Logged(f"{p.depth}/{p.top_k}/{p.total_tokens}",
                        Engine("eager", target, None, 64, eagle3=Eagle3Drafter.bind(head, target, p)).decoder("eagle3"),
                        log, slower)
                for p, slower in zip(policies, (1.0, 1.0 / (DROP_BELOW * 0.5)))]
    measured = measure_trees(decoders, policies, prompts, max_new_tokens=12, passes=1)
    warm = [(d.name, len(prompt), WARM_UP_TOKENS) for d in decoders]
    assert log == warm + [("1/1/3", len(prompts[0]), 12), ("2/2/6", len(prompts[0]), 12),
                          ("1/1/3", len(prompts[1]), 12), ("1/1/3", len(prompts[2]), 12)]
    assert [m.prompts for m in measured] == [3, 1]
    assert [len(m.rates) for m in measured] == [3, 1]  # one rate per prompt decoded
    assert measured[1].rates[0] < DROP_BELOW * measured[0].rates[0]
    assert min(measured[0].rates) <= measured[0].tokens_per_second <= max(measured[0].rates)
    assert choose_tree(measured).policy == Eagle3Policy(1, 1, 3)

    log.clear()  # without the handicap both decode every prompt, in turn
    for d in decoders:
        d.slower = 1.0
    measure_trees(decoders, policies, prompts, max_new_tokens=12, passes=1)
    assert [name for name, _, n in log if n == 12] == ["1/1/3", "2/2/6"] * 3


def test_the_draft_vocabulary_is_read_without_weights(tmp_path):
    shipped = models.tiny_dir("eagle3")
    assert read_draft_vocab(str(shipped)) == json.loads((shipped / "config.json").read_text())["draft_vocab_size"]
    (tmp_path / "config.json").write_text(json.dumps({"draft_vocab_size": "many"}))
    with pytest.raises(Eagle3CheckpointError, match="draft_vocab_size 'many'"):
        read_draft_vocab(str(tmp_path))
