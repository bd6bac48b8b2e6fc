"""The adaptive search for a tree's node count, written once for every engine.

Ranking all paths a tree could hold is wasteful: the rule keeps a few dozen of
thousands.  So a step ranks only the best ``m`` (about twice the last tree, rounded up to
a power of two: few shapes), counts the nodes the rule keeps among them, and ranks again
four times wider when the count used them all (then more paths could have joined); the
count is finally rounded to its bucket.  A fixed budget ranks its ``budget - 1`` paths
once.

How a ranking runs is the engine's business, handed in as ``rank(m) -> (got, n)``: the
paths it found (fewer than ``m`` when the whole space was ranked) and the rule's count
among them.  The eager engine ranks and counts on the spot (:func:`bastion.speculative.tree.build_tree_topk`:
the best-first walk on a CPU, vectorised ranking and the cumulative-sum count
elsewhere); the static engine launches its ranking before the step's one host read and
takes the first count from that read, so it calls :meth:`AdaptiveSearch.width` and
:meth:`AdaptiveSearch.settle` on either side of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from bastion.speculative.policy import TreePolicy
from bastion.speculative.rule import bucket_size, search_width, wider_search

Rank = Callable[[int], tuple[int, int]]  # m -> (paths ranked, the rule's node count among them)


@dataclass(frozen=True)
class AdaptiveSearch:
    """Search width -> rank -> count -> wider search while inexact -> bucket."""

    policy: TreePolicy

    def width(self, hint: int | None) -> int:
        """Paths to rank first: from ``hint`` (about twice the last tree; None: all the tree could hold), or the budget's."""
        if self.policy.budget is not None or hint is None:
            return max(self.policy.limit - 1, 1)
        return search_width(hint, self.policy)

    def settle(self, m: int, got: int, n: int, rank: Rank) -> int:
        """The node count, given a ranking of ``m`` paths that found ``got`` and counted ``n``: re-ranked wider while
        the count may be short of the rule's, then bucketed.  A fixed budget's count is final."""
        if self.policy.budget is not None:
            return n
        while (wider := wider_search(m, got, n, self.policy)) is not None:
            m = wider
            got, n = rank(m)
        return bucket_size(n, self.policy)

    def count(self, hint: int | None, rank: Rank) -> int:
        """:meth:`width`, a ranking, then :meth:`settle`: the whole search where the count is read on the spot."""
        m = self.width(hint)
        got, n = rank(m)
        return self.settle(m, got, n, rank)
