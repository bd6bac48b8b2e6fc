"""Calibration at T > 0 (sampling in C(n)), the temperature a calibration records, and the quality gate."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from bastion.calibration import grid as grid_mod
from bastion.calibration.grid import CalibrationQualityError, Grid, gated_fit, probe_grid
from bastion.calibration.store import Calibration, CalibrationError, calibration_path
from bastion.costmodel.model import CostModel, CostParams, StepOverheads
from bastion.costmodel.roofline import HardwarePeaks, ModelShape
from bastion.engines.eager import EagerProbe
from bastion.models.target import Target
from tests.support.builders import tiny_target

PEAKS = HardwarePeaks(flops_per_s=2e10, bytes_per_s=2e10)


def test_sampling_fit_differs_from_greedy_fit():
    """A large vocabulary makes per-node softmax + multinomial visible: C(n) at T > 0 grows faster."""
    torch.manual_seed(0)
    model = tiny_target(vocab=32000, layers=1, hidden=32, max_positions=512)
    target = Target(model)
    grid = Grid((4, 16, 32, 64), (16, 64), warmup=1, repeats=5, holdout_every=4)
    shape = ModelShape.from_config(model.config, 4)
    fits = {}
    for t in (0.0, 1.0):
        rows = probe_grid(EagerProbe(target), grid, temperature=t)
        _, model_t, _ = gated_fit(lambda r=rows: r, shape, PEAKS, grid.holdout_every, None)
        fits[t] = (rows, model_t)
    big = [(r0["latency_s"], r1["latency_s"]) for r0, r1 in zip(fits[0.0][0], fits[1.0][0]) if r0["s"] == 64]
    assert all(b > 1.1 * a for a, b in big), big  # sampling 64 x 32000 probabilities costs
    pred0, pred1 = (fits[t][1].predict(np.array([64.0]), 64)[0] for t in (0.0, 1.0))
    assert pred1 > 1.1 * pred0
    assert fits[0.0][1].params != fits[1.0][1].params


def _calibration(temperature: float) -> Calibration:
    shape = ModelShape.from_config(tiny_target().config, 4)
    return Calibration("m", {}, CostModel(shape, PEAKS, CostParams(1, 0, 1, 0)), StepOverheads(1e-3, 1e-3),
                       {"heldout_mape": 0.01}, {}, [{"s": 8, "c": 16, "latency_s": 1e-3}], temperature=temperature)


def test_calibration_records_its_temperature_and_refuses_the_other_class(tmp_path):
    path = tmp_path / "cal.json"
    _calibration(0.0).save(path)
    greedy = Calibration.load(path)
    assert greedy.temperature == 0.0 and json.loads(path.read_text())["temperature"] == 0.0
    greedy.check_temperature(0.0, path)
    with pytest.raises(CalibrationError, match=r"greedy \(T=0\) only.*--temperature 0.7.*--recalibrate"):
        greedy.check_temperature(0.7, path)
    _calibration(1.0).save(path)
    sampled = Calibration.load(path)
    sampled.check_temperature(0.5, path)
    with pytest.raises(CalibrationError, match="with sampling at T=1"):
        sampled.check_temperature(0.0, path)
    # one cache file per temperature class
    assert calibration_path("c", "hw", "m", "eager", 0.0) != calibration_path("c", "hw", "m", "eager", 0.7)
    assert calibration_path("c", "hw", "m", "eager", 0.7) == calibration_path("c", "hw", "m", "eager", 1.0)


# ---------------------------------------------------------------------------------------- quality gate


class FakeProbe:
    """A VerifyProbe whose timings come from a known cost model, with multiplicative noise."""

    def __init__(self, noise: list[float]):
        self.target = Target(tiny_target(layers=1, hidden=32))
        self.noise = list(noise)  # one noise level per grid measurement (repeated measurements pop the next)
        self.level = 0.0

    def reserve(self, tokens, nodes):
        pass

    def at_context(self, c, room, generator):
        pass

    def probe(self, tokens, c, temperature=0.0):
        return (tokens.shape[0], c)


@pytest.fixture
def fake_timing(monkeypatch):
    truth = CostModel(ModelShape.from_config(tiny_target().config, 4), PEAKS,
                      CostParams(1.0, 2e-3, 1.0, 1e-3, u_kv=3.0, u_att=2.0, f_kv=20.0, f_att=0.2, f_peak=1.0))
    rng = np.random.default_rng(0)
    state = {"level": 0.0, "calls": 0, "slow": lambda call: False}

    def sample_times(step, device, warmup, repeats):
        s, c = step
        out = []
        for _ in range(repeats):  # a slow spell: the calls state["slow"] picks take 1.7x
            spell = 1.7 if state["slow"](state["calls"]) else 1.0
            state["calls"] += 1
            out.append(float(truth.predict(s, c)) * spell * math.exp(state["level"] * rng.standard_normal()))
        return out

    monkeypatch.setattr(grid_mod, "sample_times", sample_times)
    return truth, state


def _measure(probe_levels, state, counter):
    probe = FakeProbe([])
    g = Grid.named("small")

    def measure():
        state["level"] = probe_levels[min(counter["n"], len(probe_levels) - 1)]
        counter["n"] += 1
        return probe_grid(probe, g)

    return measure, g, ModelShape.from_config(probe.target.config, 4)


def test_quality_gate_passes_a_clean_fit(fake_timing):
    _, state = fake_timing
    counter = {"n": 0}
    measure, g, shape = _measure([0.0], state, counter)
    _, _, report = gated_fit(measure, shape, PEAKS, g.holdout_every)
    assert counter["n"] == 1 and report["quality_gate"]["passed"] and report["heldout_mape"] < 0.05


def test_quality_gate_measures_again_once(fake_timing):
    _, state = fake_timing
    counter = {"n": 0}
    measure, g, shape = _measure([0.8, 0.0], state, counter)  # a noisy machine, then a quiet one
    _, _, report = gated_fit(measure, shape, PEAKS, g.holdout_every)
    gate = report["quality_gate"]
    assert counter["n"] == 2 and gate["passed"] and gate["attempts"][0]["heldout_mape"] > 0.10


def test_a_slow_spell_in_one_pass_leaves_the_fit_straight(fake_timing):
    """The CPU grid times every point once in each of 3 passes; a spell slowing 40 points of
    one pass bends nothing, where a single pass of 3 repeats a point fails the gate."""
    _, state = fake_timing
    g = Grid.named("small")
    probe = FakeProbe([])
    shape = ModelShape.from_config(probe.target.config, 4)
    n = len(g.points())
    assert g.rounds == 3 and g.repeats == 1 and n == 79
    state["slow"] = lambda call: n + 10 <= call < n + 50  # points 10-49 of the second pass
    _, report = grid_mod.fit_probe(probe_grid(probe, g), shape, PEAKS, g.holdout_every)
    assert report["heldout_mape"] < 0.01
    state["calls"] = 0
    state["slow"] = lambda call: 30 <= call < 150  # the same 40 points' 3 back-to-back repeats
    one_pass = dataclasses.replace(g, rounds=1, repeats=3)
    _, report = grid_mod.fit_probe(probe_grid(probe, one_pass), shape, PEAKS, g.holdout_every)
    assert report["heldout_mape"] > 0.10, report


def test_the_second_measurement_pools_both(fake_timing):
    """Spells over two passes of different points in each measurement: each alone fails the
    gate, their pooled times (each point slow in at most 2 of 6) pass it."""
    _, state = fake_timing
    g = Grid.named("small")
    probe = FakeProbe([])
    shape = ModelShape.from_config(probe.target.config, 4)
    n = len(g.points())
    per = n * g.rounds  # calls per measurement

    def slow(call):
        attempt, k = divmod(call, per)
        point, passes = k % n, k // n < 2
        return passes and ((10 <= point < 40) if attempt == 0 else (point < 10 or point >= 40))

    state["slow"] = slow
    alone = [grid_mod.fit_probe(probe_grid(probe, g), shape, PEAKS, g.holdout_every)[1]["heldout_mape"]
             for _ in range(2)]
    assert min(alone) > 0.10, alone
    state["calls"] = 0
    _, _, report = gated_fit(lambda: probe_grid(probe, g), shape, PEAKS, g.holdout_every)
    gate = report["quality_gate"]
    assert gate["passed"] and len(gate["attempts"]) == 2 and report["heldout_mape"] < 0.01


def test_quality_gate_stops_with_the_numbers_and_the_ways_out(fake_timing):
    _, state = fake_timing
    counter = {"n": 0}
    measure, g, shape = _measure([0.8], state, counter)
    with pytest.raises(CalibrationQualityError) as err:
        gated_fit(measure, shape, PEAKS, g.holdout_every)
    msg = str(err.value)
    assert counter["n"] == 2
    assert "\n" not in msg and "quieter machine" in msg and "--calib-grid" in msg and "--accept-calibration-error" in msg
    assert "% on average" in msg and "% worst" in msg


def test_quality_gate_override_measures_again_then_keeps_the_better_fit(fake_timing):
    """``--accept-calibration-error`` still measures a second time when the first fit fails the
    gate, and keeps whichever of the two fits misses its held-out points less."""
    _, state = fake_timing
    counter = {"n": 0}
    measure, g, shape = _measure([0.8], state, counter)
    _, _, report = gated_fit(measure, shape, PEAKS, g.holdout_every, None)
    gate = report["quality_gate"]
    assert counter["n"] == 2 and not gate["passed"] and len(gate["attempts"]) == 2
    mapes = [a["heldout_mape"] for a in gate["attempts"]]
    assert report["heldout_mape"] == min(mapes) == mapes[gate["kept"] - 1] > 0.10
    assert report["heldout_max_ape"] >= report["heldout_mape"]


def test_quality_gate_override_keeps_the_first_measurement_when_it_is_the_better(fake_timing):
    _, state = fake_timing
    counter = {"n": 0}
    measure, g, shape = _measure([0.3, 3.0], state, counter)  # the second measurement is far noisier
    rows, _, report = gated_fit(measure, shape, PEAKS, g.holdout_every, None)
    gate = report["quality_gate"]
    assert counter["n"] == 2 and gate["kept"] == 1 and not gate["passed"], gate
    assert gate["attempts"][0]["heldout_mape"] < gate["attempts"][1]["heldout_mape"]
    assert len(rows[0]["times_s"]) == g.rounds * g.repeats  # the first measurement's own times, not pooled


def test_quality_gate_override_passes_when_the_second_measurement_does(fake_timing):
    _, state = fake_timing
    counter = {"n": 0}
    measure, g, shape = _measure([0.8, 0.0], state, counter)
    _, _, report = gated_fit(measure, shape, PEAKS, g.holdout_every, None)
    assert counter["n"] == 2 and report["quality_gate"]["passed"] and report["quality_gate"]["kept"] == 2
