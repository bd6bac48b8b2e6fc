"""Choosing EAGLE-3's tree shape: which settings are refused, which shapes are measured, which one wins."""

from __future__ import annotations

import itertools
import math

import pytest

from bastion.runs.eagle3_choice import sweep_ties
from bastion.speculative.eagle3_tree import (
    DEFAULT_SHAPES,
    MAX_TOLERANCE,
    RATE_RESOLUTION,
    TreeMeasurement,
    candidate_trees,
    check_tree,
    choose_tree,
    every_round_kept,
    tolerance,
)
from bastion.speculative.methods import Eagle3Policy


@pytest.mark.parametrize("setting, vocab, words", [
    ((-1, 2, 6), None, "depth -1 is not a valid EAGLE-3 tree setting: give an integer >= 0"),
    ((2, 0, 6), None, "top-k 0 is not a valid"),
    ((2, 2, -3), None, "total tokens -3 is not a valid"),
    ((2, 5000, 60), 4096, "top-k 5000 exceeds the head's draft vocabulary (4096): give at most 4096"),
    ((2, 2, 3), None, "total tokens 3 are too few for depth 2"),
    ((7, 10, 8), 32000, "depth + 2 = 9 nodes; give at least 9 or a depth of at most 6"),
])
def test_unbuildable_settings_are_refused_naming_the_value(setting, vocab, words):
    with pytest.raises(ValueError) as err:
        check_tree(*setting, draft_vocab=vocab)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("setting", [(0, 1, 2), (2, 2, 4), (7, 10, 60), (1, 4096, 3)])
def test_buildable_settings_pass(setting):
    check_tree(*setting, draft_vocab=4096)


def test_the_deepest_round_needs_depth_plus_two_nodes():
    assert not every_round_kept(Eagle3Policy(2, 2, 3))  # 2 kept nodes reach level 2; the third pass proposes level 3
    assert every_round_kept(Eagle3Policy(2, 2, 4))
    assert every_round_kept(Eagle3Policy(0, 3, 2))


def test_candidates_are_buildable_distinct_and_keep_every_round():
    full = candidate_trees(4096)
    assert [(p.depth, p.top_k, p.total_tokens) for p in full] == list(DEFAULT_SHAPES)
    assert all(p.total_tokens >= p.depth + 2 for p in full)
    small = candidate_trees(4)  # top-k above the vocabulary cannot be built
    assert all(p.top_k <= 4 for p in small) and Eagle3Policy(3, 4, 12) in small
    # 1/1/3 and 1/1/9 draft the same 3-node chain (1 + 1 proposals): measured once; 2/2/3 is never measured
    shapes = candidate_trees(4096, [(1, 1, 3), (1, 1, 9), (2, 2, 3), (2, 2, 6)])
    assert shapes == [Eagle3Policy(1, 1, 3), Eagle3Policy(2, 2, 6)]


def _m(shape, tau, ms):
    return TreeMeasurement(Eagle3Policy(*shape), tau, ms / 1e3)


def test_the_fastest_shape_wins_and_the_order_of_measurements_does_not_matter():
    ms = [_m((1, 1, 3), 1.9, 10.0), _m((3, 2, 8), 2.9, 13.0), _m((7, 10, 60), 4.0, 20.0), _m((4, 4, 16), 3.1, 14.5)]
    rates = {m.policy: m.tokens_per_second for m in ms}
    assert max(rates.values()) == rates[Eagle3Policy(3, 2, 8)]  # 223 tok/s; 4/4/16 214, 4.1% behind
    for perm in itertools.permutations(ms):
        assert choose_tree(list(perm), resolution=0.0).policy == Eagle3Policy(3, 2, 8)
        assert choose_tree(list(perm), resolution=0.04).policy == Eagle3Policy(3, 2, 8)
        assert choose_tree(list(perm)).policy == Eagle3Policy(4, 4, 16)  # within RATE_RESOLUTION: the higher τ


def test_a_near_tie_goes_to_the_higher_tau_and_only_a_near_one():
    chain3, chain5, tree10 = _m((1, 1, 3), 2.5, 10.0), _m((3, 1, 5), 3.6, 15.0), _m((4, 2, 10), 4.2, 21.0)
    assert [round(m.tokens_per_second) for m in (chain3, chain5, tree10)] == [250, 240, 200]
    assert RATE_RESOLUTION == 0.05
    assert choose_tree([chain3, chain5, tree10]).policy == Eagle3Policy(3, 1, 5)  # 4% behind, 1.1 more a step
    assert choose_tree([chain3, tree10]).policy == Eagle3Policy(1, 1, 3)  # 20% behind is no tie
    assert choose_tree([chain3, chain5], resolution=0.03).policy == Eagle3Policy(1, 1, 3)


def test_without_ties_the_fastest_shape_wins_as_a_gpu_sweep_chooses():
    """Six shapes of an H200 sweep of the tiny pair (τ as its log printed it, step times from the
    rates it printed): 4/4/16, 4.5% behind 3/1/5, ties under the CPU's rule and wins on τ; on a
    GPU the fastest shape wins alone."""
    measured = [_m((1, 1, 3), 2.61, 0.44086), _m((3, 1, 5), 3.79, 0.59118), _m((2, 2, 6), 3.46, 0.58636),
                _m((4, 2, 10), 4.54, 0.76927), _m((4, 4, 16), 4.73, 0.77247), _m((7, 10, 60), 6.60, 1.14239)]
    assert choose_tree(measured).policy == Eagle3Policy(4, 4, 16)
    assert choose_tree(measured, ties=False).policy == Eagle3Policy(3, 1, 5)
    assert sweep_ties("cpu") and not sweep_ties("cuda") and not sweep_ties("xpu")  # another accelerator: a GPU's rule


def test_exact_ties_go_to_the_smaller_tree():
    ms = [_m((4, 4, 16), 3.0, 15.0), _m((3, 2, 8), 3.0, 15.0), _m((3, 4, 12), 3.0, 15.0)]  # all 200 tok/s, τ 3
    assert choose_tree(ms).policy == Eagle3Policy(3, 2, 8)


@pytest.mark.parametrize("resolution", [-0.01, 1.0, 5])
def test_a_resolution_outside_a_fraction_is_refused(resolution):
    with pytest.raises(ValueError, match=rf"resolution {resolution!r} must be a fraction in \[0, 1\)"):
        choose_tree([_m((1, 1, 3), 2.0, 10.0)], resolution=resolution)


def test_a_shape_whose_last_round_is_never_kept_is_never_chosen():
    fast_but_wasteful = _m((2, 2, 3), 1.9, 5.0)  # 380 tok/s, yet its third pass commits nothing
    assert choose_tree([fast_but_wasteful, _m((1, 1, 3), 1.9, 8.0)]).policy == Eagle3Policy(1, 1, 3)
    with pytest.raises(ValueError, match=r"no measured EAGLE-3 tree keeps every round \(measured: 2/2/3\)"):
        choose_tree([fast_but_wasteful])


@pytest.mark.parametrize("tau, seconds, words", [(0.5, 0.01, "tau 0.5 of tree 2/2/6"),
                                                 (2.0, 0.0, "step time 0.0 s of tree 2/2/6")])
def test_impossible_measurements_are_refused(tau, seconds, words):
    with pytest.raises(ValueError, match=words):
        TreeMeasurement(Eagle3Policy(2, 2, 6), tau, seconds)


def test_measurements_round_trip_through_json_dicts():
    m = _m((5, 6, 24), 3.25, 17.5)
    assert TreeMeasurement.from_dict(m.to_dict()) == m
    counted = TreeMeasurement(Eagle3Policy(5, 6, 24), 3.25, 0.0175, rates=(190.0, 185.5, 201.0, 170.25))
    assert counted.prompts == counted.to_dict()["prompts"] == 4
    assert TreeMeasurement.from_dict(counted.to_dict()) == counted
    older = {k: v for k, v in m.to_dict().items() if k not in ("prompts", "rates")}  # stored without them
    assert TreeMeasurement.from_dict(older).prompts == 0 and TreeMeasurement.from_dict(older).rates == ()
    rated = TreeMeasurement(Eagle3Policy(5, 6, 24), 3.25, 0.0175, rates=(180.5, 201.25))
    assert TreeMeasurement.from_dict(rated.to_dict()) == rated


def _rated(shape, tau, ms, rates):
    return TreeMeasurement(Eagle3Policy(*shape), tau, ms / 1e3, tuple(rates))


# per-prompt rates of the 3- and 5-node chains on the tiny pair's 4 sweep prompts (CPU)
CHAIN3_RATES, CHAIN5_RATES = (266.0, 246.0, 240.0, 308.0), (261.0, 239.0, 227.0, 344.0)


def test_a_shape_the_prompts_disagree_about_ties_beyond_the_resolution():
    chain3 = _rated((1, 1, 3), 2.515, 10.06, CHAIN3_RATES)  # 250 tok/s
    chain5 = _rated((3, 1, 5), 3.552, 15.05, CHAIN5_RATES)  # 236 tok/s: 5.6% behind
    assert 1 - chain5.tokens_per_second / chain3.tokens_per_second > RATE_RESOLUTION
    assert tolerance(chain5, chain3) == pytest.approx(1 - math.exp(-2 * 0.0371), abs=2e-3)  # 2 SE of the log ratios
    assert choose_tree([chain3, chain5]).policy == Eagle3Policy(3, 1, 5)
    # the same means without rates per prompt: the fixed resolution, and the 3-node chain
    assert choose_tree([_m((1, 1, 3), 2.515, 10.06), _m((3, 1, 5), 3.552, 15.05)]).policy == Eagle3Policy(1, 1, 3)
    # prompts that agree it is 5.6% behind: no tie
    steady = _rated((3, 1, 5), 3.552, 15.05, [r * 0.944 for r in CHAIN3_RATES])
    assert tolerance(steady, chain3) == RATE_RESOLUTION and choose_tree([chain3, steady]).policy == Eagle3Policy(1, 1, 3)


def test_however_much_the_prompts_disagree_a_shape_far_behind_is_no_tie():
    leader = _rated((1, 1, 3), 2.5, 10.0, (100.0, 400.0, 100.0, 400.0))
    wild = _rated((4, 2, 10), 4.2, 19.0, (400.0, 100.0, 400.0, 100.0))  # 221 tok/s against 250: 11.6% behind
    assert tolerance(wild, leader) == MAX_TOLERANCE
    assert choose_tree([leader, wild]).policy == Eagle3Policy(1, 1, 3)
    assert tolerance(leader, leader) == RATE_RESOLUTION


def test_rates_that_are_not_positive_are_refused():
    with pytest.raises(ValueError, match=r"rates \[250.0, 0.0\] of tree 1/1/3 must all be > 0"):
        _rated((1, 1, 3), 2.5, 10.0, (250.0, 0.0))
