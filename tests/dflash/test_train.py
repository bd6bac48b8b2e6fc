"""Tests for drafter training (dflash.train*) and the tiny target trainer.

The exact tests (block mask, label gather, anchors) pin the two places where an
off-by-one would let a drafter train "fine" on the wrong task.  The end-to-end tests use
a tiny Qwen3 target that is first fitted, in-test, to a corpus with a deterministic
successor map (``x -> perm[x]``, restarting at random 5% of the time), so the target's
greedy predictions are a simple function a drafter can learn in a few dozen steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from dflash import train as dtrain
from dflash import train_data as td
from dflash import train_setup as ts
from dflash.model import DFlashDraftModel

REPO = Path(__file__).resolve().parents[2]
VOCAB = 128
MASK_ID = 1


# ----------------------------------------------------------------------------- fixtures


def _successor_corpus(n: int, seed: int = 0) -> np.ndarray:
    perm = np.random.default_rng(1234).permutation(np.arange(2, VOCAB))  # same map for every split
    rng = np.random.default_rng(seed)
    nxt = np.zeros(VOCAB, dtype=np.int64)
    nxt[perm] = np.roll(perm, -1)
    out, x = np.empty(n, dtype=np.int32), 2
    for i in range(n):
        x = int(rng.integers(2, VOCAB)) if rng.random() < 0.05 else int(nxt[x])
        out[i] = x
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> dict[str, Path]:
    """A tiny Qwen3 target (4 layers, hidden 64) fitted to the successor corpus."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    root = tmp_path_factory.mktemp("pair")
    ids = _successor_corpus(20000)
    np.save(root / "ids.npy", ids)
    np.save(root / "val.npy", _successor_corpus(4000, seed=1))
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                      tie_word_embeddings=True, eos_token_id=0, pad_token_id=0)
    model = Qwen3ForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    flat = torch.from_numpy(ids.astype(np.int64))
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        starts = torch.randint(0, len(flat) - 65, (8,), generator=gen)
        batch = torch.stack([flat[s : s + 64] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 1.0, "the in-test target failed to fit the successor corpus"
    model.save_pretrained(str(root / "target"))
    return {"root": root, "target": root / "target", "ids": root / "ids.npy", "val": root / "val.npy"}


def _args(pair, out: Path, *extra: str) -> list[str]:
    return ["--target", str(pair["target"]), "--data", str(pair["ids"]), "--out", str(out),
            "--mask-token-id", str(MASK_ID), "--block-size", "4", "--no-progress", *extra]


def _log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------- exact pieces


def test_block_mask_two_anchors_exact():
    anchors = torch.tensor([[2, 5]])
    b, ctx_len = 3, 5  # context = positions 0..4
    mask = td.build_block_mask(anchors, ctx_len, b)
    assert mask.shape == (1, 1, 6, 5 + 6) and mask.dtype == torch.bool
    ctx_a0 = [1, 1, 0, 0, 0]  # p < 2
    ctx_a1 = [1, 1, 1, 1, 1]  # p < 5
    blk0 = [1, 1, 1, 0, 0, 0]
    blk1 = [0, 0, 0, 1, 1, 1]
    want = torch.tensor([ctx_a0 + blk0] * 3 + [ctx_a1 + blk1] * 3, dtype=torch.bool)
    assert torch.equal(mask[0, 0], want)


def test_block_inputs_and_positions():
    ids = torch.arange(10, 20)[None]  # token at position p is 10 + p
    anchors = torch.tensor([[2, 5]])
    assert td.block_token_ids(ids, anchors, 3, MASK_ID).tolist() == [[12, MASK_ID, MASK_ID, 15, MASK_ID, MASK_ID]]
    assert td.block_positions(anchors, 3).tolist() == [[2, 3, 4, 5, 6, 7]]


def test_argmax_labels_come_from_position_a_plus_k_minus_1():
    T, V, b = 12, 50, 4
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(2, T, V, generator=gen)
    anchors = torch.tensor([[1, 6], [3, 8]])
    labels = td.gather_argmax_labels(logits, anchors, b)
    assert labels.shape == (2, 2, b - 1)
    for i in range(2):
        for j in range(2):
            for k in range(1, b):
                a = int(anchors[i, j])
                assert labels[i, j, k - 1] == logits[i, a + k - 1].argmax()
    soft = td.gather_soft_labels(logits, anchors, b)
    assert torch.allclose(soft[1, 0, 2], logits[1, 3 + 3 - 1].softmax(-1))


def test_anchors_distinct_in_range_and_weights():
    gen = torch.Generator().manual_seed(0)
    a = td.sample_anchors(64, 40, 8, 16, gen)
    assert a.shape == (64, 16)
    assert int(a.min()) >= 1 and int(a.max()) <= 40 - 8
    assert bool((a[:, 1:] > a[:, :-1]).all())  # sorted and distinct
    with pytest.raises(td.DataError, match="room for only"):
        td.sample_anchors(1, 10, 8, 4, gen)
    w = td.position_weights(4, 7.0)
    assert torch.allclose(w, torch.exp(-torch.arange(3.0) / 7.0))
    hits = torch.tensor([[1, 1, 0], [0, 1, 1]], dtype=torch.bool)
    assert float(td.expected_acceptance(hits)) == pytest.approx(1 + (2 + 0) / 2)


# ----------------------------------------------------------------------------- end to end


def test_training_learns_and_saves_loadable_drafter(pair, tmp_path):
    out = tmp_path / "run"
    res = dtrain.main(_args(pair, out, "--steps", "80", "--batch-size", "4", "--seq-len", "64",
                            "--anchors-per-seq", "8", "--lr", "3e-3", "--log-every", "10",
                            "--save-every", "1000", "--val-data", str(pair["val"]), "--val-batches", "2"))
    recs = [r for r in _log(out) if "loss" in r and "event" not in r]
    first, last = recs[0], recs[-1]
    assert last["loss"] < 0.7 * first["loss"], (first["loss"], last["loss"])
    assert last["acc"][0] > first["acc"][0] + 0.2, (first["acc"], last["acc"])
    assert len(last["acc"]) == 3 and {"lr", "tokens_per_s", "tau"} <= last.keys()
    assert res["val"]["acc"][0] > 0.2
    drafter = DFlashDraftModel.from_pretrained(str(out / "drafter"))
    assert drafter.block_size == 4 and drafter.mask_token_id == MASK_ID
    assert drafter.config.num_target_layers == 4
    assert drafter.target_layer_ids == ts.default_target_layer_ids(4, 1)


def test_resume_matches_uninterrupted_run(pair, tmp_path):
    common = ["--steps", "12", "--batch-size", "2", "--seq-len", "32", "--anchors-per-seq", "4",
              "--save-every", "6", "--log-every", "3", "--draft-layers", "2", "--target-layer-ids", "0,2"]
    dtrain.main(_args(pair, tmp_path / "a", *common))
    stopped = dtrain.main(_args(pair, tmp_path / "b", *common, "--stop-after", "9"))
    assert stopped["stopped_at"] == 9
    assert not (tmp_path / "b" / "drafter").exists()
    res = dtrain.main(_args(pair, tmp_path / "b", *common))
    assert res["resumed_from"] == 6
    log = _log(tmp_path / "b")
    assert {"step": 6, "event": "resume"} in log
    assert [r["step"] for r in log if "loss" in r and "event" not in r] == [3, 6, 9, 12]
    a = DFlashDraftModel.from_pretrained(str(tmp_path / "a" / "drafter")).state_dict()
    b = DFlashDraftModel.from_pretrained(str(tmp_path / "b" / "drafter")).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ts.TrainSetupError, match="--lr"):  # changed args are refused, not mixed in
        dtrain.main(_args(pair, tmp_path / "b", *common, "--lr", "1e-2"))


def test_bad_inputs_give_clear_errors(pair, tmp_path, capsys):
    base = ["--steps", "1", "--batch-size", "1", "--seq-len", "32", "--anchors-per-seq", "2"]
    with pytest.raises(ts.TrainSetupError, match=r"\[7\].*4 layers"):
        dtrain.main(_args(pair, tmp_path / "x", *base, "--target-layer-ids", "1,7"))
    args = [a if a != str(MASK_ID) else "500" for a in _args(pair, tmp_path / "y", *base)]
    assert dtrain.cli(args) == 2
    err = capsys.readouterr().err
    assert "mask token id 500" in err and "0..127" in err


def test_drafter_config_file_and_soft_labels(pair, tmp_path):
    from transformers import AutoConfig

    cfg = ts.derive_config(AutoConfig.from_pretrained(pair["target"]), 1, 4, [3], MASK_ID)
    assert (cfg.hidden_size, cfg.layers.head_dim, cfg.layers.num_key_value_heads) == (64, 16, 2)
    cfg.to_json_file(tmp_path / "cfg.json")
    out = tmp_path / "soft"
    dtrain.main(["--target", str(pair["target"]), "--data", str(pair["ids"]), "--out", str(out),
                 "--drafter-config", str(tmp_path / "cfg.json"), "--labels", "soft", "--steps", "3",
                 "--batch-size", "2", "--seq-len", "32", "--anchors-per-seq", "2", "--no-progress"])
    assert DFlashDraftModel.from_pretrained(str(out / "drafter")).target_layer_ids == [3]


# ----------------------------------------------------------------------------- train_target.py


def test_train_target_smoke(tmp_path):
    from tools.tiny_pair import tokenizer as tiny_tokenizer
    from tools.tiny_pair import train_target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    docs = [f"def f{i}(x):\n    return x * {i} + {i % 7}\n" * 3 for i in range(40)]
    sep = tiny_tokenizer.EOS_TOKEN
    (corpus / "train.txt").write_text(sep.join(docs[:30]), encoding="utf-8")
    (corpus / "valid.txt").write_text(sep.join(docs[30:35]), encoding="utf-8")
    (corpus / "heldout.txt").write_text(sep.join(docs[35:]), encoding="utf-8")
    tok_dir = tmp_path / "tok"
    tiny_tokenizer.to_hf(tiny_tokenizer.train_bpe(docs, vocab_size=300)).save_pretrained(str(tok_dir))

    out = tmp_path / "tt"
    metrics = train_target.main(["--corpus", str(corpus), "--tokenizer", str(tok_dir), "--out", str(out),
                                 "--hidden-size", "32", "--layers", "2", "--heads", "2", "--head-dim", "16",
                                 "--kv-heads", "1", "--intermediate-size", "64", "--steps", "4",
                                 "--batch-size", "2", "--seq-len", "32", "--no-progress"])
    saved = json.loads((out / "metrics.json").read_text())
    for split in ("train", "valid", "heldout"):
        assert saved[f"{split}_ppl"] > 1.0 and saved[f"{split}_ppl"] == pytest.approx(metrics[f"{split}_ppl"])
    assert (out / "tokens" / "train.npy").exists()
    model = AutoModelForCausalLM.from_pretrained(str(out / "target"))
    tok = AutoTokenizer.from_pretrained(str(out / "target"))
    assert model.config.num_hidden_layers == 2 and model.config.tie_word_embeddings
    assert next(model.parameters()).dtype == torch.bfloat16
    assert tok.eos_token_id == 0 == model.config.eos_token_id and tok.mask_token_id == 1

    # The drafter trainer runs end to end on that target with raw text data and the
    # tokenizer's mask token as the default.
    dout = tmp_path / "d"
    dtrain.main(["--target", str(out / "target"), "--data", str(corpus / "train.txt"), "--out", str(dout),
                 "--block-size", "4", "--steps", "2", "--batch-size", "2", "--seq-len", "32",
                 "--anchors-per-seq", "2", "--target-dtype", "fp32", "--no-progress"])
    assert DFlashDraftModel.from_pretrained(str(dout / "drafter")).mask_token_id == 1
