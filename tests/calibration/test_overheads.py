"""T_other's growth with the tree: measured between two tree sizes and charged per node by the budget rule."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from bastion.calibration.calibrate import overhead_budgets
from bastion.calibration.overheads import profile_overheads
from bastion.calibration.store import Calibration
from bastion.costmodel.model import CostModel, StepOverheads, rule_costs
from bastion.results.generation import GenerationResult, StepStats
from bastion.speculative.tree import TreePolicy, count_nodes
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


def test_the_growth_per_node_is_the_line_through_two_tree_sizes():
    ov = profile_overheads(TimedDecoder, (16, 64), [1, 2, 3])
    assert ov.t_draft == pytest.approx(4e-3) and ov.t_other == pytest.approx(2e-3 + 5e-6 * 16)
    assert ov.t_other_per_node == pytest.approx(5e-6) and ov.reference_nodes == 16
    # the size-independent part: T_draft and T_other less the growth up to the reference size
    assert ov.fixed == pytest.approx(4e-3 + 2e-3)
    alone = profile_overheads(TimedDecoder, (16,), [1, 2, 3])
    assert alone.t_other_per_node == 0.0 and alone.fixed == pytest.approx(4e-3 + 2e-3 + 5e-6 * 16)


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
    assert ov.t_other == pytest.approx(2e-3 + 5e-6 * 16) and ov.t_other_per_node == pytest.approx(5e-6)


def test_probe_sizes_follow_the_policy():
    assert overhead_budgets(TreePolicy(n_min=8)) == (16, 64)
    assert overhead_budgets(TreePolicy(n_min=32, n_max=128)) == (64, 128)
    assert overhead_budgets(TreePolicy(n_min=16, n_max=32)) == (32,)  # no larger size to measure: no growth


def test_the_rule_charges_the_growth_and_keeps_smaller_trees():
    base = CostModel(SHAPE, PEAKS, PARAMS)
    ov = StepOverheads(4e-3, 2e-3, t_other_per_node=2e-5, reference_nodes=16)
    charged = rule_costs(base, ov)
    n = torch.arange(130, dtype=torch.float64)
    torch.testing.assert_close(charged.curve(256, 128) - base.curve(256, 128), 2e-5 * n * (n > 0))
    assert rule_costs(base, StepOverheads(4e-3, 2e-3)) is base  # nothing measured: the curve as fitted
    # candidates of falling probability: each node is now dearer, so the rule stops earlier
    logp = torch.log(torch.linspace(0.5, 1e-4, 127))
    policy = TreePolicy(n_min=1, n_max=128)
    kept = int(count_nodes(logp, policy, charged.curve(256, 128), ov.fixed))
    before = int(count_nodes(logp, policy, base.curve(256, 128), StepOverheads(4e-3, 2e-3).fixed))
    assert 1 < kept < before


def test_calibration_files_keep_the_growth_and_older_files_load_without_it(tmp_path):
    ov = StepOverheads(1e-3, 1e-3, t_other_per_node=3e-6, reference_nodes=16)
    cal = Calibration("m", {}, CostModel(SHAPE, PEAKS, PARAMS), ov, {"heldout_mape": 0.01}, {},
                      [{"s": 8, "c": 16, "latency_s": 1e-3}])
    path = tmp_path / "cal.json"
    cal.save(path)
    assert Calibration.load(path).overheads == ov
    data = json.loads(path.read_text())
    data["overheads"] = {"t_draft": 1e-3, "t_other": 1e-3}  # written before the growth was measured
    path.write_text(json.dumps(data))
    assert Calibration.load(path).overheads == StepOverheads(1e-3, 1e-3)
