"""T > 0: DFlash and BASTION sample exactly from the target's distribution.

A target with a 6-token vocabulary generates exactly 3 tokens, so the whole output
distribution (216 sequences) can be enumerated from the target's own conditionals.  Many
seeded speculative runs are then compared with it by a chi-square test.  With p > 1e-3 as
the pass criterion a correct implementation fails with probability 0.1 % per seed; the
seeds are fixed, so the outcome is deterministic.  The same counts tested against the
distribution at another temperature must be rejected, which shows the test can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from bastion.engines.eager import EagerDecoder
from bastion.models.target import Target
from bastion.speculative.tree import TreePolicy
from tests.support.builders import tiny_drafter, tiny_target

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


def test_multi_token_steps_happen_at_t1(pair):
    """Guard against a vacuous test: trees must accept several tokens in one step."""
    model, drafter = pair
    dec = EagerDecoder(Target(model), "bastion", drafter, TreePolicy(budget=24))
    gen = torch.Generator().manual_seed(0)
    committed = [s.committed for r in range(60) for s in dec.generate(PROMPT, NEW, 1.0, generator=gen).steps]
    assert max(committed) >= 2
    assert np.mean(committed) > 1.3
