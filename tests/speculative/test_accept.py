"""Lossless acceptance on draft trees, and the target's proposals at every temperature.

The vectorised acceptance (``accept``) is checked on a hand-made tree and against a plain
Python walk on built trees; ``propose`` against the softmax it samples from.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from bastion.speculative.accept import accept, propose
from bastion.speculative.tree import Tree
from tests.support.tree_cases import build, cases, hand_tree


def _props(assign: dict[int, int], fill: int = 19) -> torch.Tensor:
    """Proposals per node; unassigned nodes propose a token that no child carries."""
    p = torch.full((8,), fill, dtype=torch.long)
    for i, t in assign.items():
        p[i] = t
    return p


@pytest.mark.parametrize(
    "assign, count, path, bonus",
    [
        # depth-3 path 0 -> 1 -> 3 -> 5; the bonus is the proposal at node 5
        ({0: 3, 1: 4, 3: 2, 5: 11}, 3, [0, 1, 3, 5], 11),
        # mismatch at depth 1: nothing accepted, although deeper nodes would match their parents
        ({0: 12, 1: 4, 3: 2, 2: 8}, 0, [0], 12),
        # the second child of the root, then down that branch
        ({0: 7, 2: 8, 6: 1, 7: 15, 1: 4}, 3, [0, 2, 6, 7], 15),
        # the second child at depth 2
        ({0: 3, 1: 9, 4: 6, 3: 2}, 2, [0, 1, 4], 6),
        # stop in the middle of a path
        ({0: 3, 1: 4, 3: 13}, 2, [0, 1, 3], 13),
    ],
)
def test_accept_hand_made(assign, count, path, bonus):
    tree = hand_tree()
    proposals = _props(assign)
    order, got = accept(tree, proposals)
    c = int(got)
    assert c == count
    assert order[: c + 1].tolist() == path
    assert int(proposals[order[c]]) == bonus
    assert order.shape == (8,) and all(0 <= i < 8 for i in order.tolist())  # past the path: valid node indices
    assert [tree.depths[i].item() for i in order[: c + 1]] == list(range(c + 1))


def _walk(tree: Tree, proposals: list[int]) -> list[int]:
    """Plain acceptance walk: follow the child carrying the proposal until none does."""
    path, node = [0], 0
    while True:
        nxt = [j for j in range(tree.size) if tree.parents[j].item() == node and tree.tokens[j].item() == proposals[node]]
        if not nxt:
            return path
        node = nxt[0]
        path.append(node)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(cases(max_v=8), st.integers(0, 2**31 - 1), st.floats(0.0, 1.0))
def test_accept_matches_walk_on_built_trees(case, seed, follow):
    """Random proposals that often follow some child: vectorised accept == the plain walk."""
    tree = build(case)
    rng = np.random.default_rng(seed)
    v = case["logq"].shape[1]
    kids = {i: [tree.tokens[j].item() for j in range(tree.size) if tree.parents[j].item() == i] for i in range(tree.size)}
    proposals = []
    for i in range(tree.size):
        if kids[i] and rng.random() < follow:
            proposals.append(int(rng.choice(kids[i])))
        else:
            proposals.append(int(rng.integers(0, v)))
    order, count = accept(tree, torch.tensor(proposals))
    path = _walk(tree, proposals)
    assert int(count) == len(path) - 1
    assert order[: len(path)].tolist() == path


# ---------------------------------------------------------------------------------------
# proposals


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_propose_samples_softmax(temperature):
    g = torch.Generator().manual_seed(1234)
    row = torch.randn(8, generator=g) * 1.5
    rows = 20000
    out = propose(row.expand(rows, -1).contiguous(), temperature, torch.Generator().manual_seed(99))
    assert out.shape == (rows,) and out.dtype == torch.long
    counts = torch.bincount(out, minlength=8).double().numpy()
    expected = torch.softmax(row.double() / temperature, dim=-1).numpy() * rows
    assert chisquare(counts, expected).pvalue > 1e-4
    # the temperature matters: the T=1 distribution is rejected unless T == 1
    if temperature != 1.0:
        other = torch.softmax(row.double(), dim=-1).numpy() * rows
        assert chisquare(counts, other).pvalue < 1e-4


def test_propose_rows_are_independent_samples():
    """Each row is its own draw: a uniform row gives distinct tokens across many rows."""
    out = propose(torch.zeros(4000, 4), 1.0, torch.Generator().manual_seed(3))
    counts = torch.bincount(out, minlength=4).double().numpy()
    assert chisquare(counts).pvalue > 1e-4


def test_propose_never_draws_a_token_of_probability_zero():
    logits = torch.full((30000, 7), float("-inf"))
    logits[:, 0], logits[:, 3], logits[:, 5] = 0.5, 0.0, -1.0  # the first and last tokens, and 1, 2, 4 and 6: none
    out = propose(logits, 1.0, torch.Generator().manual_seed(5))
    counts = torch.bincount(out, minlength=7)
    assert counts[[1, 2, 4, 6]].sum() == 0
    expected = torch.softmax(logits[0].double(), dim=-1)[[0, 3, 5]].numpy() * out.numel()
    assert chisquare(counts[[0, 3, 5]].double().numpy(), expected).pvalue > 1e-4


@pytest.mark.parametrize("uniform, token", [(0.0, 1), (1 - 2**-53, 2)])
def test_propose_at_the_ends_of_the_uniform_draws_a_token_that_can_be_drawn(monkeypatch, uniform, token):
    """The smallest and the largest uniform land on the first and the last token of nonzero
    probability: never on a zero one at either end, never past the vocabulary."""
    logits = torch.tensor([[float("-inf"), 0.0, 0.0, float("-inf")]])
    monkeypatch.setattr(torch, "rand", lambda *a, **kw: torch.full((1, 1), uniform, dtype=torch.float64))
    assert propose(logits, 1.0).tolist() == [token]


def test_propose_greedy_is_argmax():
    logits = torch.randn(50, 30, generator=torch.Generator().manual_seed(0))
    assert torch.equal(propose(logits, 0.0), logits.argmax(dim=-1))
    assert torch.equal(propose(logits, 0.0, torch.Generator().manual_seed(1)), logits.argmax(dim=-1))
