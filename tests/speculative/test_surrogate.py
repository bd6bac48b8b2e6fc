"""The per-depth correction of the rule's surrogate, fitted to what verified trees accepted."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bastion.speculative.surrogate import HIGH, LOW, WARM, SurrogateFit, depth_mass


def test_depth_mass_sums_path_probabilities_by_depth():
    assert depth_mass([math.log(0.5), math.log(0.25), math.log(0.2)], [1, 2, 1], 3) == pytest.approx([0.7, 0.25, 0.0])


def test_the_fit_recovers_a_per_depth_factor():
    """Trees whose depth-d paths are accepted c**d times as often as the draft says: the fit finds c."""
    rng = np.random.default_rng(0)
    for c in (0.4, 0.7, 0.95, 1.1):
        fit = SurrogateFit()
        for _ in range(300):
            mass = list(rng.uniform(0, 4, 6) * 0.8 ** np.arange(6))  # trees of a few dozen nodes
            expected = sum(m * c ** (d + 1) for d, m in enumerate(mass))
            fit.observe(mass, int(rng.poisson(expected)), 0.0)
        assert math.exp(fit.shift) == pytest.approx(c, rel=0.1), c


def test_it_stays_uncorrected_until_warm_and_within_its_range():
    fit = SurrogateFit()
    fit.observe([WARM / 2], 0, 0.0)
    assert fit.shift == 0.0  # too little evidence yet
    fit.observe([WARM], 0, 0.0)
    assert math.exp(fit.shift) == pytest.approx(LOW)  # nothing accepted: the floor, never zero
    rich = SurrogateFit()
    for _ in range(20):
        rich.observe([1.0, 1.0], 6, 0.0)
    assert math.exp(rich.shift) == pytest.approx(HIGH)


def test_a_step_read_with_a_correction_counts_as_its_uncorrected_draft():
    plain, shifted = SurrogateFit(), SurrogateFit()
    for _ in range(30):
        mass = [0.9, 0.5, 0.2]
        plain.observe(mass, 1, 0.0)
        s = -0.3  # the step's ranking read every depth 0.3 lower: its path probabilities are smaller
        shifted.observe([m * math.exp(s * (d + 1)) for d, m in enumerate(mass)], 1, s)
    assert shifted.shift == pytest.approx(plain.shift)
