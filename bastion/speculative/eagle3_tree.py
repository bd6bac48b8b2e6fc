"""EAGLE-3 tree shapes: which can be built, which waste work, and which one to decode with.

A shape is an :class:`~bastion.speculative.methods.Eagle3Policy` (``depth`` expansion
rounds of the ``top_k`` best nodes, ``total_tokens`` kept, root included).  Its head
passes put nodes at levels ``1 .. depth + 1`` below the root: the first pass (over the
committed context) proposes level 1, expansion round ``i`` proposes level ``i + 1``.
Only the ``total_tokens - 1`` best proposals are verified, and a node is kept only with
all its ancestors, so a level-``L`` node needs ``L`` kept nodes.  The deepest round
therefore contributes only if ``total_tokens >= depth + 2``: below that, its head pass
(and every pass past the last reachable level) is pure cost.  The tiny experiment's former
2/2/3 is such a shape: 2 kept nodes reach level 2, and the third pass, which proposes
level 3, never counts.

Which buildable shape decodes fastest depends on the device (a CPU pays for every node
and round; a GPU verifies 60 nodes for little more than one) and on the head (a head that
guesses well deep down earns deep trees).  :func:`choose_tree` picks it from measurements
of real decoding, one :class:`TreeMeasurement` per shape (made by
:mod:`bastion.calibration.eagle3_tree`): the most tokens per second, a near-tie to the
shape that commits more per step, a near-tie judged by how much the sweep's prompts
disagree about the two shapes.  The choice is a pure function of the measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from bastion.speculative.methods import Eagle3Policy

# Candidate shapes (depth, top_k, total tokens), from chains to the reference tree: a sweep
# measures those that can be built for the head's vocabulary, every round contributing.
DEFAULT_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1, 1, 3), (2, 1, 4), (3, 1, 5), (2, 2, 6), (3, 2, 8), (4, 2, 10), (3, 4, 12), (4, 4, 16),
    (5, 4, 20), (5, 6, 24), (6, 8, 32), (7, 8, 48), (7, 10, 60),
)
# Rates closer than this are one sweep's noise: three sweeps of the tiny pair on the same 4
# prompts (a 2-core CPU VM, one thread, shapes interleaved) gave one shape rates up to 6%
# apart (1/1/3: 238, 242 and 251 tok/s).
RATE_RESOLUTION = 0.05
# Two shapes also differ from prompt to prompt: on the tiny pair's 4 sweep prompts the
# 5-node chain ran from 10% slower to 19% faster than the 3-node one, so the sweep's
# prompts, not the run's, can decide between them.  Where a sweep has rates per prompt, a
# shape ties with the leader within two standard errors of their paired log ratio, but
# never more than this far behind.
MAX_TOLERANCE = 0.10


def min_total_tokens(depth: int) -> int:
    """Fewest kept nodes (root included) for the deepest round to be kept: ``depth + 2``."""
    return depth + 2


def check_tree(depth: int, top_k: int, total_tokens: int, draft_vocab: int | None = None) -> None:
    """Refuse, in one line naming the value, a tree setting that cannot be built or wastes a round.

    Call it before any weights load: ``draft_vocab`` can come from the head's config.json
    alone (:func:`dflash.eagle3.checkpoint.read_draft_vocab`).  The message names the
    numbers of a ``depth/top-k/total`` setting (``--eagle3-tree``, the config's ``eagle3_tree``).
    """
    for name, value, low in (("depth", depth, 0), ("top-k", top_k, 1), ("total tokens", total_tokens, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} {value!r} is not a valid EAGLE-3 tree setting: give an integer >= {low}")
    if draft_vocab is not None and top_k > draft_vocab:
        raise ValueError(f"top-k {top_k} exceeds the head's draft vocabulary ({draft_vocab}): "
                         f"give at most {draft_vocab}")
    need = min_total_tokens(depth)
    if total_tokens < need:
        raise ValueError(f"total tokens {total_tokens} are too few for depth {depth}: drafts reach "
                         f"{depth + 1} below the root, so keeping the deepest round needs depth + 2 = {need} nodes; "
                         f"give at least {need} or a depth of at most {max(total_tokens - 2, 0)}")


def every_round_kept(policy: Eagle3Policy) -> bool:
    """Whether the deepest round's nodes can be verified at all (see the module docstring)."""
    return policy.total_tokens >= min_total_tokens(policy.depth)


def candidate_trees(draft_vocab: int, shapes: Iterable[tuple[int, int, int]] = DEFAULT_SHAPES) -> list[Eagle3Policy]:
    """The shapes worth measuring for a head: buildable, every round kept, no two drafting the same tree.

    ``total_tokens`` beyond the proposals a shape makes changes nothing (the tree is
    capped), so such a shape is the same as the capped one and measured once.
    """
    out: list[Eagle3Policy] = []
    seen: set[tuple[int, int, int]] = set()
    for depth, top_k, total in shapes:
        try:
            check_tree(depth, top_k, total, draft_vocab)
        except ValueError:
            continue
        policy = Eagle3Policy(depth, top_k, total)
        key = (depth, top_k, policy.tree_size(draft_vocab))
        if key not in seen:
            seen.add(key)
            out.append(policy)
    return out


@dataclass(frozen=True)
class TreeMeasurement:
    """What one shape did on real prompts: tokens committed per step and seconds per step.

    ``rates``: tokens per second on each prompt the shape decoded, in the sweep's order
    (empty where not recorded); a sweep stops decoding a shape that falls far behind after
    its first prompt, so shapes may have fewer.
    """

    policy: Eagle3Policy
    tau: float
    step_seconds: float
    rates: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tau) and self.tau >= 1.0):
            raise ValueError(f"tau {self.tau!r} of tree {_name(self.policy)} is impossible: a step commits >= 1 token")
        if not (math.isfinite(self.step_seconds) and self.step_seconds > 0):
            raise ValueError(f"step time {self.step_seconds!r} s of tree {_name(self.policy)} must be > 0")
        if not all(math.isfinite(r) and r > 0 for r in self.rates):
            raise ValueError(f"rates {list(self.rates)!r} of tree {_name(self.policy)} must all be > 0 tokens a second")

    @property
    def tokens_per_second(self) -> float:
        return self.tau / self.step_seconds

    @property
    def prompts(self) -> int:
        """On how many prompts the shape was measured (0 where not recorded)."""
        return len(self.rates)

    def to_dict(self) -> dict[str, Any]:
        p = self.policy
        return {"depth": p.depth, "top_k": p.top_k, "total_tokens": p.total_tokens, "tau": self.tau,
                "step_seconds": self.step_seconds, "prompts": self.prompts, "rates": list(self.rates)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TreeMeasurement":
        return cls(Eagle3Policy(int(data["depth"]), int(data["top_k"]), int(data["total_tokens"])),
                   float(data["tau"]), float(data["step_seconds"]), tuple(float(r) for r in data.get("rates", ())))


def _name(p: Eagle3Policy) -> str:
    return f"{p.depth}/{p.top_k}/{p.total_tokens}"


def tolerance(shape: TreeMeasurement, leader: TreeMeasurement, resolution: float = RATE_RESOLUTION) -> float:
    """How far (a fraction) below ``leader``'s rate ``shape`` may measure and still tie with it.

    ``resolution``, or, where both have rates on at least two of the same prompts, two
    standard errors of their per-prompt log ratio if that is wider, up to
    :data:`MAX_TOLERANCE`: the prompts disagree about the two shapes by that much.
    """
    k = min(len(shape.rates), len(leader.rates))
    if k < 2 or shape is leader:
        return resolution
    ratios = [math.log(a / b) for a, b in zip(shape.rates[:k], leader.rates[:k])]
    mean = sum(ratios) / k
    se = math.sqrt(sum((r - mean) ** 2 for r in ratios) / (k - 1) / k)
    return min(max(resolution, 1.0 - math.exp(-2.0 * se)), max(resolution, MAX_TOLERANCE))


def choose_tree(measurements: Sequence[TreeMeasurement], resolution: float = RATE_RESOLUTION,
                ties: bool = True) -> TreeMeasurement:
    """The shape to decode with: the most tokens per second, and with ``ties``, among the
    shapes that tie with that rate (:func:`tolerance`), the one that commits the most per step.

    Rates that close cannot be told apart by one short sweep, while τ at T = 0 is exact; so
    a near-tie goes to the shape that gets more of the head's drafts accepted, and an exact
    tie to the smaller tree.  Without ``ties`` (a sweep whose rates can be told apart: see
    :data:`bastion.runs.eagle3_choice.SWEEP_TIES`) the fastest shape wins alone.  Shapes whose
    deepest round can never be kept are passed over whatever they measured: their step time
    holds a head pass that commits nothing.
    """
    if not 0.0 <= resolution < 1.0:
        raise ValueError(f"resolution {resolution!r} must be a fraction in [0, 1), e.g. {RATE_RESOLUTION}")
    usable = [m for m in measurements if every_round_kept(m.policy)]
    if not usable:
        names = ", ".join(_name(m.policy) for m in measurements) or "none"
        raise ValueError(f"no measured EAGLE-3 tree keeps every round (measured: {names}); "
                         "measure shapes with total tokens >= depth + 2")
    leader = max(usable, key=lambda m: m.tokens_per_second)
    near = [m for m in usable
            if m.tokens_per_second >= (1.0 - (tolerance(m, leader, resolution) if ties else 0.0))
            * leader.tokens_per_second]
    return max(near, key=lambda m: (m.tau, m.tokens_per_second, -m.policy.total_tokens, -m.policy.depth,
                                    -m.policy.top_k))
