"""What drafts a step's tokens: the proposer interface both step loops call, and AR's proposer.

A method is a proposer (none, DFlash or EAGLE-3) and a tree kind
(:class:`~bastion.speculative.methods.MethodSpec`).  The step loops never ask which
drafter runs: they hand the proposer the prompt's prefill, ask it for each step's draft,
and tell it what the step accepted, and the proposer keeps whatever its next draft needs
(the DFlash drafter's context features, the EAGLE-3 head's pairs).  Each drafter is one
module holding its eager and its static proposer (:mod:`bastion.engines.dflash_proposer`,
:mod:`bastion.engines.eagle3_proposer`), registered by name in :mod:`bastion.engines.proposers`.

The eager proposer returns its draft (:class:`Draft`); the static one writes it into the
engine's buffers on the device, inside a CUDA graph per attention window, and reads what
the last step accepted from the device too (:class:`StaticProposer`), so drafting costs
no host synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch

from bastion.engines.graphs import GraphRunner
from bastion.engines.static_buffers import StepBuffers
from bastion.speculative.tree import Tree


@dataclass(frozen=True)
class Draft:
    """An eager draft: logits [b - 1, V] for depths 1..b-1 to build a tree from, or a tree drafted whole."""

    logits: torch.Tensor | None = None
    tree: Tree | None = None


class Accepted(NamedTuple):
    """What an eager step verified and accepted, for the proposer's next draft."""

    features: torch.Tensor | None  # [1, n, F] the target's states at the proposer's layers, every tree node
    keep: torch.Tensor  # [a + 1] the root's and the accepted nodes' indices, in path order
    context: int  # the committed length before the step
    tree: Tree  # the verified tree
    order: torch.Tensor  # [n] the acceptance walk's path order (first a + 1 entries: keep)
    bonus: torch.Tensor  # [1] the target's token after the accepted path: the next root


class EagerProposer(Protocol):
    """A drafter as the eager step loop runs it."""

    layer_ids: list[int]  # the target layers whose states it reads ([]: none)
    width: int  # the root plus the longest path a step can accept: the most a step commits

    def start(self, ids: torch.Tensor, first: torch.Tensor, features: torch.Tensor | None) -> None:
        """The prompt ``ids`` [1, P] was prefilled (tapped ``features`` [1, P, F]) and ``first`` [1] proposed."""

    def draft(self, root: torch.Tensor, context: int) -> Draft:
        """The step's draft below ``root`` (0-d), the committed length being ``context``."""

    def accepted(self, step: Accepted) -> None:
        """Take in what the step accepted."""


class StaticProposer(Protocol):
    """A drafter as the static engine runs it: on its own fixed buffers and the engine's :class:`StepBuffers`."""

    name: str | None  # the tap set verify and commit key their graphs by (None: nothing tapped)
    layer_ids: list[int]
    width: int
    tree_size: int | None  # the node count of every tree it drafts itself; None: a tree is built from its draft

    def allocate(self, bufs: StepBuffers) -> None:
        """Make (or remake, for larger buffers) its own buffers; ``bufs`` are the engine's new ones."""

    def first(self, run: GraphRunner, ids: torch.Tensor, first: torch.Tensor, features: torch.Tensor | None) -> None:
        """The first draft, over the whole prompt ``ids`` [1, P] (padded to a power of two where graphs run, so a
        graph per width serves every prompt; eager where they do not and past the padded buffers)."""

    def step(self, run: GraphRunner, committed: int) -> None:
        """A step's draft through ``run``, the host having read ``committed`` tokens (the device may be a step ahead)."""

    def tapped(self) -> torch.Tensor:
        """[n_max, F]: where verify writes the target's states at :attr:`layer_ids`."""

    def keep(self, keep: torch.Tensor, count: torch.Tensor) -> None:
        """Inside commit: keep the accepted nodes' states (``keep`` [width] path order, ``count`` 0-d) for the next draft."""

    def keep_root(self) -> None:
        """:meth:`keep` of a one-node tree, the same states kept more cheaply."""

    def hold(self, run: GraphRunner, rows: int) -> None:
        """Before a step without a draft verifies: set aside, on the device, the ``rows`` states a drafted last
        step kept (0 after a step without a draft), for the next :meth:`step` to take in first, with the
        root's that this step's verify writes through :meth:`hold_row` (only the proposers of methods that
        skip drafts are asked)."""

    def hold_row(self, feats: torch.Tensor) -> None:
        """Inside the verify of a step without a draft: its root's tapped states ``feats`` [1, F], set aside."""

    def hold_prompt(self, features: torch.Tensor | None) -> None:
        """In place of :meth:`first` when a prompt's first step does not draft: the prompt's ``features``
        [1, P, F] are set aside for the next :meth:`step` (asked of the same proposers as :meth:`hold`)."""

    def state(self) -> list[torch.Tensor]:
        """Tensors :meth:`keep` updates in place (restored after a capture's warm-up runs)."""


class NoDraft:
    """AR's proposer, eager and static: nothing drafted, nothing tapped, the root verified alone."""

    name = None
    layer_ids: list[int] = []
    width = 1
    tree_size = None

    def start(self, ids: torch.Tensor, first: torch.Tensor, features: torch.Tensor | None) -> None:
        pass

    def draft(self, root: torch.Tensor, context: int) -> Draft:
        return Draft()

    def accepted(self, step: Accepted) -> None:
        pass

    def allocate(self, bufs: StepBuffers) -> None:
        pass

    def first(self, run: GraphRunner, ids: torch.Tensor, first: torch.Tensor, features: torch.Tensor | None) -> None:
        pass

    def step(self, run: GraphRunner, committed: int) -> None:
        pass

    def tapped(self) -> torch.Tensor:
        raise RuntimeError("AR taps no target layers: verify asked for features without a drafter")

    def keep(self, keep: torch.Tensor, count: torch.Tensor) -> None:
        pass

    def keep_root(self) -> None:
        pass

    def hold(self, run: GraphRunner, rows: int) -> None:
        pass

    def hold_row(self, feats: torch.Tensor) -> None:
        pass

    def hold_prompt(self, features: torch.Tensor | None) -> None:
        pass

    def state(self) -> list[torch.Tensor]:
        return []
