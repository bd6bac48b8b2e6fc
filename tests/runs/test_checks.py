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


@pytest.mark.parametrize("depth, topk, total", [(7, 10, 60), (0, 1, 1), (-1, 10, 60), (7, 0, 60), (7, 10, 0), (-3, -2, -1)])
def test_the_cli_eagle3_bounds_are_the_policys(depth, topk, total):
    """The torch-free flag check refuses exactly what :class:`Eagle3Policy` refuses."""
    from bastion.speculative.methods import Eagle3Policy

    assert _accepts(check_eagle3_tree, depth, topk, total) == _accepts(Eagle3Policy, depth, topk, total)


@pytest.mark.parametrize("topk", [-1, 0, 1, 64, 128, 129])
def test_the_cli_topk_bounds_are_the_tree_policys(topk):
    from bastion.speculative.policy import TreePolicy

    assert _accepts(check_topk, topk) == _accepts(lambda k: TreePolicy(topk=k), topk)
