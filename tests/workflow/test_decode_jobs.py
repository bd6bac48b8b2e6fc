"""How decoding is split into jobs (`decode_jobs`), from Snakemake's own dry runs (no job runs).

- `tiny` (`decode_jobs: model`): one `decode_model` job per (hardware, model,
  temperature) writes every dataset's and method's file; with `decode_jobs: cell`, one
  `decode_cell` job per dataset; never a per-method `decode` job.  The budget ablation is
  a job of its own, which the speedup table does not wait for: its own AR, budget rules
  and fixed budgets, into files of their own that its aggregate and figure alone read.
- `paper` (`decode_jobs: method`): one `decode` job per method, cached and rerun alone,
  and one ablation job per cell.
- `model` or `cell` with `shards` > 1 is refused before any job, naming both keys and the fix.
"""

from __future__ import annotations

import re

import pytest

from tests.support.pipeline_support import copy_checkout, dag_jobs, dry_run, dry_run_with, planned, smk


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return copy_checkout(tmp_path_factory.mktemp("decode-jobs"))


def test_tiny_plans_one_decode_job_and_one_calibration_job(work, tmp_path):
    plan, dry = dry_run(work, "--", "figures/speedup_table.pdf")
    assert plan.get("decode_model") == 1 and "decode_cell" not in plan and "decode" not in plan
    assert plan.get("calibrate_model") == 1 and "calibrate_latency" not in plan and "measure_hardware" not in plan
    block = next(b for b in re.split(r"\n(?=rule )", dry) if b.startswith("rule decode_model:"))
    outputs = re.search(r"\n\s+output: (.*)", block).group(1).split(",")
    assert len(outputs) == 2 * 5  # both datasets x (ar, eagle3, dflash, bastion, bastion_plus): no lossy at T = 0
    assert "decode_model_ablation" not in plan and "aggregate_ablation" not in plan
    overlay = tmp_path / "cell.yaml"
    overlay.write_text("experiments:\n  tiny:\n    decode_jobs: cell\n    calibration_jobs: chain\n")
    plan = planned(work, "--configfile", "config.yaml", str(overlay), "--", "figures/speedup_table.pdf")
    assert plan.get("decode_cell") == 2 and "decode_model" not in plan  # 2 datasets x 1 temperature, 5 methods each
    assert "decode_cell_ablation" not in plan
    assert plan.get("measure_hardware") == 1 and plan.get("calibrate_latency") == 1 and plan.get("profile_constants") == 1


def test_tiny_chooses_the_eagle3_tree_once_for_every_job_that_decodes_it(work, tmp_path):
    """`eagle3_tree: auto`: one choose_eagle3_tree job per (hardware, model), whose file every
    decode job of the main comparison reads (its AR loads the head for EAGLE-3's run) and
    the ablation, which decodes no EAGLE-3, does not."""
    found = dag_jobs(work, "figures/speedup_table.pdf", "figures/budget_ablation.pdf")
    jobs = {}
    for j in found:
        jobs.setdefault(j["rule"], []).append(j)
    [choose] = jobs["choose_eagle3_tree"]
    hw = choose["output"][0].split("/")[1]
    tree = f"results/{hw}/tiny/eagle3_tree.json"
    assert choose["output"] == [tree] and choose["log"] == [f"logs/choose_eagle3_tree/{hw}/tiny.log"]
    # after the calibration, so the calibration times its grid on a worker that compiled nothing else first
    assert sorted(choose["input"]) == [f"results/{hw}/tiny/calibration.json", "results/datasets/humaneval-pkg.jsonl",
                                       "results/models/tiny.json"]
    assert choose["params"]["knobs"]["method"] == "eagle3" and choose["params"]["knobs"]["temperature"] == 0.0
    decoders = jobs["decode_model"] + jobs.get("decode_model_sampled", [])
    assert decoders and all(tree in j["input"] for j in decoders)
    assert all(tree not in j["input"] for j in jobs["decode_model_ablation"])
    eagle3 = [k for j in decoders for k in j["params"]["knobs"].values() if k["method"] == "eagle3"]
    assert eagle3 and all(k["eagle3_tree"] == "auto" for k in eagle3)
    overlay = tmp_path / "explicit.yaml"
    overlay.write_text("experiments:\n  tiny:\n    eagle3_tree: 7/10/60\n")
    plan = planned(work, "--configfile", "config.yaml", str(overlay), "--", "figures/speedup_table.pdf")
    assert "choose_eagle3_tree" not in plan and plan.get("decode_model") == 1


def test_the_budget_ablation_is_a_job_of_its_own(work):
    """One more job per (hardware, model, temperature): its own AR, budget rule and fixed
    budgets, prompt by prompt in turn, aggregated and drawn from its files alone."""
    found = dag_jobs(work, "figures/budget_ablation.pdf")
    plan = {j["rule"]: j for j in found}
    assert [j["rule"] for j in found].count("decode_model_ablation") == 1
    assert "decode_model" not in plan and "aggregate_results" not in plan  # the main comparison is not needed
    job = plan["decode_model_ablation"]
    hw = job["output"][0].split("/")[1]
    datasets = ("humaneval-pkg", "stdlib-heldout")
    assert sorted(job["input"]) == sorted([*(f"results/datasets/{d}.jsonl" for d in datasets), "results/models/tiny.json",
                                           f"results/{hw}/tiny/calibration.json"])  # no AR file of the main job
    runs = [(d, m) for d in datasets
            for m in ("ar", "bastion", "bastion_plus", "bastion-b4", "bastion-b8", "bastion-b16", "bastion-b32")]
    assert list(job["params"]["knobs"]) == [f"{d}/{m}" for d, m in runs]  # AR first, the order they advance in
    files = [f"results/{hw}/tiny/{d}/t0/ablation/{m}.jsonl" for d, m in runs]
    assert sorted(job["output"]) == sorted(files)
    assert [k["output"] for k in job["params"]["knobs"].values()] == files
    assert {(k["method"], k["budget"]) for k in job["params"]["knobs"].values()} == {
        ("ar", None), ("bastion", None), ("bastion_plus", None), ("bastion", 4), ("bastion", 8), ("bastion", 16),
        ("bastion", 32)}
    assert sorted(plan["aggregate_ablation"]["input"]) == sorted(files)
    assert plan["plot_budget_ablation"]["input"] == [f"results/{hw}/aggregate/tiny/ablation/{name}.csv"
                                                     for name in ("cells", "same_size")]


def test_paper_keeps_one_job_per_method(work):
    """3 models x 8 datasets x 2 temperatures: a job per method (the lossy acceptance at T = 1
    only), and one ablation job per cell."""
    plan = planned(work, "--config", "experiment=paper", "hardware=h200")
    assert plan.get("decode") == 3 * 8 * (5 + 6) and "decode_cell" not in plan
    assert plan.get("decode_cell_ablation") == 3 * 8 * 2


def test_cell_and_shards_are_refused_before_any_job(work):
    res = smk(work, "-n", "--config", "shards=2", check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    line = next(ln for ln in out.splitlines() if "do not combine" in ln)
    assert "experiments.tiny.decode_jobs: model" in line and "shards: 2" in line
    assert "set `shards: 1` or `decode_jobs: method`" in line


def test_a_multi_turn_cell_writes_all_methods_without_waiting_for_ar(work, tmp_path):
    """mt-bench in a cell: AR runs first inside the job, so the job reads no AR file; the
    ablation's job of the cell runs its own AR first too, whose answers are its histories."""
    overlay = tmp_path / "cell.yaml"
    overlay.write_text("experiments:\n  paper:\n    decode_jobs: cell\n")
    cell = "results/h200/qwen3-8b/mt-bench/t0"
    res = smk(work, "-n", "--configfile", "config.yaml", str(overlay), "--config", "experiment=paper", "hardware=h200",
              "--", f"{cell}/dflash.jsonl", timeout=300)
    out = res.stdout + res.stderr
    block = next(b for b in re.split(r"\n(?=rule )", out) if b.startswith("rule decode_cell:"))
    inputs = re.search(r"\n\s+input: (.*)", block).group(1)
    outputs = {x.strip() for x in re.search(r"\n\s+output: (.*)", block).group(1).split(",")}
    assert "ar.jsonl" not in inputs and "results/h200/qwen3-8b/calibration.json" in inputs
    assert outputs == {f"{cell}/{m}.jsonl" for m in ("ar", "eagle3", "dflash", "bastion", "bastion_plus")}
    assert re.search(r"decode_cell\s+1\b", out) and not re.search(r"^\s*decode\s+\d", out, re.M)
    found = dag_jobs(work, f"{cell}/ablation/bastion-b64.jsonl", configfiles=("config.yaml", str(overlay)),
                     config={"experiment": "paper", "hardware": "h200"})
    assert "decode_cell" not in {j["rule"] for j in found}  # the ablation does not wait for the main job
    job = next(j for j in found if j["rule"] == "decode_cell_ablation")
    assert not any(x.endswith("ar.jsonl") for x in job["input"])
    methods = ["ar", "bastion", "bastion_plus", *(f"bastion-b{b}" for b in (32, 64, 128, 256, 512, 1024))]
    assert sorted(job["output"]) == sorted(f"{cell}/ablation/{m}.jsonl" for m in methods)
    knobs = job["params"]["knobs"]
    assert list(knobs) == methods and knobs["ar"]["history"] is None
    assert {knobs[m]["history"] for m in methods[1:]} == {f"{cell}/ablation/ar.jsonl"}


def test_n_min_auto_is_sized_for_the_device_the_plan_decodes_on(work, tmp_path):
    """tiny's `n_min: auto`: 16 on a CPU key, 32 on a GPU key (seen through the n_max check)."""
    overlay = tmp_path / "nmax.yaml"
    overlay.write_text("experiments:\n  tiny:\n    n_max: 16\n")
    args = ["-n", "--configfile", "config.yaml", str(overlay), "--config"]
    res = smk(work, *args, "hardware=cpu-test", "--", "figures/speedup_table.pdf", check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    for key in ("h200", "nvidia-h200"):  # a key of hardware_keys, and a detected GPU key
        res = smk(work, *args, f"hardware={key}", "--", "figures/speedup_table.pdf", check=False)
        out = res.stdout + res.stderr
        assert res.returncode != 0 and "n_min 32 (`auto` on a GPU) > n_max 16" in out, out[-2000:]
    rc, out = dry_run_with(work, tmp_path / "bad.yaml", "experiments:\n  tiny:\n    n_min: big\n")
    assert rc != 0 and "n_min" in out and "'big'" in out


def test_eagle3_tree_keys_are_validated(work, tmp_path):
    bad = tmp_path / "bad.yaml"
    rc, out = dry_run_with(work, bad, "experiments:\n  tiny:\n    eagle3_tree: 7x10x60\n")
    assert rc != 0 and "['tiny']['eagle3_tree']" in out and "'7x10x60' does not match" in out
    rc, out = dry_run_with(work, bad, "experiments:\n  tiny:\n    eagle3_tree: 2/2/3\n")
    errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert rc != 0 and len(errors) == 1, out[-2000:]
    assert "`experiments.tiny.eagle3_tree`: 2/2/3: total tokens 3 are too few for depth 2" in errors[0]
    rc, out = dry_run_with(work, bad, "experiments:\n  tiny:\n    decode_jobs: process\n")
    assert rc != 0 and "decode_jobs" in out and "'process' is not one of" in out


def test_one_calibration_job_writes_every_temperature_class(work, tmp_path):
    """With T = 0 and T > 0, `calibration_jobs: one` writes both classes' files in its one job."""
    overlay = tmp_path / "temps.yaml"
    overlay.write_text("experiments:\n  tiny:\n    temperatures: [0.0, 1.0]\n")
    args = ["--configfile", "config.yaml", str(overlay), "--config", "hardware=h200", "--", "figures/speedup_table.pdf"]
    plan, dry = dry_run(work, *args)
    # one decode job per temperature: the lossy acceptance's T = 1 job is a rule of its own
    assert plan.get("calibrate_model") == 1 and plan.get("decode_model") == 1 and plan.get("decode_model_sampled") == 1
    block = next(b for b in re.split(r"\n(?=(?:local)?rule )", dry) if re.match(r"(local)?rule calibrate_model:", b))
    outputs = {x.strip() for x in re.search(r"\n\s+output: (.*)", block).group(1).split(",")}
    assert outputs == {f"results/h200/tiny/{name}.json" for name in (
        "hardware", "latency_grid", "latency_grid_sampled", "calibration", "calibration_sampled")}


def test_every_job_gets_the_kernels_and_threads_and_a_gpu_only_choice_changes_no_cpu_job(work):
    """The `kernels:` settings reach the calibration and decode jobs through params as they act
    on this CPU (a GPU-only choice stays at its default there), and every job declares
    `cpu_threads`, which Snakemake scales down to --cores: the fingerprint param (`software`)
    carries the number the jobs use, so calibration and decoding agree."""
    def jobs(cores: int = 1, **config) -> dict[str, dict]:
        found = dag_jobs(work, "figures/speedup_table.pdf", config=config, cores=cores)
        return {j["rule"]: j for j in found if j["rule"] in ("calibrate_model", "decode_model")}

    def kernels(job: dict) -> list[dict]:
        """The kernel settings a job gets: the calibration's, or each run's of a decode job."""
        return [job["params"]["kernels"]] if "kernels" in job["params"] else [
            k["kernels"] for k in job["params"]["knobs"].values()]

    default = jobs()
    assert set(default) == {"calibrate_model", "decode_model"}
    settings = {"rank": "auto", "blas": "cublaslt", "drafter": "fused", "row_kernel": True, "tile_kernel": True}
    for job in default.values():
        assert job["threads"] == 1 and ";threads=1;" in job["params"]["software"]
        assert "kernels={'rank': 'auto', 'blas': 'n/a'" in job["params"]["software"]
        assert all(k == settings for k in kernels(job))
    gpu_only = jobs(kernels={**settings, "blas": "cublas", "row_kernel": False, "tile_kernel": False})
    assert {r: j["params"] for r, j in gpu_only.items()} == {r: j["params"] for r, j in default.items()}
    references = jobs(kernels={**settings, "rank": "torch"})
    for job in references.values():
        assert all(k == {**settings, "rank": "torch"} for k in kernels(job))
        assert "kernels={'rank': 'torch'" in job["params"]["software"]
    two = jobs(cores=2, cpu_threads=2)
    assert {j["threads"] for j in two.values()} == {2}
    assert all(";threads=2;" in j["params"]["software"] for j in two.values())
    scaled = jobs(cores=1, cpu_threads=2)  # Snakemake gives each job one thread: as calibrated with one
    assert {j["threads"] for j in scaled.values()} == {1}
    assert {r: j["params"] for r, j in scaled.items()} == {r: j["params"] for r, j in default.items()}


def decode_knob(work, tmp_path, name: str, *configfiles: str) -> dict[tuple[str, float], set]:
    """Knob ``name`` of every run of the decode jobs (main and ablation) at T = 0 and 1, by (rule, temperature)."""
    both = tmp_path / "both.yaml"  # the copy decodes at T = 0 alone (tests/support/pipeline_support.py)
    both.write_text("experiments:\n  tiny:\n    temperatures: [0.0, 1.0]\n")
    found = dag_jobs(work, "figures/speedup_table.pdf", "figures/budget_ablation.pdf",
                     configfiles=("config.yaml", str(both), *configfiles))
    out: dict[tuple[str, float], set] = {}
    for job in found:
        if job["rule"].startswith("decode"):
            for knobs in job["params"]["knobs"].values():
                out.setdefault((job["rule"], knobs["temperature"]), set()).add(knobs.get(name))
    return out


def test_the_sampled_panel_decodes_the_first_sampled_max_samples_prompts(work, tmp_path):
    """`sampled_max_samples` caps the prompts of every T > 0 run, the ablation's included, and no
    T = 0 run; null (or a cap above a set's own count) leaves the set's `max_samples`."""
    default = decode_knob(work, tmp_path, "max_samples")
    assert {key: n for key, n in default.items() if key[1] == 0.0} == {
        ("decode_model", 0.0): {8}, ("decode_model_ablation", 0.0): {8}}
    assert {key: n for key, n in default.items() if key[1] == 1.0} == {
        ("decode_model_sampled", 1.0): {6}, ("decode_model_ablation", 1.0): {6}}
    for cap, expected in (("null", 8), ("20", 8), ("3", 3)):
        overlay = tmp_path / f"cap{cap}.yaml"
        overlay.write_text(f"experiments:\n  tiny:\n    sampled_max_samples: {cap}\n")
        got = decode_knob(work, tmp_path, "max_samples", str(overlay))
        sampled = [n for (_, t), n in got.items() if t == 1.0]
        assert len(sampled) == 2 and all(n == {expected} for n in sampled), (cap, got)
        assert got[("decode_model", 0.0)] == {8}


def test_the_ablation_alone_repeats_its_greedy_decodes(work, tmp_path):
    """`ablation_repeats` reaches the ablation job's runs at T = 0 only (a second decode at T > 0 is
    another decode), and no run of the main comparison, whose parameters it leaves as they were."""
    assert decode_knob(work, tmp_path, "repeats") == {
        ("decode_model", 0.0): {None}, ("decode_model_sampled", 1.0): {None},
        ("decode_model_ablation", 0.0): {2}, ("decode_model_ablation", 1.0): {1}}
    overlay = tmp_path / "three.yaml"
    overlay.write_text("experiments:\n  tiny:\n    ablation_repeats: 3\n")
    assert decode_knob(work, tmp_path, "repeats", str(overlay))[("decode_model_ablation", 0.0)] == {3}
