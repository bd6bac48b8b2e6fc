"""Resume never mixes: a partial file of other settings, another fingerprint or other code is set aside.

A run resumes from ``<output>.partial`` only when it was written under the same run key:
the settings, the engine, dtype, device type, hardware key, the compared fingerprint
fields, the decoding code and the prompts.  Otherwise the file is renamed
``<output>.partial.set-aside``, the log names what differs, and the run starts over.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bastion.calibration import fingerprint
from bastion.models import registry as models
from bastion.results import records
from bastion.runs.run import DecodeRun, run_from_knobs

PROMPTS = [{"turns": ["def add(a, b):\n    return"]}, {"turns": ["import os\n"]}]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("resume") / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    return path


def _run(data, out: Path, engine: str) -> DecodeRun:
    return DecodeRun(model="tiny", dataset=str(data), methods=("ar",), max_new_tokens=4, device="cpu",
                     dtype="float32", engine=engine, output=str(out), quiet=True)


def _interrupted(out: Path) -> str:
    """Turn a finished output into what a run killed after its first prompt leaves: prompt 0's records."""
    first = [line for line in out.read_text().splitlines(keepends=True) if json.loads(line)["prompt_index"] == 0]
    records.partial_path(out).write_text("".join(first))
    out.unlink()
    return "".join(first)


def _final(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_partial_of_another_engine_is_set_aside_and_the_run_starts_over(data, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    _run(data, out, "eager").execute()
    kept = _interrupted(out)
    capsys.readouterr()
    _run(data, out, "static").execute()
    err = capsys.readouterr().err
    part = records.partial_path(out)
    aside = Path(f"{part}.set-aside")
    assert f"{part} was written with other settings" in err and "engine: 'eager' -> 'static'" in err
    assert "fingerprint.engine: 'eager' -> 'static'" in err and f"set aside as {aside.name}" in err
    assert "[resume]" in err and "prompts already done" not in err  # nothing resumed
    assert aside.read_text() == kept and not part.exists()  # the eager records, untouched
    final = _final(out)
    assert sorted((r["prompt_index"], r["method"]) for r in final) == [(0, "ar"), (1, "ar")]
    assert {r["fingerprint"]["engine"] for r in final} == {r["run_settings"]["engine"] for r in final} == {"static"}


def test_a_partial_of_another_fingerprint_is_set_aside(data, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    _run(data, out, "eager").execute()
    _interrupted(out)
    part = records.partial_path(out)
    forged = []
    for line in part.read_text().splitlines():
        rec = json.loads(line)
        rec["run_settings"]["fingerprint"]["torch"] = "1.0.0"  # written under another torch
        rec["run_key"] = records.run_key(rec["run_settings"])
        forged.append(json.dumps(rec) + "\n")
    part.write_text("".join(forged))
    Path(f"{part}.set-aside").write_text("an earlier set-aside file\n")  # taken: the next name is used
    capsys.readouterr()
    _run(data, out, "eager").execute()
    err = capsys.readouterr().err
    assert "fingerprint.torch: '1.0.0' -> " in err and "set aside as out.jsonl.partial.set-aside-2" in err
    assert Path(f"{part}.set-aside-2").read_text() == "".join(forged)
    assert Path(f"{part}.set-aside").read_text() == "an earlier set-aside file\n"
    assert len(_final(out)) == 2


def test_the_same_settings_still_resume(data, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    _run(data, out, "eager").execute()
    full = out.read_text()
    _interrupted(out)
    capsys.readouterr()
    run = _run(data, out, "eager")
    run.quiet = False
    run.execute()
    err = capsys.readouterr().err
    assert "[resume] 1 of 2 prompts already done" in err and "set aside" not in err
    assert [(r["prompt_index"], r["output_ids"]) for r in _final(out)] == \
           [(r["prompt_index"], r["output_ids"]) for r in map(json.loads, full.splitlines())]


def test_a_pipeline_job_killed_then_rerun_after_a_code_change_starts_over(data, tmp_path, capsys, monkeypatch):
    """The pipeline's decode jobs build the same run (run_from_knobs): a partial of older code is set aside."""
    target, drafter, _ = models.resolve("tiny")
    knobs = {"method": "ar", "temperature": 0.0, "max_new_tokens": 4, "max_samples": None, "n_min": 16,
             "n_max": 8192, "topk": 128, "budget": None, "block_size": None, "device": "cpu", "dtype": "float32",
             "attn_impl": "sdpa", "engine": "eager", "seed": 0,
             "kernels": {"rank": "auto", "blas": "cublaslt", "drafter": "fused", "row_kernel": True, "tile_kernel": True}}
    out = tmp_path / "results" / "ar.jsonl"

    def job():
        return run_from_knobs(knobs, {"target": target, "drafter": drafter}, str(data), str(tmp_path / "unused.json"),
                              "cpu-test", "tiny", "prompts", str(out))

    job().execute()
    kept = _interrupted(out)
    monkeypatch.setattr(fingerprint, "source_digest", lambda: "edited-code")
    capsys.readouterr()
    job().execute()
    err = capsys.readouterr().err
    assert "code: '" in err and "-> 'edited-code'" in err and "set aside" in err
    assert Path(f"{records.partial_path(out)}.set-aside").read_text() == kept
    assert {r["run_settings"]["code"] for r in _final(out)} == {"edited-code"}


def test_differences_name_each_field_and_nested_field():
    old = {"engine": "eager", "dtype": "float32", "fingerprint": {"torch": "1.0", "engine": "eager"}, "seed": 0}
    new = {"engine": "static", "dtype": "float32", "fingerprint": {"torch": "2.0", "engine": "static"}, "seed": 0,
           "code": "abc"}
    assert records.setting_differences(old, new) == (
        "code: None -> 'abc', engine: 'eager' -> 'static', fingerprint.engine: 'eager' -> 'static', "
        "fingerprint.torch: '1.0' -> '2.0'")
    assert records.setting_differences(None, new) == "its records do not say which"
