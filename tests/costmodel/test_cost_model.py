"""The analytic roofline, its calibration fit and the per-step cost curve."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import GPT2Config, LlamaConfig, Qwen3Config

from bastion.costmodel.fit import ape, fit_cost_model, fit_params
from bastion.costmodel.model import CostModel, CostParams
from bastion.costmodel.roofline import HardwarePeaks, ModelShape, RooflineTerms, roofline_terms

# ---------------------------------------------------------------------------------------
# hand counts

TINY = dict(num_layers=2, hidden=8, num_heads=2, num_kv_heads=1, head_dim=4, intermediate=16, vocab=10,
            dtype_bytes=2)


def _hand_flops(s: int, c: int) -> float:
    # per layer, matmul weights:
    #   q_proj 8*2*4 = 64, k_proj 8*1*4 = 32, v_proj 32, o_proj 2*4*8 = 64   -> 192
    #   gate, up, down: 3 * 8 * 16                                         -> 384
    #   layer total                                                        -> 576
    # LM head: 10 * 8 = 80;  all weights touched per token: 2 * 576 + 80 = 1232
    linear = 2 * s * 1232  # 2 FLOPs per weight per token
    # attention: QK^T and PV, 2 matmuls * 2 FLOPs, per layer, over c + s keys, heads * head_dim = 8
    attention = 2 * 4 * s * (c + s) * 8  # = 64 s (c + s)
    return linear + attention


def _hand_bytes(s: int, c: int) -> float:
    b = 2
    weights = b * 1232  # every matmul weight once (tied or not: the lookup reads only s rows)
    embed_rows = b * s * 8  # the s embedding rows looked up
    # KV cache: K and V of one token in one layer = 2 * kv_heads(1) * head_dim(4) * 2 bytes = 16;
    # read for the c + s keys, written for the s new ones, in 2 layers
    kv = 2 * 16 * ((c + s) + s)
    # activations, each distinct tensor once per token and layer:
    #   attention input (8), q (2*4), k (1*4), v (1*4), attention output (2*4), o_proj output (8),
    #   MLP input (8), gate (16), up (16), down input (16), down output (8)
    #   = 4 * 8 + 2 * (2 + 1) * 4 + 3 * 16 = 32 + 24 + 48 = 104 elements
    activations = 2 * b * s * 104
    mask = s * (c + s)  # one byte per boolean
    logits = b * s * 10
    return weights + embed_rows + kv + activations + mask + logits


@pytest.mark.parametrize("s, c", [(1, 0), (1, 64), (16, 64), (7, 1000), (512, 2048)])
@pytest.mark.parametrize("tied", [False, True])
def test_flops_and_bytes_by_hand(s, c, tied):
    shape = ModelShape(**TINY, tied_embeddings=tied)
    assert shape.layer_params == 576
    assert shape.head_params == 80
    assert shape.flops(s, c) == pytest.approx(_hand_flops(s, c), rel=1e-12)
    assert shape.bytes(s, c) == pytest.approx(_hand_bytes(s, c), rel=1e-12)


def test_hand_numbers_spelled_out():
    shape = ModelShape(**TINY, tied_embeddings=False)
    # s = 3, c = 5: linear 2*3*1232 = 7392, attention 64*3*8 = 1536
    assert shape.flops(3, 5) == 7392 + 1536
    # 2464 + 48 + 32*11 + 416*3 + 3*8 + 60 = 2464 + 48 + 352 + 1248 + 24 + 60
    assert shape.bytes(3, 5) == 4196


def test_bytes_split_into_context_free_and_context_parts():
    shape = ModelShape(**TINY, tied_embeddings=False)
    for s, c in [(1, 0), (3, 5), (16, 64), (512, 2048)]:
        # K/V of one token in one layer is 16 bytes (see _hand_bytes); 2 layers; the mask 1 byte a pair
        assert shape.cache_bytes(s, c) == 2 * 16 * ((c + s) + s) + s * (c + s)
        assert shape.stream_bytes(s) + shape.cache_bytes(s, c) == shape.bytes(s, c)
    assert shape.cache_bytes(3, 5) == 352 + 24 and shape.stream_bytes(3) == 2464 + 48 + 1248 + 60


def test_tied_embeddings_move_the_same_bytes():
    """Docstring: tied embeddings are read once as the LM head, the lookup reads only s rows.

    So untied and tied weights cost the same per forward (the untied input table is
    touched only for the s looked-up rows, which are counted either way).
    """
    tied = ModelShape(**TINY, tied_embeddings=True)
    untied = ModelShape(**TINY, tied_embeddings=False)
    for s, c in [(1, 0), (32, 512), (300, 7)]:
        assert tied.bytes(s, c) == untied.bytes(s, c)
        assert tied.flops(s, c) == untied.flops(s, c)


def test_vectorised_evaluation_matches_scalars():
    shape = ModelShape(**TINY, tied_embeddings=False)
    s = np.array([1, 16, 100, 512])
    c = np.array([0, 64, 1024, 2048])
    np.testing.assert_allclose(shape.flops(s, c), [_hand_flops(a, b) for a, b in zip(s, c)], rtol=1e-12)
    np.testing.assert_allclose(shape.bytes(s, c), [_hand_bytes(a, b) for a, b in zip(s, c)], rtol=1e-12)


QWEN3_8B = ModelShape(num_layers=36, hidden=4096, num_heads=32, num_kv_heads=8, head_dim=128, intermediate=12288,
                      vocab=151936, tied_embeddings=False, dtype_bytes=2)


def test_qwen3_8b_parameter_count():
    # Qwen3-8B: 8.19 B parameters, of which the input embedding table (not in the roofline's
    # matmul weights) is 151936 * 4096; norms are negligible.
    matmul = QWEN3_8B.num_layers * QWEN3_8B.layer_params + QWEN3_8B.head_params
    assert (matmul + 151936 * 4096) / 8.19e9 == pytest.approx(1.0, abs=0.01)
    # one decode token streams the weights: ~15.1 GB at bf16
    assert QWEN3_8B.bytes(1, 0) == pytest.approx(2 * matmul, rel=1e-3)


# ---------------------------------------------------------------------------------------
# from_config


def test_from_qwen3_config():
    cfg = Qwen3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=96,
                      num_hidden_layers=3, vocab_size=100, tie_word_embeddings=True)
    shape = ModelShape.from_config(cfg, 2)
    assert shape == ModelShape(num_layers=3, hidden=64, num_heads=4, num_kv_heads=2, head_dim=32, intermediate=96,
                               vocab=100, tied_embeddings=True, dtype_bytes=2)


def test_from_llama_config_without_head_dim():
    cfg = LlamaConfig(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, intermediate_size=128,
                      num_hidden_layers=2, vocab_size=50)
    shape = ModelShape.from_config(cfg, 4)
    assert shape.head_dim == 8  # hidden / heads
    assert (shape.num_heads, shape.num_kv_heads) == (8, 2)  # GQA kept
    assert shape.tied_embeddings is False and shape.dtype_bytes == 4
    # GQA shrinks k/v projections: 64*64 (q) + 2*64*16 (k, v) + 64*64 (o) + 3*64*128
    assert shape.layer_params == 4096 + 2048 + 4096 + 24576


def test_from_dict():
    d = {"model_type": "llama", "hidden_size": 48, "num_attention_heads": 6, "num_hidden_layers": 2,
         "intermediate_size": 100, "vocab_size": 70}
    shape = ModelShape.from_config(d, 2)
    assert (shape.head_dim, shape.num_kv_heads, shape.tied_embeddings) == (8, 6, False)
    d2 = dict(d, model_type="qwen3", num_key_value_heads=2, head_dim=16, tie_word_embeddings=True)
    shape2 = ModelShape.from_config(d2, 1)
    assert (shape2.head_dim, shape2.num_kv_heads, shape2.tied_embeddings, shape2.dtype_bytes) == (16, 2, True, 1)


@pytest.mark.parametrize("config", [GPT2Config(), {"model_type": "gpt2", "hidden_size": 8}, {"hidden_size": 8}])
def test_unsupported_family(config):
    with pytest.raises(ValueError) as err:
        ModelShape.from_config(config, 2)
    msg = str(err.value)
    assert "qwen3" in msg and "llama" in msg
    if not isinstance(config, dict) or "model_type" in config:
        assert "gpt2" in msg


# ---------------------------------------------------------------------------------------
# the fit

PEAKS = HardwarePeaks(flops_per_s=800e12, bytes_per_s=4.2e12)
# attention measured at a quarter of the matmul rate, as masked kernels run on an H200
PEAKS_ATT = HardwarePeaks(flops_per_s=800e12, bytes_per_s=4.2e12, attention_flops_per_s=200e12)


def test_attention_rate_prices_only_the_attention_flops():
    s, c = np.array([1.0, 64.0, 512.0, 8192.0]), np.array([4096.0, 64.0, 2048.0, 64.0])
    one, two = roofline_terms(QWEN3_8B, PEAKS, s, c), roofline_terms(QWEN3_8B, PEAKS_ATT, s, c)
    for name in ("lin", "stream", "kv"):  # nothing else changes
        np.testing.assert_array_equal(getattr(one, name), getattr(two, name))
    np.testing.assert_allclose(one.att, QWEN3_8B.attention_flops(s, c) / 800e12, rtol=1e-12)  # no attention rate
    np.testing.assert_allclose(two.att, QWEN3_8B.attention_flops(s, c) / 200e12, rtol=1e-12)
    np.testing.assert_allclose(one.lin, QWEN3_8B.linear_flops(s) / 800e12, rtol=1e-12)
    np.testing.assert_allclose(one.stream + one.kv, QWEN3_8B.bytes(s, c) / 4.2e12, rtol=1e-12)
    # an 8192-token tree at c = 64: attention is a quarter of the FLOPs, more than half the compute time
    share = QWEN3_8B.attention_flops(8192, 64) / QWEN3_8B.flops(8192, 64)
    assert 0.2 < share < 0.3 and two.att[3] / (two.att[3] + two.lin[3]) > 0.5


@pytest.mark.parametrize("field", ["flops_per_s", "bytes_per_s", "attention_flops_per_s"])
@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_hardware_peaks_reject_bad_rates(field, bad):
    kwargs = dict(flops_per_s=1e12, bytes_per_s=1e12, attention_flops_per_s=1e12)
    kwargs[field] = bad
    with pytest.raises(ValueError, match=field):
        HardwarePeaks(**kwargs)


def test_measured_peaks_on_the_cpu_include_masked_attention():
    from bastion.calibration.peaks import measure_peaks

    peaks = measure_peaks("cpu", torch.float32)
    assert all(v > 0 and math.isfinite(v) for v in (peaks.flops_per_s, peaks.bytes_per_s, peaks.attention_flops_per_s))
    # a masked attention never beats a plain matrix multiply by much
    assert peaks.attention_flops_per_s < 4 * peaks.flops_per_s
# the paper grid's tree sizes at contexts 64 .. 32,768
S_GRID, C_GRID = (a.ravel().astype(float) for a in np.meshgrid(np.arange(16, 513, 16), 2 ** np.arange(6, 16)))

REGIMES = {
    # no attention terms: the layers' two lines cross in the middle of the grid
    "layers_only": CostParams(a_c=1.5, b_c=1e-3, a_m=1.2, b_m=2e-3),
    # as fitted on the H200 (docs/performance.md, "Cost-model error"): every branch somewhere
    "h200_like": CostParams(0.88, 3.5e-3, 1.53, 0.0, u_kv=7.7, u_att=2.9, f_kv=25.0, f_att=0.16, f_peak=0.91),
    # launch overhead on both lines, the unfused attention for more trees
    "launch_bound": CostParams(2.0, 3e-3, 1.1, 5e-3, u_kv=4.0, u_att=2.0, f_kv=30.0, f_att=0.2, f_peak=1.0),
}


def _branches(params: CostParams, t: RooflineTerms) -> dict[str, np.ndarray]:
    p = params
    fused_floor, fused_peak = p.f_kv * t.kv + p.f_att * t.att, p.f_peak * t.att
    unfused = p.u_kv * t.kv + p.u_att * t.att < np.maximum(fused_floor, fused_peak)
    return {"compute": p.a_c * t.lin + p.b_c > p.a_m * t.stream + p.b_m, "unfused": unfused,
            "floor": ~unfused & (fused_floor >= fused_peak), "peak": ~unfused & (fused_peak > fused_floor)}


def _truth(params: CostParams, peaks: HardwarePeaks = PEAKS) -> tuple[CostModel, np.ndarray, dict]:
    model = CostModel(QWEN3_8B, peaks, params)
    return model, model.predict(S_GRID, C_GRID), _branches(params, model.terms(S_GRID, C_GRID))


@pytest.mark.parametrize("regime, peaks", [
    ("layers_only", PEAKS), ("layers_only", PEAKS_ATT), ("h200_like", PEAKS_ATT), ("launch_bound", PEAKS_ATT),
], ids=["layers_only-one_rate", "layers_only", "h200_like", "launch_bound"])
def test_fit_recovers_parameters_noise_free(regime, peaks):
    true = REGIMES[regime]
    _, y, branch = _truth(true, peaks)
    assert 0.05 < branch["compute"].mean() < 0.95  # both layer lines are visible
    with_attention = true.u_kv > 0
    if with_attention:  # and all three attention branches, so all nine are identifiable
        assert all(branch[k].any() for k in ("unfused", "floor", "peak")), {k: v.mean() for k, v in branch.items()}
    fit = fit_cost_model(QWEN3_8B, peaks, S_GRID, C_GRID, y)
    for name in CostParams.names():
        if with_attention or name in ("a_c", "b_c", "a_m", "b_m"):
            assert getattr(fit.params, name) == pytest.approx(getattr(true, name), rel=1e-3, abs=1e-12), name
    assert ape(fit, S_GRID, C_GRID, y).max() < 1e-6


def test_fit_pure_memory_bound_recovers_the_active_branch():
    true = CostParams(a_c=0.5, b_c=0.5e-3, a_m=3.0, b_m=25e-3)
    _, y, branch = _truth(true)
    assert not branch["compute"].any()
    fit = fit_cost_model(QWEN3_8B, PEAKS, S_GRID, C_GRID, y)
    assert fit.params.a_m == pytest.approx(3.0, rel=1e-3)
    assert fit.params.b_m == pytest.approx(25e-3, rel=1e-3)
    assert ape(fit, S_GRID, C_GRID, y).max() < 1e-6


@pytest.mark.parametrize("regime", sorted(REGIMES))
def test_fit_with_multiplicative_noise(regime):
    _, y, _ = _truth(REGIMES[regime], PEAKS_ATT)
    rng = np.random.default_rng(2024)
    noisy = y * (1.0 + 0.03 * rng.standard_normal(y.shape))
    fit = fit_cost_model(QWEN3_8B, PEAKS_ATT, S_GRID, C_GRID, noisy)
    assert ape(fit, S_GRID, C_GRID, noisy).mean() < 0.03
    assert ape(fit, S_GRID, C_GRID, y).mean() < 0.01  # much closer to the truth than the noise


def test_fit_clamps_to_non_negative():
    # latencies that fall with the tree size (slopes want to be negative) ...
    y_down = 0.05 - 2e-5 * S_GRID
    fit = fit_cost_model(QWEN3_8B, PEAKS, S_GRID, C_GRID, y_down)
    assert min(fit.params) >= 0.0
    assert np.all(np.diff(fit.predict(np.arange(1, 600), 512.0)) >= 0)
    # ... and steep lines through the roofline terms with a negative intercept
    t = roofline_terms(QWEN3_8B, PEAKS, S_GRID, C_GRID)
    y_neg = np.maximum(5.0 * t.lin - 0.9 * 5 * t.lin.min(), 5.0 * t.stream - 0.9 * 5 * t.stream.min()) + 2 * t.kv
    assert np.all(y_neg > 0)
    assert min(fit_cost_model(QWEN3_8B, PEAKS, S_GRID, C_GRID, y_neg).params) >= 0.0
    # the low-level fitter directly, with data wanting a negative intercept on every line
    x = np.linspace(1.0, 2.0, 20)
    assert min(fit_params(RooflineTerms(x, x, x, x), 3.0 * x - 2.5, np.ones_like(x))) >= 0.0


def test_fit_input_validation():
    with pytest.raises(ValueError):
        fit_cost_model(QWEN3_8B, PEAKS, [16, 32, 48], [64, 64, 64], [1e-3, 1e-3, 1e-3])
    with pytest.raises(ValueError):
        fit_cost_model(QWEN3_8B, PEAKS, [16, 32, 48, 64], [64] * 4, [1e-3, 0.0, 1e-3, 1e-3])


@pytest.mark.parametrize("bad", [-1e-9, -1.0, float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("field", CostParams.names())
def test_cost_params_reject_negative_and_nan(bad, field):
    kwargs = dict.fromkeys(CostParams.names(), 1.0)
    kwargs[field] = bad
    with pytest.raises(ValueError, match=field):
        CostParams(**kwargs)


# ---------------------------------------------------------------------------------------
# monotonicity and the curve

params_st = st.builds(
    CostParams,
    a_c=st.floats(0.0, 10.0),
    b_c=st.floats(0.0, 0.1),
    a_m=st.floats(0.0, 10.0),
    b_m=st.floats(0.0, 0.1),
    u_kv=st.floats(0.0, 50.0),
    u_att=st.floats(0.0, 10.0),
    f_kv=st.floats(0.0, 50.0),
    f_att=st.floats(0.0, 10.0),
    f_peak=st.floats(0.0, 10.0),
)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(params_st, st.sampled_from([0, 1, 64, 777, 4096, 32768]))
def test_prediction_non_decreasing_in_s(params, c):
    model = CostModel(QWEN3_8B, PEAKS_ATT, params)
    pred = model.predict(np.arange(1, 700), c)
    assert np.all(np.diff(pred) >= 0)
    assert np.all(pred >= 0)
    # and non-decreasing in the context length
    contexts = np.array([0, 1, 100, 5000, 40000])
    assert np.all(np.diff(model.predict(64, contexts)) >= 0)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(params_st, st.integers(1, 300), st.lists(st.integers(0, 40000), min_size=1, max_size=3),
       st.sampled_from([PEAKS, PEAKS_ATT]))
def test_curve_equals_predict(params, n_max, contexts, peaks):
    model = CostModel(QWEN3_8B, peaks, params)
    for c in contexts:  # repeated calls reuse the cached, c-independent parts
        expected = model.predict(np.arange(n_max + 2), c)
        # an int, or a 0-d long tensor as the static engine passes its committed length
        for ctx in (c, torch.tensor(c)):
            cur = model.curve(ctx, n_max)
            assert cur.shape == (n_max + 2,)
            assert str(cur.dtype) == "torch.float64"  # the budget rule needs fp64 differences
            assert float(cur[0]) == 0.0
            np.testing.assert_allclose(cur.numpy()[1:], expected[1:], rtol=2e-6, atol=1e-12)
            assert np.all(np.diff(cur.numpy()) >= 0)


@pytest.mark.parametrize("peaks", [PEAKS, PEAKS_ATT], ids=["one_rate", "attention_rate"])
def test_to_dict_round_trip(peaks):
    model = CostModel(QWEN3_8B, peaks, REGIMES["h200_like"])
    data = json.loads(json.dumps(model.to_dict()))
    back = CostModel.from_dict(data)
    assert back.shape == model.shape and back.peaks == model.peaks and back.params == model.params
    np.testing.assert_array_equal(back.predict(S_GRID, C_GRID), model.predict(S_GRID, C_GRID))
    assert back.to_dict() == model.to_dict()
    assert math.isfinite(back.predict(1, 0))


def test_old_form_is_refused_with_the_fix():
    """A cost model saved before the attention terms (four parameters) does not load as a new one."""
    old = CostModel(QWEN3_8B, PEAKS, CostParams(1.25, 3e-3, 0.75, 1e-2)).to_dict()
    old["params"] = {k: old["params"][k] for k in ("a_c", "b_c", "a_m", "b_m")}
    with pytest.raises(ValueError, match="old max-of-two-lines form.*recalibrate"):
        CostModel.from_dict(old)
    del old["params"]["b_m"]
    with pytest.raises(ValueError, match="lacks the parameter"):
        CostModel.from_dict(old)
