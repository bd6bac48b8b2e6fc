"""EAGLE-3 heads in dflash: public layouts, reference forward, fit checks, tree, trainer.

Self-contained: tiny random targets are built here from Transformers configs.  No
``__init__.py`` next to this file on purpose: ``tests/`` is put on ``sys.path`` by the
conftest, and a ``tests/dflash`` *package* would shadow the real ``dflash``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

from dflash.eagle3.checkpoint import Eagle3CheckpointError, check_fits_target, load_eagle3, save_eagle3
from dflash.eagle3.config import default_eagle3_layer_ids
from dflash.eagle3.tree import draft_tree, extend_context

H, V, VD, NH, NKV, HD, INTER, LAYERS = 64, 300, 200, 4, 2, 16, 128, 8
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}


def target_config(kind: str):
    common = dict(hidden_size=H, intermediate_size=INTER, num_hidden_layers=LAYERS, num_attention_heads=NH,
                  num_key_value_heads=NKV, head_dim=HD, vocab_size=V, max_position_embeddings=512)
    if kind == "qwen3":
        return Qwen3Config(rope_theta=1_000_000.0, **common)
    return LlamaConfig(rope_theta=500_000.0, rope_scaling=dict(LLAMA3_ROPE), **common)


def head_json(kind: str, layout: str) -> dict:
    """A public-style config.json; RoPE as the target's (Llama-3.1 style scaling included)."""
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": INTER, "num_attention_heads": NH, "num_key_value_heads": NKV,
           "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "vocab_size": V, "draft_vocab_size": VD,
           "hidden_act": "silu", "max_position_embeddings": 512, "tie_word_embeddings": False}
    if kind == "qwen3":
        cfg.update(rope_theta=1_000_000.0, rope_scaling=None, head_dim=HD)
    else:
        cfg.update(rope_theta=500_000.0, rope_scaling=dict(LLAMA3_ROPE))
    if layout == "angelslim":
        cfg.update(target_hidden_size=H, head_dim=HD)
    return cfg


def random_weights(seed: int, embed: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=0.08):
        return torch.randn(*shape, generator=g) * scale

    used = torch.sort(torch.randperm(V, generator=g)[:VD]).values
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[used] = True
    w = {
        "fc.weight": r(H, 3 * H), "norm.weight": 1 + r(H), "lm_head.weight": r(VD, H, scale=0.3),
        "d2t": used - torch.arange(VD), "t2d": t2d,
        "midlayer.hidden_norm.weight": 1 + r(H), "midlayer.input_layernorm.weight": 1 + r(H),
        "midlayer.post_attention_layernorm.weight": 1 + r(H),
        "midlayer.self_attn.q_proj.weight": r(NH * HD, 2 * H), "midlayer.self_attn.k_proj.weight": r(NKV * HD, 2 * H),
        "midlayer.self_attn.v_proj.weight": r(NKV * HD, 2 * H), "midlayer.self_attn.o_proj.weight": r(H, NH * HD),
        "midlayer.mlp.gate_proj.weight": r(INTER, H), "midlayer.mlp.up_proj.weight": r(INTER, H),
        "midlayer.mlp.down_proj.weight": r(H, INTER),
    }
    if embed:
        w["embed_tokens.weight"] = r(V, H, scale=1.0)
    return w


def write_head(folder, kind: str, layout: str, seed: int = 0, edit=None):
    """Write a head in a public layout: 'eagle' = midlayer.*, no embeddings;
    'angelslim' = layers.0.* names, shipped embed_tokens, target_hidden_size."""
    w = random_weights(seed, embed=layout == "angelslim")
    cfg = head_json(kind, layout)
    if edit:
        edit(cfg, w)
    if layout == "angelslim":
        w = {(k.replace("midlayer.", "layers.0.", 1)): v for k, v in w.items()}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in w.items()}, str(folder / "model.safetensors"))
    return cfg, random_weights(seed, embed=layout == "angelslim")


# ------------------------------------------------------------------ independent reference


def rms(x, w, eps=1e-6):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def inv_freq(cfg: dict) -> torch.Tensor:
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, HD, 2).double() / HD))
    sc = cfg.get("rope_scaling")
    if sc and sc["rope_type"] == "llama3":
        old, lo, hi, f = sc["original_max_position_embeddings"], sc["low_freq_factor"], sc["high_freq_factor"], sc["factor"]
        wl = 2 * math.pi / inv
        out = torch.where(wl > old / lo, inv / f, inv)
        smooth = (old / wl - lo) / (hi - lo)
        mid = (wl <= old / lo) & (wl >= old / hi)
        inv = torch.where(mid, (1 - smooth) * inv / f + smooth * inv, out)
    return inv.float()


def rotate(x, pos, inv):  # x [S, heads, D], pos [S]
    ang = pos[:, None].float() * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos()[:, None], torch.cat([ang, ang], -1).sin()[:, None]
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def reference_logits(w, cfg, emb, feats, next_tokens):
    """Plain-torch reference forward of m causal context pairs -> draft logits [m, VD]."""
    m = feats.shape[0]
    f = feats @ w["fc.weight"].T
    x = torch.cat([rms(emb[next_tokens], w["midlayer.input_layernorm.weight"]),
                   rms(f, w["midlayer.hidden_norm.weight"])], -1)
    a = "midlayer.self_attn."
    q = (x @ w[a + "q_proj.weight"].T).view(m, NH, HD)
    k = (x @ w[a + "k_proj.weight"].T).view(m, NKV, HD)
    v = (x @ w[a + "v_proj.weight"].T).view(m, NKV, HD)
    pos, inv = torch.arange(m), inv_freq(cfg)
    q, k = rotate(q, pos, inv), rotate(k, pos, inv)
    k, v = k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)
    s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(HD)
    s = s.masked_fill(torch.ones(m, m, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.einsum("hqk,khd->qhd", s.softmax(-1), v).reshape(m, NH * HD) @ w[a + "o_proj.weight"].T
    h = f + o
    y = rms(h, w["midlayer.post_attention_layernorm.weight"])
    mlp = (F.silu(y @ w["midlayer.mlp.gate_proj.weight"].T) * (y @ w["midlayer.mlp.up_proj.weight"].T))
    out = h + mlp @ w["midlayer.mlp.down_proj.weight"].T
    return rms(out, w["norm.weight"]) @ w["lm_head.weight"].T


# ------------------------------------------------------------------ tests


@pytest.fixture(scope="module")
def target_embed():
    return torch.nn.Embedding(V, H).requires_grad_(False)


@pytest.mark.parametrize("kind", ["qwen3", "llama31"])
@pytest.mark.parametrize("layout", ["eagle", "angelslim"])
def test_public_layouts_load_strictly_and_match_reference(tmp_path, kind, layout, target_embed):
    cfg, w = write_head(tmp_path / "head", kind, layout, seed=1)
    head = load_eagle3(str(tmp_path / "head"), target_config(kind))
    assert (head.embed_tokens is not None) == (layout == "angelslim")
    head.attach_target_embeddings(target_embed)
    emb = w["embed_tokens.weight"] if layout == "angelslim" else target_embed.weight
    g = torch.Generator().manual_seed(2)
    m = 40  # past original_max_position_embeddings' low-frequency band for llama3 scaling
    feats, toks = torch.randn(m, 3 * H, generator=g), torch.randint(0, V, (m,), generator=g)
    want = reference_logits(w, cfg, emb, feats, toks)
    cache = head.new_cache()
    out = extend_context(head, cache, feats[:25], toks[:25])  # two calls through the cache ...
    out2 = extend_context(head, cache, feats[25:], toks[25:])
    got = head.logits(torch.cat([out, out2], 1)[0])
    torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)
    assert cache.length == m and cache.total == m
    # d2t maps every draft id into the draft vocabulary marked by t2d
    assert bool(head.t2d[head.to_target_ids(torch.arange(VD))].all())


def test_save_roundtrip_both_prefixes(tmp_path):
    write_head(tmp_path / "a", "llama31", "angelslim", seed=3)
    head = load_eagle3(str(tmp_path / "a"), target_config("llama31"))
    for layout, prefix in (("eagle", "layers.0"), ("angelslim", "midlayer")):
        save_eagle3(head, tmp_path / layout, layout=layout, layer_prefix=prefix)
        names = load_file(str(tmp_path / layout / "model.safetensors")).keys()
        assert any(n.startswith(prefix + ".") for n in names)
        assert ("embed_tokens.weight" in names) == (layout == "angelslim")
        back = load_eagle3(str(tmp_path / layout), target_config("llama31"))
        torch.testing.assert_close(back.fc.weight, head.fc.weight)
        assert back.config.layers.rope_parameters["rope_type"] == "llama3"


def _drop(name):
    return lambda cfg, w: w.pop(name)


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda c, w: w.update(extra=torch.zeros(3)), ["unexpected", "extra"]),
        (_drop("midlayer.mlp.up_proj.weight"), ["missing", "midlayer.mlp.up_proj.weight"]),
        (lambda c, w: w.update(d2t=w["d2t"][:150]), ["d2t", "(150,)", "(200,)"]),
        (lambda c, w: (c.update(target_hidden_size=80), w.update({"fc.weight": torch.zeros(H, 240)})),
         ["target_hidden_size 80", "target hidden_size 64", "fc.weight", "240", "192"]),
        (lambda c, w: c.update(hidden_size=48), ["fc.weight", "(64, 192)", "(48, 144)"]),
    ],
)
def test_mismatched_heads_are_refused(tmp_path, edit, words):
    write_head(tmp_path / "h", "qwen3", "eagle", edit=edit)
    with pytest.raises(Eagle3CheckpointError) as err:
        load_eagle3(str(tmp_path / "h"), target_config("qwen3"))
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_fit_checks_name_sizes(tmp_path):
    write_head(tmp_path / "h", "qwen3", "eagle")
    head = load_eagle3(str(tmp_path / "h"))
    wide = Qwen3Config(**{**target_config("qwen3").to_dict(), "hidden_size": 96})
    with pytest.raises(Eagle3CheckpointError, match=r"fc.weight in-features 192 != 3 x target hidden_size 96"):
        check_fits_target(head, wide)
    bigger = Qwen3Config(**{**target_config("qwen3").to_dict(), "vocab_size": 320})
    with pytest.raises(Eagle3CheckpointError, match=r"t2d length 300 != target vocab_size 320"):
        check_fits_target(head, bigger)


def test_layer_ids_follow_reference():
    # EAGLE captures the input of layers 2, L//2, L-3 == hidden_states[2, L//2, L-3].
    assert default_eagle3_layer_ids(32) == [1, 15, 28]
    assert [i + 1 for i in default_eagle3_layer_ids(36)] == [2, 18, 33]
    with pytest.raises(ValueError):
        default_eagle3_layer_ids(6)


def test_tree_is_valid_and_follows_the_greedy_chain(tmp_path, target_embed):
    write_head(tmp_path / "h", "llama31", "eagle", seed=5)
    head = load_eagle3(str(tmp_path / "h"), target_config("llama31"))
    head.attach_target_embeddings(target_embed)
    g = torch.Generator().manual_seed(6)
    m = 12
    feats, toks = torch.randn(m, 3 * H, generator=g), torch.randint(0, V, (m,), generator=g)
    cache = head.new_cache()
    tree = draft_tree(head, cache, feats, toks, total_tokens=20, depth=4, top_k=3)
    n = len(tree)
    assert n == 20 and int(tree.tokens[0]) == int(toks[-1]) and int(tree.parents[0]) == -1
    assert all(0 <= int(tree.parents[i]) < i for i in range(1, n))
    assert all(int(tree.depths[i]) == int(tree.depths[tree.parents[i]]) + 1 for i in range(1, n))
    assert bool(head.t2d[tree.tokens[1:]].all())
    assert cache.length == m and cache.total == m  # the tree's K/V were rolled back
    # walk the best-scored child from the root; compare with a greedy rollout of the head
    path, node = [], 0
    while True:
        kids = [i for i in range(1, n) if int(tree.parents[i]) == node]
        if not kids:
            break
        node = max(kids, key=lambda i: float(tree.scores[i]))
        path.append(int(tree.tokens[node]))
    assert len(path) >= 2
    ref = head.new_cache()
    out = extend_context(head, ref, feats, toks)[:, -1:]
    greedy = []
    for d in range(len(path)):
        tok = head.to_target_ids(head.logits(out[0, -1]).argmax())
        greedy.append(int(tok))
        pos = torch.tensor([[ref.length]])
        out = head(out, tok.view(1, 1), pos, None, ref)
        ref.commit()
    assert path == greedy
    # the next step continues from committed context only
    tree2 = draft_tree(head, cache, feats[:3], toks[:3], total_tokens=10, depth=2, top_k=2)
    assert len(tree2) == 10 and cache.length == m + 3


def test_training_time_test_matches_tree_inference(tmp_path, target_embed):
    """Unrolled step k at position t == a depth-k chain after committed context 0..t."""
    from dflash.eagle3.train import ttt_forward

    write_head(tmp_path / "h", "llama31", "eagle", seed=7)
    head = load_eagle3(str(tmp_path / "h"), target_config("llama31"))
    head.attach_target_embeddings(target_embed)
    g = torch.Generator().manual_seed(8)
    t_len, steps, t = 16, 3, 6
    feats, ids = torch.randn(1, t_len, 3 * H, generator=g), torch.randint(0, V, (1, t_len), generator=g)
    with torch.no_grad():
        outs = ttt_forward(head, feats, ids, steps)
        cache = head.new_cache()
        h = extend_context(head, cache, feats[0, : t + 1], ids[0, 1 : t + 2])[:, -1:]
        torch.testing.assert_close(h[0, 0], outs[0][0, t], atol=1e-5, rtol=1e-5)
        for k in range(1, steps):
            h = head(h, ids[:, t + 1 + k : t + 2 + k], torch.tensor([[t + k]]), None, cache)
            cache.commit()
            torch.testing.assert_close(h[0, 0], outs[k][0, t], atol=1e-5, rtol=1e-5)


def test_trainer_reduces_loss_and_saves_a_loadable_head(tmp_path):
    from dflash.eagle3 import train

    torch.manual_seed(0)
    tcfg = target_config("llama31")
    target = AutoModelForCausalLM.from_config(tcfg)
    with torch.no_grad():  # a confident target, so there is something to learn beyond its entropy
        target.lm_head.weight.mul_(40.0)
    target.save_pretrained(tmp_path / "target")
    rng = np.random.default_rng(0)
    data = np.tile(rng.integers(0, V, size=50), 40)  # a repeating corpus the head can learn
    np.save(tmp_path / "ids.npy", data)
    res = train.main(["--target", str(tmp_path / "target"), "--data", str(tmp_path / "ids.npy"),
                      "--out", str(tmp_path / "run"), "--steps", "40", "--batch-size", "8", "--seq-len", "32",
                      "--ttt-steps", "3", "--draft-vocab-size", "120", "--lr", "3e-3", "--device", "cpu",
                      "--log-every", "0"])
    losses = [r["loss"] for r in res["history"]]
    assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:5]), losses
    head = load_eagle3(res["head_dir"], tcfg)
    assert head.config.draft_vocab_size == 120 and int(head.t2d.sum()) == 120
    assert res["layer_ids"] == default_eagle3_layer_ids(LAYERS)


def test_reference_release_bin_weights_load(tmp_path):
    """The EAGLE release ships pytorch_model.bin; same tensors, read without safetensors."""
    write_head(tmp_path / "s", "llama31", "eagle", seed=9)
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "config.json").write_text((tmp_path / "s" / "config.json").read_text())
    torch.save(load_file(str(tmp_path / "s" / "model.safetensors")), folder / "pytorch_model.bin")
    head = load_eagle3(str(folder), target_config("llama31"))
    torch.testing.assert_close(head.lm_head.weight, random_weights(9, embed=False)["lm_head.weight"])


def test_cache_keep_and_crop():
    from dflash.eagle3.model import Eagle3KVCache

    cache = Eagle3KVCache()
    k = torch.arange(6.0).view(1, 1, 6, 1).expand(1, 2, 6, 3).contiguous()
    cache.extend(k, -k)
    cache.commit()
    cache.extend(k[:, :, :2] + 100, k[:, :, :2])  # speculative
    assert (cache.length, cache.total) == (6, 8)
    cache.keep([0, 2, 6])  # e.g. two context entries and one accepted speculative entry
    assert (cache.length, cache.total) == (3, 3)
    kk, _ = cache.extend(k[:, :, :1], k[:, :, :1])
    assert kk[0, 0, :, 0].tolist() == [0.0, 2.0, 100.0, 0.0]
    cache.crop(2)
    assert (cache.length, cache.total) == (2, 2)


def test_rope_from_target_and_explicit_layer_ids(tmp_path):
    from dflash import eagle3_layer_ids

    def plain(cfg, w):  # the reference Llama-3.1 head config names no RoPE settings at all
        cfg.pop("rope_theta"), cfg.pop("rope_scaling")
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 3, 6]}

    write_head(tmp_path / "h", "llama31", "eagle", edit=plain)
    own = load_eagle3(str(tmp_path / "h"), target_config("llama31"))
    assert own.config.layers.rope_parameters["rope_theta"] == 10000.0  # what EAGLE/SGLang run
    adopted = load_eagle3(str(tmp_path / "h"), target_config("llama31"), rope="target")
    assert adopted.config.layers.rope_parameters["rope_type"] == "llama3"
    torch.testing.assert_close(adopted.rotary_emb.inv_freq, inv_freq(head_json("llama31", "eagle")))
    assert eagle3_layer_ids(own.config, target_config("llama31")) == [1, 3, 6]  # SGLang ids: as they are
