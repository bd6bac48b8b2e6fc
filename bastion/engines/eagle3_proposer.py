"""An EAGLE-3 head as a proposer: it drafts a whole tree a step, eager or on the static engine's buffers.

The head reads pairs (the target's state at a position, the token after it): after the
prefill, the prompt's; after a step, the root's and the accepted drafts', with the bonus
token.  Every tree has the same node count (:meth:`Eagle3Policy.tree_size
<bastion.speculative.methods.Eagle3Policy.tree_size>`), so verify and commit replay one
graph per attention window.

On the static engine the head drafts on device state alone, as the DFlash drafter does:
its K/V live at fixed addresses (:class:`~bastion.engines.static_cache.StaticHeadKV`: the
context window, then the tree's entries), and the previous step's accepted count and
tokens come from the readback vector on the device, its features from ``pend``.  So a
step's draft is one function of the attention window, captured as a CUDA graph like the
other step functions, and it runs before the step's one host read.  Its context pass
always takes the path width of pairs (the root and the longest path a step can accept);
the pairs past the accepted count land past the committed length, where the mask hides
them until the next draft writes over them.  The first draft takes in the whole prompt,
its pairs padded to a power of two where graphs run (:meth:`StaticEagle3.first`).  On the
compiled engine the head's layer and the tree's rounds run as fused functions
(:class:`~bastion.engines.fused_eagle3.FusedEagle3Head`), on the same cache.
"""

from __future__ import annotations

import torch

from bastion.engines.compiled import Compilation
from bastion.engines.fused_eagle3 import pair_masks, step_pairs
from bastion.engines.graphs import GraphRunner
from bastion.engines.proposer import Accepted, Draft
from bastion.engines.static_buffers import WIDE_ROWS, StepBuffers, padded_width
from bastion.engines.static_cache import StaticHeadKV
from bastion.engines.static_layers import FusedLayers
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.tree import Tree


class EagerEagle3:
    """The head with its own growing cache, drafting each step's tree from the pairs accepted so far."""

    def __init__(self, eagle3: Eagle3Drafter, target: Target) -> None:
        self.eagle3 = eagle3
        self.layer_ids = list(eagle3.layer_ids)
        self.width = eagle3.path_width  # root + the longest path a step can accept

    def start(self, ids: torch.Tensor, first: torch.Tensor, features: torch.Tensor | None) -> None:
        """The head's first pairs: features of positions 0..P-1, tokens 1..P-1 and the first new one."""
        self.cache = self.eagle3.new_cache()
        self.features, self.next_tokens = features[0], torch.cat([ids[0, 1:], first])

    def draft(self, root: torch.Tensor, context: int) -> Draft:
        return Draft(tree=self.eagle3.tree(self.cache, self.features, self.next_tokens))

    def accepted(self, step: Accepted) -> None:
        """Features of the root and the accepted drafts; tokens: the accepted drafts, then the bonus."""
        self.features = step.features[0, step.keep]
        self.next_tokens = torch.cat([step.tree.tokens[step.order[1 : step.keep.shape[0]]], step.bonus])


class StaticEagle3:
    """The head on fixed buffers: the verifier's states at its taps, the next draft's pairs, its K/V."""

    name = "eagle3"

    def __init__(self, eagle3: Eagle3Drafter, target: Target, compilation: Compilation,
                 layers: FusedLayers | None) -> None:
        self.eagle3, self.target = eagle3, target
        self.layer_ids = list(eagle3.layer_ids)
        self.width = eagle3.path_width
        self.tree_size = eagle3.tree_size  # nodes of every tree it drafts
        self.fused_head = compilation.eagle3_head(eagle3.head, layers)  # the compiled engine's head, else None

    def allocate(self, bufs: StepBuffers) -> None:
        """The verifier's states at the head's taps [n_max, F], the next draft's pairs [read width, F], the head's K/V."""
        e3, dev, dtype = self.eagle3, bufs.arange.device, self.target.dtype
        self.bufs = bufs
        dim = len(e3.layer_ids) * int(self.target.config.hidden_size)
        self.features = torch.zeros(bufs.n_max, dim, dtype=dtype, device=dev)
        self.pend = torch.zeros(bufs.layout.width, dim, dtype=dtype, device=dev)
        cfg, room = e3.head.config, e3.policy.depth * e3.policy.top_k  # the tree's entries follow the window
        self.cache = StaticHeadKV(int(cfg.layers.num_key_value_heads), cfg.head_dim, bufs.capacity + room,
                                  e3.head.lm_head.weight.dtype, dev)
        rows = min(WIDE_ROWS, bufs.capacity)  # the prompt's pairs, padded, where graphs run
        self.wide = (torch.zeros(rows, dim, dtype=dtype, device=dev), torch.zeros(rows, dtype=torch.long, device=dev))
        self.wide_last = torch.zeros((), dtype=torch.long, device=dev)

    def first(self, run: GraphRunner, ids: torch.Tensor, first: torch.Tensor, features: torch.Tensor | None) -> None:
        """The head's first pairs: features of positions 0..P-1, tokens 1..P-1 and the first new one.

        Where graphs run they are padded to a power of two in ``wide`` (the pairs past P land
        past the committed length, hidden by the mask, as a step's do), so one graph per
        (window, width) serves every prompt of that size: run eagerly, the first draft took
        11.9 ms of the tiny pair's decode on an H200, against 0.28 ms for a step's draft
        replayed (docs/performance.md).  Eager past ``wide``'s rows and where no graphs run.
        """
        p, kv = ids.shape[1], self.bufs.window(ids.shape[1])
        pairs = (features[0], torch.cat([ids[0, 1:], first]))
        width = padded_width(p, 1, self.wide[1].shape[0])
        if not run.enabled or not width:
            self.draft(kv, pairs)
            return
        for buf, part in zip(self.wide, pairs):
            buf[:p].copy_(part)
        self.wide_last.fill_(p - 1)
        run(("eagle3_take_in", kv, width),
            lambda: self.draft(kv, (self.wide[0][:width], self.wide[1][:width]), self.wide_last))

    def step(self, run: GraphRunner, committed: int) -> None:
        kv = self.bufs.window(committed + self.width)  # the context grows by at most a path a step
        run(("eagle3", kv), lambda: self.draft(kv))

    @torch.no_grad()
    def draft(self, kv: int, prompt: tuple[torch.Tensor, torch.Tensor] | None = None,
              last: torch.Tensor | None = None) -> None:
        """Draft the step's tree into the tree buffers; the head's context window is ``[0, kv)``.

        ``prompt``: the first draft's pairs (features of positions ``0..P-1`` [P, F], tokens
        ``1..P`` [P]), of which the root's is ``last`` (0-d; None: the last one, padding
        after it).  Without it, the pairs are the last step's root and accepted drafts
        (features from ``pend``; tokens: the accepted drafts, then the bonus token).
        """
        bufs, fused = self.bufs, self.fused_head
        if prompt is not None:
            feats, next_tokens = prompt
            m = next_tokens.numel()
            last = m - 1 if last is None else last  # the root's pair
            pos, causal, visible = pair_masks(last, bufs.arange, bufs.length, m, kv)
            # padding pairs past the head's capacity write its last slot, which the tree's entries write over
            pos = pos.clamp(max=self.cache.capacity - 1)
        else:  # the accepted count is the root's pair; the pairs' tokens: the accepted drafts, then the bonus
            m, feats = self.width, self.pend[: self.width]
            pairs = fused.pairs if fused is not None else step_pairs
            last, next_tokens, pos, causal, visible = pairs(bufs.readback, bufs.arange, bufs.length, m, kv)
        self.cache.begin(pos, kv)
        head = fused.context if fused is not None else self.eagle3.head
        out = head(feats.reshape(1, m, -1), next_tokens.reshape(1, m), pos[None], causal, self.cache)  # [1, m, H]
        root_hidden = out[0, last] if isinstance(last, int) else out[0].index_select(0, last.view(1))[0]  # [H]
        root = bufs.root.view(1)
        if fused is None:
            tree = self.eagle3.grow(self.cache, root_hidden, root, visible, bufs.length)
        else:
            p = self.eagle3.policy
            grown = fused.grow(self.cache, root_hidden, root, visible, bufs.length, p.total_tokens, p.depth, p.top_k)
            tree = self.eagle3.finish(grown, bufs.length, fused.ancestors)
        self.write_tree(tree)

    def write_tree(self, tree: Tree) -> None:
        """Put a drafted tree into the engine's tree buffers (verify and commit read them)."""
        if tree.size != self.tree_size:
            raise RuntimeError(f"EAGLE-3 drafted {tree.size} nodes, expected {self.tree_size}")
        self.bufs.write_tree(tree)

    def tapped(self) -> torch.Tensor:
        return self.features

    def keep(self, keep: torch.Tensor, count: torch.Tensor) -> None:
        """The root's and the accepted nodes' states: the next draft's pairs (the host slices them by the count it reads)."""
        self.pend[: keep.shape[0]].copy_(self.features.index_select(0, keep))

    def keep_root(self) -> None:
        """:meth:`keep` of a one-node tree (every kept index 0), without the gather."""
        self.pend.copy_(self.features[:1].expand_as(self.pend))

    def state(self) -> list[torch.Tensor]:
        return [self.pend]
