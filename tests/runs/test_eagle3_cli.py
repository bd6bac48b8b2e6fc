"""``--methods ar,eagle3`` through the CLI: the bundled tiny head, explicit heads, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bastion import benchmark
from bastion.runs.run import DecodeRun
from tests.support.builders import save_eagle3_head, save_pair, tiny_target


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("e3cli")
    target, drafter = save_pair(root / "pair")
    data = root / "prompts.jsonl"
    data.write_text(json.dumps({"turns": ["def add(a, b):\n    return"]}) + "\n")
    return root, target, drafter, data


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tiny_pair_records_eagle3(tmp_path, capsys):
    out = tmp_path / "e3.jsonl"
    rc = benchmark.main(["--model", "tiny", "--dataset", "stdlib-heldout", "--max-samples", "2", "--max-new-tokens", "32",
                         "--methods", "ar,eagle3", "--device", "cpu", "--dtype", "float32", "--cache-dir", str(tmp_path),
                         "--eagle3-tree", "7/10/60", "--output", str(out)])
    assert rc == 0, capsys.readouterr().err
    recs = _records(out)
    by = {(r["prompt_index"], r["method"]): r for r in recs}
    assert {r["method"] for r in recs} == {"ar", "eagle3"}
    for (idx, method), r in by.items():
        if method != "eagle3":
            continue
        assert r["output_ids"] == by[(idx, "ar")]["output_ids"]  # lossless at T = 0
        assert r["acceptance_lengths"] and sum(r["acceptance_lengths"]) == r["num_output_tokens"] - 1
        assert set(r["tree_sizes"]) == {60}
        assert r["eagle3_model"].endswith("eagle3") and r["eagle3_tree"] == [7, 10, 60]
        assert r["eagle3_tree_source"] == "explicit"
    taus = [t for r in recs if r["method"] == "eagle3" for t in r["acceptance_lengths"]]
    assert max(taus) >= 3  # the trained head drafts paths the target accepts
    assert "EAGLE-3" in capsys.readouterr().out


def test_explicit_head_and_tree_flags(pair, tmp_path):
    root, target, drafter, data = pair
    import torch

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    head = save_eagle3_head(tmp_path / "head", model, draft_vocab=64, layer_ids=[0, 2, 4])
    run = DecodeRun(model=str(target), dataset=str(data), methods=("ar", "eagle3"), max_new_tokens=12, device="cpu",
                    cache_dir=str(tmp_path), eagle3_model=str(head), eagle3_tree="3/4/16", quiet=True)
    recs = run.execute()
    e3 = [r for r in recs if r["method"] == "eagle3"]
    ar = [r for r in recs if r["method"] == "ar"]
    assert e3 and [r["output_ids"] for r in e3] == [r["output_ids"] for r in ar]
    assert all(set(r["tree_sizes"]) == {16} for r in e3)
    assert all(r["eagle3_tree"] == [3, 4, 16] and r["eagle3_tree_source"] == "explicit" for r in recs)
    assert not (tmp_path / "eagle3_tree").exists()  # an explicit tree sweeps nothing


def test_mismatched_head_is_one_line_error(pair, tmp_path, capsys):
    root, target, drafter, data = pair
    wide = save_eagle3_head(tmp_path / "wide-head", tiny_target("qwen3", layers=8, hidden=128))
    rc = benchmark.main(["--model", str(target), "--dataset", str(data), "--methods", "ar,eagle3", "--device", "cpu",
                         "--eagle3-model", str(wide), "--cache-dir", str(tmp_path), "--max-new-tokens", "8"])
    assert rc == 2
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: EAGLE-3 head")  # one line
    err = errors[0]
    assert str(wide) in err and str(target) in err and "fc.weight" in err


@pytest.mark.parametrize("extra, needle", [
    ([], "--eagle3-model is required"),
    (["--eagle3-tree", "3/0/16"], "--eagle3-tree 3/0/16: top-k 0 is not a valid EAGLE-3 tree setting"),
    (["--eagle3-tree", "7x10x60"], "--eagle3-tree '7x10x60' is not a tree setting"),
])
def test_eagle3_usage_errors(pair, tmp_path, capsys, extra, needle):
    root, target, drafter, data = pair
    rc = benchmark.main(["--model", str(target), "--dataset", str(data), "--methods", "ar,eagle3", "--device", "cpu",
                         "--cache-dir", str(tmp_path), *extra])
    assert rc == 2
    assert needle in capsys.readouterr().err
