"""What each decode job waits for, from Snakemake's own dry run (no job runs).

- Multi-turn sets (mt-bench): every non-AR job reads AR's records of the same cell, so all
  methods' turn-k prompts carry AR's earlier answers; single-turn sets have no such edge.
  With `decode_jobs: model` the job decodes AR itself, first, and its other mt-bench runs
  take AR's file as their history (a param, not an input); single-turn runs take none.
  The budget ablation's job does the same with its own AR.
- Calibration per temperature class: T = 0 jobs use ``calibration.json``, T > 0 jobs
  ``calibration_sampled.json``, whose latency grid is measured with sampling.
"""

from __future__ import annotations

import re

import pytest

from tests.support.pipeline_support import copy_checkout, dag_jobs, smk


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return copy_checkout(tmp_path_factory.mktemp("dag"))


@pytest.fixture(scope="module")
def jobs(work):
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


def test_multi_turn_runs_of_a_model_job_read_the_ar_records_it_writes_first(work, tmp_path):
    """`decode_jobs: model`: one job per (model, temperature); on mt-bench every run after AR
    takes AR's file of the same dataset and temperature as its history, on gsm8k none does."""
    overlay = tmp_path / "model.yaml"
    overlay.write_text("experiments:\n  paper:\n    decode_jobs: model\n")
    cell = "results/h200/qwen3-8b/{}/t{}/{}.jsonl"
    targets = [cell.format(d, t, m) for d in ("mt-bench", "gsm8k") for t in (0, 1) for m in ("dflash", "ablation/bastion")]
    found = dag_jobs(work, *targets, configfiles=("config.yaml", str(overlay)),
                     config={"experiment": "paper", "hardware": "h200"})
    decode = {next(o for o in j["output"] if o.endswith("/mt-bench/t0/ar.jsonl") or o.endswith("/mt-bench/t1/ar.jsonl")): j
              for j in found if j["rule"] in ("decode_model", "decode_model_sampled")}
    assert sorted(decode) == [cell.format("mt-bench", t, "ar") for t in (0, 1)]  # one job per temperature
    for t in (0, 1):
        job = decode[cell.format("mt-bench", t, "ar")]
        assert not any(x.endswith("ar.jsonl") for x in job["input"])  # the job writes AR's records itself
        knobs = job["params"]["knobs"]
        mt_bench = [run for run in knobs if run.startswith("mt-bench/")]
        assert mt_bench[0] == "mt-bench/ar"  # AR runs first in the dataset: its records exist when the others start
        assert knobs["mt-bench/ar"]["history"] is None
        for method in ("eagle3", "dflash", "bastion", "bastion_plus", *(("bastion_lossy",) if t else ())):
            run = knobs[f"mt-bench/{method}"]
            assert run["history"] == cell.format("mt-bench", t, "ar") and run["output"] == cell.format("mt-bench", t, method)
            assert knobs[f"gsm8k/{method}"]["history"] is None
        assert {run["temperature"] for run in knobs.values()} == {float(t)}
    # the ablation's job: its own AR first on each dataset, whose mt-bench answers its other runs read
    ablation = [j for j in found if j["rule"] == "decode_model_ablation"]
    assert len(ablation) == 2
    for job in ablation:
        assert not any(x.endswith("ar.jsonl") for x in job["input"])
        knobs = job["params"]["knobs"]
        t = next(iter(knobs.values()))["temperature"]
        ar = cell.format("mt-bench", f"{t:g}", "ablation/ar")
        assert [run for run in knobs if run.startswith("mt-bench/")][0] == "mt-bench/ar" and knobs["mt-bench/ar"]["output"] == ar
        others = [run for name, run in knobs.items() if name.startswith("mt-bench/") and name != "mt-bench/ar"]
        assert len(others) == 2 + 6 and {run["history"] for run in others} == {ar}  # the two rules and the 6 budgets
        assert {run["history"] for name, run in knobs.items() if name.startswith("gsm8k/")} == {None}
