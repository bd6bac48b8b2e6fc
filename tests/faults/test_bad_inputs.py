"""Bad inputs, swept: the rows of docs/bad-inputs.md, each refused in one line that names it, losing nothing.

Every CLI, dataset, model-folder and cache case runs ``bastion.benchmark.main`` in-process
in a folder of its own, where the finished work a careless run could destroy is planted
first: the partial records of the run's ``--output`` and the calibration file its
``--cache-dir`` would be read or replaced from.  Each case must end with exit status 2,
exactly one ``error:`` line that holds the bad value's text, no traceback, and the folder
byte for byte as it was (nothing written, nothing removed).  The ``config.yaml`` cases are
in test_bad_config.py.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import pytest
import torch

from bastion.benchmark import main
from bastion.calibration import fingerprint
from bastion.calibration.store import Calibration, calibration_path
from bastion.costmodel.model import CostModel, CostParams, StepOverheads
from bastion.costmodel.roofline import HardwarePeaks, ModelShape
from bastion.engines.choice import resolve_engine
from bastion.models.registry import tiny_dir
from bastion.runs.settings import CALIB_GRIDS
from tests.support.builders import save_eagle3_head, tiny_target
from tests.support.pipeline_support import RECORD, REPO, missing_doc_rows, snapshot

BASE = ["--model", "tiny", "--dataset", "stdlib-heldout", "--max-samples", "1", "--max-new-tokens", "4", "--quiet"]


# ------------------------------------------------------------------------------ planted work


def calibration_bytes(model_config: dict, **fingerprint_fields: str) -> bytes:
    """A calibration of this machine's stack (with ``fingerprint_fields`` changed) for a model of ``model_config``."""
    here = fingerprint.collect(torch.device("cpu"), torch.float32, "sdpa", resolve_engine("auto", "cpu"))
    model = CostModel(ModelShape.from_config(model_config, 4), HardwarePeaks(1e10, 1e10), CostParams(1, 0, 1, 0))
    cal = Calibration("tiny", {**here, **fingerprint_fields}, model, StepOverheads(1e-3, 1e-3), {"heldout_mape": 0.01},
                      {}, [{"s": 16, "c": 64, "latency_s": 1e-3}], n_min=16, probe_sizes=(32, 128, 512),
                      max_context=100_000)
    return (json.dumps(cal.to_dict(), indent=1) + "\n").encode()


def bundled_config(part: str = "target") -> dict:
    return json.loads((tiny_dir(part) / "config.json").read_text())


def model_folder(root: Path, part: str = "target", config: dict | None = None, drop: tuple[str, ...] = (),
                 write: dict[str, bytes] | None = None) -> Path:
    """A copy of a bundled folder (weights linked, not copied) with ``config``, without ``drop``,
    and with the files of ``write``."""
    root.mkdir(parents=True)
    for src in tiny_dir(part).iterdir():
        if src.name not in drop:
            if src.suffix == ".safetensors":
                (root / src.name).symlink_to(src)
            else:
                shutil.copy(src, root / src.name)
    if config is not None:
        (root / "config.json").write_text(json.dumps(config))
    for name, data in (write or {}).items():
        (root / name).write_bytes(data)
    return root


# A safetensors file whose header promises 64 bytes of data and that holds 16: a download cut short.
_HEADER = json.dumps({"w": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}}).encode()
TRUNCATED = struct.pack("<Q", len(_HEADER)) + _HEADER + bytes(16)


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict[str, Path]:
    """What several cases read and none may change: an EAGLE-3 head of another width, the calibrations."""
    root = tmp_path_factory.mktemp("shared")
    save_eagle3_head(root / "wide-head", tiny_target("qwen3", layers=8, hidden=128))
    (root / "valid.json").write_bytes(calibration_bytes(bundled_config()))
    (root / "other-model.json").write_bytes(calibration_bytes({**bundled_config(), "hidden_size": 512,
                                                               "num_hidden_layers": 4}))
    (root / "other-stack.json").write_bytes(calibration_bytes(bundled_config(), torch="1.0.0"))
    return {"root": root, "before": snapshot(root)}


# ------------------------------------------------------------------------------ the cases


def jsonl(tmp: Path, text: str | bytes, name: str = "data.jsonl") -> str:
    path = tmp / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def history(tmp: Path, **fields) -> str:
    """AR records as a decode of stdlib-heldout with BASE's settings writes them, with ``fields`` changed."""
    rec = {"method": "ar", "target": str(tiny_dir("target")), "dataset_arg": "stdlib-heldout", "max_samples": 1,
           "data_seed": 0, "temperature": 0.0, "max_new_tokens": 4, "prompt_index": 0, "turn": 0, "output_ids": [1]}
    return jsonl(tmp, json.dumps({**rec, **fields}) + "\n", "ar.jsonl")


def on_model(folder: Path, *extra: str) -> list[str]:
    return ["--model", str(folder), *BASE[2:], "--methods", "ar", *extra]


def on_dataset(path: str, *extra: str) -> list[str]:
    return ["--model", "tiny", "--dataset", path, "--max-new-tokens", "4", "--quiet", "--methods", "ar", *extra]


def needs_no_cuda(argv: list[str]) -> list[str]:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    return argv


Case = Callable[[Path, Path], tuple[list[str], list[str]]]  # (case folder, shared folder) -> (argv, texts)

CASES: dict[str, Case] = {
    # --- flags
    "--max-samples 0": lambda t, s: ([*BASE, "--max-samples", "0"], ["--max-samples must be >= 1, got 0"]),
    "--max-new-tokens 0": lambda t, s: ([*BASE, "--max-new-tokens", "0"], ["--max-new-tokens must be >= 1, got 0"]),
    "--repeats 0": lambda t, s: ([*BASE, "--repeats", "0"], ["--repeats must be >= 1, got 0"]),
    "--repeats 2 at T = 1": lambda t, s: ([*BASE, "--repeats", "2", "--temperature", "1"],
                                         ["--repeats 2 needs --temperature 0, got 1.0", "--repeats 1"]),
    "--max-new-tokens past the positions": lambda t, s: (
        [*BASE, "--methods", "ar", "--max-new-tokens", "100000"], ["--max-new-tokens 100000", "2048 positions"]),
    "--budget 0": lambda t, s: ([*BASE, "--methods", "bastion", "--budget", "0"], ["--budget must be >= 1 node, got 0"]),
    "--temperature -1": lambda t, s: ([*BASE, "--temperature", "-1"], ["--temperature", "got -1.0"]),
    "--temperature nan": lambda t, s: ([*BASE, "--temperature", "nan"], ["--temperature", "got nan"]),
    "--temperature warm": lambda t, s: ([*BASE, "--temperature", "warm"], ["--temperature", "'warm'"]),
    "--methods ar,medusa": lambda t, s: ([*BASE, "--methods", "ar,medusa"], ["'medusa'", "--methods"]),
    "--n-min 0": lambda t, s: ([*BASE, "--n-min", "0"], ["--n-min", "not 0"]),
    "--n-min many": lambda t, s: ([*BASE, "--n-min", "many"], ["--n-min", "'many'"]),
    "--n-max 0": lambda t, s: ([*BASE, "--n-max", "0"], ["--n-max must be >= 1, got 0"]),
    "--n-max below --n-min": lambda t, s: ([*BASE, "--n-min", "32", "--n-max", "16"], ["--n-min 32", "--n-max 16"]),
    "--topk 0": lambda t, s: ([*BASE, "--topk", "0"], ["--topk must be in 1..128, got 0"]),
    "--topk 129": lambda t, s: ([*BASE, "--topk", "129"], ["--topk must be in 1..128, got 129"]),
    "--eagle3-tree=-1/2/3": lambda t, s: ([*BASE, "--eagle3-tree=-1/2/3"], ["--eagle3-tree '-1/2/3'"]),
    "--eagle3-tree 2/2/3 (the deepest round never kept)": lambda t, s: (
        [*BASE, "--eagle3-tree", "2/2/3"], ["--eagle3-tree 2/2/3", "give at least 4"]),
    "--eagle3-tree top-k above the head's draft vocabulary": lambda t, s: (
        [*BASE, "--methods", "eagle3", "--eagle3-tree", "2/5000/60"], ["top-k 5000", "exceeds the head's draft vocabulary ("]),
    "--shard 3/2": lambda t, s: ([*BASE, "--shard", "3/2"], ["--shard", "'3/2'"]),
    "--block-size 1": lambda t, s: ([*BASE, "--methods", "dflash", "--block-size", "1"], ["--block-size 1"]),
    "--block-size above the drafter's": lambda t, s: (
        [*BASE, "--methods", "dflash", "--block-size", "99"], ["--block-size 99", "2..16"]),
    "--device tpu": lambda t, s: ([*BASE, "--device", "tpu"], ["--device 'tpu'"]),
    "--device cuda without CUDA": lambda t, s: (needs_no_cuda([*BASE, "--device", "cuda"]), ["'cuda'", "no CUDA"]),
    "--dtype int8": lambda t, s: ([*BASE, "--dtype", "int8"], ["--dtype", "'int8'"]),
    "--engine turbo": lambda t, s: ([*BASE, "--engine", "turbo"], ["--engine", "'turbo'"]),
    "--calib-grid huge": lambda t, s: ([*BASE, "--calib-grid", "huge"], ["--calib-grid 'huge'"]),
    "--hardware a/b": lambda t, s: ([*BASE, "--hardware", "a/b"], ["--hardware 'a/b'"]),
    "--rank-kernels triton": lambda t, s: ([*BASE, "--rank-kernels", "triton"], ["--rank-kernels", "'triton'"]),
    "--blas mkl": lambda t, s: ([*BASE, "--blas", "mkl"], ["--blas", "'mkl'"]),
    "--drafter-layers fast": lambda t, s: ([*BASE, "--drafter-layers", "fast"], ["--drafter-layers", "'fast'"]),
    "--threads 0": lambda t, s: ([*BASE, "--threads", "0"], ["--threads must be >= 1, got 0"]),
    "--threads many": lambda t, s: ([*BASE, "--threads", "many"], ["--threads", "'many'"]),
    "--enable-thinking with a Qwen3 drafter": lambda t, s: (
        ["--model", "qwen3-8b", "--dataset", "gsm8k", "--enable-thinking"], ["--enable-thinking"]),
    # --- dataset files
    "dataset: not JSON": lambda t, s: (on_dataset(p := jsonl(t, "hello\n")), [f"{p}:1: invalid JSON"]),
    "dataset: empty (0 bytes)": lambda t, s: (on_dataset(p := jsonl(t, "")), [p, "is empty (0 bytes)"]),
    "dataset: only blank lines": lambda t, s: (on_dataset(p := jsonl(t, "\n\n")), [p, "only blank lines"]),
    "dataset: empty turns": lambda t, s: (on_dataset(p := jsonl(t, '{"turns": []}\n')), [f"{p}:1: 'turns'"]),
    "dataset: non-string turns": lambda t, s: (
        on_dataset(p := jsonl(t, '{"turns": ["ok"]}\n{"turns": ["ok", 3]}\n')), [f"{p}:2: 'turns[1]'", "int"]),
    "dataset: turns a string": lambda t, s: (on_dataset(p := jsonl(t, '{"turns": "x"}\n')), [f"{p}:1: 'turns'"]),
    "dataset: a line that is a JSON list": lambda t, s: (on_dataset(p := jsonl(t, '["x"]\n')), [f"{p}:1:", "list"]),
    "dataset: no turns key": lambda t, s: (on_dataset(p := jsonl(t, '{"prompt": "x"}\n')), [f"{p}:1:", "'turns'"]),
    "dataset: not UTF-8": lambda t, s: (on_dataset(p := jsonl(t, b'{"turns": ["\xff"]}\n')), [f"{p}:1: not UTF-8"]),
    "dataset: an empty first turn": lambda t, s: (
        on_dataset(p := jsonl(t, '{"turns": ["def f():"]}\n{"turns": [""]}\n')), [f"prompt 1 of {p}", "zero tokens"]),
    "dataset: missing .jsonl": lambda t, s: (on_dataset(str(t / "nope.jsonl")), [str(t / "nope.jsonl"), "not found"]),
    "dataset: unknown name": lambda t, s: (on_dataset("gsm9k"), ["unknown dataset 'gsm9k'"]),
    "dataset: multi-turn without ar": lambda t, s: (
        [*on_dataset(p := jsonl(t, '{"turns": ["a", "b"]}\n'))[:-1], "dflash"], [repr(p), "add ar to --methods"]),
    # --- model folders
    "--model: empty folder": lambda t, s: (on_model(t), [f"--model {t}: the folder has no config.json"]),
    "--draft-model: empty folder": lambda t, s: (
        [*BASE, "--methods", "dflash", "--draft-model", str(t)], [f"--draft-model {t}: the folder has no config.json"]),
    "--eagle3-model: empty folder": lambda t, s: (
        [*BASE, "--methods", "eagle3", "--eagle3-model", str(t)], [f"--eagle3-model {t}: the folder has no config.json"]),
    "--model: a misspelt registry key": lambda t, s: (["--model", "tinyy", *BASE[2:]], ["--model tinyy: neither"]),
    "--model: empty": lambda t, s: (["--model", "", *BASE[2:]], ["--model is empty"]),
    "--model: no such folder": lambda t, s: (on_model(t / "no" / "such"), [f"--model {t / 'no' / 'such'}: no such folder"]),
    "--model: a file": lambda t, s: (on_model(Path(jsonl(t, "{}", "config.json"))), [str(t / "config.json"), "is a file"]),
    "--model: unsupported architecture": lambda t, s: (
        on_model(m := model_folder(t / "m", config={**bundled_config(), "model_type": "gpt2"})),
        [str(m), "unsupported target model family 'gpt2'"]),
    "--model: config.json not JSON": lambda t, s: (
        on_model(m := model_folder(t / "m", drop=("config.json",), write={"config.json": b"{oops"})),
        [str(m), "config.json is not valid JSON"]),
    "--model: no tokenizer": lambda t, s: (
        on_model(m := model_folder(t / "m", drop=("tokenizer.json", "tokenizer_config.json"))), [str(m), "no tokenizer"]),
    "--model: no weights": lambda t, s: (
        on_model(m := model_folder(t / "m", drop=("model.safetensors",))), [str(m), "holds no weights"]),
    "--model: truncated safetensors": lambda t, s: (
        on_model(m := model_folder(t / "m", drop=("model.safetensors",), write={"model.safetensors": TRUNCATED})),
        [str(m), "model.safetensors is truncated (87 of 135 bytes)"]),
    "--draft-model: a target's folder": lambda t, s: (
        [*BASE, "--methods", "dflash", "--draft-model", str(tiny_dir("target"))],
        [f"--draft-model {tiny_dir('target')}", "not a DFlash drafter's"]),
    "--eagle3-model: a target's folder": lambda t, s: (
        [*BASE, "--methods", "eagle3", "--eagle3-model", str(tiny_dir("target"))],
        [f"--eagle3-model {tiny_dir('target')}", "not an EAGLE-3 head's"]),
    "--draft-model: widths do not fit": lambda t, s: (
        [*BASE, "--methods", "dflash", "--draft-model",
         str(d := model_folder(t / "d", "drafter", {**bundled_config("drafter"), "hidden_size": 64}))],
        [str(d), "does not fit target", "hidden size: drafter 64, target 384"]),
    "--eagle3-model: widths do not fit": lambda t, s: (
        [*BASE, "--methods", "eagle3", "--eagle3-model", str(s / "wide-head")],
        [str(s / "wide-head"), "does not fit target", "fc.weight in-features 384 != 3 x target hidden_size 384"]),
    # --- caches, calibration, output, history
    "--cache-dir unwritable": lambda t, s: (
        [*BASE, "--methods", "bastion", "--cache-dir", str(Path(jsonl(t, "a file", "blocker")) / "cache")],
        [str(t / "blocker" / "cache"), "cannot be written (Not a directory)"]),
    "--calibration not JSON": lambda t, s: (
        [*BASE, "--methods", "bastion", "--calibration", p := jsonl(t, "{oops", "cal.json")], [p, "not valid JSON"]),
    "--calibration missing": lambda t, s: (
        [*BASE, "--methods", "bastion", "--calibration", str(t / "nope.json")], [str(t / "nope.json"), "does not exist"]),
    "--calibration a folder": lambda t, s: (
        [*BASE, "--methods", "bastion", "--calibration", str(t)], [str(t), "cannot be read"]),
    "--calibration of another model": lambda t, s: (
        [*BASE, "--methods", "bastion", "--calibration", str(s / "other-model.json")],
        [str(s / "other-model.json"), "another shape", "hidden 512 (target 384)"]),
    "--calibration of another software stack": lambda t, s: (
        [*BASE, "--methods", "bastion", "--calibration", str(s / "other-stack.json")],
        [str(s / "other-stack.json"), "torch: calibrated with '1.0.0'"]),
    "--threads 2 with a calibration made with 1": lambda t, s: (
        [*BASE, "--methods", "bastion", "--threads", "2", "--calibration", str(s / "valid.json")],
        [str(s / "valid.json"), "threads: calibrated with 1, running with 2", "--recalibrate"]),
    "--rank-kernels torch with a calibration made with auto": lambda t, s: (
        [*BASE, "--methods", "bastion", "--rank-kernels", "torch", "--calibration", str(s / "valid.json")],
        [str(s / "valid.json"), "kernels.rank: calibrated with 'auto', running with 'torch'", "--recalibrate"]),
    "prepared dataset in --cache-dir not JSON": lambda t, s: (
        ["--model", "tiny", "--dataset", "gsm8k", "--methods", "ar", "--quiet", "--cache-dir", str(t)],
        [f"{jsonl(t, 'oops', 'gsm8k.jsonl')}:1: invalid JSON"]),
    "--output under a file": lambda t, s: (
        [*BASE, "--output", str(Path(jsonl(t, "a file", "blocker")) / "out.jsonl")],
        [f"--output {t / 'blocker' / 'out.jsonl'}: cannot write", f"{t / 'blocker'} is a file"]),
    "--output a folder": lambda t, s: ([*BASE, "--output", str(t)], [f"--output {t} is a folder"]),
    "--output: its partial records hold an unreadable line": lambda t, s: (
        [*BASE, "--output", str(Path(jsonl(t, RECORD + "{not json\n", "out.jsonl.partial")).with_suffix(""))],
        [f"{t / 'out.jsonl.partial'} has an unreadable line after 1 records", "delete it (or that line)"]),
    "--history-from missing": lambda t, s: (
        [*BASE, "--methods", "dflash", "--history-from", str(t / "ar.jsonl")], [str(t / "ar.jsonl"), "do not exist"]),
    "--history-from a folder": lambda t, s: (
        [*BASE, "--methods", "dflash", "--history-from", str(t)], [f"history records {t} are a folder"]),
    "--history-from not JSON": lambda t, s: (
        [*BASE, "--methods", "dflash", "--history-from", p := jsonl(t, "oops\n", "ar.jsonl")], [p, "cannot read"]),
    "--history-from of another dataset": lambda t, s: (
        [*BASE, "--methods", "dflash", "--history-from", p := history(t, dataset_arg="humaneval-pkg")],
        [p, "dataset_arg \"humaneval-pkg\""]),
    "--history-from without AR records": lambda t, s: (
        [*BASE, "--methods", "dflash", "--history-from", p := history(t, method="dflash")], [p, "no AR records"]),
}


# The cases refused only after torch is imported (they read the device, a tokenizer or a
# config through Transformers, or a calibration); every other case is refused without it.
AFTER_TORCH = {"--max-new-tokens past the positions", "--device cuda without CUDA", "dataset: an empty first turn",
               "--draft-model: widths do not fit", "--cache-dir unwritable", "--calibration not JSON",
               "--calibration a folder", "--calibration of another model", "--calibration of another software stack",
               "--threads 2 with a calibration made with 1", "--rank-kernels torch with a calibration made with auto"}


def planted_argv(name: str, tmp: Path, shared: Path, cases: dict[str, Case] = CASES) -> tuple[list[str], list[str]]:
    """A case's flags and texts, with the finished work it must not lose planted in ``tmp``."""
    tmp.mkdir(exist_ok=True)
    argv, texts = cases[name](tmp, shared)
    if "--output" not in argv:
        argv += ["--output", str(tmp / "out.jsonl")]
        (tmp / "out.jsonl.partial").write_text(RECORD)  # prompts a killed run finished
    if "--cache-dir" not in argv:
        cal = calibration_path(tmp / "cache", fingerprint.hardware_key({"device_name": fingerprint.device_name(
            torch.device("cpu")), "device_type": "cpu"}), "tiny", resolve_engine("auto", "cpu"))
        cal.parent.mkdir(exist_ok=True)
        cal.write_bytes((shared / "valid.json").read_bytes())  # the calibration it would use or replace
        argv += ["--cache-dir", str(tmp / "cache")]
    return argv, texts


def run_case(name: str, tmp: Path, shared: Path, capsys, cases: dict[str, Case] = CASES) -> str:
    """Run one case with finished work planted; return its error line after every check of the bar."""
    argv, texts = planted_argv(name, tmp, shared, cases)
    before = snapshot(tmp)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a flag's value by exiting
        code = exc.code
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert all(text in errors[0] for text in texts), (texts, errors[0])
    assert snapshot(tmp) == before  # nothing written, nothing removed, the planted work as it was
    return errors[0]


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_in_one_line_and_loses_nothing(name, tmp_path, shared, capsys):
    run_case(name, tmp_path / "case", shared["root"], capsys)
    assert snapshot(shared["root"]) == shared["before"]


# Cases of a BASTION_* variable that overrides a kernel setting: (the variables, the texts its one line names)
ENV_CASES: dict[str, tuple[dict[str, str], list[str]]] = {
    "BASTION_BLAS=mkl": ({"BASTION_BLAS": "mkl"}, ["BASTION_BLAS='mkl'", "kernels.blas", "cublaslt or cublas"]),
    "BASTION_ROW_KERNEL=off": ({"BASTION_ROW_KERNEL": "off"}, ["BASTION_ROW_KERNEL='off'", "use 1", "or 0"]),
}


@pytest.mark.parametrize("name", list(ENV_CASES))
def test_a_bad_override_variable_is_refused_in_one_line_and_loses_nothing(name, tmp_path, shared, capsys, monkeypatch):
    variables, texts = ENV_CASES[name]
    for var, value in variables.items():
        monkeypatch.setenv(var, value)
    run_case(name, tmp_path / "case", shared["root"], capsys, {name: lambda t, s: (list(BASE), texts)})


# Runs the CLI on each case in a fresh interpreter and reports what it imported.
WITHOUT_TORCH = """
import json, sys
from bastion.benchmark import main
codes = []
for argv in json.loads(sys.argv[1]):
    try:
        codes.append(main(argv))
    except SystemExit as exc:
        codes.append(exc.code)
print(json.dumps({"codes": codes, "heavy": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


def test_the_cases_refused_before_torch_never_import_it(tmp_path, shared):
    """What the table's "before torch" says: these cases stop in the checks that import neither
    torch nor Transformers (one fresh interpreter for all of them)."""
    names = [n for n in CASES if n not in AFTER_TORCH]
    argvs = [planted_argv(name, tmp_path / f"case{i}", shared["root"])[0] for i, name in enumerate(names)]
    res = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, json.dumps(argvs)], cwd=REPO, capture_output=True,
                         text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"))
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert report["codes"] == [2] * len(names) and report["heavy"] == [], (report, res.stderr[-3000:])


def test_output_in_a_read_only_folder():
    """Permission bits, which root ignores: then the CLI runs as an unprivileged user (as tests/runs does),
    in a folder that user can reach (pytest's own folders are closed to other users)."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp).chmod(0o755)
        read_only_output(Path(tmp))


def read_only_output(tmp: Path) -> None:
    ro = tmp / "ro"
    ro.mkdir()
    (ro / "out.jsonl.partial").write_text(RECORD)
    ro.chmod(0o555)
    cmd = [sys.executable, "-m", "bastion.benchmark", *BASE, "--methods", "ar", "--output", str(ro / "new.jsonl")]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv")
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HOME=str(tmp)))
    errors = [line for line in res.stderr.splitlines() if "error:" in line]
    assert res.returncode == 2 and len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    assert str(ro / "new.jsonl.partial") in errors[0] and "Permission denied" in errors[0]
    assert sorted(p.name for p in ro.iterdir()) == ["out.jsonl.partial"] and (ro / "out.jsonl.partial").read_text() == RECORD


def test_the_calibration_grids_are_the_grid_names():
    from bastion.calibration.grid import Grid

    for name in CALIB_GRIDS[1:]:
        Grid.named(name)
    with pytest.raises(ValueError):
        Grid.named("huge")


def test_every_case_is_a_row_of_the_table():
    missing = missing_doc_rows([*CASES, *ENV_CASES])
    assert not missing, missing
