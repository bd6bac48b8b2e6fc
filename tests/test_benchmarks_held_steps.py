"""The held-steps benchmark off CUDA: both engines take torch's writes, never draft, and set aside the same rows."""

from __future__ import annotations

import re

from benchmarks.held_steps import main
from bastion.data import registry as datasets
from bastion.data.prompts import PromptBuilder
from bastion.models import registry as models
from bastion.speculative import fused


def test_a_smoke_run_holds_every_step_and_leaves_equal_rows(capsys):
    assert main(["--device", "cpu", "--prompts", "2", "--tokens", "12", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("round 0: tok/s ar A") == 1
    assert "engine A: AR" in out and "engine B: AR" in out
    # the last prompt's rows: the prompt's own, then one for each of its 11 steps (the prefill made the first token)
    builder = PromptBuilder(models.load_tokenizer(str(models.tiny_dir("target"))))
    rows = len(builder.encode([], datasets.load_prompts("stdlib-heldout")[1]["turns"][0])) + 11
    got = re.search(r"rows set aside after one prompt: (\d+) and (\d+), equal bits: True", out)
    assert got and int(got.group(1)) == int(got.group(2)) == rows, out
    assert not any(name == "hold_row" for name, _ in fused._WORKS), "no Triton kernel off CUDA"
