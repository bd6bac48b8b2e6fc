"""The step excess over the fitted verification: measured at several tree sizes and charged by the budget rule."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch

from bastion.calibration.calibrate import overhead_budgets
from bastion.calibration.overheads import (
    describe_baselines,
    profile_baselines,
    profile_overheads,
    settled_baselines,
)
from bastion.calibration.store import Calibration
from bastion.costmodel.model import CostModel, StepOverheads, rule_costs
from bastion.results.generation import GenerationResult, StepStats
from bastion.speculative.policy import TreePolicy
from bastion.speculative.rule import count_nodes
from tests.calibration.test_store_format import PARAMS, PEAKS, SHAPE


class TimedDecoder:
    """Steps whose T_other is 2 ms plus 5 us a node (and a noisy first step, which is dropped)."""

    target = SimpleNamespace(device=torch.device("cpu"))

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes

    def generate(self, prompt, max_new_tokens, temperature, generator, collect_stats):
        other = 2e-3 + 5e-6 * self.nodes
        steps = [StepStats(1, self.nodes, 0, t_draft=9.0, t_tree=9.0)]
        steps += [StepStats(1, self.nodes, 0, t_draft=4e-3, t_tree=other / 2, t_commit=other / 2) for _ in range(6)]
        return GenerationResult([1] * 7, len(prompt), 0.0, 0.0, "max_new_tokens", steps)


def test_the_excess_is_measured_at_each_tree_size():
    ov = profile_overheads(TimedDecoder, (16, 64), [1, 2, 3])
    assert ov.t_draft == pytest.approx(4e-3) and ov.t_other == pytest.approx(2e-3 + 5e-6 * 16)
    assert [n for n, _ in ov.excess] == [16, 64]
    assert [t for _, t in ov.excess] == pytest.approx([2e-3 + 5e-6 * 16, 2e-3 + 5e-6 * 64])
    # the size-independent part: T_draft and the excess at the first size; the rise is the curve's
    assert ov.fixed == pytest.approx(4e-3 + 2e-3 + 5e-6 * 16)
    alone = profile_overheads(TimedDecoder, (16,), [1, 2, 3])
    assert alone.excess == ((16, pytest.approx(2e-3 + 5e-6 * 16)),)


class SlowVerifyDecoder(TimedDecoder):
    """Verification inside decoding takes the model's C(n, c) plus 9 ms (e.g. caches evicted by the drafter)."""

    model = CostModel(SHAPE, PEAKS, PARAMS)

    def generate(self, *a, **kw):
        res = super().generate(*a, **kw)
        for st in res.steps:
            st.context = 40
            st.t_verify = float(self.model.predict(self.nodes, 40)) + 9e-3
        return res


def test_verification_slower_in_decoding_than_fitted_is_charged_as_a_fixed_cost():
    ov = profile_overheads(SlowVerifyDecoder, (16, 64), [1, 2, 3], cost_model=SlowVerifyDecoder.model)
    assert [t for _, t in ov.excess] == pytest.approx([9e-3 + 2e-3 + 5e-6 * 16, 9e-3 + 2e-3 + 5e-6 * 64])
    assert ov.fixed == pytest.approx(4e-3 + 9e-3 + 2e-3 + 5e-6 * 16)
    # a larger fixed cost makes each node relatively cheaper: the rule keeps more of them
    logp = torch.log(torch.linspace(0.5, 1e-4, 127))
    policy = TreePolicy(n_min=1, n_max=128)
    curve = rule_costs(SlowVerifyDecoder.model, ov).curve(40, 128)
    kept = int(count_nodes(logp, policy, curve, ov.fixed))
    blind = profile_overheads(SlowVerifyDecoder, (16, 64), [1, 2, 3])  # no cost model: T_other alone
    before = int(count_nodes(logp, policy, rule_costs(SlowVerifyDecoder.model, blind).curve(40, 128), blind.fixed))
    assert kept > before


def test_sizes_the_rule_cannot_reach_are_not_run():
    made = []

    def decoder_for(n):
        made.append(n)
        return SlowVerifyDecoder(n)

    model = SlowVerifyDecoder.model  # C(256) is ~4x a 16-node step, C(1024) over 3x the whole step
    ov = profile_overheads(decoder_for, (16, 64, 256, 1024), [1, 2, 3], cost_model=model)
    assert [n for n, _ in ov.excess] == [16, 64, 256] and made == [16, 64, 256]


class FallingDecoder(TimedDecoder):
    """T_other smaller at the larger size (noise): the knots must not fall."""

    def generate(self, *a, **kw):
        res = super().generate(*a, **kw)
        for st in res.steps:
            st.t_tree = st.t_commit = (1e-3 if self.nodes > 16 else 2e-3) / 2
        return res


def test_the_knots_never_fall():
    ov = profile_overheads(FallingDecoder, (16, 64), [1, 2, 3])
    assert [t for _, t in ov.excess] == pytest.approx([2e-3, 2e-3])


class NoisyDecoder(TimedDecoder):
    """Every run but the third is 0.1 ms slower a step (timing noise only ever adds time)."""

    calls = 0

    def generate(self, *a, **kw):
        res = super().generate(*a, **kw)
        NoisyDecoder.calls += 1
        if NoisyDecoder.calls % 3 != 0:
            for st in res.steps[1:]:
                st.t_tree += 1e-4
        return res


def test_the_steadiest_run_counts():
    NoisyDecoder.calls = 0
    ov = profile_overheads(NoisyDecoder, (16, 64), [1, 2, 3])
    assert ov.t_other == pytest.approx(2e-3 + 5e-6 * 16)
    assert [t for _, t in ov.excess] == pytest.approx([2e-3 + 5e-6 * 16, 2e-3 + 5e-6 * 64])


def test_probe_sizes_follow_the_policy():
    assert overhead_budgets(TreePolicy(n_min=8)) == (16, 64, 256)
    assert overhead_budgets(TreePolicy(n_min=32, n_max=128)) == (64, 128)
    assert overhead_budgets(TreePolicy(n_min=16, n_max=32)) == (32,)  # no larger size to measure: no growth
    # a CPU's bastion_plus grows trees from one node: the excess is measured there too
    assert overhead_budgets(TreePolicy(n_min=16), gpu=False) == (2, 8, 32, 128, 512)
    assert overhead_budgets(TreePolicy(n_min=4, n_max=16), gpu=False) == (2, 8, 16)


def test_the_constants_come_from_the_reference_size_and_small_trees_add_knots():
    """T_draft and T_other (the paper's rule's constants) at two buckets; smaller sizes are knots below
    it, never skipped as out of reach; larger ones are skipped past the rule's reach, as before."""
    made = []

    def decoder_for(n):
        made.append(n)
        return SlowVerifyDecoder(n)

    ov = profile_overheads(decoder_for, (2, 8, 16, 64, 256, 1024), [1, 2, 3], cost_model=SlowVerifyDecoder.model,
                           reference=16)
    assert made == [2, 8, 16, 64, 256]
    assert ov.t_other == pytest.approx(2e-3 + 5e-6 * 16)  # at the reference, not the first size
    assert [n for n, _ in ov.excess] == [2, 8, 16, 64, 256]
    assert [t for _, t in ov.excess] == pytest.approx([9e-3 + 2e-3 + 5e-6 * n for n in (2, 8, 16, 64, 256)])
    assert ov.fixed == pytest.approx(4e-3 + 9e-3 + 2e-3 + 5e-6 * 2)  # the rule's fixed part: the first knot
    with pytest.raises(ValueError, match=r"the reference size 32 is not among the probe sizes \(2, 8\)"):
        profile_overheads(decoder_for, (2, 8), [1, 2, 3], reference=32)


def test_an_ar_step_is_c1_plus_its_measured_excess():
    model = CostModel(SHAPE, PEAKS, PARAMS)
    assert StepOverheads(1e-3, 1e-3).ar_step(model, 300) == pytest.approx(float(model.predict(1, 300)))
    assert StepOverheads(1e-3, 1e-3, ar_excess=2e-3).ar_step(model, 300) == pytest.approx(
        float(model.predict(1, 300)) + 2e-3)


def test_the_rule_charges_the_growth_and_keeps_smaller_trees():
    base = CostModel(SHAPE, PEAKS, PARAMS)
    ov = StepOverheads(4e-3, 2e-3, excess=((16, 2e-3), (64, 2e-3 + 48 * 2e-5), (128, 2e-3 + 48 * 2e-5 + 64 * 4e-5)))
    charged = rule_costs(base, ov)
    n = torch.arange(130, dtype=torch.float64)
    # zero at the first knot, the measured rise between knots, the end segments extended past them
    rise = torch.where(n <= 64, 2e-5 * (n - 16), 48 * 2e-5 + 4e-5 * (n - 64))
    torch.testing.assert_close(charged.curve(256, 128) - base.curve(256, 128), rise * (n > 0))
    legacy = rule_costs(base, StepOverheads(4e-3, 2e-3, t_other_per_node=2e-5, reference_nodes=16))
    torch.testing.assert_close(legacy.curve(256, 128) - base.curve(256, 128), 2e-5 * n * (n > 0))
    assert rule_costs(base, StepOverheads(4e-3, 2e-3)) is base  # nothing measured: the curve as fitted
    # candidates of falling probability: each node is now dearer, so the rule stops earlier
    logp = torch.log(torch.linspace(0.5, 1e-4, 127))
    policy = TreePolicy(n_min=1, n_max=128)
    kept = int(count_nodes(logp, policy, charged.curve(256, 128), ov.fixed))
    before = int(count_nodes(logp, policy, base.curve(256, 128), ov.fixed))
    assert 1 < kept < before


def test_calibration_files_keep_the_growth_and_older_files_load_without_it(tmp_path):
    ov = StepOverheads(1e-3, 1e-3, excess=((16, 1.2e-3), (64, 1.5e-3)))
    cal = Calibration("m", {}, CostModel(SHAPE, PEAKS, PARAMS), ov, {"heldout_mape": 0.01}, {},
                      [{"s": 8, "c": 16, "latency_s": 1e-3}])
    path = tmp_path / "cal.json"
    cal.save(path)
    assert Calibration.load(path).overheads == ov
    data = json.loads(path.read_text())
    data["overheads"] = {"t_draft": 1e-3, "t_other": 1e-3, "t_other_per_node": 3e-6, "reference_nodes": 16}
    path.write_text(json.dumps(data))  # the linear form: one growth a node from a reference size
    assert Calibration.load(path).overheads == StepOverheads(1e-3, 1e-3, 3e-6, 16)
    data["overheads"] = {"t_draft": 1e-3, "t_other": 1e-3}  # a file without any growth
    path.write_text(json.dumps(data))
    assert Calibration.load(path).overheads == StepOverheads(1e-3, 1e-3)


class BaselineDecoder:
    """AR steps of 5 ms (one token each) and DFlash steps of 8 ms; the warm-up run is slow."""

    target = SimpleNamespace(device=torch.device("cpu"))
    runs: ClassVar[list[str]] = []

    def __init__(self, method: str) -> None:
        self.method = method

    def generate(self, prompt, max_new_tokens, temperature, generator):
        first = self.method not in BaselineDecoder.runs
        BaselineDecoder.runs.append(self.method)
        per, emitted = (5e-3, 1) if self.method == "ar" else (8e-3, 4)
        n = max_new_tokens // emitted
        steps = [StepStats(emitted, 1, 0) for _ in range(n)]
        return GenerationResult([1] * (n * emitted + 1), len(prompt), 0.0, (50.0 if first else per) * n,
                                "max_new_tokens", steps)


def test_baseline_steps_are_timed_after_a_warm_up_and_kept_in_the_file(tmp_path):
    BaselineDecoder.runs = []
    got = profile_baselines(BaselineDecoder, [1, 2, 3], steps=8)
    assert got == pytest.approx({"ar": 5e-3, "dflash": 8e-3})
    assert BaselineDecoder.runs == ["ar"] * 3 + ["dflash"] * 3
    assert describe_baselines(got) == "baseline steps AR 5.000 ms, DFlash 8.000 ms"
    cal = Calibration("m", {}, CostModel(SHAPE, PEAKS, PARAMS), StepOverheads(1e-3, 1e-3), {}, {},
                      [{"s": 8, "c": 16, "latency_s": 1e-3}], baselines=got)
    path = tmp_path / "cal.json"
    cal.save(path)
    assert Calibration.load(path).baselines == got
    data = json.loads(path.read_text())
    del data["baselines"]  # written before they were measured
    path.write_text(json.dumps(data))
    assert Calibration.load(path).baselines == {}


class DisturbedDecoder(BaselineDecoder):
    """BaselineDecoder whose AR runs take 8 ms a step while something else runs on the machine (its first
    ``disturbed`` AR runs), 5 ms after."""

    disturbed = 0

    def generate(self, prompt, max_new_tokens, temperature, generator):
        res = super().generate(prompt, max_new_tokens, temperature, generator)
        if self.method == "ar" and BaselineDecoder.runs.count("ar") <= DisturbedDecoder.disturbed:
            res.decode_seconds *= 8 / 5
        return res


@pytest.mark.parametrize("disturbed, fitted, runs, ar", [
    (0, 4.5e-3, 6, 5e-3),  # 5 ms against a fitted 4.5: within the margin, measured once
    (3, 4.5e-3, 12, 5e-3),  # 8 ms: measured again, the quiet second measurement kept
    (6, 4.5e-3, 18, 5e-3),  # disturbed twice: the quiet third measurement kept
    (9, 4.5e-3, 18, 8e-3),  # disturbed throughout: kept as measured, after two more tries
    (3, 7.5e-3, 6, 8e-3),  # 8 ms against a fitted 7.5: within the margin, so it stays
    (3, 7.0e-3, 12, 5e-3),  # 8 ms against a fitted 7: 1.14 times it, measured again
])
def test_an_ar_step_far_over_its_fitted_cost_is_measured_again(disturbed, fitted, runs, ar):
    BaselineDecoder.runs, DisturbedDecoder.disturbed = [], disturbed
    lines = []
    got = settled_baselines(DisturbedDecoder, [1, 2, 3], fitted, steps=8, log=lines.append)
    assert len(BaselineDecoder.runs) == runs
    assert got == pytest.approx({"ar": ar, "dflash": 8e-3})
    again = [5.0 if k * 3 >= disturbed else 8.0 for k in range(1, runs // 6)]
    assert lines == [f"[calibrate] AR's step 8.000 ms was over 1.12 x the fitted C(1) {fitted * 1e3:.3f} ms; "
                     f"measured again: {a:.3f} ms" for a in again]
