"""What each decode job waits for, from Snakemake's own dry run (no job runs).

- Multi-turn sets (mt-bench): every non-AR job reads AR's records of the same cell, so all
  methods' turn-k prompts carry AR's earlier answers; single-turn sets have no such edge.
- Calibration per temperature class: T = 0 jobs use ``calibration.json``, T > 0 jobs
  ``calibration_sampled.json``, whose latency grid is measured with sampling.
"""

from __future__ import annotations

import re

import pytest

from tests.support.pipeline_support import copy_checkout, smk


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    work = copy_checkout(tmp_path_factory.mktemp("dag"))
    cell = "results/h200/qwen3-8b/{}/t{}/{}.jsonl"
    targets = [cell.format(d, t, m) for d in ("mt-bench", "gsm8k") for t in (0, 1) for m in ("dflash", "bastion")]
    res = smk(work, "-n", "--config", "experiment=paper", "hardware=h200", "--", *targets, timeout=300)
    out = res.stdout + res.stderr
    found = {}
    for block in re.split(r"\n(?=rule )", out):
        rule = re.match(r"rule (\w+):", block)
        inp, outp = re.search(r"\n\s+input: (.*)", block), re.search(r"\n\s+output: (.*)", block)
        if rule and inp and outp:
            found[outp.group(1).strip()] = (rule.group(1), [x.strip() for x in inp.group(1).split(",")])
    return found


def test_multi_turn_jobs_read_ar_records(jobs):
    for t in (0, 1):
        for m in ("dflash", "bastion"):
            _, inputs = jobs[f"results/h200/qwen3-8b/mt-bench/t{t}/{m}.jsonl"]
            assert f"results/h200/qwen3-8b/mt-bench/t{t}/ar.jsonl" in inputs, (t, m, inputs)
        _, ar_inputs = jobs[f"results/h200/qwen3-8b/mt-bench/t{t}/ar.jsonl"]
        assert not any(x.endswith("ar.jsonl") for x in ar_inputs)  # AR makes its own history


def test_single_turn_jobs_do_not_wait_for_ar(jobs):
    for t in (0, 1):
        for m in ("dflash", "bastion"):
            _, inputs = jobs[f"results/h200/qwen3-8b/gsm8k/t{t}/{m}.jsonl"]
            assert not any(x.endswith("ar.jsonl") for x in inputs), inputs
            assert f"results/h200/qwen3-8b/gsm8k/t{t}/ar.jsonl" not in jobs


def test_calibration_per_temperature_class(jobs):
    assert "results/h200/qwen3-8b/calibration.json" in jobs["results/h200/qwen3-8b/gsm8k/t0/bastion.jsonl"][1]
    assert "results/h200/qwen3-8b/calibration_sampled.json" in jobs["results/h200/qwen3-8b/gsm8k/t1/bastion.jsonl"][1]
    rule, inputs = jobs["results/h200/qwen3-8b/calibration_sampled.json"]
    assert rule == "profile_constants" and "results/h200/qwen3-8b/latency_grid_sampled.json" in inputs
    assert jobs["results/h200/qwen3-8b/latency_grid_sampled.json"][0] == "calibrate_latency"
