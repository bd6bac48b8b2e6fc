"""The calibration grid reaches the longest context a run can see (no extrapolated trees)."""

from __future__ import annotations

from bastion.calibration.grid import Grid
from bastion.data.prompts import PromptBuilder


class _Chars:
    """A tokenizer of one id per character, without a chat template."""

    chat_template = None

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(ch) % 251 for ch in text]}


def test_covering_doubles_contexts_until_the_longest_fits():
    paper = Grid.named("paper")
    assert paper.covering(1500) == paper  # already inside
    wide = paper.covering(20_000)
    assert wide.c_values == paper.c_values + (4096, 8192, 16384, 32768)
    assert wide.s_values == paper.s_values and wide.tail_s == paper.tail_s
    assert max(c for _, c in wide.points()) >= 20_000


def test_longest_context_counts_every_turn_and_its_answer():
    builder = PromptBuilder(_Chars())
    prompts = [{"turns": ["abc"]}, {"turns": ["x" * 10, "y" * 5]}]
    # two-turn prompt: "x"*10 + "" + "\n" then "y"*5 -> 16 ids, plus 2 x 7 new tokens
    assert builder.longest_context(prompts, max_new_tokens=7) == 16 + 14
    assert builder.longest_context([{"turns": ["abc"]}], max_new_tokens=0) == 3
