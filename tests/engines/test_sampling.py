"""T > 0: DFlash and BASTION sample exactly from the target's distribution.

A target with a 6-token vocabulary generates exactly 3 tokens, so the whole output
distribution (216 sequences) can be enumerated from the target's own conditionals.  Many
seeded speculative runs are then compared with it by a chi-square test.  With p > 1e-3 as
the pass criterion a correct implementation fails with probability 0.1 % per seed; the
seeds are fixed, so the outcome is deterministic.  The same counts tested against the
distribution at another temperature must be rejected, which shows the test can fail.

Three-token runs are mostly single steps; the second half of this file tests long runs
in which the tree usually misses, with a statistic shown to reject subtly wrong samplers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chi2, chisquare, norm

from bastion.costmodel.model import StepOverheads
from bastion.engines import eager
from bastion.engines.eager import EagerDecoder
from bastion.models.target import Target
from bastion.speculative.gate import DraftGate
from bastion.speculative.policy import TreePolicy
from tests.support.builders import tiny_drafter, tiny_target
from tests.support.decoding import _cost_model

VOCAB, NEW = 6, 3
PROMPT = [0, 3, 1, 4, 2]


@pytest.fixture(scope="module")
def pair():
    model = tiny_target(vocab=VOCAB, layers=4, hidden=32, seed=13, scale=2.0)
    return model, tiny_drafter(model, block_size=4, seed=2, mask_id=VOCAB - 1)


def exact_distribution(model, temperature: float) -> np.ndarray:
    """P(x1, x2, x3 | prompt) from the target's conditionals, flattened [V ** 3]."""

    def cond(prefix: tuple[int, ...]) -> np.ndarray:
        with torch.no_grad():
            logits = model(torch.tensor([PROMPT + list(prefix)])).logits[0, -1].double()
        return torch.softmax(logits / temperature, -1).numpy()

    probs = np.zeros([VOCAB] * NEW)
    p1 = cond(())
    for x1 in range(VOCAB):
        p2 = cond((x1,))
        for x2 in range(VOCAB):
            probs[x1, x2] = p1[x1] * p2[x2] * cond((x1, x2))
    return probs.reshape(-1)


def sample_counts(dec: EagerDecoder, temperature: float, runs: int, seed: int) -> np.ndarray:
    counts = np.zeros(VOCAB**NEW)
    gen = torch.Generator()
    for r in range(runs):
        gen.manual_seed(seed * 100_003 + r)
        out = dec.generate(PROMPT, NEW, temperature=temperature, generator=gen).output_ids
        assert len(out) == NEW
        counts[np.ravel_multi_index(out, [VOCAB] * NEW)] += 1
    return counts


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square goodness of fit, pooling cells with expected count < 5 into one."""
    expected = probs * counts.sum()
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.mark.parametrize("method,temperature", [("bastion", 1.0), ("dflash", 1.0), ("bastion", 0.7)])
def test_speculative_sampling_matches_target_distribution(pair, method, temperature):
    model, drafter = pair
    target = Target(model)
    dec = EagerDecoder(target, method, drafter, TreePolicy(budget=24))
    probs = exact_distribution(model, temperature)
    assert abs(probs.sum() - 1) < 1e-9
    counts = sample_counts(dec, temperature, runs=1500, seed=11)
    assert chi2_pvalue(counts, probs) > 1e-3
    # power: the same counts are clearly NOT distributed as the target at another temperature
    other = exact_distribution(model, temperature * 0.5)
    assert chi2_pvalue(counts, other) < 1e-6


# ---------------------------------------------------------------------------------------
# A test with power: many multi-step runs in which the tree usually misses the sampled token.
#
# The drafter proposes a fixed distribution Q that puts 90% on one token W the target finds
# unlikely, and the tree holds 4 nodes, so most steps take the "sampled token absent from
# the tree" branch.  For every emitted token we know the target's exact conditional p (one
# batched forward over the finished sequences) and test three things, Bonferroni-combined:
#   - the temperature score  sum(log p(x) - E_p log p), normalised (z-test);
#   - the drift score        sum(Q(x) / p(x) - 1), normalised (z-test): mass moved toward Q;
#   - an omnibus chi-square on the (rank of x under p, x == W) categories.
# The same statistic is shown to reject a sampler 15% too hot and one that drifts 3% toward
# the draft distribution (tests of the test).

PV, PNEW, RUNS = 6, 10, 400


@pytest.fixture(scope="module")
def wrong_drafts():
    model = tiny_target(vocab=PV, layers=1, hidden=16, seed=13, scale=20.0)
    drafter = tiny_drafter(model, block_size=4, seed=2, mask_id=PV - 1, layers=1)
    with torch.no_grad():
        w = int(model(torch.tensor([PROMPT])).logits[0, -1].argmin())
    q = torch.full((PV,), 0.02)
    q[w] = 0.9
    q /= q.sum()

    dec = EagerDecoder(Target(model), "bastion", drafter, TreePolicy(budget=4, topk=2))
    dec.proposer.logits = lambda root, c: q.log().expand(dec.block_size - 1, PV).clone()  # the same wrong drafts
    return model, dec, q, w


def _runs(dec, seed: int, drafted: list[bool] | None = None) -> tuple[np.ndarray, list[int]]:
    gen, outs, committed = torch.Generator(), [], []
    for r in range(RUNS):
        gen.manual_seed(seed * 100_003 + r)
        res = dec.generate(PROMPT, PNEW, temperature=1.0, generator=gen)
        assert len(res.output_ids) == PNEW
        outs.append(res.output_ids)
        committed += [s.committed for s in res.steps]
        if drafted is not None:
            drafted += [s.drafted for s in res.steps]
    return np.array(outs), committed


def sampling_pvalue(model, outs: np.ndarray, q: torch.Tensor, w: int, temperature: float = 1.0) -> float:
    with torch.no_grad():
        x = torch.tensor([PROMPT + list(o) for o in outs])
        p = torch.softmax(model(x).logits[:, len(PROMPT) - 1 : -1].double() / temperature, -1).numpy()  # [R, N, V]
    pick = np.take_along_axis(p, outs[..., None], -1)[..., 0]
    logp = np.log(p)
    mean_lp = (p * logp).sum(-1)
    z_temp = (np.log(pick) - mean_lp).sum() / np.sqrt(((p * logp**2).sum(-1) - mean_lp**2).sum())
    qq = q.double().numpy()
    z_drift = (qq[outs] / pick - 1).sum() / np.sqrt(((qq**2 / p).sum(-1) - 1).sum())
    order = np.argsort(-p, axis=-1, kind="stable")
    rank = np.argmax(order == outs[..., None], axis=-1)
    p_sorted, is_w = np.take_along_axis(p, order, -1), order == w
    obs, exp = np.zeros((PV, 2)), np.zeros((PV, 2))
    np.add.at(obs, (rank.ravel(), (outs == w).ravel().astype(int)), 1)
    for r in range(PV):
        exp[r, 1] = (p_sorted[..., r] * is_w[..., r]).sum()
        exp[r, 0] = (p_sorted[..., r] * ~is_w[..., r]).sum()
    keep = exp > 1e-9
    p_chi = chi2.sf(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum(), keep.sum() - 1)
    return 3 * min(2 * norm.sf(abs(z_temp)), 2 * norm.sf(abs(z_drift)), p_chi)


def test_bastion_plus_stays_lossless_while_it_skips_drafts(pair):
    """This project's rule with a drafter that does not pay: most steps are AR steps, some probes
    draft (the gate carries across the runs), and every output is still a sample of the target."""
    model, drafter = pair
    cost, _ = _cost_model(model)
    dec = EagerDecoder(Target(model), "bastion_plus", drafter, TreePolicy(n_min=4, n_max=24), cost,
                       StepOverheads(5e-3, 1e-3))
    counts = sample_counts(dec, 1.0, runs=1500, seed=11)
    assert dec.gate.skipped > 500  # decisions for AR steps in place of drafted ones ...
    assert chi2_pvalue(counts, exact_distribution(model, 1.0)) > 1e-3
    assert chi2_pvalue(counts, exact_distribution(model, 0.5)) < 1e-6


def test_bastion_plus_with_wrong_drafts_stays_lossless_over_many_steps(wrong_drafts):
    """Long runs mixing AR steps, probes and the drafts after them, which take in the AR steps' states."""
    model, fixed, q, w = wrong_drafts
    cost, _ = _cost_model(model)
    dec = EagerDecoder(fixed.target, "bastion_plus", fixed.drafter, TreePolicy(n_min=4, n_max=4, topk=2), cost,
                       StepOverheads(5e-3, 1e-3))
    dec.proposer.logits = fixed.proposer.logits
    generate = dec.generate

    def fresh(*a, **kw):  # every run starts out drafting: drafts, AR steps and probes in every run
        dec.gate = DraftGate(dec.gate.ar_step, dec.gate.drafted_step)
        return generate(*a, **kw)

    dec.generate = fresh
    drafted = []
    outs, committed = _runs(dec, seed=3, drafted=drafted)
    assert 0.2 * len(drafted) < sum(drafted) < 0.8 * len(drafted), sum(drafted) / len(drafted)
    assert sampling_pvalue(model, outs, q, w) > 1e-3


def test_multi_step_sampling_with_wrong_drafts(wrong_drafts):
    model, dec, q, w = wrong_drafts
    outs, committed = _runs(dec, seed=2)
    committed = np.array(committed)
    assert np.mean(committed == 1) > 0.6  # the tree usually misses the sampled token ...
    assert np.mean(committed >= 2) > 0.05  # ... but not always: accepted drafts are tested too
    assert sampling_pvalue(model, outs, q, w) > 1e-3


@pytest.mark.parametrize("fault", ["hot", "drift"])
def test_the_test_rejects_a_wrong_sampler(wrong_drafts, monkeypatch, fault):
    """A sampler 15% too hot, or drifting 3% toward the draft distribution, fails the statistic."""
    model, dec, q, w = wrong_drafts
    right = eager.propose

    def hot(logits, temperature, generator=None):
        return right(logits, temperature * 1.15, generator)

    def drift(logits, temperature, generator=None):
        probs = 0.97 * torch.softmax(logits.float() / temperature, -1) + 0.03 * q
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    monkeypatch.setattr(eager, "propose", hot if fault == "hot" else drift)
    outs, _ = _runs(dec, seed=2)
    assert sampling_pvalue(model, outs, q, w) < 1e-4


# ---------------------------------------------------------------------------------------
# bastion_lossy: the release's acceptance at T > 0, an option that is not lossless.


def _greedy_steps(model, outs: list[list[int]], steps: list[list[int]]) -> tuple[int, int, int]:
    """(drafts accepted, of them equal to the target's argmax at their prefix, bonus tokens that are not the argmax)."""
    drafts = greedy = off_bonus = 0
    with torch.no_grad():
        for out, committed in zip(outs, steps):
            argmax = model(torch.tensor([PROMPT + out])).logits[0, len(PROMPT) - 1 : -1].argmax(-1).tolist()
            pos = 1  # the prefill emits the first token
            for a in committed:
                drafts += a - 1
                greedy += sum(out[i] == argmax[i] for i in range(pos, pos + a - 1))
                off_bonus += out[pos + a - 1] != argmax[pos + a - 1]
                pos += a
    return drafts, greedy, off_bonus


def test_the_lossy_walk_follows_the_argmax_and_samples_its_last_token(pair):
    """bastion_lossy accepts a draft only where it is the target's argmax and samples the token after
    the path; lossless BASTION, on the same drafts and seeds, accepts sampled non-argmax drafts too."""
    model, drafter = pair
    seen = {}
    for method in ("bastion_lossy", "bastion"):
        dec = EagerDecoder(Target(model), method, drafter, TreePolicy(budget=24))
        outs, steps, gen = [], [], torch.Generator()
        for r in range(150):
            res = dec.generate(PROMPT, 12, temperature=1.0, generator=gen.manual_seed(r))
            outs.append(res.output_ids)
            steps.append([s.committed for s in res.steps])
        seen[method] = _greedy_steps(model, outs, steps)
    drafts, greedy, off_bonus = seen["bastion_lossy"]
    assert drafts > 100 and greedy == drafts  # every accepted draft is the argmax
    assert off_bonus > 20  # the last token of a step is sampled, not the argmax
    drafts, greedy, _ = seen["bastion"]
    assert drafts > 100 and greedy < drafts  # the lossless walk follows samples
