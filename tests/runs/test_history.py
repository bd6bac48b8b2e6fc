"""One history for all methods: with ``history_from`` every turn-k prompt carries AR's earlier answers."""

from __future__ import annotations

import json

import pytest

from bastion.benchmark import main
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
    ar = _run(data, tmp_path / "ar.jsonl", ("ar",))
    partial = tmp_path / "ar-part.jsonl"  # AR's records without prompt 0's first answer
    partial.write_text("".join(json.dumps(r) + "\n" for r in ar if (r["prompt_index"], r["turn"]) != (0, 0)))
    with pytest.raises(UsageError, match="no answer for prompt 0, turn 0"):
        _run(data, tmp_path / "dflash.jsonl", ("dflash",), history_from=str(partial))


def test_multi_turn_without_ar_or_its_records_is_refused(tmp_path, capsys):
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"turns": TURNS}) + "\n")
    code = main(["--model", "tiny", "--dataset", str(data), "--methods", "dflash,bastion", "--max-new-tokens", "6",
                 "--quiet", "--output", str(tmp_path / "out.jsonl")])
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert "3 turns" in errors[0] and "add ar to --methods" in errors[0] and "--history-from" in errors[0]


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    """A two-prompt multi-turn set and AR's records of it (6 new tokens)."""
    root = tmp_path_factory.mktemp("chat")
    data = root / "chat.jsonl"
    data.write_text(json.dumps({"turns": TURNS}) + "\n" + json.dumps({"turns": TURNS[:2]}) + "\n")
    _run(data, root / "ar.jsonl", ("ar",))
    return root, data


@pytest.mark.parametrize("change, needle", [
    ({"max_new_tokens": 8}, "max_new_tokens 6 (this run: 8)"),
    ({"temperature": 0.5}, "temperature 0.0 (this run: 0.5)"),
    ({"max_samples": 1}, "max_samples null (this run: 1)"),
    ({"data_seed": 7}, "data_seed"),
])
def test_history_of_other_settings_is_refused_naming_them(chat, tmp_path, change, needle):
    root, data = chat
    kw = {"max_new_tokens": 6, **change}
    with pytest.raises(UsageError) as err:
        DecodeRun(model="tiny", dataset=str(data), methods=("dflash",), output=str(tmp_path / "d.jsonl"), quiet=True,
                  history_from=str(root / "ar.jsonl"), **kw).execute()
    msg = str(err.value)
    assert str(root / "ar.jsonl") in msg and "other settings" in msg and needle in msg


def test_history_of_other_prompts_is_refused(chat, tmp_path):
    root, data = chat
    other = tmp_path / "other.jsonl"  # same shape, another second prompt
    other.write_text(json.dumps({"turns": TURNS}) + "\n" + json.dumps({"turns": ["x = 1\n", "y = 2\n"]}) + "\n")
    forged = tmp_path / "forged.jsonl"  # AR's records, claiming the other file as their dataset
    forged.write_text("".join(json.dumps({**json.loads(line), "dataset_arg": str(other)}) + "\n"
                              for line in (root / "ar.jsonl").read_text().splitlines()))
    with pytest.raises(UsageError, match=r"answer other prompts than this run's \(prompt index 1\)"):
        _run(other, tmp_path / "d.jsonl", ("dflash",), history_from=str(forged))


def test_history_of_another_target_is_refused(chat, tmp_path):
    root, data = chat
    forged = tmp_path / "forged-target.jsonl"
    forged.write_text("".join(json.dumps({**json.loads(line), "target": "someone/else"}) + "\n"
                              for line in (root / "ar.jsonl").read_text().splitlines()))
    with pytest.raises(UsageError, match=r'other settings: target "someone/else" \(this run: "'):
        _run(data, tmp_path / "d.jsonl", ("dflash",), history_from=str(forged))


def test_the_run_key_holds_the_history_content_not_its_path(chat, tmp_path):
    root, data = chat
    copy = tmp_path / "elsewhere" / "ar-copy.jsonl"
    copy.parent.mkdir()
    copy.write_text((root / "ar.jsonl").read_text())
    keys = {}
    for name, path in (("original", root / "ar.jsonl"), ("copy", copy)):
        keys[name] = {r["run_key"] for r in _run(data, tmp_path / f"{name}.jsonl", ("dflash",), history_from=str(path))}
    changed = tmp_path / "changed.jsonl"  # AR regenerated with another answer to prompt 0, turn 0
    lines = [json.loads(line) for line in (root / "ar.jsonl").read_text().splitlines()]
    lines[0]["output_ids"] = lines[0]["output_ids"][:-1]
    changed.write_text("".join(json.dumps(r) + "\n" for r in lines))
    keys["changed"] = {r["run_key"] for r in _run(data, tmp_path / "changed-out.jsonl", ("dflash",),
                                                   history_from=str(changed))}
    assert len(keys["original"]) == 1 and keys["original"] == keys["copy"] != keys["changed"]
