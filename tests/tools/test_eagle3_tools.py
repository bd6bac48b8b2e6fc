"""The EAGLE-3 head tools: choosing on decoded τ, shipping under the size limit, scoring both drafters alike."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from bastion.models import registry
from dflash.eagle3.checkpoint import load_eagle3
from tools.tiny_pair import pick_eagle3, teacher_accuracy


def test_training_facts_come_from_the_run_log(tmp_path):
    (tmp_path / "head").mkdir()
    rows = [{"step": 0, "event": "start", "args": {}},
            {"step": 1, "loss": 9.0, "elapsed_s": 4.0, "tokens_seen": 2048},
            {"step": 2, "loss": 8.0, "elapsed_s": 8.5, "tokens_seen": 4096},
            {"step": 2, "event": "final", "val": {"loss": 8.1, "acc": [0.5, 0.4]}}]
    (tmp_path / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert pick_eagle3.training_facts(tmp_path / "head") == {"steps": 2, "tokens_seen": 4096, "train_seconds": 8.5,
                                                             "val_acc": [0.5, 0.4]}
    assert pick_eagle3.training_facts(tmp_path / "no_run" / "head") == {}  # e.g. the shipped head: no log beside it


def test_tau_is_pooled_over_steps_and_outputs_are_checked_against_ar(tmp_path):
    def rec(i, method, out, acc):
        return {"prompt_index": i, "method": method, "output_ids": out, "num_output_tokens": len(out),
                "decode_seconds": 1.0, "acceptance_lengths": acc, "tree_sizes": [6] * len(acc)}
    records = [rec(0, "ar", [1, 2, 3, 4], [1] * 4), rec(1, "ar", [5, 6, 7], [1] * 3),
               rec(0, "eagle3", [1, 2, 3, 4], [3, 1]), rec(1, "eagle3", [5, 6, 8], [2, 1])]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    ar: dict = {}
    tau, equal, n = pick_eagle3.tau_and_equality(path, ar)
    assert tau == pytest.approx(7 / 4) and (equal, n) == (1, 2)  # τ over all steps: (3 + 1 + 2 + 1) / 4


def test_decodes_are_reused_only_for_the_same_command_and_head(tmp_path):
    heads = {n: tmp_path / n for n in ("a", "b")}
    for n, d in heads.items():
        d.mkdir()
        (d / "model.safetensors").write_bytes(n.encode())
    runs = tmp_path / "runs.txt"

    def command(name: str) -> tuple[list[str], object, str]:
        out = tmp_path / f"{name}.jsonl"
        code = f"open({str(runs)!r}, 'a').write('{name} '); open({str(out)!r}, 'w').write('{{}}')"
        return [sys.executable, "-c", code], out, str(heads[name])

    def ran(commands) -> list[str]:
        runs.write_text("")
        pick_eagle3.run_all(commands, jobs=2)
        return sorted(runs.read_text().split())

    both = [command("a"), command("b")]
    assert ran(both) == ["a", "b"]
    assert ran(both) == []  # a rerun after a kill skips what is done
    (heads["b"] / "model.safetensors").write_bytes(b"another head under the same name")
    assert ran(both) == ["b"]
    (tmp_path / "a.stamp.json").unlink()  # a file an earlier pick left, with no stamp of this command
    assert ran(both) == ["a"]
    other = command("a")
    other[0][-1] += " # another tree"
    assert ran([other, command("b")]) == ["a"]


def test_a_shipped_head_is_bf16_and_under_the_limit(tmp_path):
    src = registry.tiny_dir("eagle3")
    size = pick_eagle3.ship(str(src), tmp_path / "e3")
    assert size < pick_eagle3.SIZE_LIMIT
    a, b = load_eagle3(str(src)), load_eagle3(str(tmp_path / "e3"))
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())  # bf16 already: exact


@pytest.fixture(scope="module")
def target():
    return AutoModelForCausalLM.from_pretrained(registry.tiny_dir("target"), dtype=torch.float32).eval()


def test_documents_must_start_with_their_prompts():
    prompts = [np.array([5, 6]), np.array([7])]
    data = np.array([5, 6, 9, 9, 0, 7, 8, 0])
    docs = teacher_accuracy.documents(data, prompts, 0)
    assert [(d.tolist(), p) for d, p in docs] == [([5, 6, 9, 9], 2), ([7, 8], 1)]
    with pytest.raises(SystemExit, match="document 1 does not start with prompt 1"):
        teacher_accuracy.documents(data, [np.array([5, 6]), np.array([8])], 0)
    with pytest.raises(SystemExit, match="2 documents but 1 prompts"):
        teacher_accuracy.documents(data, prompts[:1], 0)


def test_both_drafters_are_scored_at_the_same_roots(target):
    import copy

    from transformers import AutoTokenizer

    from dflash import DFlashDraftModel

    tok = AutoTokenizer.from_pretrained(registry.tiny_dir("target"))
    text = "def read_lines(path: str) -> list[str]:\n    \"\"\"Return the lines of a text file.\"\"\"\n"
    prompt = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    p_len = prompt.shape[1]
    doc = target.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=30, min_new_tokens=30,
                          do_sample=False)[0].numpy()
    drafter = DFlashDraftModel.from_pretrained(registry.tiny_dir("drafter"), dtype=torch.float32)
    head = load_eagle3(str(registry.tiny_dir("eagle3")), target.config)
    head.attach_target_embeddings(target.get_input_embeddings())
    untrained = copy.deepcopy(head)
    torch.manual_seed(0)
    for p in untrained.parameters():
        if p.is_floating_point() and p.requires_grad:
            p.data.normal_(0.0, 0.02)
    res = teacher_accuracy.score(target, drafter, {"head": head, "untrained": untrained}, [(doc, p_len)], 7)
    roots = p_len + 30 - 16 - p_len + 1  # roots p_len .. p_len + 14: a whole 16-token block after each
    assert res["dflash"]["roots"] == res["head"]["roots"] == res["untrained"]["roots"] == roots
    assert all(len(r["acc"]) == 7 and all(0 <= a <= 1 for a in r["acc"]) for r in res.values())
    # the same roots score what each drafter learned: both trained ones guess the greedy
    # continuation's next token often, random weights almost never
    assert res["dflash"]["acc"][0] >= 0.3 and res["head"]["acc"][0] >= 0.3
    assert res["untrained"]["acc"][0] < 0.2
