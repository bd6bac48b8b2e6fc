"""AR, EAGLE-3, DFlash and BASTION decoding on one shared step loop.

Every step verifies a tree whose root is the last committed token: AR verifies the root
alone, EAGLE-3 the head's own dynamic tree, DFlash the drafter's greedy block as a chain,
BASTION a budget-aware tree.  One
target forward, the acceptance walk of :mod:`bastion.speculative.accept`, then the commit: accepted
nodes keep their KV entries (moved to contiguous positions) and their hidden states
become the drafter's new context features.  Emitted tokens are cut at the first stop
token and at ``max_new_tokens`` exactly as AR decoding would, so at temperature 0 all
three methods return identical ids.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Sequence

import torch

from bastion.costmodel.model import CostModel, StepOverheads, rule_costs
from bastion.engines.base import check_fits, check_method, emit, prompt_tensor
from bastion.engines.choice import sync
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.results.generation import GenerationResult, StepStats
from bastion.speculative.accept import accept, emitted_tokens, propose
from bastion.speculative.tree import (
    Tree,
    TreePolicy,
    build_tree_topk,
    chain_tree,
    draft_topk,
    topk_width,
)
from dflash import DFlashDraftModel


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
        self.policy = policy or TreePolicy()
        self.spec = check_method(method, drafter is not None, self.policy, cost_model, overheads, eagle3 is not None)
        self.target, self.method, self.drafter, self.eagle3 = target, method, drafter, eagle3
        self.cost_model, self.overheads = rule_costs(cost_model, overheads), overheads
        self.taps: list[int] = []  # the target layers this method's drafter reads, set at each generate
        if self.spec.drafter == "eagle3":
            self.taps = list(eagle3.layer_ids)
            self.block_size = eagle3.path_width  # root + the longest path a step can accept
        else:
            if drafter is not None:
                self.taps = list(drafter.target_layer_ids)
                if drafter.mask_token_id is None:
                    raise ValueError("the drafter config has no dflash_config.mask_token_id")
            self.block_size = drafter.block_size if drafter is not None else 1
        if self.taps:
            target.set_feature_layers(self.taps)

    # ------------------------------------------------------------------ helpers
    def check_fits(self, prompt_len: int, max_new_tokens: int) -> None:
        check_fits(self.target, prompt_len, max_new_tokens, self.block_size)

    def _draft(self, root: torch.Tensor, c: int, feats: torch.Tensor, feat_pos: torch.Tensor, dcache) -> torch.Tensor:
        """Draft logits [b - 1, V] for depths 1..b-1 of the block starting at position c."""
        b = self.block_size
        block = torch.full((1, b), self.drafter.mask_token_id, dtype=torch.long, device=root.device)
        block[0, 0] = root
        pos = torch.arange(c, c + b, device=root.device)[None]
        h = self.drafter(self.target.embed(block), pos, feats, feat_pos[None], cache=dcache)  # [1, b, H]
        return self.target.logits(h[0, 1:])

    def _tree(self, root: torch.Tensor, draft_logits: torch.Tensor | None, c: int, temperature: float, hint: int) -> Tree:
        if not self.spec.ranked:  # DFlash's greedy block as a chain; AR the root alone
            return chain_tree(root, draft_logits.argmax(dim=-1) if self.spec.drafts else root.new_empty(0))
        # Draft probabilities at the sampling temperature (1 for greedy) feed the surrogate.
        logq, tok = draft_topk(draft_logits, temperature, topk_width(self.policy, draft_logits.shape[-1]))
        curve = fixed = None
        if self.policy.budget is None:
            curve = self.cost_model.curve(c, self.policy.n_max, device=draft_logits.device)
            fixed = self.overheads.fixed
        return build_tree_topk(root, logq, tok, self.policy, curve, fixed or 0.0, search_hint=hint)

    # ------------------------------------------------------------------ main loop
    @torch.no_grad()
    def generate(
        self,
        prompt_ids: Sequence[int] | torch.Tensor,
        max_new_tokens: int,
        temperature: float = 0.0,
        stop_token_ids: Iterable[int] = (),
        generator: torch.Generator | None = None,
        collect_stats: bool = False,
    ) -> GenerationResult:
        target, device = self.target, self.target.device
        ids = prompt_tensor(prompt_ids, max_new_tokens, device)
        prompt_len = ids.shape[1]
        self.check_fits(prompt_len, max_new_tokens)
        stops = set(int(t) for t in stop_token_ids)
        use_draft = self.spec.drafts
        drafted = self.spec.tree == "drafted"  # EAGLE-3: the head drafts its own tree
        if max_new_tokens == 0:
            return GenerationResult([], prompt_len, 0.0, 0.0, "max_new_tokens")
        if use_draft:  # decoders of several methods may share the target: tap this one's layers
            target.set_feature_layers(self.taps)

        sync(device)
        t0 = time.perf_counter()
        cache = target.new_cache(capacity=prompt_len + max_new_tokens + self.block_size + 64)
        out = target.forward(ids, torch.arange(prompt_len, device=device)[None], None, cache, features=use_draft)
        first = propose(target.logits(out.hidden[0, -1:]), temperature, generator)  # [1]
        feats, feat_pos = out.features, torch.arange(prompt_len, device=device)
        dcache = self.drafter.new_cache() if use_draft and not drafted else None
        if drafted:  # the head's first pairs: features of positions 0..P-1, tokens 1..P-1 and the first new one
            ecache = self.eagle3.new_cache()
            feats, next_tokens = out.features[0], torch.cat([ids[0, 1:], first])
        output = [int(first.item())]
        root = first[0]
        sync(device)
        t1 = time.perf_counter()

        steps: list[StepStats] = []
        stop_reason = "stop_token" if output[0] in stops else "max_new_tokens"
        done = output[0] in stops or len(output) >= max_new_tokens
        hint = 2 * self.policy.n_min
        clock = (lambda: (sync(device), time.perf_counter())[1]) if collect_stats else (lambda: 0.0)
        while not done:
            c = cache.length
            ta = clock()
            if drafted:
                tree = self.eagle3.tree(ecache, feats, next_tokens)
                tb = clock()
            else:
                draft_logits = self._draft(root, c, feats, feat_pos, dcache) if use_draft else None
                tb = clock()
                tree = self._tree(root, draft_logits, c, temperature, hint)
            n = tree.size
            hint = 2 * n
            tc = clock()
            mask = torch.ones(1, 1, n, c + n, dtype=torch.bool, device=device)
            mask[0, 0, :, c:] = tree.ancestors
            vout = target.forward(tree.tokens[None], (c + tree.depths)[None], mask, cache, features=use_draft)
            logits = target.logits(vout.hidden[0])  # [n, V]
            td = clock()
            proposals = propose(logits, temperature, generator)
            order, count = accept(tree, proposals)
            width = min(n, self.block_size)
            last = order.gather(0, count.view(1))
            packed = torch.cat([count.view(1), tree.tokens[order[:width]], proposals[last]]).tolist()  # one sync
            a, emitted = packed[0], emitted_tokens(packed)
            te = clock()
            keep = order[: a + 1]
            cache.keep(c, keep)
            if drafted:  # features of the root and accepted drafts; tokens: the accepted drafts, then the bonus
                feats = vout.features[0, keep]
                next_tokens = torch.cat([tree.tokens[order[1 : a + 1]], proposals[last]])
            elif use_draft:
                feats = vout.features[:, keep]
                feat_pos = torch.arange(c, c + a + 1, device=device)
            before = len(output)
            ended = emit(output, emitted, stops, max_new_tokens)
            if ended is not None:
                done, stop_reason = True, ended
            root = proposals[last[0]]
            tf = clock()
            # only the tokens emitted count: a stop token or max_new_tokens may cut the step
            steps.append(StepStats(len(output) - before, n, c, tb - ta, tc - tb, td - tc, te - td, tf - te))
        sync(device)
        t2 = time.perf_counter()
        return GenerationResult(output, prompt_len, t1 - t0, t2 - t1, stop_reason, steps)


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

        At ``temperature`` > 0 every node also samples its token (softmax + multinomial
        over the vocabulary), as a sampling decode step does.
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
