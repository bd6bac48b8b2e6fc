"""The order in which the methods of one prompt take their turns.

Methods decoded one after another on the same prompt do not run on the same machine: the
one that follows AR finds the caches as AR left them, and the one that runs first in a
round may wait out what the last prompt started.  With a fixed order these carry-over
effects always land on the same methods.  On the 2-core CPU, in the ablation's fixed
order (AR, ``bastion``, ``bastion_plus``, the fixed budgets), ``bastion`` took 0.5-2.3% more
time than the fixed budget of 16 that built exactly its trees at T = 0, in all six
comparisons of three runs: a bias as large as the differences the ablation reports.  In
this order the eight comparisons of two runs (both temperatures) ranged from -0.1% to
+2.7%, five of them within 0.2% (docs/performance.md): what is left is the noise between
two methods of one job.

So round ``r`` (a prompt) uses row ``r`` of a Williams design: over ``n`` rounds (``2n``
when ``n`` is odd) every method takes every position equally often, and every method
directly follows every other one equally often.  Round 0 keeps the given order's first
method first (AR, where it runs).
"""

from __future__ import annotations


def williams_rows(n: int) -> list[list[int]]:
    """The rows of a Williams design for ``n`` treatments: ``n`` rows for even ``n``, ``2n`` for odd."""
    if n < 1:
        raise ValueError(f"a Williams design needs at least one treatment, not {n}")
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(j + i) % n for j in first] for i in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def turn_order(n: int, round_: int) -> list[int]:
    """The indices of ``n`` methods in the order they decode in round ``round_``."""
    rows = williams_rows(n)
    return rows[round_ % len(rows)]
