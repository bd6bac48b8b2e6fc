"""A correction of the rule's acceptance surrogate, learned while decoding (this project's rule, T > 0).

The rule expects a tree to commit P tokens: the root plus every node's path probability
under the draft.  At T = 0 that holds on the tiny pair (P / τ 1.00-1.02), but at T = 1 the
target samples from a flat distribution and far fewer drafts survive than the draft's
probabilities say: P / τ 1.2-1.4 for every tree size, so the rule grows trees for tokens
that never come (docs/performance.md, "The budget rule against reality").

The correction is a factor ``c`` per depth: a path of depth d counts ``p c^d``, which is
``log c`` added to every depth's draft log-probabilities (the ranking within a depth
does not change, deeper paths lose more).  It is fitted to what the verified trees did:
over the drafted steps so far, each weighed by :data:`DECAY` per step since,

    sum_d S_d c^d = A,   S_d the verified trees' path probabilities at depth d, A their accepted drafts

which has one root in ``c`` (the left side grows with c), found by bisection within
[:data:`LOW`, :data:`HIGH`].  Until the trees have predicted :data:`WARM` accepted drafts
it stays 1.  Everything is on the host, from what each step verified; like the draft
gate it learns a step's outcome after the next step's tree is set, which is when the
static engine reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DECAY = 0.98  # weight of a step's evidence per drafted step since (about 50 steps' memory)
WARM = 8.0  # predicted accepted drafts before the factor departs from 1
LOW, HIGH = 0.25, 1.25  # the factor's range: low enough for T = 1, high enough that a first node still pays
ROUNDS = 40  # bisection rounds: the factor to about 1e-12


def depth_mass(logp, depths, d_max: int) -> list[float]:
    """Each depth's summed path probability [D] over the nodes given: path log-probabilities and depths (1..D)."""
    mass = [0.0] * d_max
    for lp, d in zip(logp, depths):
        mass[int(d) - 1] += math.exp(float(lp))
    return mass


@dataclass
class SurrogateFit:
    """The per-depth factor ``c``, fitted while decoding; :attr:`shift` is its ``log c``."""

    mass: list[float] = field(default_factory=list)  # S_d, decayed
    accepted: float = 0.0  # A, decayed
    shift: float = 0.0  # log c, added to every depth's draft log-probabilities

    def observe(self, mass: list[float], accepted: int, shift: float) -> None:
        """A verified tree's depth mass, its path probabilities read with ``shift`` per depth (the
        correction its step used, taken out here), and the drafts the step accepted."""
        if len(self.mass) < len(mass):
            self.mass += [0.0] * (len(mass) - len(self.mass))
        raw = [m * math.exp(-shift * (d + 1)) for d, m in enumerate(mass)]
        self.mass = [DECAY * s + (raw[d] if d < len(raw) else 0.0) for d, s in enumerate(self.mass)]
        self.accepted = DECAY * self.accepted + accepted
        if sum(self.mass) >= WARM:
            self.shift = math.log(self.factor())

    def factor(self) -> float:
        """The ``c`` that makes the trees' corrected expectation equal the drafts they accepted."""
        def expected(c: float) -> float:
            return sum(s * c ** (d + 1) for d, s in enumerate(self.mass))

        lo, hi = LOW, HIGH
        if expected(hi) <= self.accepted:
            return hi
        if expected(lo) >= self.accepted:
            return lo
        for _ in range(ROUNDS):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if expected(mid) < self.accepted else (lo, mid)
        return 0.5 * (lo + hi)
