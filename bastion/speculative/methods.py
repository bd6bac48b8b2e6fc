"""What distinguishes the decoding methods, stated once for every engine.

A method is described by facts, not by its name: which drafter runs each step (none, the
DFlash drafter, or an EAGLE-3 head), where the verified tree comes from (``tree``):

* ``"chain"``: the drafter's greedy block as a chain (DFlash), or the root alone (AR);
* ``"ranked"``: the best ranked draft paths under the budget rule (BASTION);
* ``"drafted"``: the drafter returns its own tree (EAGLE-3's dynamic tree of a fixed
  node count, :class:`Eagle3Policy`);

which budget rule sizes a ranked tree (``rule``):

* ``"paper"``: the paper's rule as its release runs it: draft probabilities from the raw
  draft logits, the fitted verification latency C(n) and the calibration's constants
  ``T_draft + T_other``, the count rounded down to a multiple of ``n_min``;
* ``"plus"``: this project's rule: draft probabilities at the sampling temperature, the
  step excess measured at several tree sizes charged as the tree grows
  (:func:`~bastion.costmodel.model.rule_costs`), the count taken to the better bucket
  beside it on a GPU and kept as it is on a CPU (no graphs there ask for few shapes),
  AR steps without the drafter's forward while no tree pays (:mod:`bastion.speculative.gate`),
  and at T > 0 a correction of its acceptance surrogate learned while decoding
  (:mod:`bastion.speculative.surrogate`);

and how a verified tree is accepted (``acceptance``): ``"lossless"`` (the target's own
token at every node, sampled at T > 0: :mod:`bastion.speculative.accept`), or
``"lossy"``, the release's shortcut at T > 0: the walk follows the target's argmax and
only the token after the accepted path is sampled.

Engines branch on these facts, never on method names, and the node count a step
verifies follows from them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bastion.defaults import EAGLE3_DEPTH, EAGLE3_TOPK, EAGLE3_TOTAL_TOKENS, METHODS, N_MIN_PLUS_SAMPLED_CPU
from bastion.speculative.policy import TreePolicy

TREE_KINDS = ("chain", "ranked", "drafted")
RULES = ("paper", "plus")
ACCEPTANCES = ("lossless", "lossy")


@dataclass(frozen=True)
class MethodSpec:
    name: str
    tree: str = "chain"  # "chain" | "ranked" | "drafted" (the drafter returns its own tree)
    drafter: str | None = None  # which model drafts: None, "dflash" or "eagle3"
    rule: str | None = None  # the budget rule of a ranked tree: "paper" | "plus"
    acceptance: str = "lossless"  # "lossless" | "lossy" (the release's argmax walk at T > 0)

    def __post_init__(self) -> None:
        if self.tree not in TREE_KINDS:
            raise ValueError(f"method {self.name!r}: unknown tree kind {self.tree!r}; choose from {TREE_KINDS}")
        if self.tree != "chain" and self.drafter is None:
            raise ValueError(f"method {self.name!r}: a {self.tree} tree needs a drafter")
        if (self.rule is None) == self.ranked or (self.rule is not None and self.rule not in RULES):
            raise ValueError(f"method {self.name!r}: a ranked tree, and only one, needs a budget rule from {RULES}; "
                             f"got rule {self.rule!r} for a {self.tree} tree")
        if self.acceptance not in ACCEPTANCES:
            raise ValueError(f"method {self.name!r}: unknown acceptance {self.acceptance!r}; choose from {ACCEPTANCES}")

    @property
    def drafts(self) -> bool:
        """A drafter runs every step."""
        return self.drafter is not None

    @property
    def ranked(self) -> bool:
        """The tree is the best ranked draft paths under the budget rule."""
        return self.tree == "ranked"

    @property
    def lossy(self) -> bool:
        """At T > 0 the walk follows the target's argmax (not lossless; the release's acceptance)."""
        return self.acceptance == "lossy"

    @property
    def skips_drafts(self) -> bool:
        """At T > 0 steps fall back to AR, without the drafter's forward, while no tree pays (this project's rule).

        Not at T = 0: there the drafter predicts what it was trained on, the target's greedy
        tokens, and on the tiny pair the gate's AR spells on a hard stretch cost more than they
        saved (docs/performance.md, "No tree pays, no draft").
        """
        return self.rule == "plus"

    def gated(self, temperature: float) -> bool:
        """Whether the draft gate decides which steps draft at this temperature."""
        return self.skips_drafts and temperature > 0

    def draft_temperature(self, temperature: float) -> float:
        """The temperature of the draft probabilities the rule's surrogate reads: the sampling
        temperature for this project's rule, the raw logits (1) for the paper's, as its release."""
        return temperature if self.rule == "plus" and temperature > 0 else 1.0

    def tree_policy(self, policy: TreePolicy, gpu: bool, sampling: bool = False) -> TreePolicy:
        """The policy this method's adaptive trees follow on the device at T = 0 or, with
        ``sampling``, at T > 0: its rule's rounding and, for this project's rule on a CPU,
        granularity 1 from a floor: the device's ``n_min`` at T = 0, where a CPU step costs
        about the same from 12 to 16 nodes, which the smooth cost curve does not see, and
        ``N_MIN_PLUS_SAMPLED_CPU`` at T > 0, where sampled drafts rarely survive and small
        trees are what pays (docs/performance.md, "Where `bastion_plus`'s CPU trees start").

        A fixed budget, and a method without a ranked tree, keep ``policy`` as given.
        """
        if not self.ranked or policy.budget is not None:
            return policy
        if self.rule == "paper":
            return replace(policy, rounding="down")
        if gpu:
            return replace(policy, rounding="best-neighbour")
        floor = N_MIN_PLUS_SAMPLED_CPU if sampling else policy.n_min
        return replace(policy, n_min=min(floor, policy.n_max), rounding=None)

    def tree_policies(self, policy: TreePolicy, gpu: bool) -> dict[bool, TreePolicy]:
        """The policy at T = 0 (key False) and at T > 0 (key True), for a decoder that serves both."""
        return {sampling: self.tree_policy(policy, gpu, sampling) for sampling in (False, True)}

    def known_size(self, block: int, policy: TreePolicy, ranked_paths: int, drafted: int | None = None) -> int | None:
        """Nodes the step verifies when the host knows it without reading the device.

        AR verifies the root, DFlash the root and its ``block - 1`` drafts, a drafted tree
        its fixed size ``drafted``, a fixed-budget tree its budget (capped by the
        ``ranked_paths`` that exist); the adaptive rule's count is a device value (None).
        """
        if not self.drafts:
            return 1
        if self.tree == "drafted":
            if drafted is None:
                raise ValueError(f"method {self.name!r} drafts its own tree: pass its size")
            return drafted
        if not self.ranked:
            return block
        if policy.budget is not None:
            return min(policy.budget, ranked_paths + 1)
        return None


@dataclass(frozen=True)
class Eagle3Policy:
    """EAGLE-3's tree: ``depth`` expansion rounds of the ``top_k`` best nodes, ``total_tokens`` kept.

    Everything about the tree's shape that the host must know is fixed by these three
    numbers (and the draft vocabulary), so engines can size buffers and graphs up front.
    """

    depth: int = EAGLE3_DEPTH
    top_k: int = EAGLE3_TOPK
    total_tokens: int = EAGLE3_TOTAL_TOKENS

    def __post_init__(self) -> None:
        if self.depth < 0 or self.top_k < 1 or self.total_tokens < 1:
            raise ValueError(
                f"EAGLE-3 needs depth >= 0, top-k >= 1 and total tokens >= 1; got {self.depth}, {self.top_k}, "
                f"{self.total_tokens}"
            )

    def tree_size(self, draft_vocab: int | None = None) -> int:
        """Nodes of every drafted tree, root included: the proposals capped by ``total_tokens``."""
        k = self.top_k if draft_vocab is None else min(self.top_k, int(draft_vocab))
        return min(self.total_tokens - 1, k + self.depth * k * k) + 1

    @property
    def path_width(self) -> int:
        """Root plus the longest accepted path: drafts reach ``depth + 1`` below the root."""
        return self.depth + 2


SPECS: dict[str, MethodSpec] = {
    "ar": MethodSpec("ar"),
    "eagle3": MethodSpec("eagle3", tree="drafted", drafter="eagle3"),
    "dflash": MethodSpec("dflash", drafter="dflash"),
    "bastion": MethodSpec("bastion", tree="ranked", drafter="dflash", rule="paper"),
    "bastion_plus": MethodSpec("bastion_plus", tree="ranked", drafter="dflash", rule="plus"),
    "bastion_lossy": MethodSpec("bastion_lossy", tree="ranked", drafter="dflash", rule="paper", acceptance="lossy"),
}
assert tuple(SPECS) == METHODS


def method_spec(method: str) -> MethodSpec:
    if method not in SPECS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    return SPECS[method]
