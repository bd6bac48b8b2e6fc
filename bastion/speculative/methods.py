"""What distinguishes the decoding methods, stated once for every engine.

A method is described by two facts, not by its name: whether a drafter runs each step,
and whether the tree comes from ranked draft paths (BASTION) or is a chain (the
drafter's greedy block for DFlash, the root alone for AR).  Engines branch on these
facts, never on method names, and the node count a step verifies follows from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from bastion.defaults import METHODS
from bastion.speculative.tree import TreePolicy


@dataclass(frozen=True)
class MethodSpec:
    name: str
    drafts: bool  # a drafter runs every step
    ranked: bool  # the tree is the best ranked draft paths; otherwise a chain

    def known_size(self, block: int, policy: TreePolicy, ranked_paths: int) -> int | None:
        """Nodes the step verifies when the host knows it without reading the device.

        AR verifies the root, DFlash the root and its ``block - 1`` drafts, a fixed-budget
        tree its budget (capped by the ``ranked_paths`` that exist); the adaptive rule's
        count is a device value (None).
        """
        if not self.drafts:
            return 1
        if not self.ranked:
            return block
        if policy.budget is not None:
            return min(policy.budget, ranked_paths + 1)
        return None


SPECS: dict[str, MethodSpec] = {
    "ar": MethodSpec("ar", drafts=False, ranked=False),
    "dflash": MethodSpec("dflash", drafts=True, ranked=False),
    "bastion": MethodSpec("bastion", drafts=True, ranked=True),
}
assert tuple(SPECS) == METHODS


def method_spec(method: str) -> MethodSpec:
    if method not in SPECS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    return SPECS[method]
