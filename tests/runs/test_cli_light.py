"""The CLI answers ``--help`` and refuses bad flag values without importing torch or Transformers.

Each case runs ``bastion.benchmark.main`` in a fresh interpreter and reports which heavy
modules that process imported: a module imported by a test of this session would hide an
import made by the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "triton")
PROBE = """
import json, sys
from bastion.benchmark import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "heavy": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY,)
BASE = ["--model", "tiny", "--dataset", "stdlib-heldout", "--max-samples", "1"]


def _cli(*argv: str) -> tuple[int, list[str], str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    report = json.loads(res.stdout.strip().splitlines()[-1])
    return report["code"], report["heavy"], res.stdout, res.stderr


def test_help_imports_neither_torch_nor_transformers():
    code, heavy, out, err = _cli("--help")
    assert code == 0 and "--max-new-tokens" in out and "--engine" in out, err
    assert heavy == []


@pytest.mark.parametrize("argv, needle", [
    (["--temperature", "-1"], "--temperature must be a finite number >= 0 (0: greedy), got -1.0"),
    (["--temperature", "nan"], "--temperature must be a finite number >= 0 (0: greedy), got nan"),
    (["--temperature", "inf"], "--temperature must be a finite number >= 0 (0: greedy), got inf"),
    (["--max-samples", "0"], "--max-samples must be >= 1, got 0 (omit it to decode every prompt)"),
    (["--methods", "ar,beam"], "in --methods; choose from"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (["--budget", "0"], "--budget must be >= 1 node, got 0"),
    (["--n-min", "0"], "n_min must be a node count >= 1 or 'auto', not 0"),
    (["--n-min", "64", "--n-max", "16"], "got --n-min 64 and --n-max 16"),
    (["--topk", "0"], "--topk must be in 1..128, got 0"),
    (["--eagle3-tree", "2/2/3"], "--eagle3-tree 2/2/3: total tokens 3 are too few for depth 2"),
    (["--eagle3-tree", "deep"], "--eagle3-tree 'deep' is not a tree setting: give auto, or depth/top-k/total"),
    (["--shard", "3/2"], "--shard must be I/N"),
])
def test_a_bad_flag_is_refused_before_torch_loads(argv, needle):
    code, heavy, out, err = _cli(*BASE, *argv)
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(errors) == 1 and needle in errors[0], err
    assert "Traceback" not in err
    assert heavy == []


@pytest.mark.parametrize("flag", ["--model", "--draft-model", "--eagle3-model"])
def test_an_empty_model_folder_is_named_with_its_missing_config(tmp_path, flag):
    empty = tmp_path / "empty-model"
    empty.mkdir()
    argv = [*BASE, flag, str(empty)] if flag != "--model" else [flag, str(empty), *BASE[2:]]
    code, heavy, out, err = _cli(*argv)
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert f"{flag} {empty}: the folder has no config.json" in errors[0] and "--draft-model is required" not in err
    assert heavy == []


def test_multi_turn_without_ar_is_refused_from_the_dataset_alone(tmp_path):
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"turns": ["def f():\n", "    # and g\n"]}) + "\n")
    code, heavy, out, err = _cli("--model", "tiny", "--dataset", str(data), "--methods", "dflash")
    assert code == 2 and "add ar to --methods" in err and heavy == [], err


def test_the_probe_sees_torch_when_a_run_gets_that_far(tmp_path):
    """The control: a flag that needs the device (here an absent CUDA device) does import torch,
    so an empty list above means the CLI stopped before it, not that the probe is blind."""
    code, heavy, out, err = _cli(*BASE, "--device", "cuda:7", "--output", str(tmp_path / "out.jsonl"))
    assert code == 2 and "torch" in heavy, err
