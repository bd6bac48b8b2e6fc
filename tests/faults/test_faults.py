"""Bad inputs and faults: each stops with one line naming the file or flag and the fix, and loses nothing.

Cheap faults run the CLI in-process (``main`` returns 2 and prints ``error: ...``); the
faults that need a real process (SIGTERM, a file-size limit, a killed calibration) run
``python -m bastion.benchmark`` as a subprocess.  Everything uses the bundled tiny pair
(or tiny random models), one or two prompts and a few tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bastion.benchmark import main
from bastion.calibration import fingerprint
from bastion.calibration.store import Calibration
from bastion.costmodel.model import CostModel, CostParams, StepOverheads
from bastion.costmodel.roofline import HardwarePeaks, ModelShape
from bastion.engines.choice import resolve_engine
from bastion.results import records
from tests.support.builders import byte_tokenizer, tiny_drafter, tiny_target
from tests.support.pipeline_support import REPO, copy_checkout, smk

BASE = ["--model", "tiny", "--dataset", "stdlib-heldout", "--max-samples", "1", "--max-new-tokens", "4", "--quiet"]


def cli(capsys, *args: str) -> str:
    """Run the CLI in-process; return its one-line error (asserting exit status 2 and no traceback)."""
    code = main([*BASE, *args])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def calibration_file(path: Path, temperature: float = 0.0) -> dict:
    shape = ModelShape.from_config(tiny_target().config, 4)
    here = fingerprint.collect(torch.device("cpu"), torch.float32, "sdpa", resolve_engine("auto", "cpu"))
    cal = Calibration("tiny", here, CostModel(shape, HardwarePeaks(1e10, 1e10), CostParams(1, 0, 1, 0)),
                      StepOverheads(1e-3, 1e-3), {"heldout_mape": 0.01}, {}, [{"s": 8, "c": 16, "latency_s": 1e-3}],
                      temperature=temperature)
    cal.save(path)
    return cal.to_dict()


def same_records(a: list[str], b: list[str]) -> bool:
    """The same (prompt, turn, method) records with the same tokens (times differ between runs)."""
    def key(lines):
        return [(r["prompt_index"], r["turn"], r["method"], r["output_ids"]) for r in map(json.loads, lines)]
    return key(a) == key(b)


def subprocess_cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bastion.benchmark", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO)), **kw)


# ------------------------------------------------------------------------------ problem 5


def test_truncated_calibration_names_the_file_and_recalibrate(capsys, tmp_path):
    path = tmp_path / "cal.json"
    calibration_file(path)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    msg = cli(capsys, "--methods", "bastion", "--calibration", str(path))
    assert str(path) in msg and "--recalibrate" in msg and "not valid JSON" in msg
    assert path.read_text() == text[: len(text) // 2]  # left for the user to inspect


def test_calibration_missing_a_key(capsys, tmp_path):
    path = tmp_path / "cal.json"
    data = calibration_file(path)
    del data["overheads"]
    path.write_text(json.dumps(data))
    msg = cli(capsys, "--methods", "bastion", "--calibration", str(path))
    assert str(path) in msg and "overheads" in msg and "--recalibrate" in msg


def test_unwritable_output_fails_before_decoding(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    msg = cli(capsys, "--methods", "ar", "--output", str(blocker / "out.jsonl"))
    assert str(blocker / "out.jsonl.partial") in msg and "--output" in msg
    assert blocker.read_text() == "not a folder"


def test_max_new_tokens_beyond_positions_fails_before_calibration(capsys, tmp_path):
    msg = cli(capsys, "--methods", "bastion", "--max-new-tokens", "100000", "--cache-dir", str(tmp_path / "c"))
    assert "--max-new-tokens 100000" in msg and "2048" in msg
    assert not (tmp_path / "c").exists()  # no calibration was started


def test_torn_partial_line_is_cut_and_the_run_resumes(capsys, tmp_path):
    out = tmp_path / "out.jsonl"
    args = ["--model", "tiny", "--dataset", "stdlib-heldout", "--max-samples", "2", "--max-new-tokens", "4",
            "--methods", "ar", "--quiet", "--output", str(out)]
    assert main(args) == 0
    full = out.read_text().splitlines(keepends=True)
    part = records.partial_path(out)
    part.write_text(full[0] + full[1][:40])  # prompt 0 done, prompt 1 torn mid-write
    out.unlink()
    key = json.loads(full[0])["run_key"]
    assert len(records.read_partial(part, key)) == 1
    assert part.read_text() == full[0]  # the torn tail is gone: the next append starts a fresh line
    assert main(args) == 0
    again = out.read_text().splitlines(keepends=True)
    assert same_records(again, full) and not part.exists()


# ------------------------------------------------------------------------------ settings


def test_unknown_method(capsys):
    msg = cli(capsys, "--methods", "ar,medusa")
    assert "medusa" in msg and "--methods" in msg


def test_negative_budget(capsys):
    msg = cli(capsys, "--methods", "bastion", "--budget", "-4")
    assert "--budget" in msg and "-4" in msg


def test_n_min_above_n_max(capsys):
    msg = cli(capsys, "--methods", "bastion", "--n-min", "64", "--n-max", "16")
    assert "--n-min 64" in msg and "--n-max 16" in msg


def test_non_numeric_temperature_on_the_cli(capsys):
    with pytest.raises(SystemExit) as exc:
        main([*BASE, "--temperature", "warm"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--temperature" in err.splitlines()[-1] and "'warm'" in err
    assert "Traceback" not in err


def test_non_numeric_temperature_in_config_yaml(tmp_path):
    work = copy_checkout(tmp_path / "work")
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("experiments:\n  tiny:\n    temperatures: [warm]\n")
    res = smk(work, "-n", "--configfile", "config.yaml", str(overlay), check=False, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "temperatures" in out and "warm" in out
    assert "Traceback" not in out


def test_drafter_for_another_target(capsys, tmp_path):
    target = tiny_target(vocab=260, hidden=64, seed=0)
    other = tiny_target(vocab=260, hidden=32, seed=1)
    target.save_pretrained(tmp_path / "target")
    byte_tokenizer().save_pretrained(tmp_path / "target")
    tiny_drafter(other, block_size=4, mask_id=257).save_pretrained(str(tmp_path / "drafter"))
    code = main(["--model", str(tmp_path / "target"), "--draft-model", str(tmp_path / "drafter"), "--dataset",
                 "stdlib-heldout", "--max-samples", "1", "--max-new-tokens", "4", "--methods", "dflash", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    msg = err.strip().splitlines()[-1]
    assert "does not fit target" in msg and "hidden size" in msg and str(tmp_path / "drafter") in msg


def test_drafter_mismatch_is_refused_before_any_weights_load(capsys, tmp_path, monkeypatch):
    from bastion.models import registry

    target = tiny_target(vocab=260, hidden=64, seed=0)
    target.save_pretrained(tmp_path / "target")
    byte_tokenizer().save_pretrained(tmp_path / "target")
    tiny_drafter(tiny_target(vocab=260, hidden=32, seed=1), block_size=4, mask_id=257).save_pretrained(
        str(tmp_path / "drafter"))

    def no_weights(*a, **k):
        raise AssertionError("weights loaded before the pair check")

    monkeypatch.setattr(registry, "load_target", no_weights)
    monkeypatch.setattr(registry, "load_drafter", no_weights)
    code = main(["--model", str(tmp_path / "target"), "--draft-model", str(tmp_path / "drafter"), "--dataset",
                 "stdlib-heldout", "--max-samples", "1", "--max-new-tokens", "4", "--methods", "dflash", "--quiet"])
    msg = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "does not fit target" in msg and "hidden size: drafter 32, target 64" in msg


def test_corrupt_dataset_line(capsys, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"turns": ["def f():"]}\n{"turns": ["oops"\n')
    code = main(["--model", "tiny", "--dataset", str(data), "--max-new-tokens", "4", "--methods", "ar", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and f"{data}:2" in err.strip().splitlines()[-1]


def test_greedy_calibration_refused_at_t_above_0(capsys, tmp_path):
    path = tmp_path / "cal.json"
    calibration_file(path, temperature=0.0)
    msg = cli(capsys, "--methods", "bastion", "--calibration", str(path), "--temperature", "0.8")
    assert str(path) in msg and "greedy (T=0) only" in msg and "--temperature 0.8" in msg


def test_missing_history_records(capsys, tmp_path):
    msg = cli(capsys, "--methods", "dflash", "--history-from", str(tmp_path / "ar.jsonl"))
    assert str(tmp_path / "ar.jsonl") in msg and "decode AR first" in msg


def test_partial_from_other_settings_is_set_aside_and_kept(capsys, tmp_path):
    out = tmp_path / "out.jsonl"
    part = records.partial_path(out)
    stranger = json.dumps({"run_key": "someone-else", "prompt_index": 0}) + "\n"
    part.write_text(stranger)
    assert main([*BASE, "--methods", "ar", "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{part} was written with other settings" in err and "set aside as out.jsonl.partial.set-aside" in err
    assert (tmp_path / "out.jsonl.partial.set-aside").read_text() == stranger
    assert "someone-else" not in out.read_text() and not part.exists()


def test_a_partial_with_an_unreadable_line_is_refused_and_kept(capsys, tmp_path):
    """Corruption is not another run's settings: it stops the run, and the file stays for inspection."""
    out = tmp_path / "out.jsonl"
    part = records.partial_path(out)
    part.write_text("{not json\n")
    msg = cli(capsys, "--methods", "ar", "--output", str(out))
    assert str(part) in msg and "unreadable line" in msg
    assert part.read_text() == "{not json\n"


# ------------------------------------------------------------------------------ faults in processes


def test_calibration_killed_part_way_leaves_no_calibration(tmp_path):
    cache = tmp_path / "cache"
    proc = subprocess_cli(*BASE[:-1], "--methods", "bastion", "--calib-grid", "tiny", "--cache-dir", str(cache))
    deadline = time.monotonic() + 240
    seen = ""
    while time.monotonic() < deadline and "[calibrate] grid" not in seen:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
    assert "[calibrate] grid" in seen, seen
    proc.kill()
    proc.wait()
    proc.stderr.close()
    proc.stdout.close()
    assert not list(cache.glob("calibration_*.json"))  # only a complete file is ever renamed into place


def test_full_disk_keeps_finished_prompts(tmp_path):
    out = tmp_path / "out.jsonl"
    args = ["--model", "tiny", "--dataset", "stdlib-heldout", "--max-samples", "2", "--max-new-tokens", "4",
            "--methods", "ar", "--quiet", "--output", str(out)]
    assert main(args) == 0
    lines = out.read_text().splitlines(keepends=True)
    out.unlink()
    limit_kb = len(lines[0]) // 1024 + 1  # room for prompt 0's record, not for prompt 1's as well
    assert len(lines[0]) < limit_kb * 1024 < len(lines[0]) + len(lines[1])
    cmd = " ".join([f"ulimit -f {limit_kb};", sys.executable, "-m", "bastion.benchmark", *args])
    res = subprocess.run(["bash", "-c", cmd], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO)), timeout=300)
    err_lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert res.returncode == 2 and len(err_lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "out.jsonl.partial" in err_lines[0] and "rerun to resume" in err_lines[0]
    part = records.partial_path(out)
    kept = part.read_text().splitlines(keepends=True)
    assert part.read_text().endswith("\n") and same_records(kept, lines[:1])  # prompt 0 kept, nothing torn
    assert main(args) == 0 and same_records(out.read_text().splitlines(keepends=True), lines)


# The CLI in a process that sends itself SIGTERM right after the first prompt's records are
# appended: the signal lands mid-run every time, between two prompts, whatever the machine's speed.
SIGTERM_AFTER_FIRST_PROMPT = """
import os, signal, sys
from bastion.results import records
append = records.append_records
def append_then_terminate(path, recs):
    append(path, recs)
    os.kill(os.getpid(), signal.SIGTERM)
records.append_records = append_then_terminate
from bastion.benchmark import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_mid_decode_keeps_finished_prompts_and_resumes(tmp_path):
    out = tmp_path / "out.jsonl"
    part = records.partial_path(out)
    args = ["--model", "tiny", "--dataset", "stdlib-heldout", "--max-samples", "3", "--max-new-tokens", "16",
            "--methods", "ar,dflash", "--output", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_FIRST_PROMPT, *args], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: terminated (SIGTERM)") and str(part) in errors[0]
    kept = part.read_text()
    assert kept.endswith("\n") and not out.exists()
    first = [json.loads(line) for line in kept.splitlines()]
    assert sorted((r["prompt_index"], r["method"]) for r in first) == [(0, "ar"), (0, "dflash")]  # prompt 0, whole
    proc = subprocess_cli(*args)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "[resume] 1 of 3 prompts already done" in err
    final = [json.loads(x) for x in out.read_text().splitlines()]
    keys = [(r["prompt_index"], r["turn"], r["method"]) for r in final]
    assert len(keys) == len(set(keys)) == 6 and not part.exists()  # every prompt once, no duplicates
    again = {(r["prompt_index"], r["method"]): r for r in final}
    assert all(again[(0, r["method"])] == r for r in first)  # the kept records, as they were written
