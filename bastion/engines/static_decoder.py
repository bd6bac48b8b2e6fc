"""The decoding loop of the static engine: same methods, same outputs, one host sync a step.

The eager :class:`bastion.engines.eager.EagerDecoder` reads each step's accepted tokens
before the next step starts.  Here the host reads them one step later, in the same
transfer as the next tree's node count, which the host must know anyway to pick the
verification graph.  A step is therefore: draft, rank (both on device state the host has
not read), read the readback vector (the step's one synchronisation), build, verify,
commit.  Generation ends when a read shows a stop token or enough tokens; the draft
issued after the final commit is discarded.  The emitted tokens, cut at stop tokens and
``max_new_tokens``, are those of the eager decoder.

The step asks its proposer for the draft (:mod:`bastion.engines.proposer`): the DFlash
drafter's logits, or EAGLE-3's whole tree, on device state; the adaptive node count is
the search of :mod:`bastion.speculative.search`, whose first ranking runs before the read
and whose count arrives with the previous step's tokens.  The first draft, over the whole
prompt, is the first step's (or, where this project's gate skips that step's draft, the
first drafting step's): its time is decode time, as on the eager engine (and in the
original release's harness), never prefill time.

Step times (``collect_stats``, :mod:`bastion.engines.step_clock`) come in two kinds.
``True`` synchronises the device at every phase boundary, so each phase is timed alone
(host launch included); that is what calibration's step overheads use.  ``"events"``
records a CUDA event at each boundary instead: the decode runs exactly as it does
untimed, and any time the GPU waits for the host (the step's one synchronisation) falls
in the phase it interrupts, so the phases add up to the step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch

from bastion.costmodel.model import CostModel, StepOverheads, rule_inputs
from bastion.engines.base import DecodeRun, check_fits, check_method, draft_gate, emit, gate_drafts, prompt_tensor
from bastion.engines.choice import sync
from bastion.engines.static_engine import StaticEngine
from bastion.engines.step_clock import fill_times, step_clock
from bastion.results.generation import GenerationResult, StepStats
from bastion.speculative.accept import Readback, propose
from bastion.speculative.policy import TreePolicy
from bastion.speculative.search import AdaptiveSearch
from bastion.speculative.surrogate import SurrogateFit
from bastion.speculative.tree import topk_width


@dataclass(kw_only=True)
class _Decode(DecodeRun):
    """One ``generate`` call's host-side state."""

    width: int  # tokens a depth the tree phase may select (ranked trees)
    fitting: bool = False  # the surrogate's correction is learned (this project's adaptive rule at T > 0)
    shift: float = 0.0  # the correction this step's ranking reads, and the pending step's
    pending_shift: float = 0.0
    marks: list[tuple] = field(default_factory=list)  # (stats, phase stamps) of every step
    pending: StepStats | None = None  # the verified step whose tokens are not read yet
    prompt: tuple | None = None  # (ids [1, P], first token [1], features [1, P, F]) until the first step reads them
    context: int = 0  # committed length, as the host last read it
    first_step: bool = True

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


class StaticDecoder:
    """Decodes one prompt at batch size 1 on a :class:`StaticEngine` (shared by all methods)."""

    def __init__(
        self,
        engine: StaticEngine,
        method: str,
        policy: TreePolicy | None = None,
        cost_model: CostModel | None = None,
        overheads: StepOverheads | None = None,
    ) -> None:
        self.spec = check_method(method, "dflash" in engine.proposers, policy or TreePolicy(), cost_model, overheads,
                                 "eagle3" in engine.proposers)
        # the tree policy at T = 0 and at T > 0 (MethodSpec.tree_policy), each with its ranking search;
        # generate takes its temperature's pair as self.policy and self.search
        self.policies = self.spec.tree_policies(policy or TreePolicy(), gpu=engine.device.type == "cuda")
        self.searches = {sampling: AdaptiveSearch(p) for sampling, p in self.policies.items()}
        self.policy, self.search = self.policies[False], self.searches[False]
        if self.spec.ranked and self.policy.limit > engine.n_max:
            raise ValueError(
                f"the tree may grow to {self.policy.limit} nodes but the static engine "
                f"was built for n_max={engine.n_max}; build the engine with a larger n_max"
            )
        self.engine, self.method = engine, method
        self.overheads = overheads
        self.cost_model, self.fixed_cost = rule_inputs(cost_model, overheads, self.spec.rule or "plus")
        # whether a step drafts, and the surrogate's correction at T > 0, learned over every prompt this
        # decoder runs (this project's adaptive rule; None: every step drafts, the surrogate as drafted)
        self.gate = draft_gate(self.spec, self.policy, cost_model, self.cost_model, self.fixed_cost, overheads)
        self.fit = SurrogateFit() if self.gate is not None else None
        self.proposer = engine.proposer(self.spec.drafter)
        self.block_size = self.proposer.width
        self.target = engine.target

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
        eng = self.engine
        clock = step_clock(collect_stats, eng.device)  # checks the argument before any work
        ids = prompt_tensor(prompt_ids, max_new_tokens, eng.device)
        prompt_len = ids.shape[1]
        check_fits(self.target, prompt_len, max_new_tokens, max(eng.block, self.block_size))
        if max_new_tokens == 0:
            return GenerationResult([], prompt_len, 0.0, 0.0, "max_new_tokens")
        # one step past the last commit may still draft and verify: leave it room
        eng.ensure_capacity(prompt_len + max_new_tokens + eng.block)
        vocab = self.target.lm_head.weight.shape[0]
        self.policy, self.search = self.policies[temperature > 0], self.searches[temperature > 0]
        gate = self.gate if self.spec.gated(temperature) else None
        run = _Decode(max_new_tokens=max_new_tokens, stops=set(int(t) for t in stop_token_ids),
                      temperature=temperature, generator=generator, clock=clock, hint=2 * self.policy.n_min,
                      width=topk_width(self.policy, vocab) if self.spec.ranked else 0, gate=gate,
                      fitting=self.fit is not None and temperature > 0, context=prompt_len)
        if gate is not None:
            gate.restart()
        if run.fitting:
            eng.tree_phase.shift.fill_(self.fit.shift)
        capture0 = eng.runner.capture_seconds

        sync(eng.device)
        t0 = time.perf_counter()
        reused = self._prefill(run, ids, prompt_ids)
        sync(eng.device)
        t1 = time.perf_counter()
        while not run.done:
            self._step(run)
        sync(eng.device)
        t2 = time.perf_counter()
        if collect_stats:
            fill_times(run.marks)
        setup = eng.runner.capture_seconds - capture0  # graph captures are one-off work, not decoding
        return GenerationResult(run.output[:max_new_tokens], prompt_len, t1 - t0, t2 - t1 - setup, run.stop_reason,
                                run.steps, reused)

    def _prefill(self, run: _Decode, ids: torch.Tensor, prompt_ids) -> bool:
        """The prompt's forward (or its kept copy) and the first token; whether the prefill was a copy."""
        eng = self.engine
        last_hidden, feats, reused = eng.prefill(ids, self.proposer.name, prompt=prompt_ids)
        first = propose(self.target.logits(last_hidden), run.temperature, run.generator)  # [1]
        eng.buffers.root.copy_(first[0])
        run.output.append(int(first.item()))
        if not run.greedy:
            eng.logits_buffer()  # allocated before any graph that writes it is captured
        run.prompt = (ids, first, feats)
        run.done = run.output[0] in run.stops or len(run.output) >= run.max_new_tokens
        run.stop_reason = "stop_token" if run.output[0] in run.stops else "max_new_tokens"
        return reused

    def _step(self, run: _Decode) -> None:
        """Draft and rank, read the previous step back, then build, verify and commit this step's tree."""
        eng = self.engine
        drafts = gate_drafts(run.gate, run.first_step, run.context)  # else an AR step, without the drafter's forward
        run.shift = self.fit.shift if run.fitting else 0.0
        ta = run.clock()
        self._draft(run, drafts)
        tb = run.clock()
        m, got = self._rank_first(run) if drafts else (0, 0)
        n = self.spec.known_size(eng.block, self.policy, got, self.proposer.tree_size) if drafts else 1
        back = eng.read_back()  # the step's one host synchronisation
        if run.pending is not None and self._absorb(run, back):
            return
        if n is None:  # adaptive: the rule's count, read with the previous step's tokens
            n = self.search.settle(m, got, back[Readback.NODES], lambda width: self._rank_wider(run, width))
            run.hint = 2 * n
        if not drafts:  # the next draft takes in every row set aside: a drafted last step's kept ones, then this one's
            drafted = bool(run.steps) and run.steps[-1].drafted  # (a prompt's rows: set aside already)
            self.proposer.hold(eng.runner, back[Readback.COUNT] + 1 if drafted else 0)
        self._learn(run)
        run.first_step = False
        kv = eng.window(run.context + n)
        if self.proposer.tree_size is None:  # a tree the proposer drafted whole is in the tree buffers already
            self._build(run, n, drafts)
        tc = run.clock()
        self._verify_commit(run, n, kv, (ta, tb, tc), drafts and self.spec.drafts)

    def _build(self, run: _Decode, n: int, drafted: bool) -> None:
        """The step's ``n``-node tree into the tree buffers: the root alone (AR's step, or a one-node
        budget, never compiled), the ranked paths or the drafter's chain."""
        eng = self.engine
        if n == 1:
            eng.runner(("build_root",), eng.build_root)
        else:
            ranked, topk, mass = self.spec.ranked, eng.tree_phase.topk, run.fitting
            eng.runner(("build", ranked, n, topk, mass), lambda: eng.steps.build(ranked, n, mass))
        if run.fitting and drafted:
            eng.tree_phase.send_mass(n)

    def _learn(self, run: _Decode) -> None:
        """The last drafted tree's outcome into the surrogate's fit, once this step's tree is set (its wider
        rankings read the same correction); the next ranking reads the new one."""
        if run.learning is not None:
            self.fit.observe(*run.learning)
            self.engine.tree_phase.shift.fill_(self.fit.shift)
            run.learning = None

    def _draft(self, run: _Decode, drafts: bool) -> None:
        """The step's draft: over the whole prompt on the first step (eagerly; decode time on every engine,
        as in the eager loop), else from the device state (after steps without a draft, their features first).
        A first step without one sets the prompt's rows aside for the first draft."""
        if run.first_step and drafts:
            self.proposer.first(self.engine.runner, *run.prompt)
        elif run.first_step:
            self.proposer.hold_prompt(run.prompt[2])
        elif drafts:
            self.proposer.step(self.engine.runner, run.context)
        if run.first_step:
            run.prompt = None

    def _verify_commit(self, run: _Decode, n: int, kv: int, stamps: tuple, drafted: bool) -> None:
        """Verify the ``n``-node tree in window ``kv``, sample at T > 0, commit; the step's tokens are read next step."""
        eng, taps = self.engine, self.proposer.name
        hold = taps is not None and not drafted  # a step without a draft: its tapped row is set aside
        eng.runner(("verify", n, kv, run.greedy, taps, hold), lambda: eng.verify(n, kv, run.greedy, taps, hold),
                   writes=self.proposer.state() if hold else ())
        td = run.clock()
        lossy = self.spec.lossy and not run.greedy
        if not run.greedy:  # sampling stays eager: the caller's generator drives it
            logits, b = eng.logits_buffer()[:n], eng.buffers
            # the lossy walk follows the argmax and takes its bonus from the samples (Readback: commit)
            (b.samples if lossy else b.proposals)[:n].copy_(propose(logits, run.temperature, run.generator))
            if lossy:
                b.proposals[:n].copy_(logits.argmax(dim=-1))
        te = run.clock()
        if n == 1 and not lossy:  # AR's step, or one of this project's rule that did not draft (it holds)
            eng.runner(("commit_root", taps, hold), lambda: eng.commit_root(taps, hold), writes=eng.state())
        else:
            eng.runner(("commit", n, taps, lossy), lambda: eng.steps.commit(n, taps, lossy), writes=eng.state())
        tf = run.clock()
        run.pending, run.pending_shift = StepStats(0, n, run.context, drafted=drafted), run.shift
        run.marks.append((run.pending, (*stamps, td, te, tf)))

    def _absorb(self, run: _Decode, back: list[int]) -> bool:
        """Take in the verified step's readback: record it, emit its tokens, advance; whether generation ended."""
        before = len(run.output)
        ended = emit(run.output, Readback.tokens(back), run.stops, run.max_new_tokens)
        run.pending.committed = len(run.output) - before  # only emitted tokens count (cut at stops, max_new_tokens)
        if run.gate is not None and run.pending.drafted:
            run.gate.observe(back[Readback.COUNT] + 1, run.pending.tree_size, run.pending.context)
            if run.fitting:
                run.learning = (self.engine.tree_phase.read_mass(), back[Readback.COUNT], run.pending_shift)
        run.steps.append(run.pending)
        run.pending = None
        run.context += back[Readback.COUNT] + 1
        if ended is not None:
            run.done, run.stop_reason = True, ended
        return ended is not None

    def _rank_first(self, run: _Decode) -> tuple[int, int]:
        """The search's first ranking (ranked trees only), launched before the read: (width m, paths found)."""
        if not self.spec.ranked:
            return 0, 0
        m = self.search.width(run.hint)
        self._select(run, min(run.width, m))
        return m, self._rank(m)

    def _rank_wider(self, run: _Decode, m: int) -> tuple[int, int]:
        """A wider ranking, its count read at once (an extra host read, only when the first ranking ran short)."""
        if min(run.width, m) > self.engine.tree_phase.topk:
            self._select(run, min(run.width, m))
        got = self._rank(m)
        return got, int(self.engine.buffers.readback[Readback.NODES])

    def _select(self, run: _Decode, k: int) -> None:
        """Each depth's top ``k`` draft tokens, through a graph keyed by ``k``.

        Ranking the best ``m`` paths needs only ``k = m`` tokens a depth: a path through a
        depth's rank-r token is beaten by its r better-ranked siblings, so with r >= m it is
        never among the best m.  The adaptive rule thus selects as wide as it ranks (about
        twice its last tree) instead of the policy's full top-k: on a 2-core CPU 0.7 ms
        instead of 1.6 ms a step for the tiny pair's 15 x 4,096 draft logits.
        """
        eng, phase = self.engine, self.engine.tree_phase
        if k != phase.topk:  # views of fixed buffers: re-sliced only when the width changes
            phase.set_topk(k)
        t = self.spec.draft_temperature(run.temperature)  # the surrogate's draft probabilities (MethodSpec)
        shifted = run.fitting  # plus the surrogate's correction (speculative.surrogate)
        eng.runner(("select", t, k, shifted), lambda: eng.steps.select(t, shifted))

    def _rank(self, m: int) -> int:
        """Rank ``m`` paths through a graph keyed by ``m``; return how many paths exist (known without a read)."""
        eng, phase, fixed = self.engine, self.engine.tree_phase, self.fixed_cost
        got = phase.ranked(m)
        key = ("rank", m, phase.topk, self.policy, id(self.cost_model), fixed)
        eng.runner(key, lambda: phase.rank(m, self.policy, self.cost_model, fixed))
        return got

