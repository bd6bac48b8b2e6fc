"""One history for all methods: with ``history_from`` every turn-k prompt carries AR's earlier answers."""

from __future__ import annotations

import json

import pytest

from bastion.data.prompts import PromptBuilder
from bastion.models import registry as models
from bastion.runs.checks import UsageError
from bastion.runs.run import DecodeRun

TURNS = ["def walk(path):\n", "    # now list the files\n", "    return"]


def _run(data, out, methods, **kw):
    return DecodeRun(model="tiny", dataset=str(data), methods=methods, max_new_tokens=6, output=str(out), quiet=True,
                     **kw).execute()


def test_later_turns_take_the_history_records(tmp_path):
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"turns": TURNS}) + "\n" + json.dumps({"turns": TURNS[:2]}) + "\n")
    ar_out = tmp_path / "ar.jsonl"
    ar = _run(data, ar_out, ("ar",))
    # a history file whose answers differ from anything dflash would write itself
    fake = tmp_path / "history.jsonl"
    target_ref = models.resolve("tiny")[0]
    builder = PromptBuilder(models.load_tokenizer(target_ref), False)
    answer = builder.tokenizer("    x = 1\n")["input_ids"]
    fake.write_text("".join(json.dumps({**r, "output_ids": answer}) + "\n" for r in ar))
    recs = _run(data, tmp_path / "dflash.jsonl", ("dflash",), history_from=str(fake))
    by_key = {(r["prompt_index"], r["turn"]): r for r in recs}
    for (i, turn), rec in by_key.items():
        turns = TURNS if i == 0 else TURNS[:2]
        history = [(turns[j], builder.decode(answer)) for j in range(turn)]
        assert rec["num_prompt_tokens"] == len(builder.encode(history, turns[turn])), (i, turn)
    # and with AR's real records, dflash's prompts are AR's prompts turn by turn
    same = _run(data, tmp_path / "dflash2.jsonl", ("dflash",), history_from=str(ar_out))
    assert [r["num_prompt_tokens"] for r in same] == [r["num_prompt_tokens"] for r in ar]


def test_history_records_must_cover_every_earlier_turn(tmp_path):
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"turns": TURNS[:2]}) + "\n")
    partial = tmp_path / "ar.jsonl"
    partial.write_text(json.dumps({"prompt_index": 5, "turn": 0, "method": "ar", "output_ids": [1]}) + "\n")
    with pytest.raises(UsageError, match="no answer for prompt 0, turn 0"):
        _run(data, tmp_path / "dflash.jsonl", ("dflash",), history_from=str(partial))
