"""Runs that share a session load the models and the engine once and write the records of runs alone.

The pipeline's ``decode_cell`` jobs (:func:`bastion.runs.cell.decode_cell`) decode every
method of a cell this way; their files must equal the per-method jobs' files, run keys
included, and a killed cell must resume every method from its own partial file.
"""

from __future__ import annotations

import json
import shutil

import pytest

from bastion.runs import runner
from bastion.runs.cell import decode_cell
from bastion.runs.run import DecodeRun
from bastion.runs.session import Session

METHODS = ("ar", "eagle3", "dflash", "bastion")
PROMPTS = [{"turns": ["def add(a, b):\n    return", "    # and now subtract\n"]}, {"turns": ["import os\n"]}]
TIMES = {"prefill_seconds", "decode_seconds", "t_draft", "t_tree", "t_verify", "t_accept", "t_commit"}
# how the prefill was timed: a shared static engine restores a prompt's prefill for a cell's later methods
TIMING_NOTES = {"prefill_reused"}


@pytest.fixture()
def data(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    return path


@pytest.fixture()
def single_turn(tmp_path):
    """One turn per prompt: the runs of a cell need no history and advance in turn."""
    path = tmp_path / "single.jsonl"
    path.write_text("".join(json.dumps({"turns": p["turns"][:1]}) + "\n" for p in PROMPTS))
    return path


def _runs(data, folder, history=False, engine="static"):
    """One run per method, as a cell job makes them: bastion at a fixed budget (no calibration)."""
    return [DecodeRun(model="tiny", dataset=str(data), methods=(m,), max_new_tokens=8, device="cpu", dtype="float32",
                      engine=engine, quiet=True, output=str(folder / f"{m}.jsonl"), budget=16 if m == "bastion" else None,
                      eagle3_tree="7/10/60",
                      history_from=str(folder / "ar.jsonl") if history and m != "ar" else None)
            for m in METHODS]


def _content(path):
    """A record file without its timings (which differ run to run)."""
    return [{k: v for k, v in json.loads(line).items() if k not in TIMES | TIMING_NOTES}
            for line in path.read_text().splitlines()]


@pytest.mark.parametrize("engine", ["static", "eager"])
def test_a_session_loads_once_and_writes_the_records_of_runs_alone(data, tmp_path, engine):
    out = tmp_path / "out"
    for run in _runs(data, out, history=True, engine=engine):  # each run alone, as the per-method jobs do
        run.execute()
    alone = {m: _content(out / f"{m}.jsonl") for m in METHODS}
    shutil.rmtree(out)
    session = Session(METHODS)
    for run in _runs(data, out, history=True, engine=engine):
        run.execute(session)
    kinds = [key[0] for key in session.loaded]
    # one target, tokenizer, drafter, EAGLE-3 head and engine for all four runs
    assert sorted(kinds) == sorted(["target", "tokenizer", "drafter", "eagle3_head", "eagle3", "engine"]), session.loaded
    for m in METHODS:
        shared = _content(out / f"{m}.jsonl")
        assert shared == alone[m], m  # same tokens, steps, trees and run key
        assert len({r["run_key"] for r in shared}) == 1
    # the static engine prefilled each prompt once for the taps dflash and bastion share
    reused = [json.loads(line).get("prefill_reused", False) for line in (out / "bastion.jsonl").read_text().splitlines()]
    assert reused == [engine == "static"] * len(reused)
    assert not list(out.glob("*.partial"))


def test_a_cell_takes_ar_histories_and_resumes_each_method(data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "cell"
    for run in _runs(data, out, history=True):  # per-method: AR first, the others read its records
        run.execute()
    alone = {m: _content(out / f"{m}.jsonl") for m in METHODS}
    shutil.rmtree(out)

    # a cell killed in dflash's second prompt: AR is done; the readers' round 1 (row [1, 2, 0] of
    # eagle3, dflash, bastion) starts with dflash, so each reader has its first prompt
    real = runner.decode_prompt

    def dies(run, idx, *args, **kw):
        if run.methods == ("dflash",) and idx == 1:
            raise KeyboardInterrupt
        return real(run, idx, *args, **kw)

    monkeypatch.setattr(runner, "decode_prompt", dies)
    with pytest.raises(KeyboardInterrupt):
        decode_cell(_runs(data, out, history=True))
    assert (out / "ar.jsonl.partial").exists() and (out / "dflash.jsonl.partial").exists()
    monkeypatch.setattr(runner, "decode_prompt", real)
    for path in out.glob("*.jsonl"):  # Snakemake deletes the outputs of a failed job
        path.unlink()
    runs = _runs(data, out, history=True)
    for run in runs:
        run.quiet = False
    capsys.readouterr()
    session = decode_cell(runs)
    err = capsys.readouterr().err
    assert err.count("[resume] 2 of 2 prompts already done") == 1  # AR comes from its records
    assert err.count("[resume] 1 of 2 prompts already done") == 3  # the readers resume after their first prompt
    assert [key[0] for key in session.loaded].count("engine") == 1
    for m in METHODS:
        assert _content(out / f"{m}.jsonl") == alone[m], m
    assert not list(out.glob("*.partial"))  # gone once the whole cell is written


def test_a_cell_without_histories_decodes_prompt_by_prompt_and_resumes(single_turn, tmp_path, monkeypatch, capsys):
    """Runs on the same prompts advance in turn (every method on a prompt, then the next prompt), each
    round in the Williams design's order (bastion.runs.order); files as alone."""
    data = single_turn
    out = tmp_path / "cell"
    for run in _runs(data, out):
        run.execute()
    alone = {m: _content(out / f"{m}.jsonl") for m in METHODS}
    shutil.rmtree(out)
    order, real = [], runner.decode_prompt

    def logged(run, idx, *args, **kw):
        order.append((run.methods[0], idx))
        if run.methods == ("dflash",) and idx == 1 and kill["on"]:
            raise KeyboardInterrupt
        return real(run, idx, *args, **kw)

    kill = {"on": True}
    monkeypatch.setattr(runner, "decode_prompt", logged)
    with pytest.raises(KeyboardInterrupt):  # killed in dflash's second prompt
        decode_cell(_runs(data, out))
    # rounds 0 and 1 of four methods: rows [0, 1, 3, 2] and [1, 2, 0, 3] of METHODS
    assert order == [("ar", 0), ("eagle3", 0), ("bastion", 0), ("dflash", 0), ("eagle3", 1), ("dflash", 1)]
    for path in out.glob("*.jsonl"):  # Snakemake deletes the outputs of a failed job
        path.unlink()
    kill["on"], order[:] = False, []
    runs = _runs(data, out)
    for run in runs:
        run.quiet = False
    capsys.readouterr()
    decode_cell(runs)
    err = capsys.readouterr().err
    assert err.count("[resume] 1 of 2 prompts already done") == 3  # all but eagle3 lost their second prompt
    assert order == [("ar", 1), ("bastion", 1), ("dflash", 1)]  # row 0 again, without the finished eagle3
    for m in METHODS:
        assert _content(out / f"{m}.jsonl") == alone[m], m
    assert not list(out.glob("*.partial"))
