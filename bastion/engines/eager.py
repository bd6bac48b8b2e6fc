"""AR, EAGLE-3, DFlash and BASTION decoding on one shared step loop.

Every step verifies a tree whose root is the last committed token: AR verifies the root
alone, EAGLE-3 the head's own dynamic tree, DFlash the drafter's greedy block as a chain,
BASTION a budget-aware tree.  The draft comes from the method's proposer
(:mod:`bastion.engines.proposer`), the tree from the method's tree kind.  One target
forward, the acceptance walk of :mod:`bastion.speculative.accept`, then the commit:
accepted nodes keep their KV entries (moved to contiguous positions) and their hidden
states go to the proposer for its next draft.  Emitted tokens are cut at the first stop
token and at ``max_new_tokens`` exactly as AR decoding would, so at temperature 0 all
methods return identical ids.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import torch

from bastion.costmodel.model import CostModel, StepOverheads, rule_inputs
from bastion.engines.base import DecodeRun, check_fits, check_method, draft_gate, emit, gate_drafts, prompt_tensor
from bastion.engines.choice import sync
from bastion.engines.proposer import Accepted, Draft
from bastion.engines.proposers import eager_proposer
from bastion.engines.step_clock import fill_times, step_clock
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.results.generation import GenerationResult, StepStats
from bastion.speculative.accept import Readback, accept, propose
from bastion.speculative.surrogate import SurrogateFit
from bastion.speculative.policy import TreePolicy
from bastion.speculative.tree import Tree, build_tree_topk, chain_tree, draft_topk, root_tree, topk_width
from dflash import DFlashDraftModel


@dataclass(kw_only=True)
class _Decode(DecodeRun):
    """One ``generate`` call's state between steps."""

    cache: object  # the target's growing KV cache
    root: torch.Tensor  # 0-d: the last committed token, not yet seen by the target
    unseen: tuple | None = None  # the last drafted step's (committed, nodes, context), for the gate after the next decision
    marks: list[tuple] = field(default_factory=list)  # (stats, phase stamps) of every step, timed after the last


class EagerDecoder:
    """Decodes one prompt at batch size 1 on Transformers' layers with growing caches."""

    def __init__(
        self,
        target: Target,
        method: str,
        drafter: DFlashDraftModel | None = None,
        policy: TreePolicy | None = None,
        cost_model: CostModel | None = None,
        overheads: StepOverheads | None = None,
        eagle3: Eagle3Drafter | None = None,
    ) -> None:
        self.spec = check_method(method, drafter is not None, policy or TreePolicy(), cost_model, overheads,
                                 eagle3 is not None)
        # the tree policy at T = 0 and at T > 0 (MethodSpec.tree_policy); generate takes its temperature's
        self.policies = self.spec.tree_policies(policy or TreePolicy(), gpu=target.device.type == "cuda")
        self.policy = self.policies[False]
        self.target, self.method, self.drafter, self.eagle3 = target, method, drafter, eagle3
        self.overheads = overheads
        self.cost_model, self.fixed_cost = rule_inputs(cost_model, overheads, self.spec.rule or "plus")
        # whether a step drafts, and the surrogate's correction at T > 0, learned over every prompt this
        # decoder runs (this project's adaptive rule; None: every step drafts, the surrogate as drafted)
        self.gate = draft_gate(self.spec, self.policy, cost_model, self.cost_model, self.fixed_cost, overheads)
        self.fit = SurrogateFit() if self.gate is not None else None
        self.proposer = eager_proposer(self.spec.drafter, {"dflash": drafter, "eagle3": eagle3}, target)
        # positions reserved past the generation: the proposer's widest step; AR on a decoder with a
        # DFlash drafter reserves its block too, as the static engine (and a cell's other methods) do
        self.block_size = self.proposer.width if self.spec.drafts else (drafter.block_size if drafter is not None else 1)
        if self.proposer.layer_ids:
            target.set_feature_layers(self.proposer.layer_ids)

    def check_fits(self, prompt_len: int, max_new_tokens: int) -> None:
        check_fits(self.target, prompt_len, max_new_tokens, self.block_size)

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: Sequence[int] | torch.Tensor,
        max_new_tokens: int,
        temperature: float = 0.0,
        stop_token_ids: Iterable[int] = (),
        generator: torch.Generator | None = None,
        collect_stats: bool | str = False,
    ) -> GenerationResult:
        target, device = self.target, self.target.device
        clock = step_clock(collect_stats, device)  # checks the argument before any work
        ids = prompt_tensor(prompt_ids, max_new_tokens, device)
        prompt_len = ids.shape[1]
        self.check_fits(prompt_len, max_new_tokens)
        if max_new_tokens == 0:
            return GenerationResult([], prompt_len, 0.0, 0.0, "max_new_tokens")
        if self.proposer.layer_ids:  # decoders of several methods may share the target: tap this one's layers
            target.set_feature_layers(self.proposer.layer_ids)
        stops = set(int(t) for t in stop_token_ids)

        sync(device)
        t0 = time.perf_counter()
        run = self._prefill(ids, max_new_tokens, stops, temperature, generator, clock)
        sync(device)
        t1 = time.perf_counter()
        while not run.done:
            self._step(run)
        if run.gate is not None:  # as the static engine: a decision past the last step (its draft is dropped), then
            self._drafts(run)  # the last step's count; so both engines' gates go through the same states
        sync(device)
        t2 = time.perf_counter()
        if collect_stats:
            fill_times(run.marks)
        return GenerationResult(run.output, prompt_len, t1 - t0, t2 - t1, run.stop_reason, run.steps)

    def _prefill(self, ids: torch.Tensor, max_new_tokens: int, stops: set[int], temperature: float,
                 generator: torch.Generator | None, clock: Callable[[], object]) -> _Decode:
        """The prompt's causal forward into a new cache, the first token, the proposer's start."""
        target, device, prompt_len = self.target, self.target.device, ids.shape[1]
        cache = target.new_cache(capacity=prompt_len + max_new_tokens + self.block_size + 64)
        out = target.forward(ids, torch.arange(prompt_len, device=device)[None], None, cache,
                             features=bool(self.proposer.layer_ids))
        first = propose(target.logits(out.hidden[0, -1:]), temperature, generator)  # [1]
        self.proposer.start(ids, first, out.features)
        self.policy = self.policies[temperature > 0]
        gate = self.gate if self.spec.gated(temperature) else None
        if gate is not None:
            gate.restart()
        run = _Decode(max_new_tokens=max_new_tokens, stops=stops, temperature=temperature, generator=generator,
                      clock=clock, cache=cache, root=first[0], hint=2 * self.policy.n_min, gate=gate)
        run.output.append(int(first.item()))
        run.stop_reason = "stop_token" if run.output[0] in stops else "max_new_tokens"
        run.done = run.output[0] in stops or len(run.output) >= max_new_tokens
        return run

    def _step(self, run: _Decode) -> None:
        """Draft, build the tree, verify, accept, commit: one step, its tokens read at once."""
        target, device, c = self.target, self.target.device, run.cache.length
        drafts = self._drafts(run, first=not run.steps, prompt_rows=c)
        ta = run.clock()
        draft = self.proposer.draft(run.root, c) if drafts else None
        tb = run.clock()
        shift = self.fit.shift if self.fit is not None and run.temperature > 0 else None
        tree = self._tree(run.root, draft, c, run.temperature, run.hint, shift) if drafts else root_tree(run.root)
        if run.learning is not None:  # the last drafted tree's outcome, once this step's tree is set (as static)
            self.fit.observe(*run.learning)
            run.learning = None
        n = tree.size
        run.hint = 2 * n if drafts else run.hint
        tc = run.clock()
        mask = torch.ones(1, 1, n, c + n, dtype=torch.bool, device=device)
        mask[0, 0, :, c:] = tree.ancestors
        vout = target.forward(tree.tokens[None], (c + tree.depths)[None], mask, run.cache,
                              features=bool(self.proposer.layer_ids))
        logits = target.logits(vout.hidden[0])  # [n, V]
        td = run.clock()
        proposals = propose(logits, run.temperature, run.generator)
        # the release's lossy walk follows the argmax; the bonus is still the sample at its stop
        order, count = accept(tree, logits.argmax(dim=-1) if self.spec.lossy and run.temperature > 0 else proposals)
        last = order.gather(0, count.view(1))
        path = tree.tokens[order[1 : min(n, self.block_size)]]
        back = Readback.pack(count, torch.full_like(count, n), path, proposals[last]).tolist()  # one sync
        te = run.clock()
        keep = order[: back[Readback.COUNT] + 1]
        run.cache.keep(c, keep)
        self.proposer.accepted(Accepted(vout.features, keep, c, tree, order, proposals[last]))
        before = len(run.output)
        ended = emit(run.output, Readback.tokens(back), run.stops, run.max_new_tokens)
        if ended is not None:
            run.done, run.stop_reason = True, ended
        run.root = proposals[last[0]]
        if drafts and run.gate is not None:
            run.unseen = (back[Readback.COUNT] + 1, n, c)
            run.learning = None if shift is None else (tree.mass, back[Readback.COUNT], shift)
        tf = run.clock()
        # only the tokens emitted count: a stop token or max_new_tokens may cut the step
        run.steps.append(StepStats(len(run.output) - before, n, c, drafted=drafts and self.spec.drafts))
        run.marks.append((run.steps[-1], (ta, tb, tc, td, te, tf)))

    @staticmethod
    def _drafts(run: _Decode, first: bool = False, prompt_rows: int = 0) -> bool:
        """Whether this step drafts (:func:`gate_drafts`; a prompt's ``first`` step that does not leaves the
        prompt's features with the proposer, for its first draft).

        The gate learns a step's count only after deciding the next step, as on the static engine,
        which launches a draft before it reads the step before: both take the same steps.
        """
        if run.gate is None:
            return True
        drafts = gate_drafts(run.gate, first, prompt_rows)
        if run.unseen is not None:
            run.gate.observe(*run.unseen)
            run.unseen = None
        return drafts

    def _tree(self, root: torch.Tensor, draft: Draft, c: int, temperature: float, hint: int,
              shift: float | None = None) -> Tree:
        """The step's tree: the one the proposer drafted, a chain of its greedy draft (the root alone
        without one), or the budget rule's best ranked paths (``shift``: the surrogate's correction, added
        to every depth's draft log-probabilities)."""
        if draft.tree is not None:
            return draft.tree
        if not self.spec.ranked:
            return chain_tree(root, draft.logits.argmax(dim=-1) if draft.logits is not None else root.new_empty(0))
        # the surrogate's draft probabilities: the raw logits' (paper) or at the sampling temperature (plus)
        logq, tok = draft_topk(draft.logits, self.spec.draft_temperature(temperature),
                               topk_width(self.policy, draft.logits.shape[-1]))
        if shift is not None:
            logq = logq + torch.tensor(shift, dtype=torch.float32, device=logq.device)
        curve = None
        if self.policy.budget is None:
            curve = self.cost_model.curve(c, self.policy.n_max, device=draft.logits.device)
        return build_tree_topk(root, logq, tok, self.policy, curve, self.fixed_cost, search_hint=hint)


class EagerProbe:
    """The eager engine's verification step for the latency grid (:class:`~bastion.engines.base.VerifyProbe`).

    Each context length is prefilled once with random tokens; every probe verifies ``s``
    tokens under a chain mask and crops the cache back, exactly like a decode step.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self.cache = None

    def reserve(self, tokens: int, nodes: int) -> None:
        """Eager caches grow as needed: nothing to reserve."""

    def at_context(self, c: int, room: int, generator: torch.Generator) -> None:
        target, device = self.target, self.target.device
        self.cache = target.new_cache(capacity=c + room)
        ctx = torch.randint(0, int(target.config.vocab_size), (1, c), generator=generator).to(device)
        target.forward(ctx, torch.arange(c, device=device)[None], None, self.cache, features=False)

    def probe(self, tokens: torch.Tensor, c: int, temperature: float = 0.0) -> Callable[[], None]:
        """Verify ``tokens`` [s] as a chain after ``c`` cached tokens, then crop back.

        At ``temperature`` > 0 every node also samples its token (softmax over the vocabulary
        and one draw, :func:`~bastion.speculative.accept.propose`), as a sampling decode step does.
        """
        target, cache = self.target, self.cache
        s, device = tokens.shape[0], tokens.device
        ids = tokens.view(1, s)
        pos = torch.arange(c, c + s, device=device)[None]
        mask = torch.ones(1, 1, s, c + s, dtype=torch.bool, device=device)
        mask[0, 0, :, c:] = torch.ones(s, s, dtype=torch.bool, device=device).tril_()

        gen = torch.Generator(device=device).manual_seed(0) if temperature > 0 else None

        def step() -> None:
            out = target.forward(ids, pos, mask, cache, features=False)
            logits = target.logits(out.hidden[0])
            if temperature > 0:
                propose(logits, temperature, gen)
            cache.crop(c)

        return step
