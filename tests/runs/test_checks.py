"""``--n-min`` as the CLI checks it: before the device is known, and once it is."""

from __future__ import annotations

import pytest

from bastion.runs.checks import UsageError, check_n_min


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
