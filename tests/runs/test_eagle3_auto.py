"""``--eagle3-tree auto``: chosen by a sweep on the tiny pair, recorded, cached per head and reused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bastion import benchmark
from bastion.calibration.eagle3_tree import TreeChoice
from bastion.calibration.store import CalibrationError
from bastion.runs import eagle3_choice
from bastion.runs.eagle3_choice import TreeKey, head_digest, resolve_tree, tree_cache_path
from bastion.speculative.eagle3_tree import TreeMeasurement
from bastion.speculative.methods import Eagle3Policy

TINY_HEAD = Path(__file__).resolve().parents[2] / "dflash" / "assets" / "tiny" / "eagle3"


def _cli(tmp_path: Path, out: str, *extra: str) -> int:
    return benchmark.main(["--model", "tiny", "--dataset", "stdlib-heldout", "--max-samples", "2", "--max-new-tokens",
                           "32", "--methods", "ar,eagle3", "--device", "cpu", "--dtype", "float32", "--cache-dir",
                           str(tmp_path / "cache"), "--output", str(tmp_path / out), *extra])


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def sweeps(monkeypatch):
    """How often the real sweep ran."""
    calls = []
    real = eagle3_choice.sweep

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(eagle3_choice, "sweep", counted)
    return calls


def test_auto_tree_is_chosen_recorded_and_reused(tmp_path, capsys, sweeps):
    assert _cli(tmp_path, "first.jsonl") == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert len(sweeps) == 1 and "[eagle3] choosing the tree for head" in err
    [cached] = list((tmp_path / "cache" / "eagle3_tree").glob("*/*.json"))
    stored = json.loads(cached.read_text())
    chosen = [stored["chosen"][k] for k in ("depth", "top_k", "total_tokens")]
    assert stored["key"]["head"] == head_digest(TINY_HEAD) and stored["key"]["dtype"] == "float32"
    assert len(stored["measured"]) >= 5  # the sweep measured shapes from chains to the reference tree
    assert Eagle3Policy(*chosen).total_tokens >= chosen[0] + 2  # every round of the chosen tree can be kept
    recs = _records(tmp_path / "first.jsonl")
    assert {r["method"] for r in recs} == {"ar", "eagle3"}
    assert all(r["eagle3_tree"] == chosen and r["eagle3_tree_source"] == "auto" for r in recs)
    by = {(r["prompt_index"], r["method"]): r for r in recs}
    vocab = json.loads((TINY_HEAD / "config.json").read_text())["draft_vocab_size"]
    for (idx, method), r in by.items():
        if method == "eagle3":
            assert r["output_ids"] == by[(idx, "ar")]["output_ids"]  # fp32, T = 0: lossless with the chosen tree
            assert set(r["tree_sizes"]) == {Eagle3Policy(*chosen).tree_size(vocab)}

    assert _cli(tmp_path, "second.jsonl") == 0
    err = capsys.readouterr().err
    assert len(sweeps) == 1, "the cached choice was measured again"
    assert f"[eagle3] reusing tree {'/'.join(map(str, chosen))}" in err and str(cached) in err
    again = _records(tmp_path / "second.jsonl")
    assert [r["eagle3_tree"] for r in again] == [chosen] * len(again)
    assert {r["run_key"] for r in again} == {r["run_key"] for r in recs}

    explicit = "7/10/60" if chosen != [7, 10, 60] else "1/1/3"
    assert _cli(tmp_path, "explicit.jsonl", "--eagle3-tree", explicit) == 0
    recs3 = _records(tmp_path / "explicit.jsonl")
    assert all(r["eagle3_tree_source"] == "explicit" for r in recs3) and len(sweeps) == 1
    assert {r["run_key"] for r in recs3}.isdisjoint({r["run_key"] for r in recs})  # the tree is in the run key


def test_another_head_has_its_own_key(tmp_path):
    from safetensors.torch import load_file, save_file

    same, other = tmp_path / "same", tmp_path / "other"
    shutil.copytree(TINY_HEAD, same)
    shutil.copytree(TINY_HEAD, other)
    weights = load_file(other / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name] + 1e-3  # the same shapes, another head
    save_file(weights, other / "model.safetensors")
    assert head_digest(same) == head_digest(TINY_HEAD)  # the content names the head, not its folder
    assert head_digest(other) != head_digest(TINY_HEAD)
    keys = [TreeKey(head_digest(h), "cpu-x", "static", "float32") for h in (TINY_HEAD, other)]
    assert tree_cache_path("c", keys[0]) != tree_cache_path("c", keys[1])


def _choice(tree: tuple[int, int, int]) -> TreeChoice:
    m = TreeMeasurement(Eagle3Policy(*tree), 2.0, 0.01)
    return TreeChoice(m, [m])


def test_the_cache_is_read_unless_remeasuring_is_asked(tmp_path):
    key = TreeKey("abc", "cpu-x", "static", "float32")
    made = []

    def measure():
        made.append(1)
        return _choice((2, 2, 6))

    log: list[str] = []
    assert resolve_tree("auto", None, lambda: key, tmp_path, False, measure, log.append) == (Eagle3Policy(2, 2, 6), "auto")
    assert resolve_tree("auto", None, lambda: key, tmp_path, False, measure, log.append)[1] == "auto" and len(made) == 1
    assert "reusing tree 2/2/6" in log[-1]
    resolve_tree("auto", None, lambda: key, tmp_path, True, measure, log.append)  # --recalibrate
    assert len(made) == 2
    assert resolve_tree("4/4/16", None, lambda: key, tmp_path, False, measure, log.append) == (
        Eagle3Policy(4, 4, 16), "explicit")
    assert len(made) == 2


def test_a_choice_made_for_another_head_is_refused(tmp_path):
    path = tree_cache_path(tmp_path, TreeKey("abc", "cpu-x", "static", "float32"))
    eagle3_choice.save_choice(path, TreeKey("abc", "cpu-x", "static", "float32"), _choice((2, 2, 6)))
    with pytest.raises(CalibrationError) as exc:
        resolve_tree("auto", str(path), lambda: TreeKey("def", "cpu-x", "static", "float32"), tmp_path, False,
                     lambda: _choice((1, 1, 3)), print)
    assert str(path) in str(exc.value) and "'head': 'def'" in str(exc.value) and "--recalibrate" in str(exc.value)


def test_the_calibration_is_measured_before_the_sweep(tmp_path, capsys, sweeps):
    """A run that both calibrates and sweeps measures its latencies first, as the pipeline's jobs
    do, so both time the grid before anything of the head is compiled or captured."""
    assert benchmark.main(["--model", "tiny", "--dataset", "stdlib-heldout", "--max-samples", "1", "--max-new-tokens",
                           "16", "--methods", "ar,eagle3,bastion", "--device", "cpu", "--dtype", "float32",
                           "--calib-grid", "tiny", "--n-min", "4", "--accept-calibration-error",
                           "--cache-dir", str(tmp_path / "cache"), "--output", str(tmp_path / "out.jsonl")]) == 0
    err = capsys.readouterr().err
    assert len(sweeps) == 1
    assert 0 <= err.index("[calibrate] wrote") < err.index("[eagle3] choosing the tree for head")
    by = {r["method"]: r["output_ids"] for r in _records(tmp_path / "out.jsonl")}
    assert by["eagle3"] == by["ar"] == by["bastion"]  # the engine rebuilt with the head decodes as before
