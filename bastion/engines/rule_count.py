"""The budget rule's node count inside the static engine's ``rank`` step, on the device.

On CUDA one Triton kernel (:mod:`bastion.speculative.count_kernel`) evaluates the cost
curve at the step's context and counts the nodes; elsewhere, or where the kernel fails
to build, the torch reference (:meth:`CostModel.curve` and :func:`count_nodes`, about
45 small kernels on a GPU) does the same.
"""

from __future__ import annotations

import torch

from bastion.costmodel.model import CostModel
from bastion.speculative.fused import run_triton
from bastion.speculative.policy import TreePolicy
from bastion.speculative.rule import count_nodes


class RuleCount:
    """Writes the rule's node count (root included) into a one-element device buffer."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._coefs: dict[tuple[int, float], tuple[CostModel, torch.Tensor]] = {}

    def __call__(self, logp: torch.Tensor, policy: TreePolicy, cost_model: CostModel, fixed_cost: float,
                 length: torch.Tensor, out: torch.Tensor) -> None:
        """``logp`` [N] the ranked paths' log-probabilities; ``length`` the cached tokens (0-d); ``out`` [1] int64."""
        if not run_triton("count_nodes", self.device, lambda: self._fused(logp, policy, cost_model, fixed_cost, length, out)):
            # C(n) at this context, only as far as the count reads it (n <= paths + 1): the curve
            # is element-wise in n, so this is the full curve's head, without evaluating n_max points
            curve = cost_model.curve(length, min(policy.n_max, logp.shape[0]), device=self.device)
            out.copy_(count_nodes(logp, policy, curve, fixed_cost))

    def _fused(self, logp: torch.Tensor, policy: TreePolicy, cost_model: CostModel, fixed_cost: float,
               length: torch.Tensor, out: torch.Tensor) -> None:
        from bastion.speculative.count_kernel import count_nodes_fused

        key = (id(cost_model), fixed_cost)
        if key not in self._coefs:  # made on the first (warm-up) call, outside any graph capture
            p = cost_model.params
            coef = torch.tensor([p.u_kv, p.u_att, p.f_kv, p.f_att, p.f_peak, fixed_cost], dtype=torch.float64,
                                device=self.device)
            self._coefs[key] = (cost_model, coef)  # the model kept alive: its id stays its own
        count_nodes_fused(logp, cost_model.curve_parts(policy.n_max, self.device), self._coefs[key][1], length,
                          policy.n_min, policy.n_max, out, policy.neighbour)
