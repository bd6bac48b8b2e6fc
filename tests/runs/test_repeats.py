"""Repeated decodes: a cell decodes every prompt's repeats in turn, and a record keeps the fastest decode.

The budget ablation's job decodes each T = 0 prompt twice (`ablation_repeats`), so a burst
of other work on the machine during one decode no longer decides a method's time.
"""

from __future__ import annotations

import json

import pytest

from bastion.runs import runner
from bastion.runs.cell import decode_cell
from bastion.runs.checks import UsageError
from bastion.runs.repeats import fastest
from bastion.runs.run import DecodeRun

PROMPTS = [{"turns": ["def add(a, b):\n    return"]}, {"turns": ["import os\n"]}]
TIMES = {"prefill_seconds", "decode_seconds", "prefill_reused", "repeat_seconds", "repeats_agree", "run_key",
         "run_settings"}


def _runs(data, folder, repeats):
    """AR and BASTION at a fixed budget (no calibration), as the ablation's cell makes them."""
    return [DecodeRun(model="tiny", dataset=str(data), methods=(m,), max_new_tokens=8, device="cpu", dtype="float32",
                      engine="static", quiet=True, output=str(folder / f"{m}.jsonl"),
                      budget=16 if m == "bastion" else None, repeats=repeats)
            for m in ("ar", "bastion")]


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_cell_decodes_the_repeats_in_turn_and_keeps_the_fastest(tmp_path, monkeypatch):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    decode_cell(_runs(data, tmp_path / "once", 1))
    order, real = [], runner.decode_prompt

    def logged(run, idx, *args, **kw):
        order.append((run.methods[0], idx))
        return real(run, idx, *args, **kw)

    monkeypatch.setattr(runner, "decode_prompt", logged)
    decode_cell(_runs(data, tmp_path / "twice", 2))
    # every method's first decode of a prompt, then every method's second, then the next prompt
    assert [idx for _, idx in order] == [0, 0, 0, 0, 1, 1, 1, 1]
    for i in range(0, 8, 2):
        assert {m for m, _ in order[i : i + 2]} == {"ar", "bastion"}, order
    for m in ("ar", "bastion"):
        once, twice = _records(tmp_path / "once" / f"{m}.jsonl"), _records(tmp_path / "twice" / f"{m}.jsonl")
        assert [{k: v for k, v in r.items() if k not in TIMES} for r in twice] == \
               [{k: v for k, v in r.items() if k not in TIMES} for r in once]  # the same tokens, steps and trees
        for r in twice:
            assert len(r["repeat_seconds"]) == 2 and r["repeats_agree"] is True
            assert r["decode_seconds"] == min(r["repeat_seconds"])
        # a partial file of single decodes never resumes a run of repeats
        assert twice[0]["run_settings"]["repeats"] == 2 and "repeats" not in once[0]["run_settings"]
        assert twice[0]["run_key"] != once[0]["run_key"]


def _rec(seconds, tokens, trees=(1, 1)):
    return {"decode_seconds": seconds, "output_ids": list(tokens), "tree_sizes": list(trees)}


def test_only_decodes_that_agree_with_the_first_can_be_kept():
    first = [_rec(2.0, [5, 6]), _rec(3.0, [7])]
    same_faster = [_rec(1.5, [5, 6]), _rec(3.5, [7])]
    other_fastest = [_rec(0.5, [5, 9]), _rec(1.0, [7], trees=(1, 2))]
    kept = fastest([first, same_faster, other_fastest])
    assert [r["decode_seconds"] for r in kept] == [1.5, 3.0]
    assert [r["repeat_seconds"] for r in kept] == [[2.0, 1.5, 0.5], [3.0, 3.5, 1.0]]
    assert [r["repeats_agree"] for r in kept] == [False, False]
    assert fastest([first]) == first  # one decode: its records as they are, no repeat fields


@pytest.mark.parametrize("repeats, temperature, needle", [
    (0, 0.0, "--repeats must be >= 1, got 0"),
    (2, 0.7, "--repeats 2 needs --temperature 0, got 0.7"),
])
def test_repeats_are_refused_where_they_are_not_the_same_decode(repeats, temperature, needle):
    run = DecodeRun(model="tiny", dataset="stdlib-heldout", repeats=repeats, temperature=temperature)
    with pytest.raises(UsageError, match=needle.replace(".", r"\.")):
        run.validate()
