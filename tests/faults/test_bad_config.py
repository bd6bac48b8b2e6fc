"""Bad configurations, swept: the ``config.yaml`` rows of docs/bad-inputs.md, each stopping
``snakemake -n`` in one line that names it, before any job and losing nothing.

The cases run in one process in a copied checkout (Snakemake's start-up is paid once), with
finished results planted under ``results/`` that must stay byte for byte as they were.  The
command line's cases are in test_bad_inputs.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.pipeline_support import RECORD, copy_checkout, env, missing_doc_rows, snapshot

# Each case: (what `--config` sets, or an overlay config file's text; the texts its one line names)
CONFIG_CASES: dict[str, tuple[list[str] | str, list[str]]] = {
    "config: unknown key": (["foo=1"], ["unknown config key `foo`"]),
    "config: unknown experiment key": ("experiments:\n  tiny:\n    nmin: 8\n", ["`experiments['tiny']['nmin']`"]),
    "config: seed of the wrong type": (["seed=abc"], ["`seed` = 'abc'", "not of type 'integer'"]),
    "config: negative max_samples": ("experiments:\n  tiny:\n    datasets:\n      stdlib-heldout: {max_samples: -1}\n",
                                     ["['max_samples']` = -1"]),
    "config: sampled_max_samples 0": ("experiments:\n  tiny:\n    sampled_max_samples: 0\n",
                                      ["['sampled_max_samples']` = 0", "minimum of 1"]),
    "config: ablation_repeats 0": ("experiments:\n  tiny:\n    ablation_repeats: 0\n",
                                   ["['ablation_repeats']` = 0", "minimum of 1"]),
    "config: temperatures [abc]": ("experiments:\n  tiny:\n    temperatures: [abc]\n", ["['temperatures'][0]` = 'abc'"]),
    "config: temperatures [-1]": ("experiments:\n  tiny:\n    temperatures: [-1]\n", ["['temperatures'][0]` = -1"]),
    "config: temperatures [.nan]": ("experiments:\n  tiny:\n    temperatures: [.nan]\n", ["temperatures`: nan"]),
    "config: unknown experiment": (["experiment=nope"], ["unknown experiment 'nope'"]),
    "config: unknown model in the experiment": ("experiments:\n  tiny:\n    models: [tiny, nope]\n",
                                                ["experiments.tiny.models", "unknown model 'nope'"]),
    "config: unknown dataset": ("experiments:\n  tiny:\n    datasets:\n      gsm9k: {max_samples: 2}\n",
                                ["experiments.tiny.datasets.gsm9k", "unknown dataset 'gsm9k'"]),
    "config: unknown method": ("experiments:\n  tiny:\n    methods: [ar, medusa]\n", ["['methods'][1]` = 'medusa'"]),
    "config: shards 0": (["shards=0"], ["`shards` = 0"]),
    "config: decode_jobs foo": ("experiments:\n  tiny:\n    decode_jobs: foo\n", ["['decode_jobs']` = 'foo'"]),
    "config: decode_jobs cell with shards 2": ("experiments:\n  tiny:\n    decode_jobs: cell\nshards: 2\n",
                                               ["decode_jobs: cell", "shards: 2"]),
    "config: engine turbo": (["engine=turbo"], ["`engine` = 'turbo'"]),
    "config: kernels.rank triton": ("kernels:\n  rank: triton\n", ["`kernels['rank']` = 'triton'"]),
    "config: kernels.row_kernel maybe": ("kernels:\n  row_kernel: maybe\n",
                                         ["`kernels['row_kernel']` = 'maybe'", "not of type 'boolean'"]),
    "config: unknown kernels key": ("kernels:\n  triton: false\n", ["unknown config key `kernels['triton']`"]),
    "config: cpu_threads 0": (["cpu_threads=0"], ["`cpu_threads` = 0"]),
    "config: cpu_threads many": (["cpu_threads=many"], ["`cpu_threads` = 'many'", "not of type 'integer'"]),
    "config: n_min 0": ("experiments:\n  tiny:\n    n_min: 0\n", ["['n_min']` = 0"]),
    "config: n_max below n_min": ("experiments:\n  tiny:\n    n_min: 32\n    n_max: 16\n", ["n_min 32 > n_max 16"]),
    "config: topk 129": ("experiments:\n  tiny:\n    topk: 129\n", ["['topk']` = 129"]),
    "config: max_new_tokens 0": ("experiments:\n  tiny:\n    max_new_tokens: 0\n", ["['max_new_tokens']` = 0"]),
    "config: block_size 1": ("experiments:\n  tiny:\n    block_size: 1\n", ["['block_size']` = 1"]),
    "config: eagle3_tree 2/2/3": ("experiments:\n  tiny:\n    eagle3_tree: 2/2/3\n",
                                  ["`experiments.tiny.eagle3_tree`: 2/2/3", "give at least 4"]),
    "config: eagle3_tree 7x10x60": ("experiments:\n  tiny:\n    eagle3_tree: 7x10x60\n",
                                    ["['eagle3_tree']` = '7x10x60'"]),
    "config: unmapped hardware key": (["hardware=h300"], ["`hardware`: 'h300'", "hardware_keys"]),
    "config: hardware key with a slash": (["hardware=a/b"], ["`hardware` = 'a/b'"]),
    "config: device pattern not a regex": ("hardware_keys:\n  h200: {device_pattern: 'H2(00'}\n",
                                           ["hardware_keys.h200.device_pattern", "'H2(00'"]),
    "config: model folder missing": ("models:\n  tiny: {target: ./no/such, drafter: tiny}\n",
                                     ["models.tiny.target", "./no/such: no such folder"]),
}

# Runs Snakemake's CLI once per case in one process: its start-up (seconds) is paid once.
SNAKEMAKE_CASES = """
import contextlib, io, json, sys
from snakemake.cli import main
out = []
for args in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            main(["-n", *args])
            code = 0
        except SystemExit as exc:
            code = exc.code
    out.append({"code": code, "output": buf.getvalue()})
print(json.dumps(out))
"""


def test_bad_config_is_refused_in_one_line_before_any_job(tmp_path):
    work = copy_checkout(tmp_path / "work")
    planted = {"results/datasets/stdlib-heldout.jsonl": '{"turns": ["def f():"]}\n',
               "results/cpu-test/tiny/calibration.json": "{}\n",
               "results/cpu-test/tiny/stdlib-heldout/t0.0/ar.jsonl.partial": RECORD}
    for rel, text in planted.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    before = snapshot(work / "results")
    argv = []
    for i, (name, (change, _)) in enumerate(CONFIG_CASES.items()):
        if isinstance(change, str):
            (tmp_path / f"overlay{i}.yaml").write_text(change)
            argv.append(["--configfile", "config.yaml", str(tmp_path / f"overlay{i}.yaml")])
        else:
            argv.append(["--config", *change])
    argv.append(["--config", "hardware=cpu-test"])  # the control: a good config plans
    res = subprocess.run([sys.executable, "-c", SNAKEMAKE_CASES, json.dumps(argv)], cwd=work, env=env(work),
                         capture_output=True, text=True, timeout=300)
    results = json.loads(res.stdout.strip().splitlines()[-1])
    assert results[-1]["code"] == 0 and "decode_model" in results[-1]["output"], results[-1]["output"][-2000:]
    for (name, (_, texts)), got in zip(CONFIG_CASES.items(), results):
        errors = [line for line in got["output"].splitlines() if "error:" in line]
        assert got["code"] not in (0, None) and len(errors) == 1, (name, got["output"][-3000:])
        assert all(text in errors[0] for text in texts) and "Traceback" not in got["output"], (name, errors[0])
    assert snapshot(work / "results") == before


PIPELINE_ENV_CASE = "BASTION_RANK=triton (snakemake)"


def test_a_bad_override_variable_stops_planning_in_one_line(tmp_path):
    work = copy_checkout(tmp_path / "work")
    before = snapshot(work / "results")
    res = subprocess.run([sys.executable, "-m", "snakemake", "-n"], cwd=work, capture_output=True, text=True, timeout=300,
                         env={**env(work), "BASTION_RANK": "triton"})
    out = res.stdout + res.stderr
    errors = [line for line in out.splitlines() if "error:" in line]
    assert res.returncode == 1 and len(errors) == 1 and "Traceback" not in out, out[-3000:]
    assert "BASTION_RANK='triton' (it overrides kernels.rank)" in errors[0] and "auto or torch" in errors[0]
    assert snapshot(work / "results") == before  # no job ran


def test_every_case_is_a_row_of_the_table():
    missing = missing_doc_rows([*CONFIG_CASES, PIPELINE_ENV_CASE])
    assert not missing, missing
