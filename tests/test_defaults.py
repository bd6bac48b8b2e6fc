"""The shared defaults' one function with logic: `n_min: auto` sized for the device."""

from __future__ import annotations

import pytest

from bastion.defaults import N_MIN, N_MIN_CPU, resolve_n_min


def test_auto_n_min_is_the_gpu_or_the_cpu_width_and_a_count_passes_through():
    assert (resolve_n_min("auto", gpu=True), resolve_n_min("auto", gpu=False)) == (N_MIN, N_MIN_CPU) == (32, 16)
    assert resolve_n_min(12, gpu=True) == resolve_n_min(12, gpu=False) == 12
    for bad in (0, -4, "8", 2.5, True):
        with pytest.raises(ValueError, match="n_min must be a node count >= 1 or 'auto'"):
            resolve_n_min(bad, gpu=False)
