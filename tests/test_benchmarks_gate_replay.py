"""The gate replay: positions covered as decoding covers them, the gate's stops and probes, bad records refused."""

from __future__ import annotations

import json

import pytest

from benchmarks.gate_replay import covering, main, replay
from bastion.speculative.gate import MIN_STEPS


def test_each_position_takes_the_count_of_the_step_that_covers_it():
    assert covering([2, 1, 3]) == [2, 2, 1, 3, 3, 3]


def test_a_drafter_that_never_pays_costs_little_more_than_its_probes():
    r = replay([covering([1] * 128)] * 8, ratio=3.0, probes=2, tokens=128)
    assert r["steps"] == 8 * 128 and MIN_STEPS < r["drafted"] < 0.05 * r["steps"]
    # every drafted step costs 3 AR steps and commits one: the loss is 2 AR steps each
    assert r["speedup"] == pytest.approx(r["steps"] / (r["steps"] + 2 * r["drafted"]))


def test_a_longer_wait_probes_less_where_drafting_never_pays():
    """16 prompts of 128 tokens: past the doubling, a probe every 64 AR steps or every 128."""
    prompts = [covering([1] * 128)] * 16
    short, long = (replay(prompts, ratio=3.0, probes=2, tokens=128, max_wait=w) for w in (64, 128))
    assert long["drafted"] < short["drafted"] - 5 and long["speedup"] > short["speedup"]


def test_a_drafter_that_pays_drafts_every_step():
    r = replay([covering([6] * 30)] * 2, ratio=3.0, probes=2, tokens=128)
    assert r["drafted"] == r["steps"] and r["spells"] == {22: 2} and r["speedup"] == pytest.approx(6 / 3)


def test_lone_lucky_stretches_resume_drafting_only_with_one_probe_to_resume():
    """Text where drafting does not pay, but with single short stretches that a probe can land on:
    one paying probe resumes a run of losing drafted steps, two in a row are not met.  (Both
    open with a run of MIN_STEPS + 1 drafted steps: the stop, read one step late.)"""
    commits = ([1] * 10 + [8]) * 20
    one = replay([covering(commits)], ratio=3.0, probes=1, tokens=128 * 4)
    two = replay([covering(commits)], ratio=3.0, probes=2, tokens=128 * 4)
    runs = {name: sum(c for n, c in r["spells"].items() if n > 1) for name, r in (("one", one), ("two", two))}
    assert runs["one"] > 10 and runs["two"] == 1 and two["spells"][MIN_STEPS + 1] == 1
    assert two["drafted"] < one["drafted"] and two["speedup"] > one["speedup"]


def test_records_that_skip_drafts_are_refused(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"method": "bastion_plus", "acceptance_lengths": [1, 3], "drafted": [0, 1]}) + "\n")
    with pytest.raises(SystemExit, match="skip drafts at some steps; replay a method that drafts every step"):
        main(["--records", str(path), "--method", "bastion_plus"])
    with pytest.raises(SystemExit, match="no records of method 'bastion'"):
        main(["--records", str(path)])
