"""Calibration files of the current cost model load as saved; files of the old form are refused with the fix."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bastion.calibration import stages
from bastion.calibration.store import FORMAT_VERSION, Calibration, CalibrationError
from bastion.costmodel.model import CostModel, CostParams, StepOverheads
from bastion.costmodel.roofline import HardwarePeaks, ModelShape

SHAPE = ModelShape(num_layers=2, hidden=64, num_heads=4, num_kv_heads=2, head_dim=16, intermediate=128, vocab=100,
                   tied_embeddings=True, dtype_bytes=4)
PEAKS = HardwarePeaks(flops_per_s=2e10, bytes_per_s=2e10, attention_flops_per_s=1e10)
PARAMS = CostParams(1.1, 2e-3, 1.3, 1e-3, u_kv=3.0, u_att=2.0, f_kv=20.0, f_att=0.2, f_peak=1.0)


def _calibration() -> Calibration:
    return Calibration("m", {}, CostModel(SHAPE, PEAKS, PARAMS), StepOverheads(1e-3, 1e-3), {"heldout_mape": 0.01},
                       {}, [{"s": 8, "c": 16, "latency_s": 1e-3}])


def test_round_trip_keeps_every_parameter(tmp_path):
    path = tmp_path / "cal.json"
    _calibration().save(path)
    data = json.loads(path.read_text())
    assert data["format_version"] == FORMAT_VERSION == 2
    assert set(data["cost_model"]["params"]) == set(CostParams.names())
    back = Calibration.load(path)
    assert back.cost_model.params == PARAMS
    s, c = np.arange(1, 300), np.full(299, 5000)
    np.testing.assert_array_equal(back.cost_model.predict(s, c), CostModel(SHAPE, PEAKS, PARAMS).predict(s, c))


def _old_file(tmp_path):
    """A calibration as written before the attention terms: format 1, four parameters."""
    data = _calibration().to_dict()
    data["format_version"] = 1
    data["cost_model"]["params"] = {"a_c": 1.0, "b_c": 2e-3, "a_m": 1.2, "b_m": 0.0}
    path = tmp_path / "calibration_cpu_m.json"
    path.write_text(json.dumps(data))
    return path, data


def test_old_calibration_file_is_refused_naming_file_and_fix(tmp_path):
    path, _ = _old_file(tmp_path)
    with pytest.raises(CalibrationError) as err:
        Calibration.load(path)
    msg = str(err.value)
    assert str(path) in msg and "format 1" in msg and "max of two lines" in msg and "--recalibrate" in msg


def test_old_parameters_under_the_new_format_are_refused(tmp_path):
    path, data = _old_file(tmp_path)
    data["format_version"] = FORMAT_VERSION
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"calibration_cpu_m\.json is malformed.*old max-of-two-lines.*--recalibrate"):
        Calibration.load(path)


def test_pipeline_latency_file_of_the_old_form_is_refused_before_loading(tmp_path):
    """profile_constants completes calibrate_latency's file: an old one stops it at once, with the way out."""
    lat = tmp_path / "latency_grid.json"
    lat.write_text(json.dumps({"fingerprint": {}, "cost_model": {"shape": {}, "peaks": {},
                                                                  "params": {"a_c": 1, "b_c": 0, "a_m": 1, "b_m": 0}}}))
    with pytest.raises(CalibrationError, match=r"latency_grid\.json.*old max-of-two-lines.*calibrate_latency"):
        stages.profile_constants(str(tmp_path / "cal.json"), "m", "missing-model.json", str(lat), "cpu", "float32",
                                 "sdpa", "eager", 4)


def _covering(n_min: int = 16, max_context: int = 1024) -> Calibration:
    cal = _calibration()
    cal.n_min, cal.probe_sizes, cal.max_context = n_min, (2 * n_min, 8 * n_min, 32 * n_min), max_context
    return cal


def test_what_a_calibration_covers_is_saved_and_loaded(tmp_path):
    path = tmp_path / "cal.json"
    _covering(16, 1024).save(path)
    data = json.loads(path.read_text())
    assert (data["n_min"], data["probe_sizes"], data["max_context"]) == (16, [32, 128, 512], 1024)
    back = Calibration.load(path)
    assert (back.n_min, back.probe_sizes, back.max_context) == (16, (32, 128, 512), 1024)
    back.check_covers(16, 1024, path)  # its own n_min and contexts up to the grid's largest: accepted


@pytest.mark.parametrize("given", [False, True])
def test_another_n_min_is_refused_naming_both_and_the_fix(tmp_path, given):
    with pytest.raises(CalibrationError) as err:
        _covering(16).check_covers(32, 100, tmp_path / "cal.json", given=given)
    msg = str(err.value)
    assert "--n-min 16" in msg and "--n-min 32" in msg and "32, 128, 512 nodes" in msg and "--recalibrate" in msg
    assert ("omit --calibration" in msg) == given


def test_longer_contexts_than_the_grid_are_refused(tmp_path):
    with pytest.raises(CalibrationError) as err:
        _covering(16, 1024).check_covers(16, 1025, tmp_path / "cal.json")
    msg = str(err.value)
    assert "up to 1024 tokens" in msg and "reaches 1025" in msg and "--recalibrate" in msg


def test_a_file_that_does_not_say_what_it_covers_is_refused(tmp_path):
    path = tmp_path / "cal.json"
    data = _calibration().to_dict()
    for key in ("n_min", "probe_sizes", "max_context"):
        del data[key]
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"does not record the n_min and contexts it covers.*--recalibrate"):
        Calibration.load(path).check_covers(16, 10, path)
