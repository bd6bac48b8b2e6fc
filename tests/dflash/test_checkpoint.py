"""Drafter checkpoints in the public DFlash layout: saved, loaded, and refused when incomplete.

Names that resolve nowhere and pairs that do not fit are in test_drafter_lookup.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from dflash import DFlashConfig, DFlashDraftModel, default_target_layer_ids
from dflash.checkpoint import CheckpointError
from tests.support.builders import tiny_drafter, tiny_target

# ---------------------------------------------------------------------------------------
# helpers

PUBLIC_LAYER_IDS = [1, 9, 17, 25, 33]


def public_config(hidden: int = 32, layers: int = 5, with_layer_ids: bool = True, auto_map: bool = True) -> dict:
    """A config.json shaped like z-lab/Qwen3-8B-DFlash-b16's, with small sizes."""
    dflash = {"mask_token_id": 151669}
    if with_layer_ids:
        dflash["target_layer_ids"] = list(PUBLIC_LAYER_IDS)
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "block_size": 16,
        "bos_token_id": 151643,
        "dflash_config": dflash,
        "eos_token_id": 151645,
        "head_dim": 8,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": 2 * hidden,
        "max_position_embeddings": 40960,
        "max_window_layers": layers,
        "model_type": "qwen3",
        "num_attention_heads": 4,
        "num_hidden_layers": layers,
        "num_key_value_heads": 2,
        "num_target_layers": 36,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    }
    if auto_map:
        cfg["auto_map"] = {"AutoModel": "dflash.DFlashDraftModel"}
    return cfg


def public_tensor_names(num_layers: int) -> set[str]:
    """The tensor names of the public DFlash checkpoints, written out independently."""
    names = {"norm.weight", "fc.weight", "hidden_norm.weight"}
    for n in range(num_layers):
        p = f"layers.{n}."
        names |= {p + f"self_attn.{x}_proj.weight" for x in "qkvo"}
        names |= {p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"}
        names |= {p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")}
        names |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
    return names


def public_weights(hidden: int = 32, layers: int = 5, n_tapped: int = 5, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random bf16 tensors with the public names and shapes (heads 4 x 8, kv heads 2 x 8)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g).to(torch.bfloat16)  # noqa: E731
    w = {"norm.weight": r(hidden), "hidden_norm.weight": r(hidden), "fc.weight": r(hidden, n_tapped * hidden)}
    for n in range(layers):
        p = f"layers.{n}."
        w[p + "self_attn.q_proj.weight"] = r(32, hidden)
        w[p + "self_attn.k_proj.weight"] = r(16, hidden)
        w[p + "self_attn.v_proj.weight"] = r(16, hidden)
        w[p + "self_attn.o_proj.weight"] = r(hidden, 32)
        w[p + "self_attn.q_norm.weight"] = r(8)
        w[p + "self_attn.k_norm.weight"] = r(8)
        w[p + "mlp.gate_proj.weight"] = r(2 * hidden, hidden)
        w[p + "mlp.up_proj.weight"] = r(2 * hidden, hidden)
        w[p + "mlp.down_proj.weight"] = r(hidden, 2 * hidden)
        w[p + "input_layernorm.weight"] = r(hidden)
        w[p + "post_attention_layernorm.weight"] = r(hidden)
    return w


def write_checkpoint(folder: Path, config: dict, weights: dict[str, torch.Tensor]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def _inputs(model: DFlashDraftModel, q: int = 16, c: int = 7, seed: int = 5):
    g = torch.Generator().manual_seed(seed)
    h = model.config.hidden_size
    n = len(model.target_layer_ids)
    blk = torch.randn(1, q, h, generator=g)
    ctx = torch.randn(1, c, n * h, generator=g)
    return blk, torch.arange(c, c + q)[None], ctx, torch.arange(c)[None]


# ---------------------------------------------------------------------------------------
# round trip


def test_save_load_round_trip(tmp_path):
    target = tiny_target(layers=6, hidden=64)
    model = tiny_drafter(target, block_size=8, layers=3, layer_ids=[0, 2, 5])
    model.save_pretrained(str(tmp_path / "d"))
    loaded = DFlashDraftModel.from_pretrained(str(tmp_path / "d"))
    assert isinstance(loaded, DFlashDraftModel) and not loaded.training
    sd, ld = model.state_dict(), loaded.state_dict()
    assert sd.keys() == ld.keys()
    for k in sd:
        assert torch.equal(sd[k], ld[k]), k
    assert loaded.config.to_dict() == model.config.to_dict()
    assert (loaded.block_size, loaded.target_layer_ids, loaded.mask_token_id) == (8, [0, 2, 5], 259)
    with torch.no_grad():
        assert torch.equal(model(*_inputs(model)), loaded(*_inputs(loaded)))
        # with the context cache, in two steps
        c1, c2 = model.new_cache(), loaded.new_cache()
        blk, bpos, ctx, cpos = _inputs(model)
        for a, b in [(slice(0, 4), slice(4, 7))]:
            assert torch.equal(model(blk, bpos, ctx[:, a], cpos[:, a], cache=c1),
                               loaded(blk, bpos, ctx[:, a], cpos[:, a], cache=c2))
            assert torch.equal(model(blk, bpos, ctx[:, b], cpos[:, b], cache=c1),
                               loaded(blk, bpos, ctx[:, b], cpos[:, b], cache=c2))


def test_saved_tensor_names_are_the_public_ones(tmp_path):
    target = tiny_target(layers=6, hidden=64)
    model = tiny_drafter(target, layers=2)
    model.save_pretrained(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as fh:
        keys = set(fh.keys())
    assert keys == public_tensor_names(2)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"]
    assert cfg["model_type"] == "qwen3"
    assert cfg["num_target_layers"] == 6 and cfg["block_size"] == 8
    assert cfg["dflash_config"] == {"target_layer_ids": [1, 3], "mask_token_id": 259}


# ---------------------------------------------------------------------------------------
# public-shaped checkpoints


@pytest.mark.parametrize("auto_map", [True, False])
def test_public_shaped_checkpoint_loads(tmp_path, auto_map):
    weights = public_weights()
    write_checkpoint(tmp_path, public_config(auto_map=auto_map), weights)
    model = DFlashDraftModel.from_pretrained(str(tmp_path))
    assert model.block_size == 16
    assert model.target_layer_ids == PUBLIC_LAYER_IDS
    assert model.mask_token_id == 151669
    assert model.config.num_target_layers == 36
    assert model.config.num_hidden_layers == 5 and model.config.hidden_size == 32
    assert model.fc.in_features == 5 * 32
    sd = model.state_dict()
    assert set(sd) == public_tensor_names(5)
    for k, v in weights.items():  # bf16 on disk, float32 requested: exact widening
        assert sd[k].dtype == torch.float32
        assert torch.equal(sd[k], v.float()), k
    # rope_theta from config.json reaches the rotary embedding (not the 10000 default)
    hd = 8
    expected = 1.0 / (1e6 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    torch.testing.assert_close(model.rotary_emb.inv_freq.double(), expected, rtol=1e-6, atol=0)
    with torch.no_grad():
        out = model(*_inputs(model))
    assert out.shape == (1, 16, 32) and torch.isfinite(out).all()


def test_public_shaped_checkpoint_in_bf16(tmp_path):
    weights = public_weights(seed=3)
    write_checkpoint(tmp_path, public_config(), weights)
    model = DFlashDraftModel.from_pretrained(str(tmp_path), dtype=torch.bfloat16)
    sd = model.state_dict()
    assert all(v.dtype == torch.bfloat16 for v in sd.values())
    assert all(torch.equal(sd[k], v) for k, v in weights.items())


def test_public_config_without_layer_ids_gets_default_spread(tmp_path):
    write_checkpoint(tmp_path, public_config(with_layer_ids=False), public_weights())
    model = DFlashDraftModel.from_pretrained(str(tmp_path))
    assert model.target_layer_ids == [1, 9, 17, 25, 33]
    cfg = DFlashConfig.from_dict(public_config(with_layer_ids=False))
    assert cfg.target_layer_ids == [1, 9, 17, 25, 33]


def test_model_prefix_is_accepted(tmp_path):
    weights = public_weights()
    write_checkpoint(tmp_path, public_config(), {"model." + k: v for k, v in weights.items()})
    model = DFlashDraftModel.from_pretrained(str(tmp_path))
    assert torch.equal(model.fc.weight, weights["fc.weight"].float())


@pytest.mark.parametrize(
    "num_target, num_draft, expected",
    [
        (36, 5, [1, 9, 17, 25, 33]),  # Qwen3-8B drafter
        (36, 1, [18]),
        (28, 5, [1, 7, 13, 19, 25]),  # Qwen3-4B-shaped target (1 .. 25 in 4 equal steps)
        (32, 5, [1, 8, 15, 22, 29]),  # Llama-3.1-8B-shaped target: span 28 / 4 = 7
        (36, 2, [1, 33]),
        (6, 2, [1, 3]),
        (32, 3, [1, 15, 29]),
        (7, 1, [3]),
    ],
)
def test_default_target_layer_ids(num_target, num_draft, expected):
    got = default_target_layer_ids(num_target, num_draft)
    assert got == expected
    assert all(0 <= i < num_target for i in got)
    assert got == sorted(set(got))


def test_default_target_layer_ids_rejects_empty_target():
    with pytest.raises(ValueError):
        default_target_layer_ids(0, 3)


# ---------------------------------------------------------------------------------------
# strictness


def test_missing_tensor_is_named(tmp_path):
    weights = public_weights()
    del weights["layers.3.mlp.up_proj.weight"]
    write_checkpoint(tmp_path, public_config(), weights)
    with pytest.raises(CheckpointError, match=r"missing.*layers\.3\.mlp\.up_proj\.weight"):
        DFlashDraftModel.from_pretrained(str(tmp_path))


def test_extra_tensor_is_named(tmp_path):
    weights = public_weights()
    weights["embed_tokens.weight"] = torch.zeros(10, 32, dtype=torch.bfloat16)
    write_checkpoint(tmp_path, public_config(), weights)
    with pytest.raises(CheckpointError, match=r"unexpected.*embed_tokens\.weight"):
        DFlashDraftModel.from_pretrained(str(tmp_path))


def test_config_with_fewer_layers_than_weights_is_refused(tmp_path):
    # weights of 5 layers, config of 4: layers.4.* are unexpected
    write_checkpoint(tmp_path, public_config(layers=4), public_weights(layers=5))
    with pytest.raises(CheckpointError, match=r"layers\.4\."):
        DFlashDraftModel.from_pretrained(str(tmp_path))


def test_wrong_tensor_shape_raises_checkpoint_error(tmp_path):
    """A tensor whose shape disagrees with config.json is a malformed checkpoint, named as such.

    (bastion.models.registry.load_drafter turns anything but a CheckpointError into a
    ModelUnavailableError that advises HF_TOKEN / HF_HUB_OFFLINE, which is wrong here.)
    """
    weights = public_weights()
    weights["layers.0.mlp.up_proj.weight"] = torch.zeros(65, 32, dtype=torch.bfloat16)
    write_checkpoint(tmp_path, public_config(), weights)
    with pytest.raises(CheckpointError, match=r"layers\.0\.mlp\.up_proj\.weight"):
        DFlashDraftModel.from_pretrained(str(tmp_path))


def test_folder_without_config_or_weights(tmp_path):
    (tmp_path / "a").mkdir()
    save_file({"x": torch.zeros(1)}, str(tmp_path / "a" / "model.safetensors"))
    with pytest.raises(CheckpointError, match="config.json"):
        DFlashDraftModel.from_pretrained(str(tmp_path / "a"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(json.dumps(public_config()))
    with pytest.raises(CheckpointError, match="safetensors"):
        DFlashDraftModel.from_pretrained(str(tmp_path / "b"))
    with pytest.raises(CheckpointError, match="is a file"):
        DFlashDraftModel.from_pretrained(str(tmp_path / "b" / "config.json"))


def test_sharded_checkpoint_with_index(tmp_path):
    weights = public_weights()
    names = sorted(weights)
    half = len(names) // 2
    parts = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(public_config()))
    for fname, keys in parts.items():
        save_file({k: weights[k] for k in keys}, str(tmp_path / fname))
    index = {"metadata": {}, "weight_map": {k: f for f, ks in parts.items() for k in ks}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    model = DFlashDraftModel.from_pretrained(str(tmp_path))
    assert torch.equal(model.layers[4].mlp.down_proj.weight, weights["layers.4.mlp.down_proj.weight"].float())
