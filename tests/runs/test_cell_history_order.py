"""A cell on a multi-turn set: AR, whose answers are the others' histories, decodes its
prompts first; the runs that read them then advance prompt by prompt in turn, so a drift
of the machine touches them alike (the budget ablation's job relies on it)."""

from __future__ import annotations

import json
import shutil

import pytest

from bastion.runs.cell import decode_cell
from bastion.runs import runner
from bastion.runs.run import DecodeRun

PROMPTS = [{"turns": ["def add(a, b):\n    return", "    # and now subtract\n"]}, {"turns": ["import os\n", "x = 1\n"]}]
TIMES = {"prefill_seconds", "decode_seconds", "t_draft", "t_tree", "t_verify", "t_accept", "t_commit", "prefill_reused"}


@pytest.fixture()
def data(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    return path


def _runs(data, folder):
    """AR, then two readers of its records: bastion at two fixed budgets (no calibration) and dflash."""
    def run(method, budget=None, name=None):
        return DecodeRun(model="tiny", dataset=str(data), methods=(method,), max_new_tokens=8, device="cpu",
                         dtype="float32", engine="static", quiet=True, output=str(folder / f"{name or method}.jsonl"),
                         budget=budget, history_from=None if method == "ar" else str(folder / "ar.jsonl"))
    return [run("ar"), run("dflash"), run("bastion", 16, "bastion-b16"), run("bastion", 32, "bastion-b32")]


def _content(path):
    return [{k: v for k, v in json.loads(line).items() if k not in TIMES} for line in path.read_text().splitlines()]


def test_ar_decodes_first_then_the_history_readers_advance_in_turn(data, tmp_path, monkeypatch):
    out = tmp_path / "cell"
    names = ("ar", "dflash", "bastion-b16", "bastion-b32")
    for run in _runs(data, out):  # each alone, one after another
        run.execute()
    alone = {n: _content(out / f"{n}.jsonl") for n in names}
    shutil.rmtree(out)
    order, real = [], runner.decode_prompt

    def logged(run, idx, *args, **kw):
        order.append((run.methods[0], run.budget, idx))
        return real(run, idx, *args, **kw)

    monkeypatch.setattr(runner, "decode_prompt", logged)
    decode_cell(_runs(data, out))
    dflash, b16, b32 = ("dflash", None), ("bastion", 16), ("bastion", 32)
    # the readers' rounds take rows [0, 1, 2] and [1, 2, 0] of the design (bastion.runs.order)
    assert order == [("ar", None, 0), ("ar", None, 1)] + [(*r, 0) for r in (dflash, b16, b32)] + [
        (*r, 1) for r in (b16, b32, dflash)]
    for n in names:  # the second turns carry AR's answers, as when decoded alone
        assert _content(out / f"{n}.jsonl") == alone[n], n
    assert {r["turn"] for r in alone["bastion-b32"]} == {0, 1}
    assert not list(out.glob("*.partial"))
