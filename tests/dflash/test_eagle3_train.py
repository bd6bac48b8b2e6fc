"""The EAGLE-3 trainer's run control: decaying schedule, clock, resume, fine-tuning, scoring, refusals."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from dflash.eagle3 import train
from dflash.eagle3.checkpoint import load_eagle3
from dflash.eagle3.config import head_config_for
from dflash.eagle3.model import Eagle3Head
from dflash.eagle3.ttt import target_view, ttt_scores, weighted_loss

V = 120


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A small confident Llama target and a repeating corpus with document ends (EOS = 0)."""
    root = tmp_path_factory.mktemp("e3train")
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=8, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, vocab_size=V, max_position_embeddings=256, eos_token_id=0)
    target = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        target.lm_head.weight.mul_(40.0)
    target.save_pretrained(root / "target")
    rng = np.random.default_rng(0)
    doc = np.concatenate([rng.integers(1, V, size=39), [0]])
    np.save(root / "ids.npy", np.tile(doc, 30))
    return root


def _args(pair, out, *extra: str) -> list[str]:
    return ["--target", str(pair / "target"), "--data", str(pair / "ids.npy"), "--out", str(out),
            "--batch-size", "4", "--seq-len", "24", "--ttt-steps", "3", "--lr", "3e-3", "--device", "cpu",
            "--log-every", "0", "--doc-windows", *extra]


def test_a_killed_run_resumes_exactly_where_it_stopped(pair, tmp_path):
    straight = train.main(_args(pair, tmp_path / "a", "--steps", "6"))
    cut = train.main(_args(pair, tmp_path / "b", "--steps", "6", "--stop-after", "3"))
    assert cut["stopped_at"] == 3 and len(cut["history"]) == 3
    assert not (tmp_path / "b" / "head").exists()
    resumed = train.main(_args(pair, tmp_path / "b", "--steps", "6"))
    assert [r["step"] for r in resumed["history"]] == [4, 5, 6]
    assert [r["loss"] for r in cut["history"] + resumed["history"]] == [r["loss"] for r in straight["history"]]
    a, b = (load_eagle3(str(tmp_path / x / "head")).state_dict() for x in "ab")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_rate_warms_up_then_decays_to_its_floor():
    ns = argparse.Namespace(lr=1e-3, steps=100, warmup_steps=10, min_lr_ratio=0.1, time_schedule=False,
                            max_seconds=0)
    lr = train._schedule(ns)
    assert lr(1, 0.0) == pytest.approx(1e-4)  # first warm-up step
    assert lr(11, 0.0) == pytest.approx(1e-3)  # peak
    assert lr(50, 0.0) < lr(30, 0.0) < 1e-3
    assert lr(101, 0.0) == pytest.approx(1e-4)  # the floor, not a constant rate
    clock = argparse.Namespace(**{**vars(ns), "time_schedule": True, "max_seconds": 60.0})
    tl = train._schedule(clock)
    assert tl(11, 0.0) == pytest.approx(1e-3)
    assert tl(11, 60.0) == pytest.approx(1e-4)  # cut by the clock at step 11: already at the floor
    assert tl(11, 30.0) == pytest.approx(lr(51, 0.0))  # half the time counts as half the steps


def test_fine_tuning_starts_from_the_given_head(pair, tmp_path):
    first = train.main(_args(pair, tmp_path / "a", "--steps", "12"))
    again = train.main(_args(pair, tmp_path / "b", "--steps", "2", "--init-from", first["head_dir"]))
    fresh = train.main(_args(pair, tmp_path / "c", "--steps", "2"))
    assert again["history"][0]["loss"] < 0.8 * fresh["history"][0]["loss"]
    assert load_eagle3(again["head_dir"]).config.draft_vocab_size == V


def test_scores_count_only_the_marked_roots(pair):
    target = AutoModelForCausalLM.from_pretrained(pair / "target").eval()
    torch.manual_seed(1)
    head = Eagle3Head(head_config_for(target.config, V, None, None))
    head.t2d.fill_(True)
    head.attach_target_embeddings(target.get_input_embeddings())
    ids = torch.from_numpy(np.load(pair / "ids.npy")[:40].astype(np.int64)).view(2, 20)
    feats, logits = train.target_pass(target, ids, head.config.layer_ids(8))
    every = ttt_scores(head, feats, ids, logits, 3)
    assert [int(s.counted) for s in every] == [2 * 19, 2 * 18, 2 * 17]
    roots = torch.zeros(2, 20, dtype=torch.bool)
    roots[:, 12:] = True  # roots 12..19: positions t = 11..18 (fewer at depth k: t + 1 + k <= 19)
    some = ttt_scores(head, feats, ids, logits, 3, roots)
    assert [int(s.counted) for s in some] == [2 * 8, 2 * 7, 2 * 6]
    assert all(int(s.hits) <= int(e.hits) for s, e in zip(some, every))


@pytest.mark.parametrize("extra, words", [
    (["--seq-len", "3"], "--seq-len 3"),
    (["--steps", "0"], "--steps must be >= 1, got 0"),
    (["--init-from", "somewhere", "--draft-vocab-size", "50"], "--draft-vocab-size cannot change"),
])
def test_bad_settings_are_refused_in_one_line(pair, tmp_path, capsys, extra, words):
    assert train.cli(_args(pair, tmp_path / "x", *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err


def test_labels_outside_the_draft_vocabulary_can_count_as_misses(pair):
    target = AutoModelForCausalLM.from_pretrained(pair / "target").eval()
    torch.manual_seed(2)
    head = Eagle3Head(head_config_for(target.config, V // 2, None, None))
    head.t2d[V // 2 :] = True  # the upper half of the target's tokens; the lower half cannot be drafted
    head.d2t.fill_(V // 2)
    head.attach_target_embeddings(target.get_input_embeddings())
    ids = torch.from_numpy(np.load(pair / "ids.npy")[:40].astype(np.int64)).view(2, 20)
    feats, logits = train.target_pass(target, ids, head.config.layer_ids(8))
    inside = ttt_scores(head, feats, ids, logits, 3)
    every = ttt_scores(head, feats, ids, logits, 3, outside_vocab_counts=True)
    assert [int(s.counted) for s in every] == [2 * 19, 2 * 18, 2 * 17]
    assert all(int(i.counted) < int(e.counted) for i, e in zip(inside, every))  # some labels fall outside
    assert [int(s.hits) for s in inside] == [int(s.hits) for s in every]  # never a hit there
    assert [s.loss.item() for s in inside] == [s.loss.item() for s in every]


def _scored_batch(pair, seed: int):
    target = AutoModelForCausalLM.from_pretrained(pair / "target").eval()
    torch.manual_seed(seed)
    head = Eagle3Head(head_config_for(target.config, V, None, None))
    head.t2d.fill_(True)
    head.attach_target_embeddings(target.get_input_embeddings())
    ids = torch.from_numpy(np.load(pair / "ids.npy")[:40].astype(np.int64)).view(2, 20)
    feats, logits = train.target_pass(target, ids, head.config.layer_ids(8))
    return head, feats, ids, logits


def test_the_training_loss_weights_each_steps_score(pair):
    head, feats, ids, logits = _scored_batch(pair, 3)
    weights = [1.0, 0.5, 0.25]
    loss, losses, accs = weighted_loss(head, feats, ids, target_view(head, logits), torch.tensor(weights),
                                       torch.float32)
    scores = ttt_scores(head, feats, ids, logits, 3)
    assert losses.tolist() == pytest.approx([s.loss.item() for s in scores], rel=1e-6)
    assert accs.tolist() == pytest.approx([int(s.hits) / int(s.counted) for s in scores], rel=1e-6)
    assert loss.item() == pytest.approx(sum(w * s.loss.item() for w, s in zip(weights, scores)), rel=1e-6)
    assert loss.requires_grad and not losses.requires_grad


def test_the_compiled_loss_equals_the_eager_one(pair):
    head, feats, ids, logits = _scored_batch(pair, 4)
    view, weights = target_view(head, logits), torch.tensor([1.0, 0.8])
    eager = weighted_loss(head, feats, ids, view, weights, torch.float32)
    grads = torch.autograd.grad(eager[0], list(head.parameters()), allow_unused=True)
    compiled = torch.compile(weighted_loss)(head, feats, ids, view, weights, torch.float32)
    again = torch.autograd.grad(compiled[0], list(head.parameters()), allow_unused=True)
    assert compiled[1].tolist() == pytest.approx(eager[1].tolist(), rel=1e-5)
    assert compiled[2].tolist() == eager[2].tolist()
    for g, h in zip(grads, again):
        assert (g is None) == (h is None)
        if g is not None:
            torch.testing.assert_close(h, g, rtol=1e-4, atol=1e-6)
