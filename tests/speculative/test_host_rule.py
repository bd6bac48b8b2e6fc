"""The budget rule's CPU path: the cost curve and the node count in NumPy, equal to torch's bit for bit.

On a CPU the static and eager engines evaluate C(n, c) and the rule's count with NumPy
(torch's dispatch cost more than the arithmetic); a GPU without Triton runs the torch
path, which ``BASTION_RANK=torch`` selects here.  Both must give the same numbers, or
the two paths would build different trees from the same draft.
"""

from __future__ import annotations

import functools
import itertools

import torch

from bastion.costmodel.model import CostModel, StepOverheads, rule_costs
from bastion.speculative.policy import ROUNDINGS, TreePolicy
from bastion.speculative.rule import count_nodes
from tests.calibration.test_store_format import PARAMS, PEAKS, SHAPE


def _both(monkeypatch, fn):
    host = fn()
    with monkeypatch.context() as m:
        m.setenv("BASTION_RANK", "torch")
        reference = fn()
    return host, reference


def test_curve_and_count_on_the_host_equal_the_torch_path(monkeypatch):
    base = CostModel(SHAPE, PEAKS, PARAMS)
    models = [base, rule_costs(base, StepOverheads(1e-3, 1e-3, excess=((16, 1e-3), (64, 1.4e-3), (256, 2.5e-3))))]
    g = torch.Generator().manual_seed(0)
    counts = set()
    for model, n_max, c in itertools.product(models, (31, 64, 8192), (0, 97, torch.tensor(1500), 30000)):
        host, ref = _both(monkeypatch, functools.partial(model.curve, c, n_max))
        assert host.dtype == ref.dtype == torch.float64 and torch.equal(host, ref)
        lazy = model.curve_at(int(c), n_max)  # the best-first walk's element-by-element curve
        assert len(lazy) == n_max + 2 and [lazy[n] for n in range(n_max + 2)] == ref.tolist()
    for model, n, n_min, n_max, scale in itertools.product(models, (1, 7, 31, 127), (1, 8, 32), (64, 256), (0.05, 0.3, 2.0)):
        if n > n_max - 1 or n_min > n_max:
            continue
        for trial in range(6):
            logp = -torch.rand(n, generator=g).mul(scale).cumsum(0)
            rounding = ROUNDINGS[trial % 3]
            policy = TreePolicy(n_min=n_min, n_max=n_max, rounding=rounding)
            fixed = float(torch.rand(1, generator=g)) * 3e-2
            curve = model.curve(97, n_max)  # the same for both paths (checked above)
            host, ref = _both(monkeypatch, functools.partial(count_nodes, logp, policy, curve, fixed))
            assert int(host) == int(ref), (n, n_min, n_max, scale, rounding)
            counts.add((rounding, int(ref)))
    for rounding in ROUNDINGS:  # the cases reach many different counts under every rounding, not only the ends
        assert len([c for r, c in counts if r == rounding]) > 8, rounding
