"""The static engine's tree phase: select, rank and build, on buffers of its own.

These three step functions sit between the draft and the verification.  ``select`` keeps
each depth's top-k log-probabilities, ``rank`` orders the paths and writes the budget
rule's node count into the readback vector, and ``build`` writes the chosen tree (the
ranked paths for BASTION, the drafter's greedy chain for DFlash) into the tree buffers.
The phase owns the top-k table, the ranked paths and the host walk; it reads the draft
logits and writes the tree and the count into the engine's :class:`StepBuffers`.

They have two implementations with the same trees.  On CUDA, and wherever torch.compile
runs them, they are tensor programs that never read a device value on the host, so each
is one graph.  Otherwise, on a CPU, the budget rule runs as the best-first walk of
:mod:`bastion.speculative.best_first`: it pops only the paths the count reads, which took
BASTION's extra tree-phase time over DFlash's from about 1.0 to 0.4 ms a step on the
2-core CPU (docs/performance.md).
"""

from __future__ import annotations

from typing import Callable

import torch

from bastion.costmodel.model import CostModel
from bastion.defaults import TOPK_LIMIT, torch_references_forced
from bastion.engines.kernels import argmax_chunks, row_argmax
from bastion.engines.rule_count import RuleCount
from bastion.engines.static_buffers import StepBuffers
from bastion.speculative.accept import Readback
from bastion.speculative.best_first import Walk, rank_walk, tree_arrays
from bastion.speculative.fused import run_triton, use_triton
from bastion.speculative.path_rank import layout, top_paths
from bastion.speculative.policy import TreePolicy
from bastion.speculative.surrogate import depth_mass
from bastion.speculative.tree import chain_tree, draft_topk, paths_tree


class TreePhase:
    """Select, rank and build for a drafter whose logits [D, V] it reads."""

    def __init__(self, device: torch.device, compiled: bool, step: Callable[[Callable], Callable] = lambda f: f) -> None:
        self.device = device
        self.compiled = compiled  # select, build (and commit) run through torch.compile: no host walk
        self._select_torch = step(self._select_reference)  # compiled by the engine's ``step``, or as written
        self.count = RuleCount(device)  # the budget rule's node count (one Triton kernel on CUDA)
        self.host_walk: Walk | None = None  # the last best-first walk, for build (an uncompiled CPU engine)
        self.topk = 0
        self.mass: list[float] = []  # the last ranked tree's depth mass, on the host (speculative.surrogate)

    def allocate(self, bufs: StepBuffers, draft_out: torch.Tensor) -> None:
        """Its tables for the draft logits ``draft_out`` [D, V] and trees of up to ``bufs.n_max`` nodes."""
        self.bufs, self.draft_out = bufs, draft_out
        d, vocab = draft_out.shape
        long = dict(dtype=torch.long, device=self.device)
        self.argmax_chunks = argmax_chunks(vocab)  # a constant for the compiled build
        # each depth's top-k (k <= 128, the policy's cap); graphs use the [:, :k] view
        self.logq_all = torch.zeros(d, TOPK_LIMIT, dtype=torch.float32, device=self.device)
        self.top_tok_all = torch.zeros(d, TOPK_LIMIT, **long)
        self.set_topk(1)
        m = max(bufs.n_max - 1, 1)
        self.paths = {k: torch.zeros(m, **long) for k in ("depth", "local", "par_local", "rank")}  # ranked paths
        self.logp = torch.zeros(m, dtype=torch.float32, device=self.device)  # their path log-probabilities
        # the surrogate's correction (log c per depth), and the built tree's depth mass on the device and the host
        self.shift = torch.zeros((), dtype=torch.float32, device=self.device)
        self.mass_dev = torch.zeros(d, dtype=torch.float64, device=self.device)
        self.mass_host = torch.zeros(d, dtype=torch.float64, pin_memory=self.device.type == "cuda")

    def set_topk(self, k: int) -> None:
        """Tokens kept per depth; views of fixed buffers, so graphs of other k stay valid."""
        self.topk = k
        self.logq, self.top_tok = self.logq_all[:, :k], self.top_tok_all[:, :k]

    def ranked(self, m: int) -> int:
        """How many paths a ranking of ``m`` finds: a shape, so the host knows it without reading the device."""
        return min(m, layout(self.draft_out.shape[0], self.topk, m, self.device)[0].shape[0])

    def select(self, temperature: float, shifted: bool = False) -> None:
        """Each depth's top-k draft log-probabilities [D, k] at ``temperature``, ``shifted``: plus :attr:`shift`.

        On CUDA one Triton launch (:mod:`bastion.speculative.select_kernel`), never compiled;
        elsewhere, for a vocabulary too wide for it, or where it fails, the torch reference.
        """
        if not self._select_kernel(temperature, shifted):
            self._select_torch(temperature, shifted)

    def _select_kernel(self, temperature: float, shifted: bool) -> bool:
        """:meth:`select` by the Triton kernel; False where it does not serve (then the reference runs)."""
        if not use_triton(self.device):
            return False
        from bastion.speculative import select_kernel as kern  # imports Triton: only where it runs

        logits, shift = self.draft_out, self.shift if shifted else None
        return kern.serves(logits, self.logq.shape[1]) and run_triton(
            "select", self.device, lambda: kern.select_topk(logits, temperature, self.logq, self.top_tok, shift))

    def _select_reference(self, temperature: float, shifted: bool) -> None:
        """:meth:`select` in torch (compiled on the compiled engine's CUDA)."""
        # the width as the view's size, not the int: compiled with dynamic shapes, one graph serves every width
        logq, tok = draft_topk(self.draft_out, temperature, self.logq.shape[1])
        self.logq.copy_(logq + self.shift if shifted else logq)
        self.top_tok.copy_(tok)

    def walks_on_host(self) -> bool:
        """Rank and build by the best-first walk: an uncompiled CPU engine, unless
        ``BASTION_RANK=torch`` asks for the torch references."""
        return self.device.type == "cpu" and not self.compiled and not torch_references_forced()

    def rank(self, m: int, policy: TreePolicy, cost_model: CostModel, fixed_cost: float) -> int:
        """Rank the best ``m`` paths; the rule's node count into the readback vector; returns how many paths exist."""
        bufs = self.bufs
        nodes = bufs.readback[Readback.NODES : Readback.NODES + 1]
        if self.walks_on_host():
            curve = lambda n: cost_model.curve_at(int(bufs.length), n)  # noqa: E731  C(n), as RuleCount evaluates it
            got, self.host_walk = rank_walk(self.logq.numpy(), m, policy, curve, fixed_cost)
            nodes.fill_(self.host_walk.count)
            return got
        p = self.paths
        logp = top_paths(self.logq, m, (self.logp, p["depth"], p["local"], p["par_local"], p["rank"]))[0]
        got = logp.shape[0]
        if policy.budget is not None:
            nodes.fill_(min(policy.budget, got + 1))
        else:
            self.count(logp, policy, cost_model, fixed_cost, bufs.length, nodes)
        return got

    def build(self, ranked: bool, n: int, mass: bool = False) -> None:
        """The ``n``-node tree (n > 1) into the tree buffers: ranked paths (BASTION) or a chain (DFlash);
        ``mass``: a ranked tree's depth mass into :attr:`mass_dev` too (on the device; see :meth:`send_mass`)."""
        bufs = self.bufs
        if ranked and self.walks_on_host():
            arrays = tree_arrays(self.host_walk, self.top_tok.numpy(), int(bufs.root), n)
            for buf, a in zip((bufs.tree_tokens, bufs.tree_parents, bufs.tree_depths), arrays):
                buf.numpy()[:n] = a
            bufs.tree_anc.numpy()[:n, :n] = arrays[3]
            return
        if ranked:
            p = self.paths
            tree = paths_tree(bufs.root, self.top_tok, p["depth"], p["local"], p["par_local"], p["rank"], n, bufs.n_max)
            if mass:
                self.mass_dev.zero_()
                self.mass_dev.index_add_(0, p["depth"][: n - 1] - 1, self.logp[: n - 1].double().exp())
        else:  # the drafter's greedy block after the root (DFlash); AR's root alone is the engine's build_root
            tree = chain_tree(bufs.root, row_argmax(self.draft_out[: n - 1], self.argmax_chunks))
        bufs.write_tree(tree)

    def send_mass(self, n: int) -> None:
        """After a ranked tree of ``n`` nodes is built: its depth mass on its way to the host (read with the next
        readback, whose synchronisation it precedes); the host walk's is there already, a root alone has none."""
        d = self.draft_out.shape[0]
        if n == 1:
            self.mass = [0.0] * d
        elif self.walks_on_host():
            self.mass = depth_mass(self.host_walk.logp[1:n], self.host_walk.depths[1:n], d)
        else:
            self.mass_host.copy_(self.mass_dev, non_blocking=True)
            self.mass = []  # read from mass_host after the synchronisation

    def read_mass(self) -> list[float]:
        """The last ranked tree's depth mass, once the readback that follows it has been read."""
        return self.mass or self.mass_host.tolist()
