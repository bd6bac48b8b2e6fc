"""The decoding loop of the static engine: same methods, same outputs, one host sync a step.

The eager :class:`bastion.engines.eager.Decoder` reads each step's accepted tokens before the
next step starts.  Here the host reads them one step later, in the same transfer as the
next tree's node count, which the host must know anyway to pick the verification graph.
A step is therefore: draft, rank (both on device state the host has not read), read the
readback vector (the step's one synchronisation), build, verify, commit.  Generation ends
when a read shows a stop token or enough tokens; the draft issued after the final commit
is discarded.  The emitted tokens, cut at stop tokens and ``max_new_tokens``, are those of
the eager decoder.

EAGLE-3 (a ``drafted`` tree) drafts like DFlash, on device state: its head reads the
previous step's accepted count and tokens from the readback vector on the device (one
graph per window, :mod:`bastion.engines.static_eagle3`), writes its tree straight into
the tree buffers, and verifies and commits through the same graphs at its fixed size.

Step times (``collect_stats``) come in two kinds.  ``True`` synchronises the device at
every phase boundary, so each phase is timed alone (host launch included); that is what
calibration's step overheads use.  ``"events"`` records a CUDA event at each boundary
instead and reads them after the last step: the decode runs exactly as it does untimed,
and any time the GPU waits for the host (the step's one synchronisation) falls in the
phase it interrupts, so the phases add up to the step.
"""

from __future__ import annotations

import time
from typing import Iterable, Sequence

import torch

from bastion.costmodel.model import CostModel, StepOverheads, rule_costs
from bastion.engines.base import check_fits, check_method, emit, prompt_tensor
from bastion.engines.choice import sync
from bastion.engines.static_engine import StaticEngine
from bastion.results.generation import GenerationResult, StepStats
from bastion.speculative.accept import emitted_tokens, propose
from bastion.speculative.path_rank import layout
from bastion.speculative.policy import TreePolicy
from bastion.speculative.rule import bucket_size, search_width, wider_search
from bastion.speculative.tree import topk_width


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
        self.policy = policy or TreePolicy()
        self.spec = check_method(method, engine.drafter is not None, self.policy, cost_model, overheads,
                                 engine.eagle3 is not None)
        limit = self.policy.budget if self.policy.budget is not None else self.policy.n_max
        if self.spec.ranked and limit > engine.n_max:
            raise ValueError(
                f"the tree may grow to {limit} nodes but the static engine "
                f"was built for n_max={engine.n_max}; build the engine with a larger n_max"
            )
        self.engine, self.method = engine, method
        self.cost_model, self.overheads = rule_costs(cost_model, overheads), overheads
        self.block_size = engine.block if self.spec.drafts else 1
        # what verify and commit tap: nothing, the DFlash drafter's layers or the EAGLE-3 head's
        self.taps: bool | str = {None: False, "dflash": True, "eagle3": "eagle3"}[self.spec.drafter]
        if self.spec.drafter == "eagle3":
            self.block_size = engine.eagle3.path_width
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
        eng, spec, policy = self.engine, self.spec, self.policy
        device = eng.device
        clock, marks = _clock(collect_stats, device)  # checks the argument before any work
        ids = prompt_tensor(prompt_ids, max_new_tokens, device)
        prompt_len = ids.shape[1]
        check_fits(self.target, prompt_len, max_new_tokens, max(eng.block, self.block_size))
        if max_new_tokens == 0:
            return GenerationResult([], prompt_len, 0.0, 0.0, "max_new_tokens")
        # one step past the last commit may still draft and verify: leave it room
        eng.ensure_capacity(prompt_len + max_new_tokens + eng.block)
        stops = set(int(t) for t in stop_token_ids)
        use_draft = spec.drafts
        drafted = spec.tree == "drafted"  # EAGLE-3: the head drafts its own tree, eagerly
        taps = self.taps
        greedy = temperature <= 0
        run = eng.runner
        capture0 = run.capture_seconds

        sync(device)
        t0 = time.perf_counter()
        last_hidden, feats = eng.prefill(ids, features=taps, prompt=prompt_ids)
        reused = eng.prefill_reused
        first = propose(self.target.logits(last_hidden), temperature, generator)  # [1]
        eng.root.copy_(first[0])
        output = [int(first.item())]
        width = topk_width(policy, self.target.lm_head.weight.shape[0]) if spec.ranked else 0
        if not greedy:
            eng.logits_buffer()  # allocated before any graph that writes it is captured
        if drafted:  # the head's first pairs: features of positions 0..P-1, tokens 1..P-1 and the first new one
            eng.draft_eagle3(eng.window(prompt_len), (feats[0], torch.cat([ids[0, 1:], first])))
        elif use_draft:  # the first draft takes in the whole prompt's features: one-off shape, eager
            eng.pend_count.fill_(prompt_len)
            eng.draft(eng.draft_window(prompt_len), feats)
        sync(device)
        t1 = time.perf_counter()

        done = output[0] in stops or len(output) >= max_new_tokens
        stop_reason = "stop_token" if output[0] in stops else "max_new_tokens"
        steps: list[StepStats] = []
        pending: StepStats | None = None  # the verified step whose tokens are not read yet
        c = prompt_len  # committed length, as the host last read it
        hint = 2 * policy.n_min
        fixed = self.overheads.fixed if self.overheads is not None else 0.0
        first_step = True
        while not done:
            ta = clock()
            if use_draft and not first_step:
                # the context grows by at most a block (a path) per step
                kv_d = eng.window(c + self.block_size) if drafted else eng.draft_window(c)
                if drafted:
                    run(("eagle3", kv_d), lambda: eng.draft_eagle3(kv_d))
                else:
                    run(("draft", kv_d), lambda: eng.draft(kv_d, eng.pend))
            tb = clock()
            got = 0
            if spec.ranked:
                m = search_width(hint, policy) if policy.budget is None else max(policy.budget - 1, 1)
                _select(eng, min(width, m), temperature)
                got = _rank(eng, m, policy, self.cost_model, fixed)
            n = spec.known_size(eng.block, policy, got, eng.e3_size)
            back = eng.read_back()  # the step's one host synchronisation
            if pending is not None:  # the previous step's tokens
                a, ended = _absorb(back, pending, steps, output, stops, max_new_tokens)
                pending = None
                c += a + 1
                if ended is not None:
                    done, stop_reason = True, ended
                    break
            if n is None:  # adaptive: the rule's count; widen the search if it ran out of paths
                n = back[1]
                while (wider := wider_search(m, got, n, policy)) is not None:
                    m = wider
                    if min(width, m) > eng.topk:
                        _select(eng, min(width, m), temperature)
                    got = _rank(eng, m, policy, self.cost_model, fixed)
                    n = int(eng.readback[1])
                n = bucket_size(n, policy)
                hint = 2 * n
            first_step = False
            kv = eng.window(c + n)
            if not drafted:  # a drafted tree is in the tree buffers already
                if n == 1:  # AR's step (or a one-node budget): the root alone, never compiled
                    run(("build_root",), eng.build_root)
                else:
                    run(("build", spec.ranked, n, eng.topk), lambda: eng.build(spec.ranked, n))
            tc = clock()
            run(("verify", n, kv, greedy, taps), lambda: eng.verify(n, kv, greedy, taps))
            td = clock()
            if not greedy:  # sampling stays eager: the caller's generator drives it
                eng.proposals[:n].copy_(propose(eng.logits_buffer()[:n], temperature, generator))
            te = clock()
            if n == 1 and not taps:
                run(("commit_root",), eng.commit_root, writes=eng.state())
            else:
                run(("commit", n, taps), lambda: eng.commit(n, taps), writes=eng.state())
            tf = clock()
            pending = StepStats(0, n, c, 0.0, 0.0, 0.0, 0.0, 0.0)
            marks.append((pending, (ta, tb, tc, td, te, tf)))
        sync(device)
        t2 = time.perf_counter()
        for stats, stamps in marks if collect_stats else ():  # every event has completed after the final sync
            stats.t_draft, stats.t_tree, stats.t_verify, stats.t_accept, stats.t_commit = _intervals(stamps)
        setup = run.capture_seconds - capture0  # graph captures are one-off work, not decoding
        return GenerationResult(output[:max_new_tokens], prompt_len, t1 - t0, t2 - t1 - setup, stop_reason, steps, reused)


def _absorb(back: list[int], pending: StepStats, steps: list[StepStats], output: list[int], stops: set[int],
            max_new_tokens: int) -> tuple[int, str | None]:
    """Take in a verified step's readback: record it, emit its tokens; return (accepted count, why it ended)."""
    before = len(output)
    ended = emit(output, emitted_tokens(back), stops, max_new_tokens)
    pending.committed = len(output) - before  # only emitted tokens count (cut at stops, max_new_tokens)
    steps.append(pending)
    return back[0], ended


def _clock(collect_stats: bool | str, device: torch.device) -> tuple:
    """(clock, marks): ``clock()`` stamps a phase boundary; ``marks`` collects each step's stamps.

    Untimed, the stamps are zeros and are never turned into times.
    """
    if collect_stats == "events":
        if device.type != "cuda":
            raise ValueError(f"collect_stats='events' needs a CUDA device, not {device}; use collect_stats=True")

        def stamp() -> torch.cuda.Event:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event

        return stamp, []
    if collect_stats not in (True, False):
        raise ValueError(f"collect_stats must be True, False or 'events', not {collect_stats!r}")
    if collect_stats:
        return (lambda: (sync(device), time.perf_counter())[1]), []
    return (lambda: 0.0), []


def _intervals(stamps: tuple) -> list[float]:
    """Seconds between consecutive stamps (perf_counter floats or recorded CUDA events)."""
    if isinstance(stamps[0], float):
        return [b - a for a, b in zip(stamps, stamps[1:])]
    return [a.elapsed_time(b) / 1e3 for a, b in zip(stamps, stamps[1:])]


def _select(eng: StaticEngine, k: int, temperature: float) -> None:
    """Each depth's top ``k`` draft tokens, through a graph keyed by ``k``.

    Ranking the best ``m`` paths needs only ``k = m`` tokens a depth: a path through a
    depth's rank-r token is beaten by its r better-ranked siblings, so with r >= m it is
    never among the best m.  The adaptive rule thus selects as wide as it ranks (about
    twice its last tree) instead of the policy's full top-k: on a 2-core CPU 0.7 ms
    instead of 1.6 ms a step for the tiny pair's 15 x 4,096 draft logits.
    """
    if k != eng.topk:  # views of fixed buffers: re-sliced only when the width changes
        eng.set_topk(k)
    eng.runner(("select", temperature, k), lambda: eng.select(temperature))


def _rank(eng: StaticEngine, m: int, policy: TreePolicy, cost_model, fixed: float) -> int:
    """Rank ``m`` paths through a graph keyed by ``m``; return how many paths exist.

    The count is a shape (the ranked-path layout of :func:`bastion.speculative.path_rank.top_paths`), so the host knows it
    without reading the device.
    """
    got = min(m, layout(eng.block - 1, eng.topk, m, eng.device)[0].shape[0])
    eng.runner(("rank", m, eng.topk, policy, id(cost_model), fixed), lambda: eng.rank(m, policy, cost_model, fixed))
    return got
