"""Lossless acceptance of a verified tree.

At every tree node the target proposes its own next token: the argmax at temperature 0,
or an independent sample from softmax(logits / T) at T > 0.  Walking from the root, we
move to the child that carries the proposed token and stop when no child does; the
accepted path plus the proposal at its last node is emitted.  Each emitted token is thus
exactly the target's choice given its prefix, so at T = 0 the output equals greedy
decoding and at T > 0 it is distributed exactly as sampling from the target (the
draft only decides how many of those choices one forward can confirm).

Vectorised: a node is on the accepted path iff every node on its root path (itself
included) matches its parent's proposal; siblings carry distinct tokens, so those
nodes form a single chain and sorting them by depth gives the path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from bastion.speculative.tree import Tree


def propose(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """The target's own next token at each node: logits [n, V] -> [n] long.

    At T > 0 each row is one draw from ``softmax(logits / T)`` by inverting its cumulative
    distribution at one uniform number, all rows at once: ``torch.multinomial`` took 1.2 ms
    for a 16-node tree's [16, 4096] on one CPU thread, this whole function 0.11 ms.  The
    sums are in float64, and the uniform is scaled by each row's total, so a token's chance
    is its probability to float64 rounding and a token of probability 0 is never drawn.
    """
    if temperature <= 0.0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # [n, V]
    cdf = probs.double().cumsum_(dim=-1)  # [n, V]
    # u in [0, total): a total near 1 times a uniform below 1 stays below the total after rounding
    u = torch.rand(cdf.shape[0], 1, generator=generator, dtype=torch.float64, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)  # the first token whose cumulative sum passes u


def accept(tree: Tree, proposals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (path order [n], accepted count 0-d) without a host sync.

    ``path_order[:count + 1]`` are the node indices of the root and the accepted draft
    nodes in depth order; ``proposals[path_order[count]]`` is the bonus token.  Entries
    past ``count`` are valid node indices with no meaning.
    """
    parent_prop = proposals[tree.parents.clamp(min=0)]  # [n]: the proposal at each node's parent
    match = tree.tokens == parent_prop
    match[:1].fill_(True)  # the root is committed already (fill_: capturable in a CUDA graph)
    ok = ~(tree.ancestors & ~match[None, :]).any(dim=1)  # [n]: whole root path matches
    # The accepted nodes are one chain with depths 0..count: each goes to the slot of its
    # depth (a scatter, not a sort); the others to a spare slot, dropped.
    n = ok.shape[0]
    slot = torch.where(ok, tree.depths, n)
    idx = torch.arange(n, device=ok.device)
    path_order = torch.zeros(n + 1, dtype=torch.long, device=ok.device).scatter_(0, slot, idx)[:n]
    return path_order, ok.sum() - 1


@dataclass(frozen=True)
class Readback:
    """The layout of the one vector a step sends to the host: ``[accepted count, node count, path tokens.., bonus]``.

    Both engines read a step back in this layout, so one host transfer carries everything
    the host needs: how many drafts were accepted, the tokens to emit and (the static
    engine's) the rule's node count for the next tree, ranked before the read.  ``width``
    is the root plus the longest path a step can accept: ``width - 1`` path slots, of
    which the first ``accepted`` hold the accepted drafts.
    """

    width: int

    COUNT: ClassVar[int] = 0  # drafts accepted (the path's length below the root)
    NODES: ClassVar[int] = 1  # the rule's node count of the next tree (static engine), or this step's tree size
    PATH: ClassVar[int] = 2  # the first accepted draft token

    @property
    def size(self) -> int:
        return self.width + 2

    @property
    def path(self) -> slice:
        """The path slots: the accepted drafts, then whatever the rest of the walk's order holds."""
        return slice(self.PATH, self.width + 1)

    @property
    def bonus(self) -> int:
        """The bonus token's slot: the last."""
        return self.width + 1

    @staticmethod
    def pack(count: torch.Tensor, nodes: torch.Tensor, path: torch.Tensor, bonus: torch.Tensor) -> torch.Tensor:
        """A readback vector [len(path) + 3] from the accepted count, node count (0-d or [1]), path tokens and bonus [1]."""
        return torch.cat([count.view(1), nodes.view(1), path, bonus.view(1)])

    @classmethod
    def tokens(cls, back: list[int]) -> list[int]:
        """A step's emitted tokens from its vector on the host: the accepted drafts, then the bonus."""
        a = back[cls.COUNT]
        return back[cls.PATH : cls.PATH + a] + [back[-1]]
