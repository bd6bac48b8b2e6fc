"""EAGLE-3's tree shape for one device and one head, from a short sweep on real prompts.

The latency calibration times random tokens, which says what a tree of ``n`` nodes costs
to verify but nothing about how many of its nodes a head gets accepted: that needs real
drafts.  So each candidate shape (:func:`~bastion.speculative.eagle3_tree.candidate_trees`)
decodes a few prompts of the dataset on the engine that will decode, and keeps tokens
committed per step (τ) and seconds per step; :func:`~bastion.speculative.eagle3_tree.choose_tree`
decides.  Both depend on the head, so the result belongs to the head: it must
be stored under a key that names the head's files as well as the hardware and engine.

Timing follows :mod:`bastion.calibration.overheads`: a warm-up run first (graphs,
caches), then the fastest of ``passes`` runs per prompt, since noise only adds time, and
the shapes take turns prompt by prompt, so that drift weighs on all of them alike.  At
temperature 0 τ does not depend on timing at all; it does depend on how far a decode
runs (the first tokens of an answer are the hardest to guess), so a sweep should decode
as many tokens as the run will, within reason.
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


# A shape below this fraction of the leader's rate after the first prompt is decoded no
# further: after trailing by 30% it would have to beat the leader by 10% on each of the
# next three prompts, and on a CPU the deep trees (0.5-0.7 of the leader's rate there)
# would otherwise take most of the sweep's time.  On an H200 every shape but the 3-node
# chain stayed above it (0.71-0.97 of the leader).
DROP_BELOW = 0.7
WARM_UP_TOKENS = 8  # graphs of later windows are captured by the first of a GPU's two passes


def _fastest_of(decoder: Decoder, prompt: Sequence[int], max_new_tokens: int, passes: int) -> tuple[int, int, float]:
    """(committed, steps, seconds) of the fastest of ``passes`` decodes of one prompt."""
    runs = [decoder.generate(prompt, max_new_tokens=max_new_tokens) for _ in range(max(passes, 1))]
    fastest = min(runs, key=lambda r: r.decode_seconds)
    return sum(s.committed for s in fastest.steps), len(fastest.steps), fastest.decode_seconds


def measure_trees(decoders: Sequence[Decoder], policies: Sequence[Eagle3Policy], prompts: Sequence[Sequence[int]],
                  max_new_tokens: int, passes: int = 2) -> list[TreeMeasurement]:
    """τ and seconds per step of each shape's decoder over ``prompts`` (greedy).

    The shapes take turns prompt by prompt, so that any drift of the machine weighs on all
    of them alike; after the first prompt those below :data:`DROP_BELOW` of the leader stop.
    """
    if not prompts:
        raise CalibrationError("the EAGLE-3 tree sweep needs at least one prompt")
    for decoder in decoders:  # warm-up: caches, allocators, compiled functions
        decoder.generate(prompts[0], max_new_tokens=min(WARM_UP_TOKENS, max_new_tokens))
    totals = [[0, 0, 0.0] for _ in decoders]  # committed, steps, seconds
    rates: list[list[float]] = [[] for _ in decoders]  # tokens per second, prompt by prompt
    alive = list(range(len(decoders)))
    for i, prompt in enumerate(prompts):
        for j in alive:
            committed, steps, seconds = _fastest_of(decoders[j], prompt, max_new_tokens, passes)
            t = totals[j]
            t[0], t[1], t[2] = t[0] + committed, t[1] + steps, t[2] + seconds
            rates[j].append(committed / seconds if seconds > 0 else 0.0)
        if i == 0:
            alive = [j for j in alive if rates[j][0] >= DROP_BELOW * max(rates[k][0] for k in alive)]
    out = []
    for policy, (committed, steps, seconds), per_prompt in zip(policies, totals, rates):
        if not steps or seconds <= 0 or min(per_prompt) <= 0:
            raise CalibrationError(f"the EAGLE-3 sweep of tree {policy.depth}/{policy.top_k}/{policy.total_tokens} "
                                   f"made no timed step; use longer prompts or more new tokens")
        out.append(TreeMeasurement(policy, committed / steps, seconds / steps, tuple(per_prompt)))
    return out


def sweep_trees(decoder_for: Callable[[Eagle3Policy], Decoder], prompts: Sequence[Sequence[int]], draft_vocab: int,
                max_new_tokens: int = 64, passes: int = 2,
                shapes: Sequence[tuple[int, int, int]] | None = None,
                log: Callable[[str], None] | None = None, ties: bool = True) -> TreeChoice:
    """Measure every candidate shape with ``decoder_for(policy)`` and choose (:func:`choose_tree`,
    near-ties to the higher τ with ``ties``).

    Shapes that cannot be built for ``draft_vocab`` or whose deepest round is never kept
    are not decoded at all.
    """
    policies = candidate_trees(draft_vocab) if shapes is None else candidate_trees(draft_vocab, shapes)
    if not policies:
        raise CalibrationError(f"no candidate EAGLE-3 tree can be built for a draft vocabulary of {draft_vocab}")
    measured = measure_trees([decoder_for(p) for p in policies], policies, prompts, max_new_tokens, passes)
    if log is not None:
        for m in measured:
            p = m.policy
            log(f"EAGLE-3 tree {p.depth}/{p.top_k}/{p.total_tokens}: tau {m.tau:.2f}, "
                f"{m.step_seconds * 1e3:.2f} ms a step, {m.tokens_per_second:.1f} tok/s")
    return TreeChoice(choose_tree(measured, ties=ties), measured)
