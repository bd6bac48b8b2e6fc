"""The static engine's tree phase: select, rank and build on its fixed buffers.

These three step functions sit between the draft and the verification.  ``select`` keeps
each depth's top-k log-probabilities, ``rank`` orders the paths and writes the budget
rule's node count into the readback vector, and ``build`` writes the chosen tree (the
ranked paths for BASTION, the drafter's greedy chain for DFlash) into the tree buffers.

They have two implementations with the same trees.  On CUDA, and wherever torch.compile
runs them (``steps_compiled``), they are tensor programs that never read a device value
on the host, so each is one graph.  Otherwise, on a CPU, the budget rule runs as the
best-first walk of :mod:`bastion.speculative.best_first`: it pops only the paths the count
reads, which took BASTION's extra tree-phase time over DFlash's from about 1.0 to 0.4 ms a
step on the 2-core CPU (docs/performance.md, session 18).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bastion.defaults import torch_references_forced
from bastion.engines.kernels import row_argmax
from bastion.speculative.best_first import tree_arrays, walk
from bastion.speculative.path_rank import ranked_count, top_paths
from bastion.speculative.policy import TreePolicy
from bastion.speculative.tree import chain_tree, draft_topk, paths_tree

if TYPE_CHECKING:
    from bastion.engines.static_engine import StaticEngine


def select(engine: StaticEngine, temperature: float) -> None:
    """Each depth's top-k draft log-probabilities [D, k] at the sampling temperature (1 for greedy)."""
    # the width as the view's size, not the int: compiled with dynamic shapes, one graph serves every width
    logq, tok = draft_topk(engine.draft_out, temperature, engine.logq.shape[1])
    engine.logq.copy_(logq)
    engine.top_tok.copy_(tok)


def walks_on_host(engine: StaticEngine) -> bool:
    """Rank and build by the best-first walk: an uncompiled CPU engine, unless
    ``BASTION_RANK=torch`` asks for the torch references."""
    return engine.device.type == "cpu" and not engine.steps_compiled and not torch_references_forced()


def rank(engine: StaticEngine, m: int, policy: TreePolicy, cost_model, fixed_cost: float) -> int:
    """Rank the best ``m`` paths; the rule's node count into ``readback[1]``; returns how many paths exist."""
    if walks_on_host(engine):
        return _rank_host(engine, m, policy, cost_model, fixed_cost)
    logp, depth, local, par_local, rank_ = top_paths(engine.logq, m)
    got = logp.shape[0]
    for name, t in (("depth", depth), ("local", local), ("par_local", par_local), ("rank", rank_)):
        engine.paths[name][:got].copy_(t)
    if policy.budget is not None:
        engine.readback[1].fill_(min(policy.budget, got + 1))
    else:
        engine.count(logp, policy, cost_model, fixed_cost, engine.length, engine.readback[1:2])
    return got


def _rank_host(engine: StaticEngine, m: int, policy: TreePolicy, cost_model, fixed_cost: float) -> int:
    """:func:`rank` on a CPU: the walk is kept on the engine for :func:`build` to read."""
    logq = engine.logq.numpy()  # [D, K] fp32
    got = ranked_count(logq.shape[0], logq.shape[1], m)
    curve = None
    if policy.budget is None:  # C(n) as far as the count reads it, as RuleCount evaluates it
        curve = cost_model.curve_at(int(engine.length), min(policy.n_max, got))
    engine.host_walk = walk(logq[:, :m].tolist(), got, policy, curve, fixed_cost)
    engine.readback[1].fill_(engine.host_walk.count)
    return got


def build(engine: StaticEngine, ranked: bool, n: int) -> None:
    """The ``n``-node tree (n > 1) into the tree buffers: ranked paths (BASTION) or a chain (DFlash)."""
    if ranked and walks_on_host(engine):
        arrays = tree_arrays(engine.host_walk, engine.top_tok.numpy(), int(engine.root), n)
        for buf, a in zip((engine.tree_tokens, engine.tree_parents, engine.tree_depths), arrays):
            buf.numpy()[:n] = a
        engine.tree_anc.numpy()[:n, :n] = arrays[3]
        return
    if ranked:
        p = engine.paths
        tree = paths_tree(engine.root, engine.top_tok, p["depth"], p["local"], p["par_local"], p["rank"], n,
                          engine.n_max)
    else:  # the drafter's greedy block after the root (DFlash); AR's root alone is build_root
        tree = chain_tree(engine.root, row_argmax(engine.draft_out[: n - 1], engine.argmax_chunks))
    engine.tree_tokens[:n].copy_(tree.tokens)
    engine.tree_parents[:n].copy_(tree.parents)
    engine.tree_depths[:n].copy_(tree.depths)
    engine.tree_anc[:n, :n].copy_(tree.ancestors)
