"""``--n-min`` as the CLI checks it: before the device is known, and once it is."""

from __future__ import annotations

import pytest

from bastion.runs.checks import UsageError, check_eagle3_tree, check_n_min, check_topk


def test_auto_waits_for_the_device_then_takes_its_width():
    assert check_n_min("auto", 8192) == "auto"
    assert check_n_min("auto", 8192, gpu=True) == 32
    assert check_n_min("auto", 8192, gpu=False) == 16
    assert check_n_min(8, 16) == 8 == check_n_min(8, 16, gpu=True)


@pytest.mark.parametrize("n_min,n_max,gpu,needle", [
    (0, 16, None, "n_min must be a node count >= 1 or 'auto', not 0"),
    (64, 16, None, "got --n-min 64 and --n-max 16"),
    ("auto", 8, True, "got --n-min 32 (auto) and --n-max 8"),  # only known once the device is
])
def test_bad_minimums_name_the_value(n_min, n_max, gpu, needle):
    with pytest.raises(UsageError, match=r"--n-min") as exc:
        check_n_min(n_min, n_max, gpu=gpu)
    assert needle in str(exc.value)


def _accepts(check, *args) -> bool:
    try:
        check(*args)
    except ValueError:  # UsageError is one
        return False
    return True


@pytest.mark.parametrize("depth, topk, total", [(7, 10, 60), (0, 1, 2), (0, 1, 1), (2, 2, 3), (2, 2, 4), (7, 0, 60),
                                               (7, 10, 0), (1, 4096, 3)])
def test_the_cli_eagle3_tree_is_the_tree_rule(depth, topk, total):
    """The flag check refuses exactly what :func:`check_tree` refuses, and builds what it accepts."""
    from bastion.speculative.eagle3_tree import check_tree
    from bastion.speculative.methods import Eagle3Policy

    text = f"{depth}/{topk}/{total}"
    assert _accepts(check_eagle3_tree, text) == _accepts(check_tree, depth, topk, total)
    if _accepts(check_eagle3_tree, text):
        assert check_eagle3_tree(text) == (depth, topk, total) and Eagle3Policy(depth, topk, total)


@pytest.mark.parametrize("text", ["7/10", "7/10/60/1", "a/b/c", "-1/2/6", "7,10,60", "", "AUTO"])
def test_a_malformed_eagle3_tree_is_refused_naming_it(text):
    with pytest.raises(UsageError) as exc:
        check_eagle3_tree(text)
    assert f"--eagle3-tree {text!r} is not a tree setting" in str(exc.value) and "e.g. 7/10/60" in str(exc.value)


def test_auto_eagle3_tree_waits_for_the_models():
    assert check_eagle3_tree("auto") is None


@pytest.mark.parametrize("topk", [-1, 0, 1, 64, 128, 129])
def test_the_cli_topk_bounds_are_the_tree_policys(topk):
    from bastion.speculative.policy import TreePolicy

    assert _accepts(check_topk, topk) == _accepts(lambda k: TreePolicy(topk=k), topk)


def test_the_rules_are_methods_and_the_lossy_one_is_opt_in():
    """Both rules and the lossy acceptance are methods the CLI takes; the default list leaves the lossy one out."""
    from bastion.benchmark import build_parser, run_from_args
    from bastion.runs.checks import parse_methods

    assert parse_methods("bastion_lossy,ar,bastion_plus") == ("ar", "bastion_plus", "bastion_lossy")  # run order
    args = build_parser().parse_args(["--model", "tiny", "--dataset", "stdlib-heldout"])
    assert run_from_args(args).methods == ("ar", "eagle3", "dflash", "bastion", "bastion_plus")
    with pytest.raises(UsageError, match=r"unknown method\(s\) \['bastion\+'\] in --methods; choose from .*bastion_lossy"):
        parse_methods("bastion+")


def test_a_method_is_its_facts():
    from bastion.speculative.methods import MethodSpec, method_spec
    from bastion.speculative.policy import TreePolicy

    paper, plus, lossy = (method_spec(m) for m in ("bastion", "bastion_plus", "bastion_lossy"))
    assert (paper.rule, paper.acceptance, plus.rule, lossy.rule, lossy.acceptance) == (
        "paper", "lossless", "plus", "paper", "lossy")
    policy = TreePolicy(n_min=16, rounding=None)
    assert (paper.tree_policy(policy, gpu=False).n_min, paper.tree_policy(policy, gpu=False).rounding) == (16, "down")
    assert plus.tree_policy(policy, gpu=True).rounding == "best-neighbour"
    assert (plus.tree_policy(policy, gpu=False).n_min, plus.tree_policy(policy, gpu=False).rounding) == (16, None)
    sampled = plus.tree_policy(policy, gpu=False, sampling=True)
    assert (sampled.n_min, sampled.rounding) == (1, None)  # at T > 0 from one node
    assert plus.tree_policies(policy, gpu=False) == {False: plus.tree_policy(policy, gpu=False), True: sampled}
    assert plus.tree_policy(policy, gpu=True, sampling=True) == plus.tree_policy(policy, gpu=True)
    assert (plus.gated(0.0), plus.gated(1.0), paper.gated(1.0)) == (False, True, False)
    assert plus.tree_policy(TreePolicy(budget=8), gpu=False) == TreePolicy(budget=8)  # a fixed budget stays as given
    assert (paper.draft_temperature(0.7), plus.draft_temperature(0.7), plus.draft_temperature(0.0)) == (1.0, 0.7, 1.0)
    with pytest.raises(ValueError, match="a ranked tree, and only one, needs a budget rule"):
        MethodSpec("x", tree="ranked", drafter="dflash")
    with pytest.raises(ValueError, match="unknown acceptance 'fast'"):
        MethodSpec("x", acceptance="fast")
