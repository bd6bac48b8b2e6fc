"""The order of a round's methods: a Williams design, balanced for position and predecessor."""

from __future__ import annotations

import collections

import pytest

from bastion.runs.order import turn_order, williams_rows


@pytest.mark.parametrize("n", range(1, 10))
def test_every_method_takes_every_position_and_follows_every_other_equally_often(n):
    rows = williams_rows(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(row) == list(range(n)) for row in rows)
    positions = collections.Counter((i, row[i]) for row in rows for i in range(n))
    assert set(positions.values()) == {len(rows) // n}
    assert len(positions) == n * n
    if n > 1:
        follows = collections.Counter((row[i], row[i + 1]) for row in rows for i in range(n - 1))
        assert len(follows) == n * (n - 1)  # every ordered pair of distinct methods
        assert len(set(follows.values())) == 1, follows


def test_round_zero_keeps_the_first_method_first_and_rounds_cycle():
    assert turn_order(4, 0) == [0, 1, 3, 2] and turn_order(4, 1) == [1, 2, 0, 3]
    assert turn_order(4, 4) == turn_order(4, 0)
    assert turn_order(3, 3) == [2, 1, 0] and turn_order(3, 6) == turn_order(3, 0)  # odd: the mirrored rows follow
    assert turn_order(1, 5) == [0]


def test_a_design_of_no_methods_is_refused():
    with pytest.raises(ValueError, match="at least one treatment, not 0"):
        williams_rows(0)
