"""The static engine: preallocated buffers, graph-captured step functions, and the parts that own them.

One :class:`StaticEngine` wires together, for one target and its drafters:

- its own buffers (:class:`~bastion.engines.static_buffers.StepBuffers`: the target's KV
  cache, the committed length and root token, the tree, the verifier's outputs, the
  readback vector), allocated in one place and replaced together when a request
  outgrows them;
- a proposer per drafter (:mod:`bastion.engines.proposers`), each with its own buffers and
  drafting step;
- the tree phase (:class:`~bastion.engines.static_tree.TreePhase`: select, rank, build) over
  the DFlash drafter's logits;
- the prefill memo (:class:`~bastion.engines.prefill_memo.PrefillMemo`);
- the step functions it runs, built once: compiled or not (:class:`~bastion.engines.compiled.Compilation`).

A step is six functions, each captured per shape key by :class:`GraphRunner`:

    draft   (kv window)       the proposer's forward (DFlash: logits; EAGLE-3: its whole tree)
    select  (T, shifted)      each depth's top-k log-probabilities (trees only), corrected (bastion_plus at T > 0)
    rank    (m)               best m paths over all depths + the budget rule's node count
    build   (method, n)       the n-node tree: tokens, parents, depths, ancestor matrix
    verify  (n, kv window)    tree mask, target forward, proposals (T = 0) or logits
    commit  (n, lossy)        acceptance walk, KV compaction, next root, readback

AR's one-node tree has its own build and commit (``build_root``, ``commit_root``), a few
writes that are never compiled.  None of them reads a device value on the host, so a step
has one host synchronisation: the decoder's read of the readback vector (the previous
step's tokens and this step's node count).  The semantics are those of
:mod:`bastion.engines.eager` exactly; the functions reuse its tree, acceptance and
cost-curve code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from bastion.defaults import use_torch_references
from bastion.engines import compiled, static_attention
from bastion.engines.choice import Kernels
from bastion.engines.graphs import GraphRunner, read_to_host
from bastion.engines.prefill_memo import PrefillMemo
from bastion.engines.proposer import NoDraft, StaticProposer
from bastion.engines.proposers import static_proposers
from bastion.engines.static_buffers import StepBuffers, round_up
from bastion.engines.static_tree import TreePhase
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.accept import Readback, accept
from dflash import DFlashDraftModel


@dataclass(frozen=True)
class StepFunctions:
    """The step functions a decoder runs through the graph runner: compiled on the compiled engine's CUDA, else as written."""

    select: Callable[[float, bool], None] | None  # (temperature, shifted); None without a DFlash drafter
    build: Callable[[bool, int, bool], None] | None  # (ranked, n, depth mass)
    commit: Callable[[int, str | None, bool], None]  # (n, tap set, lossy)


class StaticEngine:
    """Preallocated state and graph-captured step functions for one target and its drafters."""

    def __init__(self, target: Target, drafter: DFlashDraftModel | None, max_context: int, n_max: int,
                 graphs: bool = True, kv_block: int = 256, fused: bool = False, eagle3: Eagle3Drafter | None = None,
                 compile: bool | None = None, kernels: Kernels | None = None) -> None:
        self.target = target
        self.device, self.dtype = target.device, target.dtype
        self.kv_block = kv_block
        # poll for the step's read instead of blocking in the sync (see read_back): on the
        # H200 it cut the GPU's wait for the host by about 100 us a step (docs/performance.md)
        self.spin_read = True
        self.runner = GraphRunner(self.device, enabled=graphs)
        # grouped-query tree attention without per-head K/V copies (sdpa targets only)
        self.attention = static_attention.register() if target.attn_impl == "sdpa" else None
        # the run's kernel settings (None: the defaults with the environment's overrides)
        self.compilation = compiled.Compilation.choose(fused, self.device, compile, kernels)
        use_torch_references(self.compilation.kernels.rank == "torch")
        self.fused = self.compilation.layers(target)  # the compiled engine's target layers, else None
        self.proposers = static_proposers({"dflash": drafter, "eagle3": eagle3}, target, self.compilation, self.fused)
        self.block = drafter.block_size if drafter is not None else 1
        widths = [p.width for p in self.proposers.values()]
        self.layout = Readback(max([self.block, *widths]))  # root + the longest path any drafter's step accepts
        self.n_max = max([int(n_max), self.layout.width, *(p.tree_size or 0 for p in self.proposers.values())])
        # select, rank and build over the DFlash drafter's logits: the trees of its methods
        self.tree_phase = (TreePhase(self.device, self.compilation.compile, self.compilation.step)
                           if drafter is not None else None)
        tree = self.tree_phase
        self.steps = StepFunctions(select=tree and tree.select,  # compiles its torch form itself (TreePhase.select)
                                   build=tree and self.compilation.step(tree.build),
                                   commit=self.compilation.step(self.commit))
        if drafter is not None:
            target.set_feature_layers(drafter.target_layer_ids)
        self.memo = PrefillMemo()  # prompts prefilled before: a cell's other methods restore them
        self._allocate(max_context)

    # ------------------------------------------------------------------ buffers
    def _allocate(self, max_context: int) -> None:
        """The engine's buffers, then its proposers' and its tree phase's, for the new sizes."""
        self.buffers = StepBuffers.allocate(self.target, int(max_context), self.n_max, self.block, self.kv_block,
                                            self.layout)
        for proposer in self.proposers.values():
            proposer.allocate(self.buffers)
        if self.tree_phase is not None:
            self.tree_phase.allocate(self.buffers, self.proposers["dflash"].draft_out)

    def ensure_capacity(self, need: int, nodes: int = 0) -> None:
        """Grow the buffers for a longer context (or larger trees); graphs on the old ones are dropped."""
        if need > self.buffers.max_context or nodes > self.n_max:
            self.runner = GraphRunner(self.device, enabled=self.runner.enabled)
            self.n_max = max(self.n_max, nodes)
            self._allocate(round_up(max(need, self.buffers.max_context), self.kv_block))

    def window(self, tokens: int) -> int:
        """The attention window that covers ``tokens`` positions."""
        return self.buffers.window(tokens)

    def proposer(self, name: str | None) -> StaticProposer:
        """The proposer of drafter ``name``; None: AR's, which drafts nothing."""
        return NoDraft() if name is None else self.proposers[name]

    # ------------------------------------------------------------------ prefill
    def prefill(self, ids: torch.Tensor, taps: str | None, prompt=None) -> tuple[torch.Tensor, torch.Tensor | None, bool]:
        """The prompt [1, P] into an empty cache, tapping the layers of drafter ``taps`` (None: none): a causal
        forward, or a kept copy of one; returns (hidden [1, H], features [1, P, F], whether it was a copy)."""
        self._tap(taps)
        done, reused = self.memo.prefill(self.target, self.buffers, ids, taps, prompt)
        return done.hidden, done.features, reused

    def _tap(self, taps: str | None) -> StaticProposer:
        """Point the target at drafter ``taps``'s layers; returns its proposer."""
        proposer = self.proposer(taps)
        if taps is not None:
            self.target.set_feature_layers(proposer.layer_ids)
        return proposer

    # ------------------------------------------------------------------ step functions
    def verify(self, n: int, kv: int, greedy: bool, taps: str | None, hold: bool = False) -> None:
        """Target forward over the ``n`` tree nodes with a [n, kv] mask; proposals or logits out.

        ``taps``: the drafter whose layers to tap (None: none), a graph per value; with ``hold``
        (a one-node step without a draft) the tapped states are set aside for the next draft.
        """
        proposer, b = self._tap(taps), self.buffers
        # a held row leaves the fused forward as its layers' parts: hold_row sets them aside (one kernel on CUDA)
        parts = hold and self.fused is not None
        mask = b.mask[:n, :kv]
        mask.copy_((b.arange[:kv] < b.length)[None].expand(n, kv))
        b.write_index[:n].copy_(b.length + b.arange[:n])
        mask.index_copy_(1, b.write_index[:n], b.tree_anc[:n, :n])
        b.positions[:n].copy_(b.length + b.tree_depths[:n])
        b.cache.write_index = b.write_index[:n]
        b.cache.kv_len = kv
        hidden, feats = self._forward(b.tree_tokens[:n][None], b.positions[:n][None], mask[None, None],
                                      "parts" if parts else taps is not None)
        logits = self.target.logits(hidden[0])  # [n, V]
        if greedy:
            b.proposals[:n].copy_(logits.argmax(dim=-1))
        else:
            b.logits[:n].copy_(logits)
        if hold:
            proposer.hold_row(feats if parts else feats[0])
        elif taps is not None:
            proposer.tapped()[:n].copy_(feats[0])

    def _forward(self, ids, positions, mask, features: bool | str):
        """The target over tree tokens: (hidden [1, s, H], tapped features [1, s, F] or None; with
        ``features="parts"``, the compiled engine only, each tapped layer's [1, s, H])."""
        if self.fused is not None:
            return self.fused.forward(ids, positions, mask, self.buffers.cache, features)
        config = self.target.config
        saved = config._attn_implementation
        try:
            if self.attention is not None:
                config._attn_implementation = self.attention
            out = self.target.forward(ids, positions, mask, self.buffers.cache, features=features)
        finally:
            config._attn_implementation = saved
        return out.hidden, out.features

    def commit(self, n: int, taps: str | None, lossy: bool = False) -> None:
        """Accept along the proposals, compact the KV cache, advance, fill the readback vector.

        ``lossy``: the proposals are the target's argmax and the bonus comes from the
        samples (the release's acceptance at T > 0; a sample at every node, of which only
        the stop node's is used, is distributed as the release's one sample there).
        """
        b, layout = self.buffers, self.layout
        tree = b.tree(n)
        proposals = b.proposals[:n]
        order, count = accept(tree, proposals)
        # always layout.width entries (past n: the root's, never read), so no graph asks n <= width:
        # DFlash's 16-node chain and BASTION's larger trees share this function's graph
        keep = F.pad(order, (0, layout.width))[: layout.width]
        b.cache.keep(b.length, keep)
        if taps is not None:  # the drafter's next context; the host slices it by the count it reads
            self.proposers[taps].keep(keep, count)
        bonus = (b.samples[:n] if lossy else proposals)[order.gather(0, count.view(1))]  # [1]
        b.readback[layout.COUNT].copy_(count)
        b.readback[layout.path].copy_(tree.tokens[keep[1:]])
        b.readback[layout.bonus :].copy_(bonus)
        b.root.copy_(bonus[0])
        b.length.add_(count + 1)

    def build_root(self) -> None:
        """The build of AR's one-node tree: four tiny writes, never compiled (a compiled
        ``build`` specialises on n == 1, a graph that the first decode job of a warm worker paid for)."""
        b = self.buffers
        b.tree_tokens[:1].copy_(b.root.view(1))
        b.tree_parents[:1].fill_(-1)
        b.tree_depths[:1].zero_()
        b.tree_anc[:1, :1].fill_(True)

    def commit_root(self, taps: str | None = None, hold: bool = False) -> None:
        """:meth:`commit` of a one-node tree, never compiled: the root's proposal is the next
        token, and the root's K/V already sit at the committed length, so nothing moves.

        With ``taps`` the root's tapped states become the next draft's context, as
        :meth:`commit` keeps them, without the general commit's gathers over the cache
        (about 0.2 ms of a 5.5 ms step on a CPU); with ``hold`` (a step of this project's
        rule that did not draft) its verify set them aside already, so it keeps nothing.
        """
        b = self.buffers
        if taps is not None and not hold:
            self.proposers[taps].keep_root()
        bonus = b.proposals[:1]
        b.readback[self.layout.COUNT].zero_()
        b.readback[self.layout.bonus :].copy_(bonus)
        b.root.copy_(bonus[0])
        b.length.add_(1)

    def read_back(self) -> list[int]:
        """The readback vector on the host: waits for every step function launched so far."""
        b = self.buffers
        return read_to_host(b.readback, b.readback_host, b.read_event if self.spin_read else None)

    def state(self) -> list[torch.Tensor]:
        """Tensors :meth:`commit` updates in place (restored after capture warm-up)."""
        b = self.buffers
        return [b.cache.kv, b.length, b.root, b.readback, *(t for p in self.proposers.values() for t in p.state())]

    def logits_buffer(self) -> torch.Tensor:
        """The verifier's logits [n_max, V] for T > 0 (allocated before any graph that writes them)."""
        return self.buffers.logits_buffer(self.target.lm_head.weight.shape[0], self.dtype)
