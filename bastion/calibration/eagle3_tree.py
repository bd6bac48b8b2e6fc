"""EAGLE-3's tree shape for one device and one head, from a short sweep on real prompts.

The latency calibration times random tokens, which says what a tree of ``n`` nodes costs
to verify but nothing about how many of its nodes a head gets accepted: that needs real
drafts.  So each candidate shape (:func:`~bastion.speculative.eagle3_tree.candidate_trees`)
decodes a few prompts of the dataset on the engine that will decode, and keeps tokens
committed per step (τ) and seconds per step; :func:`~bastion.speculative.eagle3_tree.choose_tree`
takes the fastest.  Both depend on the head, so the result belongs to the head: it must
be stored under a key that names the head's files as well as the hardware and engine.

Timing follows :mod:`bastion.calibration.overheads`: a warm-up run first (graphs,
caches), then the fastest of ``passes`` runs per prompt, since noise only adds time.
At temperature 0 τ does not depend on timing at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from bastion.calibration.store import CalibrationError
from bastion.speculative.eagle3_tree import TreeMeasurement, candidate_trees, choose_tree
from bastion.speculative.methods import Eagle3Policy

if TYPE_CHECKING:
    from bastion.engines.base import Decoder


@dataclass
class TreeChoice:
    """The chosen shape with every measurement behind it (for the record and the cache)."""

    chosen: TreeMeasurement
    measured: list[TreeMeasurement] = field(default_factory=list)

    @property
    def policy(self) -> Eagle3Policy:
        return self.chosen.policy

    def to_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen.to_dict(), "measured": [m.to_dict() for m in self.measured]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TreeChoice":
        return cls(TreeMeasurement.from_dict(data["chosen"]), [TreeMeasurement.from_dict(m) for m in data["measured"]])


def measure_tree(decoder: Decoder, policy: Eagle3Policy, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 passes: int = 2) -> TreeMeasurement:
    """τ and seconds per step of one shape's decoder over ``prompts`` (greedy)."""
    if not prompts:
        raise CalibrationError("the EAGLE-3 tree sweep needs at least one prompt")
    decoder.generate(prompts[0], max_new_tokens=max_new_tokens)  # warm-up: graphs, caches
    committed = steps = 0
    seconds = 0.0
    for prompt in prompts:
        runs = [decoder.generate(prompt, max_new_tokens=max_new_tokens) for _ in range(max(passes, 1))]
        fastest = min(runs, key=lambda r: r.decode_seconds)
        committed += sum(s.committed for s in fastest.steps)
        steps += len(fastest.steps)
        seconds += fastest.decode_seconds
    if not steps or seconds <= 0:
        raise CalibrationError(f"the EAGLE-3 sweep of tree {policy.depth}/{policy.top_k}/{policy.total_tokens} "
                               f"made no timed step; use longer prompts or more new tokens")
    return TreeMeasurement(policy, committed / steps, seconds / steps)


def sweep_trees(decoder_for: Callable[[Eagle3Policy], Decoder], prompts: Sequence[Sequence[int]], draft_vocab: int,
                max_new_tokens: int = 64, passes: int = 2,
                shapes: Sequence[tuple[int, int, int]] | None = None,
                log: Callable[[str], None] | None = None) -> TreeChoice:
    """Measure every candidate shape with ``decoder_for(policy)`` and choose the fastest.

    Shapes that cannot be built for ``draft_vocab`` or whose deepest round is never kept
    are not decoded at all.
    """
    policies = candidate_trees(draft_vocab) if shapes is None else candidate_trees(draft_vocab, shapes)
    if not policies:
        raise CalibrationError(f"no candidate EAGLE-3 tree can be built for a draft vocabulary of {draft_vocab}")
    measured = []
    for policy in policies:
        m = measure_tree(decoder_for(policy), policy, prompts, max_new_tokens, passes)
        measured.append(m)
        if log is not None:
            log(f"EAGLE-3 tree {policy.depth}/{policy.top_k}/{policy.total_tokens}: tau {m.tau:.2f}, "
                f"{m.step_seconds * 1e3:.2f} ms a step, {m.tokens_per_second:.1f} tok/s")
    return TreeChoice(choose_tree(measured), measured)
