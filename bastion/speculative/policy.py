"""How many nodes a step may verify: the tree policy every engine, the rule and the CLI share.

It has a module of its own because everything in :mod:`bastion.speculative` reads it (the
tree construction, the rule's count, the best-first walk, the method facts) while it
needs none of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from bastion.defaults import N_MAX, N_MIN, TOPK, TOPK_LIMIT

# How the rule's node count becomes a tree size (the module docstring of
# bastion.speculative.tree states each): "down" to a multiple of n_min (the paper's
# release), to the "best-neighbour" multiple by expected rate, or None: the count itself.
ROUNDINGS: tuple[str | None, ...] = ("down", "best-neighbour", None)


@dataclass(frozen=True)
class TreePolicy:
    """How many nodes to verify.

    ``budget=None`` is BASTION's adaptive rule; ``budget=N`` takes the N most probable
    nodes (root included), for the budget ablation.  ``topk`` caps the tokens considered
    per depth (K <= 128).  ``n_min`` is the rule's floor and, when ``rounding`` is not
    None, the width of the buckets its count is rounded to (few shapes for CUDA graphs).
    """

    n_min: int = N_MIN
    n_max: int = N_MAX
    topk: int = TOPK
    rounding: str | None = "down"
    budget: int | None = None

    def __post_init__(self) -> None:
        if self.n_min < 1 or self.n_max < self.n_min:
            raise ValueError(f"need 1 <= n_min <= n_max, got n_min={self.n_min}, n_max={self.n_max}")
        if not 1 <= self.topk <= TOPK_LIMIT:
            raise ValueError(f"topk must be in 1..{TOPK_LIMIT}, got {self.topk}")
        if self.budget is not None and self.budget < 1:
            raise ValueError(f"budget must be >= 1 node, got {self.budget}")
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"unknown rounding {self.rounding!r}; choose from {', '.join(map(str, ROUNDINGS))}")

    @property
    def limit(self) -> int:
        """The most nodes a tree may have: the fixed budget, or ``n_max`` for the adaptive rule."""
        return self.budget if self.budget is not None else self.n_max

    @property
    def neighbour(self) -> bool:
        """The count is weighed against the bucket above it (``best-neighbour`` rounding)."""
        return self.rounding == "best-neighbour"
