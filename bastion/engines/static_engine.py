"""The static engine's buffers and its per-step device functions.

One :class:`StaticEngine` owns everything a decoding step reads or writes, allocated once
(sized to the longest context plus the largest tree) so CUDA graphs can replay on fixed
addresses: the target's and the drafter's KV caches, the committed length and root
token, the features waiting to enter the drafter's context, the drafter's top-k table,
the ranked draft paths, the compiled tree, the verifier's outputs and a small readback
vector.  A step is six functions, each captured per shape key by :class:`GraphRunner`:

    draft   (kv window)       drafter forward -> draft logits
    select  (T)               each depth's top-k log-probabilities (trees only)
    rank    (m)               best m paths over all depths + the budget rule's node count
    build   (method, n)       the n-node tree: tokens, parents, depths, ancestor matrix
    verify  (n, kv window)    tree mask, target forward, proposals (T = 0) or logits
    commit  (n)               acceptance walk, KV compaction, next root, readback

EAGLE-3's head drafts its tree in one step function instead of the first four,
``draft_eagle3`` (kv window) in :mod:`bastion.engines.static_eagle3`.  AR's one-node
tree has its own build and commit (``build_root``, ``commit_root``), a few writes that
are never compiled.

None of them reads a device value on the host, so a step has one host synchronisation:
the decoder's read of the readback vector (the previous step's tokens and this step's
node count).  The semantics are those of :mod:`bastion.engines.eager` exactly; the functions
reuse its tree, acceptance and cost-curve code.  The tree phase (select, rank, build) lives
in :mod:`bastion.engines.static_tree`, which on an uncompiled CPU engine ranks and builds by
a best-first walk on the host (the same trees).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bastion.engines import (
    compiled,
    prefill_memo,
    static_attention,
    static_dflash,
    static_eagle3,
    static_tree,
)
from bastion.engines.graphs import GraphRunner, read_to_host
from bastion.engines.rule_count import RuleCount
from bastion.engines.static_cache import ContextTooLongError, StaticKVCache
from bastion.engines.static_layers import FusedLayers
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.accept import accept
from bastion.speculative.best_first import Walk
from bastion.speculative.policy import TreePolicy
from bastion.speculative.tree import Tree
from dflash import DFlashDraftModel


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k


class StaticEngine:
    """Preallocated state and graph-captured step functions for one (target, drafter) pair."""

    def __init__(
        self,
        target: Target,
        drafter: DFlashDraftModel | None,
        max_context: int,
        n_max: int,
        graphs: bool = True,
        kv_block: int = 256,
        fused: bool = False,
        eagle3: Eagle3Drafter | None = None,
    ) -> None:
        self.target, self.drafter, self.eagle3 = target, drafter, eagle3
        self.device, self.dtype = target.device, target.dtype
        self.kv_block = kv_block
        # poll for the step's read instead of blocking in the sync (see read_back): on the
        # H200 it cut the GPU's wait for the host by about 100 us a step (docs/performance.md)
        self.spin_read = True
        self.block = drafter.block_size if drafter is not None else 1
        self.e3_size = eagle3.tree_size if eagle3 is not None else 0  # nodes of every EAGLE-3 tree
        self.read_width = max(self.block, eagle3.path_width if eagle3 is not None else 1)  # root + longest path
        self.n_max = max(int(n_max), self.read_width, self.e3_size)
        self.tap_sets = static_eagle3.tap_sets(drafter, eagle3)  # by name; verify's features=True means "dflash"
        self.runner = GraphRunner(self.device, enabled=graphs)
        # grouped-query tree attention without per-head K/V copies (sdpa targets only)
        self.attention = static_attention.register() if target.attn_impl == "sdpa" else None
        self.fused: FusedLayers | None = None
        self.fused_drafter = None  # the compiled engine's drafter layers (same call as the drafter)
        self.steps_compiled = False  # select, build and commit through torch.compile (set by compiled.fuse)
        self.host_walk: Walk | None = None  # an uncompiled CPU engine's last best-first walk (static_tree)
        if fused:  # the compiled engine (bastion.engines.compiled)
            compiled.fuse(self)
        if drafter is not None:
            target.set_feature_layers(drafter.target_layer_ids)
        self.memo = prefill_memo.PrefillMemo()  # prompts prefilled before: a cell's other methods restore them
        self.prefill_reused = False
        self._allocate(max_context)

    # ------------------------------------------------------------------ buffers
    def _allocate(self, max_context: int) -> None:
        cfg, dev, b = self.target.config, self.device, self.block
        self.max_context = int(max_context)
        self.topk = 0
        # room for the context, the biggest tree, and the drafter block written past it
        self.capacity = _round_up(self.max_context + self.n_max + b, self.kv_block)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        self.cache = StaticKVCache(self.target.num_layers, int(cfg.num_key_value_heads), head_dim, self.capacity,
                                   self.dtype, dev)
        long = dict(dtype=torch.long, device=dev)
        self.length = torch.zeros((), **long)  # committed tokens in the target's cache
        self.root = torch.zeros((), **long)  # last committed token, not yet seen by the target
        rw = self.read_width
        self.readback = torch.zeros(rw + 2, **long)  # [accepted count, node count, path tokens.., bonus]
        # its host copy: page-locked, so the step's one read is a direct DMA, not a staged copy
        self.readback_host = torch.zeros(rw + 2, dtype=torch.long, pin_memory=dev.type == "cuda")
        self.count = RuleCount(dev)  # the budget rule's node count (one Triton kernel on CUDA)
        self.read_event = torch.cuda.Event() if dev.type == "cuda" else None
        n = self.n_max
        self.tree_tokens = torch.zeros(n, **long)
        self.tree_parents = torch.zeros(n, **long)
        self.tree_depths = torch.zeros(n, **long)
        self.tree_anc = torch.zeros(n, n, dtype=torch.bool, device=dev)
        self.mask = torch.zeros(n, self.capacity, dtype=torch.bool, device=dev)  # [s, kv] tree mask rows
        self.positions = torch.zeros(n, **long)
        self.write_index = torch.zeros(n, **long)
        self.proposals = torch.zeros(n, **long)
        self.logits: torch.Tensor | None = None  # [n_max, V], made on the first T > 0 step
        self.arange = torch.arange(max(n, self.capacity), **long)
        if self.drafter is not None:
            static_dflash.allocate(self, n)
        if self.eagle3 is not None:
            static_eagle3.allocate(self, n, rw)

    def ensure_capacity(self, need: int, nodes: int = 0) -> None:
        """Grow the buffers for a longer context (or larger trees); graphs on the old ones are dropped."""
        if need > self.max_context or nodes > self.n_max:
            self.runner = GraphRunner(self.device, enabled=self.runner.enabled)
            self.n_max = max(self.n_max, nodes)
            self._allocate(_round_up(max(need, self.max_context), self.kv_block))

    def window(self, tokens: int) -> int:
        """The attention window that covers ``tokens`` positions."""
        if tokens > self.capacity:
            raise ContextTooLongError(
                f"{tokens} positions exceed the static engine's buffers ({self.capacity}); "
                "raise its max_context or shorten the prompt / --max-new-tokens"
            )
        return min(self.capacity, _round_up(tokens, self.kv_block))

    def set_topk(self, k: int) -> None:
        """Tokens kept per depth; views of fixed buffers, so graphs of other k stay valid."""
        self.topk = k
        self.logq, self.top_tok = self.logq_all[:, :k], self.top_tok_all[:, :k]

    # ------------------------------------------------------------------ prefill
    def taps(self, features: bool | str) -> str | None:
        """Point the target at a drafter's layers: ``features`` False, True / "dflash" or "eagle3"; returns the name."""
        if not features:
            return None
        name = "dflash" if features is True else features
        self.target.set_feature_layers(self.tap_sets[name])
        return name

    def prefill(self, ids: torch.Tensor, features: bool | str, prompt=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The prompt [1, P] into an empty cache: a causal forward, or a kept copy of one
        (:func:`bastion.engines.prefill_memo.prefill`); returns (hidden [1, H], features [1, P, F])."""
        done = prefill_memo.prefill(self, ids, self.taps(features), prompt)
        return done.hidden, done.features

    # ------------------------------------------------------------------ step functions
    def draft(self, kv: int, feats: torch.Tensor) -> None:
        """Drafter forward for the block at ``length``; ``feats`` [1, W, F] enter its context first."""
        self.draft_out.copy_(self.draft_logits(kv, feats))

    def draft_logits(self, kv: int, feats: torch.Tensor) -> torch.Tensor:
        """Draft logits [b - 1, V] for depths 1..b-1 (the drafter's K/V window is ``kv``)."""
        return static_dflash.draft_logits(self, kv, feats)

    def draft_window(self, committed: int) -> int:
        """The drafter's attention window when the host has read ``committed`` tokens."""
        return static_dflash.window(self, committed)

    def draft_eagle3(self, kv: int, prompt: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        """EAGLE-3's tree into the tree buffers, the head's window ``kv``; ``prompt``: the first draft's pairs."""
        static_eagle3.draft(self, kv, prompt)

    def select(self, temperature: float) -> None:
        """Each depth's top-k draft log-probabilities (:func:`bastion.engines.static_tree.select`)."""
        static_tree.select(self, temperature)

    def rank(self, m: int, policy: TreePolicy, cost_model, fixed_cost: float) -> int:
        """Rank the best ``m`` paths and write the rule's node count into the readback vector.

        Returns how many paths exist (fewer than ``m`` when the whole space was ranked).
        """
        return static_tree.rank(self, m, policy, cost_model, fixed_cost)

    def build(self, ranked: bool, n: int) -> None:
        """Compile the ``n``-node tree (n > 1) into the tree buffers: ranked paths (BASTION) or a chain."""
        static_tree.build(self, ranked, n)

    def verify(self, n: int, kv: int, greedy: bool, features: bool | str) -> None:
        """Target forward over the ``n`` tree nodes with a [n, kv] mask; proposals or logits out.

        ``features``: False, True / "dflash" or "eagle3" (whose layers to tap; a graph per value).
        """
        taps = self.taps(features)
        features = taps is not None
        mask = self.mask[:n, :kv]
        mask.copy_((self.arange[:kv] < self.length)[None].expand(n, kv))
        self.write_index[:n].copy_(self.length + self.arange[:n])
        mask.index_copy_(1, self.write_index[:n], self.tree_anc[:n, :n])
        self.positions[:n].copy_(self.length + self.tree_depths[:n])
        self.cache.write_index = self.write_index[:n]
        self.cache.kv_len = kv
        hidden, feats = self._forward(self.tree_tokens[:n][None], self.positions[:n][None], mask[None, None], features)
        logits = self.target.logits(hidden[0])  # [n, V]
        if greedy:
            self.proposals[:n].copy_(logits.argmax(dim=-1))
        else:
            self.logits[:n].copy_(logits)
        if features:
            (self.e3_features if taps == "eagle3" else self.features)[:n].copy_(feats[0])

    def _forward(self, ids, positions, mask, features: bool):
        """The target over tree tokens: (hidden [1, s, H], tapped features [1, s, F] or None)."""
        if self.fused is not None:
            return self.fused.forward(ids, positions, mask, self.cache, features)
        config = self.target.config
        saved = config._attn_implementation
        try:
            if self.attention is not None:
                config._attn_implementation = self.attention
            out = self.target.forward(ids, positions, mask, self.cache, features=features)
        finally:
            config._attn_implementation = saved
        return out.hidden, out.features

    def commit(self, n: int, features: bool | str) -> None:
        """Accept along the proposals, compact the KV cache, advance, fill the readback vector."""
        b = self.block
        tree = Tree(self.tree_tokens[:n], self.tree_parents[:n], self.tree_depths[:n], self.tree_anc[:n, :n])
        proposals = self.proposals[:n]
        order, count = accept(tree, proposals)
        # always read_width entries (past n: the root's, never read), so no graph asks n <= read_width:
        # DFlash's 16-node chain and BASTION's larger trees share this function's graph
        rw = self.read_width
        keep = F.pad(order, (0, rw))[:rw]
        self.cache.keep(self.length, keep)
        if features == "eagle3":  # the head's next pairs; the host slices them by the count it reads
            self.e3_pend[:rw].copy_(self.e3_features.index_select(0, keep))
        elif features:
            self.pend[0, :b].copy_(self.features.index_select(0, keep[:b]))
            self.pend_count.copy_(count + 1)
        bonus = proposals[order.gather(0, count.view(1))]  # [1]
        self.readback[0].copy_(count)
        self.readback[2 : 1 + rw].copy_(tree.tokens[keep[1:]])
        self.readback[-1:].copy_(bonus)
        self.root.copy_(bonus[0])
        self.length.add_(count + 1)

    def build_root(self) -> None:
        """:meth:`build` of AR's one-node tree: four tiny writes, never compiled (a compiled
        ``build`` specialises on n == 1, a graph that the first decode job of a warm worker paid for)."""
        self.tree_tokens[:1].copy_(self.root.view(1))
        self.tree_parents[:1].fill_(-1)
        self.tree_depths[:1].zero_()
        self.tree_anc[:1, :1].fill_(True)

    def commit_root(self) -> None:
        """:meth:`commit` of AR's untapped one-node tree, never compiled: the root's proposal is
        the next token, and the root's K/V already sit at the committed length, so nothing moves."""
        bonus = self.proposals[:1]
        self.readback[0].zero_()
        self.readback[-1:].copy_(bonus)
        self.root.copy_(bonus[0])
        self.length.add_(1)

    def read_back(self) -> list[int]:
        """The readback vector on the host: waits for every step function launched so far."""
        return read_to_host(self.readback, self.readback_host, self.read_event if self.spin_read else None)

    def state(self) -> list[torch.Tensor]:
        """Tensors :meth:`commit` updates in place (restored after capture warm-up)."""
        extra = [self.pend, self.pend_count] if self.drafter is not None else []
        if self.eagle3 is not None:
            extra.append(self.e3_pend)
        return [self.cache.kv, self.length, self.root, self.readback, *extra]

    def logits_buffer(self) -> torch.Tensor:
        if self.logits is None or self.logits.shape[0] < self.n_max:  # n_max may have grown
            vocab = self.target.lm_head.weight.shape[0]
            self.logits = torch.zeros(self.n_max, vocab, dtype=self.dtype, device=self.device)
        return self.logits
