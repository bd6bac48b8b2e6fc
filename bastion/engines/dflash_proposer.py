"""The DFlash drafter as a proposer: one block forward a step, eager or on the static engine's buffers.

The drafter sees the features of every committed token (the target's states at its tapped
layers) and drafts a block ``[root, mask, mask, ...]``: logits for depths 1..b-1 in one
forward.  After a step, the accepted nodes' features join its context.

On the static engine its context K/V live at fixed addresses
(:class:`~bastion.engines.static_cache.StaticContextKV`), one slot per position.  A draft
first takes in the features of the nodes the last step accepted (``pend``, always a
block's worth of rows: those past ``pend_count`` are padding at positions the mask
hides), then runs the block at the positions right after the committed length.  The
first draft of a prompt takes in the whole prompt's rows, and a draft after steps without
one (this project's rule at T > 0) those steps' rows: where graphs run they are padded to
a power of two in ``wide``, so one graph per (window, width) serves every prompt of that
size (run eagerly, such a draft took 3.6-5.6 ms of the tiny pair's decode on an H200,
against 0.14 ms for a step's draft replayed; docs/performance.md).  The
compiled engine's fused drafter (:class:`~bastion.engines.fused_drafter.FusedDrafter`)
writes the block's K/V into those slots too, so attention reads one window of the cache;
the drafter module appends them after the window instead.  Nothing here reads a device
value on the host, so the draft is one CUDA graph per window.
"""

from __future__ import annotations

import torch

from bastion.engines.compiled import Compilation
from bastion.engines.graphs import GraphRunner
from bastion.engines.proposer import Accepted, Draft
from bastion.engines.static_buffers import WIDE_ROWS, StepBuffers, padded_width
from bastion.engines.static_cache import StaticContextKV
from bastion.engines.static_layers import FusedLayers
from bastion.models.target import Target
from bastion.speculative.fused import run_triton, use_triton
from dflash import DFlashDraftModel


def _checked(drafter: DFlashDraftModel) -> DFlashDraftModel:
    if drafter.mask_token_id is None:
        raise ValueError("the drafter config has no dflash_config.mask_token_id")
    return drafter


class EagerDFlash:
    """The drafter with its own growing cache, drafting each step from the features accepted since its last draft.

    Those are the last step's accepted nodes, or, after steps that did not draft (this
    project's rule falling back to AR steps), every step's since: the next draft takes
    them all in, as the first draft takes the whole prompt's.
    """

    def __init__(self, drafter: DFlashDraftModel, target: Target) -> None:
        self.drafter, self.target = _checked(drafter), target
        self.layer_ids = list(drafter.target_layer_ids)
        self.width = drafter.block_size

    def start(self, ids: torch.Tensor, first: torch.Tensor, features: torch.Tensor | None) -> None:
        self.cache = self.drafter.new_cache()
        self.features, self.positions = features, torch.arange(ids.shape[1], device=ids.device)  # [1, P, F], [P]

    def draft(self, root: torch.Tensor, context: int) -> Draft:
        logits = self.logits(root, context)
        self.features = self.positions = None  # in the drafter's cache now
        return Draft(logits=logits)

    def logits(self, root: torch.Tensor, c: int) -> torch.Tensor:
        """Draft logits [b - 1, V] for depths 1..b-1 of the block starting at position ``c``."""
        b = self.width
        block = torch.full((1, b), self.drafter.mask_token_id, dtype=torch.long, device=root.device)
        block[0, 0] = root
        pos = torch.arange(c, c + b, device=root.device)[None]
        h = self.drafter(self.target.embed(block), pos, self.features, self.positions[None], cache=self.cache)  # [1, b, H]
        return self.target.logits(h[0, 1:])

    def accepted(self, step: Accepted) -> None:
        features = step.features[:, step.keep]  # [1, a + 1, F]
        positions = torch.arange(step.context, step.context + step.keep.shape[0], device=step.keep.device)
        if self.features is not None:  # a step without a draft: its features wait for the next one
            features, positions = torch.cat([self.features, features], 1), torch.cat([self.positions, positions])
        self.features, self.positions = features, positions


class StaticDFlash:
    """The drafter on fixed buffers: its K/V, the verifier's tapped states, the next draft's rows, the draft logits."""

    name = "dflash"
    tree_size = None

    def __init__(self, drafter: DFlashDraftModel, target: Target, compilation: Compilation,
                 layers: FusedLayers | None) -> None:
        self.drafter, self.target = _checked(drafter), target
        self.layer_ids = list(drafter.target_layer_ids)
        self.width = drafter.block_size
        self.fused_drafter = compilation.drafter(drafter, layers)  # the compiled engine's layers (same call)

    def allocate(self, bufs: StepBuffers) -> None:
        """The drafter's K/V, the verifier's tapped states [n_max, F], the next draft's context
        rows [1, b, F], the draft logits [b - 1, V] and the block's tokens [b]."""
        d, b, dev, dtype = self.drafter, self.width, bufs.arange.device, self.target.dtype
        self.bufs = bufs
        dcfg = d.config.layers
        d_head = int(getattr(dcfg, "head_dim", None) or dcfg.hidden_size // dcfg.num_attention_heads)
        self.dcache = StaticContextKV(d.config.num_hidden_layers, int(dcfg.num_key_value_heads), d_head,
                                      bufs.capacity, dtype, dev)
        feat_dim = len(d.target_layer_ids) * int(self.target.config.hidden_size)
        self.features = torch.zeros(bufs.n_max, feat_dim, dtype=dtype, device=dev)  # verifier's tapped states
        self.pend = torch.zeros(1, b, feat_dim, dtype=dtype, device=dev)  # accepted nodes' features
        self.pend_count = torch.zeros((), dtype=torch.long, device=dev)
        vocab = int(self.target.lm_head.weight.shape[0])
        self.draft_out = torch.zeros(b - 1, vocab, dtype=dtype, device=dev)
        self.block_ids = torch.full((b,), int(d.mask_token_id), dtype=torch.long, device=dev)
        # a draft's context rows when they are more than a step's: the prompt's, or those set aside by steps
        # without a draft (``held`` of them on the device, ``held_rows`` as the host counts them); its last
        # row takes the set-aside writes past the count, so no live row ever lands there
        self.wide = torch.zeros(1, min(WIDE_ROWS, bufs.capacity), feat_dim, dtype=dtype, device=dev)
        self.held = torch.zeros((), dtype=torch.long, device=dev)
        self.held_rows = 0

    def window(self, committed: int) -> int:
        """The drafter's attention window when the host has read ``committed`` tokens.

        The device may be a block ahead (the step whose tokens the host has not read yet),
        and the fused drafter's block sits in the window after the live context.
        """
        ahead = 2 * self.width if self.fused_drafter is not None else self.width
        return self.bufs.window(committed + ahead)

    def first(self, run: GraphRunner, ids: torch.Tensor, first: torch.Tensor, features: torch.Tensor | None) -> None:
        """The first draft takes in the whole prompt's features (eagerly past ``wide``'s rows)."""
        kv, w = self.window(ids.shape[1]), features.shape[1]
        if w >= self.wide.shape[1]:
            self.held_rows = 0  # whatever the last prompt left set aside
            self.held.zero_()
            self.pend_count.fill_(w)
            self.draft(kv, features)
        else:
            self.hold_prompt(features)
            self._take_in_held(run, kv)

    def hold_prompt(self, features: torch.Tensor) -> None:
        """A prompt whose first step does not draft: its rows ``features`` [1, P, F] wait in ``wide`` for the
        first draft, as a held step's do; that step's commit sets nothing more aside (no rows kept yet)."""
        w = features.shape[1]
        self.wide[:, :w].copy_(features)
        self.held.fill_(w)
        self.held_rows = w
        self.pend_count.zero_()

    def step(self, run: GraphRunner, committed: int) -> None:
        kv = self.window(committed)  # the context grows by at most a block a step
        if self.held_rows:  # steps without a draft went before: every row they set aside, their own included
            self._take_in_held(run, kv)
            return
        run(("draft", kv), lambda: self.draft(kv, self.pend))

    def _take_in_held(self, run: GraphRunner, kv: int) -> None:
        """A draft over every row set aside in ``wide``, which then holds none."""
        w, self.held_rows = self.held_rows, 0
        self.held.zero_()
        self.take_in(run, kv, w)

    def take_in(self, run: GraphRunner, kv: int, w: int) -> None:
        """A draft over the first ``w`` rows of ``wide``: padded to a power of two where graphs run (the
        rows past ``w`` are padding, as in ``pend``), eager where none run (a CPU: nothing to capture,
        and padding costs arithmetic)."""
        self.pend_count.fill_(w)
        width = padded_width(w, self.width, self.wide.shape[1])
        if not run.enabled or not width:
            self.draft(kv, self.wide[:, :w])
            return
        run(("take_in", kv, width), lambda: self.draft(kv, self.wide[:, :width]))

    def hold(self, run: GraphRunner, rows: int) -> None:
        """Before a step without a draft verifies: set aside what the next draft must take in first.

        ``rows``: the states the last step kept, when it drafted (0 when it did not: its own
        row is set aside already); they move from ``pend`` into ``wide`` on the device
        (:meth:`set_aside`).  This step's verify writes its row there too (:meth:`hold_row`),
        so such a step adds to AR's step only that write and the tap.
        """
        need, room = self.held_rows + rows + 1, self.wide.shape[1] - 1
        if need > room:
            raise RuntimeError(f"{need} context rows (those set aside by steps without a draft, and the last "
                               f"step's) do not fit the {room} rows of the wide buffer; draft sooner")
        if rows:
            run(("set_aside",), self.set_aside, writes=self.state())
        self.held_rows = need

    def set_aside(self) -> None:
        """The ``pend_count`` rows the last commit kept go after those set aside in ``wide``; rows past the
        count go to wide's last row, which no draft reads."""
        arange = self.bufs.arange[: self.width]
        rows = torch.where(arange < self.pend_count, self.held + arange, self.wide.shape[1] - 1)  # [b]
        self.wide[0].index_copy_(0, rows, self.pend[0])
        self.held.add_(self.pend_count)

    def hold_row(self, feats: torch.Tensor | list[torch.Tensor]) -> None:
        """Inside the verify of a step without a draft: its root's tapped states after the rows set aside (the
        next draft's context; :meth:`hold` counted it).  ``feats``: [1, F], or each tapped layer's row [1, 1, H]
        (the compiled engine), which one Triton launch writes where it serves (:mod:`bastion.engines.hold_kernel`:
        on CUDA) and torch's concatenation and writes elsewhere."""
        if isinstance(feats, list):
            if self._hold_in_one(feats):
                return
            feats = torch.cat(feats, dim=-1)[0]
        self.wide[0].index_copy_(0, self.held.view(1), feats)
        self.held.add_(1)

    def _hold_in_one(self, parts: list[torch.Tensor]) -> bool:
        """:meth:`hold_row` of ``parts`` in one Triton launch, where it serves them; False: not done."""
        if not use_triton(self.held.device):
            return False
        from bastion.engines import hold_kernel  # imports Triton: only where it runs

        rows = self.wide[0]
        return hold_kernel.serves(parts, rows) and run_triton(
            "hold_row", self.held.device, lambda: hold_kernel.hold_row(parts, rows, self.held))

    def draft(self, kv: int, feats: torch.Tensor) -> None:
        """Drafter forward for the block at the committed length; ``feats`` [1, W, F] enter its context first."""
        self.draft_out.copy_(self.draft_logits(kv, feats))

    def draft_logits(self, kv: int, feats: torch.Tensor) -> torch.Tensor:
        """Draft logits [b - 1, V] for depths 1..b-1; the drafter's K/V window is ``[0, kv)``."""
        e, b, w = self.bufs, self.width, feats.shape[1]
        start = e.length - self.pend_count  # first new context position
        index = start + e.arange[:w]
        if w > b:  # a padded wide draft: rows past the capacity write its last slot, which no live row or window reaches
            index = index.clamp(max=self.dcache.capacity - 1)
        self.dcache.write_index = index
        self.dcache.kv_len = kv
        block = self.block_ids.clone()
        block[0] = e.root
        pos = e.length + e.arange[:b]
        if self.fused_drafter is not None:  # the block's K/V go into the window, at its positions
            seen = e.arange[:kv] < e.length + b  # the live context, then the block
            mask = seen[None, None, None, :].expand(1, 1, b, kv)
        else:  # the module appends the block's K/V after the window
            live = e.arange[:kv] < e.length  # the context the drafter may see
            mask = torch.cat([live, live.new_ones(b)])[None, None, None, :].expand(1, 1, b, kv + b)
        h = (self.fused_drafter or self.drafter)(self.target.embed(block[None]), pos[None], feats,
                                                 self.dcache.write_index[None], mask, self.dcache)
        return self.target.logits(h[0, 1:])

    def tapped(self) -> torch.Tensor:
        return self.features

    def keep(self, keep: torch.Tensor, count: torch.Tensor) -> None:
        """The accepted nodes' features become the next draft's context rows (a block's worth, padding past the count)."""
        b = self.width
        self.pend[0, :b].copy_(self.features.index_select(0, keep[:b]))
        self.pend_count.copy_(count + 1)

    def keep_root(self) -> None:
        """:meth:`keep` of a one-node tree (every kept index 0, count 0), without the gather."""
        self.pend[0, : self.width].copy_(self.features[:1].expand(self.width, -1))
        self.pend_count.fill_(1)

    def state(self) -> list[torch.Tensor]:
        return [self.pend, self.pend_count, self.wide, self.held]
