"""The Snakemake pipeline, driven for real on the tiny experiment, offline on the CPU.

The session's clean run (``tiny_run``, tests/workflow/conftest.py) copies the checkout
(as a clean clone would have it) into a temporary folder and runs every command there
with that copy first on PYTHONPATH, so edits made by the tests (a library source, the
config) never touch the repository.  The clean run builds the whole DAG once; the rerun
tests then ask Snakemake what it would do next, and the tests that run jobs share their
runs where one run can show several things.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import time

import pytest

from bastion.engines.choice import resolve_engine
from tests.support.pipeline_support import (
    SNAKEMAKE,
    dry_run_with,
    env,
    hardware_key,
    planned,
    smk,
)


@pytest.fixture(scope="module")
def work(tiny_run):
    return tiny_run.work


def test_clean_run_builds_the_table_offline(work, tiny_run):
    assert tiny_run.seconds < 600, f"clean run took {tiny_run.seconds:.0f} s"
    rows = list(csv.DictReader(open(work / "figures/speedup_table.csv")))
    datasets = [r[next(iter(r))] for r in rows]
    assert datasets[-1] == "Average" and {"humaneval-pkg", "stdlib-heldout"} <= set(datasets)
    speed_cols = [c for c in rows[0] if c.endswith("/speedup")]
    assert speed_cols and all(float(r[c]) > 0 for r in rows for c in speed_cols)  # real numbers, no blanks
    for c in speed_cols:
        mean = sum(float(r[c]) for r in rows[:-1]) / (len(rows) - 1)
        assert abs(float(rows[-1][c]) - mean) < 1e-6
    from pypdf import PdfReader

    text = PdfReader(str(work / "figures/speedup_table.pdf")).pages[0].extract_text()
    hw = hardware_key(work)
    assert hw in text and "tiny" in text and "Average" in text
    md = (work / "figures/speedup_table.md").read_text()
    first = re.search(r"\d+\.\d\dx", md).group(0)
    assert first in text  # the PDF shows the same numbers as its twins
    for twin in ("tex", "md"):
        assert (work / f"figures/speedup_table.{twin}").stat().st_size > 0
    # decode outputs are complete and lossless at T = 0
    base = work / "results" / hw / "tiny" / "stdlib-heldout" / "t0"
    ar = {(r["prompt_index"], r["turn"]): r["output_ids"] for r in map(json.loads, open(base / "ar.jsonl"))}
    bs = {(r["prompt_index"], r["turn"]): r["output_ids"] for r in map(json.loads, open(base / "bastion.jsonl"))}
    assert ar == bs and len(ar) == 8


def test_second_run_does_nothing(work):
    assert planned(work, "--", "figures/speedup_table.pdf") == {}


def test_the_ablation_job_decodes_its_own_runs_and_leaves_the_main_job_alone(work, tmp_path):
    """figures/budget_ablation.pdf from one job: its own AR, adaptive BASTION and a fixed
    budget, prompt by prompt in turn; the main job's files stay as they are."""
    hw = hardware_key(work)
    overlay = tmp_path / "ablation.yaml"  # one budget, the CPU's tree size, keeps the job short
    overlay.write_text("experiments:\n  tiny:\n    budget_ablation: [16]\n")
    args = ["--configfile", "config.yaml", str(overlay), "--", "figures/budget_ablation.pdf"]
    assert planned(work, *args) == {"decode_model_ablation": 1, "aggregate_ablation": 1, "plot_budget_ablation": 1}
    results = work / "results" / hw / "tiny"
    stamp = {p: p.stat().st_mtime_ns for p in results.glob("*/t0/*.jsonl")}
    smk(work, "--cores", "1", *args)
    assert {p: p.stat().st_mtime_ns for p in results.glob("*/t0/*.jsonl")} == stamp
    for dataset in ("humaneval-pkg", "stdlib-heldout"):
        main, own = results / dataset / "t0", results / dataset / "t0" / "ablation"
        assert sorted(p.name for p in own.iterdir()) == ["ar.jsonl", "bastion-b16.jsonl", "bastion.jsonl",
                                                        "bastion_plus.jsonl"]
        ar = _tokens(main / "ar.jsonl")
        assert len(ar) == 8 and all(_tokens(own / f"{m}.jsonl") == ar
                                    for m in ("ar", "bastion", "bastion_plus", "bastion-b16"))
        # the paper's rule builds the same trees as the main job's: its count depends on the
        # calibration alone (bastion_plus's also on what its gate and surrogate saw, prompt by prompt)
        trees = [[r["tree_sizes"] for r in map(json.loads, open(folder / "bastion.jsonl"))] for folder in (main, own)]
        assert trees[0] == trees[1]
        assert {s for r in map(json.loads, open(own / "bastion-b16.jsonl")) for s in r["tree_sizes"]} <= set(range(1, 17))
    cells = list(csv.DictReader(open(work / f"results/{hw}/aggregate/tiny/ablation/cells.csv")))
    assert sorted((c["dataset"], c["method"]) for c in cells) == sorted(
        (d, m) for d in ("humaneval-pkg", "stdlib-heldout") for m in ("ar", "bastion", "bastion_plus", "bastion-b16"))
    assert all(float(c["speedup"]) == 1.0 for c in cells if c["method"] == "ar")
    assert all(float(c["speedup"]) > 0 for c in cells)
    # the drift check: each rule whose trees all had 16 nodes on a set is held against the fixed 16
    checks = list(csv.DictReader(open(work / f"results/{hw}/aggregate/tiny/ablation/same_size.csv")))
    constant = sorted((d, rule) for d in ("humaneval-pkg", "stdlib-heldout") for rule in ("bastion", "bastion_plus")
                      if {s for r in map(json.loads, open(results / d / f"t0/ablation/{rule}.jsonl"))
                          for s in r["tree_sizes"]} == {16})
    assert ("humaneval-pkg", "bastion") in constant  # the paper's rule at the CPU's n_min: 16 nodes throughout
    assert sorted((c["dataset"], c["rule"]) for c in checks) == constant
    assert all(c["fixed"] == "bastion-b16" and float(c["time_ratio"]) > 0 for c in checks)
    from pypdf import PdfReader

    text = PdfReader(str(work / "figures/budget_ablation.pdf")).pages[0].extract_text()
    assert "adaptive" in text and "DFlash" not in text  # its own runs only: no DFlash line from the main job
    assert planned(work, *args) == {} and planned(work, "--", "figures/speedup_table.pdf") == {}


def test_lint_and_paper_plan_without_network(work):
    lint = smk(work, "--lint", check=False)
    assert lint.returncode == 0 and "Lints for" not in lint.stdout + lint.stderr, lint.stdout + lint.stderr
    t0 = time.monotonic()
    plan = planned(work, "--config", "experiment=paper")
    assert time.monotonic() - t0 < 120
    # 3 models x 8 datasets x 2 temperatures x (ar, eagle3, dflash, bastion), and the ablation per cell
    assert plan["decode"] == 3 * 8 * (5 + 6) and plan["decode_cell_ablation"] == 3 * 8 * 2  # lossy at T = 1 only
    # calibration per (model, temperature class): T = 0 and T > 0
    assert plan["prepare_dataset"] == 8 and plan["fetch_model"] == 3 and plan["calibrate_latency"] == 6
    assert "choose_eagle3_tree" not in plan  # the paper's explicit reference tree is never swept


def test_fingerprint_change_reruns_calibration_and_decoding(work):
    plan = planned(work, "--config", "attn_impl=eager", "--", "figures/speedup_table.pdf")
    # tiny calibrates in one job (`calibration_jobs: one`) and decodes both datasets' four methods in one
    assert plan.get("calibrate_model") == 1 and plan.get("decode_model") == 1
    assert "prepare_dataset" not in plan and "fetch_model" not in plan and "decode" not in plan


def test_library_source_change_reruns_calibration_and_decoding(work):
    src = work / "bastion" / "speculative" / "tree.py"
    original = src.read_bytes()
    try:
        src.write_bytes(original + b"\n# an edit to the tree code\n")
        plan = planned(work, "--", "figures/speedup_table.pdf")
        assert plan.get("calibrate_model") == 1 and plan.get("decode_model") == 1
        assert "prepare_dataset" not in plan
    finally:
        src.write_bytes(original)
    assert planned(work, "--", "figures/speedup_table.pdf") == {}  # same content again: nothing to do


def test_code_hashes_follow_subpackage_folders(work):
    """A new module in the report layer reruns the figures only; one in a new subpackage reruns decoding."""
    report_mod = work / "bastion" / "report" / "_new_helper.py"
    new_pkg = work / "bastion" / "newlayer"
    try:
        report_mod.write_text("X = 1\n")
        plan = planned(work, "--", "figures/speedup_table.pdf")
        assert plan.get("make_speedup_table") == 1 and plan.get("aggregate_results") == 1
        assert "decode_model" not in plan and "calibrate_model" not in plan
        report_mod.unlink()
        new_pkg.mkdir()
        (new_pkg / "__init__.py").write_text("")
        plan = planned(work, "--", "figures/speedup_table.pdf")
        assert plan.get("calibrate_model") == 1 and plan.get("decode_model") == 1
    finally:
        report_mod.unlink(missing_ok=True)
        if new_pkg.exists():
            (new_pkg / "__init__.py").unlink()
            new_pkg.rmdir()
    assert planned(work, "--", "figures/speedup_table.pdf") == {}


def test_sample_count_change_reruns_decoding_only(work, tmp_path):
    """tiny decodes both datasets in one job, so a sample count reruns that job, and no calibration or data."""
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("experiments:\n  tiny:\n    datasets:\n      humaneval-pkg: {max_samples: 8}\n"
                       "      stdlib-heldout: {max_samples: 5}\n")
    plan = planned(work, "--configfile", "config.yaml", str(overlay), "--", "figures/speedup_table.pdf")
    assert plan == {"decode_model": 1, "aggregate_results": 1, "make_speedup_table": 1}


def test_eagle3_tree_change_reruns_decoding_only(work, tmp_path):
    overlay = tmp_path / "tree.yaml"
    overlay.write_text("experiments:\n  tiny:\n    eagle3_tree: 4/4/16\n")
    plan = planned(work, "--configfile", "config.yaml", str(overlay), "--", "figures/speedup_table.pdf")
    assert plan == {"decode_model": 1, "aggregate_results": 1, "make_speedup_table": 1}  # no sweep for an explicit tree


def test_unknown_experiment_fails_before_any_job(work):
    res = smk(work, "-n", "--config", "experiment=nope", check=False)
    assert res.returncode != 0 and "unknown experiment 'nope'" in res.stdout + res.stderr


def test_bad_dataset_model_and_temperature_in_config_file(work, tmp_path):
    bad = tmp_path / "bad.yaml"
    rc, out = dry_run_with(work, bad, "experiments:\n  tiny:\n    datasets:\n      gsm9k: {max_samples: 2}\n")
    assert rc != 0 and "experiments.tiny.datasets.gsm9k" in out and "gsm8k" in out
    rc, out = dry_run_with(work, bad, "experiments:\n  tiny:\n    models: [tiny, nope]\n")
    assert rc != 0 and "experiments.tiny.models" in out and "unknown model 'nope'" in out
    rc, out = dry_run_with(work, bad, "experiments:\n  tiny:\n    temperatures: [zero]\n")
    assert rc != 0 and "temperatures" in out and "'zero' is not of type 'number'" in out


def test_paper_experiment_without_network_fails_fast(work):
    t0 = time.monotonic()
    res = smk(work, "--cores", "1", "--config", "experiment=paper", "--", "results/datasets/gsm8k.jsonl", check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "openai/gsm8k" in out and "HF_TOKEN" in out and "HF_HUB_OFFLINE" in out
    res = smk(work, "--cores", "1", "--config", "experiment=paper", "--", "results/models/qwen3-8b.json", check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "Qwen/Qwen3-8B" in out and "HF_TOKEN" in out
    assert time.monotonic() - t0 < 120


def test_killed_decode_job_resumes_each_method_without_loss_or_duplicates(work):
    """Deleting one method's file reruns the decode job; a kill mid-job loses no finished method or prompt."""
    hw = hardware_key(work)
    results = work / "results" / hw / "tiny"
    cell = results / "humaneval-pkg" / "t0"  # the job's first dataset
    target = f"results/{hw}/tiny/humaneval-pkg/t0/dflash.jsonl"

    def records():
        return {str(p.relative_to(results)): [(r["prompt_index"], r["turn"], r["output_ids"]) for r in map(json.loads, open(p))]
                for p in results.glob("*/t0/*.jsonl")}

    before = records()
    assert len(before) == 2 * 5  # both datasets' ar, eagle3, dflash and both rules (the ablation is its own job)
    (work / target).unlink()
    assert planned(work, "--", target) == {"decode_model": 1}
    partial = work / f"{target}.partial"
    proc = subprocess.Popen([*SNAKEMAKE, "--cores", "1", target], cwd=work, env=env(work),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:  # every method on a prompt, then the next prompt
            if partial.exists() and len({json.loads(l)["prompt_index"] for l in partial.read_text().splitlines()}) >= 2:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the decode job never wrote two dflash prompts")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole job, mid-prompt
        proc.wait()
    assert not (work / target).exists() and (cell / "ar.jsonl.partial").exists()
    done_before = len(partial.read_text().splitlines())
    smk(work, "--unlock")  # the killed snakemake left its lock behind
    smk(work, "--cores", "1", "--rerun-incomplete", target)
    log = (work / f"logs/decode_model/{hw}/tiny/t0.log").read_text()
    # prompt by prompt, in the turn order of bastion.runs.order (rows [0, 1, 4, 2, 3] and [1, 2, 0, 3, 4] of
    # ar, eagle3, dflash, bastion, bastion_plus): with dflash's second prompt written, EAGLE-3 has two
    # and AR at least one; each resumes from its own records
    for method, least in (("ar", 1), ("eagle3", 2)):
        assert re.search(rf"\[resume\] [{least}-8] of 8 prompts already done in \S*/{method}\.jsonl\.partial",
                         log), log[-3000:]
    assert re.search(r"\[resume\] [2-7] of 8 prompts already done in \S*/dflash\.jsonl\.partial", log), log[-3000:]
    assert records() == before  # every method's file, none lost, none twice, same tokens
    assert not list(results.glob("*/t0/*.partial")) and done_before >= 2


def test_report(work, tmp_path):
    out = tmp_path / "report.zip"
    smk(work, "--report", str(out), "figures/speedup_table.pdf")
    assert out.stat().st_size > 10_000


def test_hardware_switch_reruns_only_the_new_key_in_one_warm_worker(work):
    """A new hardware key calibrates and decodes for itself alone, to the same tokens.

    It runs with ``job_worker: true`` (on a GPU, ``auto`` means so): the calibration and
    decode jobs run one after another in one warm worker process, which a later
    invocation finds again.
    """
    old = hardware_key(work)
    keys = 'hardware_keys={"alt-cpu": {"device_pattern": "."}}'
    before = _cells(work / "results" / old / "tiny")
    assert len(before) == 2 * 5
    stamp = {p: p.stat().st_mtime_ns for p in (work / "results").rglob("*") if p.is_file()}
    plan = planned(work, "--config", "hardware=alt-cpu", keys, "--", "figures/speedup_table.pdf")
    assert plan.get("calibrate_model") == 1 and plan.get("decode_model") == 1
    assert plan.get("aggregate_results") == 1 and plan.get("make_speedup_table") == 1
    assert "prepare_dataset" not in plan and "fetch_model" not in plan
    in_worker = ["--config", "hardware=alt-cpu", keys, "job_worker=true"]
    idle = {"BASTION_WORKER_IDLE_S": "20"}
    smk(work, "--cores", "2", *in_worker, "--", "figures/speedup_table.pdf", extra_env=idle)
    assert _cells(work / "results" / "alt-cpu" / "tiny") == before
    logs = work / "logs"
    lines = [re.search(r"\[job-worker\] ran in worker pid (\d+) as its job (\d+)", (logs / rule / "alt-cpu" / log).read_text())
             for rule, log in (("calibrate_model", "tiny.log"), ("choose_eagle3_tree", "tiny.log"),
                               ("decode_model", "tiny/t0.log"))]
    assert all(lines), "a job did not run in the worker"
    (pid_c, job_c), (pid_e, job_e), (pid_d, job_d) = (m.groups() for m in lines)
    # the calibration and the EAGLE-3 tree choice (in either order), then the decode job that reads both
    assert pid_c == pid_e == pid_d and {job_c, job_e} == {"1", "2"} and job_d == "3"
    # a later invocation finds the same worker (Snakemake's per-invocation source cache is not in its key)
    smk(work, "--cores", "1", *in_worker, "--forcerun", "decode_model", "--", "figures/speedup_table.pdf", extra_env=idle)
    again = re.search(r"\[job-worker\] ran in worker pid (\d+) as its job (\d+)",
                      (logs / "decode_model" / "alt-cpu" / "tiny/t0.log").read_text())
    assert again and again.groups() == (pid_c, "4")
    assert _cells(work / "results" / "alt-cpu" / "tiny") == before
    for path, mtime in stamp.items():  # datasets and the old key's results are untouched
        assert path.stat().st_mtime_ns == mtime, path
    assert (work / "results" / "alt-cpu" / "aggregate" / "tiny" / "cells.csv").exists()
    assert (work / "results" / old / "aggregate" / "tiny" / "cells.csv").exists()
    assert planned(work, "--config", "hardware=alt-cpu", keys, "--", "figures/speedup_table.pdf") == {}
    # with two keys, the comparison figure joins the default targets
    plan = planned(work, "--config", "hardware=alt-cpu", keys)
    assert plan.get("plot_hardware_comparison") == 1


def _cells(results):
    """dataset/method -> its tokens by (prompt, turn), for every main-comparison file under ``results``."""
    return {f"{c.parent.parent.name}/{c.name}": _tokens(c) for c in sorted(results.glob("*/t0/*.jsonl"))}


def _tokens(path):
    return {(r["prompt_index"], r["turn"]): r["output_ids"] for r in map(json.loads, open(path))}


def test_engine_switch_recalibrates_and_sharded_jobs_merge_to_the_same_records(work, tmp_path):
    """The engine is part of the fingerprint (own calibration) and keeps T = 0 outputs; its
    decoding here is split into two shards, which merge to the records of the unsplit job.

    The default ``auto`` resolves to one engine on this CPU; switching to the other one
    recalibrates and redecodes (one method's file, in per-method jobs: shards split those,
    and a cell job is refused with shards > 1; then another file in an unsplit job;
    tests/runs/test_session.py decodes cells on both engines).  Last in the module: it
    replaces two files' results and the calibration.
    """
    other = "eager" if resolve_engine("auto", "cpu") != "eager" else "static"
    hw = hardware_key(work)
    target = f"results/{hw}/tiny/humaneval-pkg/t0/bastion.jsonl"
    before = [json.loads(line) for line in open(work / target)]
    (work / target).unlink()
    overlay = tmp_path / "method.yaml"
    overlay.write_text("experiments:\n  tiny:\n    decode_jobs: method\n")
    switch = ["--configfile", "config.yaml", str(overlay), "--config", f"engine={other}", "shards=2", "--", target]
    plan = planned(work, *switch)
    assert plan == {"calibrate_model": 1, "decode_shard": 2, "merge_shards": 1}
    smk(work, "--cores", "2", *switch)
    shards = [[json.loads(l)["prompt_index"] for l in open(work / f"results/{hw}/tiny/humaneval-pkg/t0/shards/bastion.{i}.jsonl")]
              for i in range(2)]
    n = len({r["prompt_index"] for r in before})
    assert n >= 4 and shards == [list(range(0, n, 2)), list(range(1, n, 2))]  # each prompt in exactly one shard
    records = [json.loads(line) for line in open(work / target)]
    assert [(r["prompt_index"], r["output_ids"]) for r in records] == [(r["prompt_index"], r["output_ids"]) for r in before]
    assert {(r["prompt_index"], r["turn"]): r["output_ids"] for r in records} == {
        (r["prompt_index"], r["turn"]): r["output_ids"] for r in before}
    assert {r["fingerprint"]["engine"] for r in records} == {other}
    # unsplit, one method's job decodes with the new calibration too (AR's file: the shortest)
    ar = f"results/{hw}/tiny/stdlib-heldout/t0/ar.jsonl"
    before = _tokens(work / ar)
    unsplit = ["--configfile", "config.yaml", str(overlay), "--config", f"engine={other}", "--", ar]
    assert planned(work, *unsplit) == {"decode": 1}
    smk(work, "--cores", "1", *unsplit)
    assert _tokens(work / ar) == before and {json.loads(line)["fingerprint"]["engine"] for line in open(work / ar)} == {other}
    res = smk(work, "-n", "--config", "engine=turbo", "--", target, check=False)
    assert res.returncode != 0 and "turbo" in res.stdout + res.stderr
