"""The calibrated roofline model of one verification forward.

``C(s, c)`` predicts the latency of a target forward over ``s`` new (tree) tokens with
``c`` tokens already cached.  It starts from an analytic roofline of a decoder-only
transformer, derived from the model's own config (so any Qwen3- or Llama-shaped model
works, not a table of three), split into four times
(:func:`~bastion.costmodel.roofline.roofline_terms`): ``T_lin`` (projection, MLP and LM
head FLOPs at a large matmul's measured rate), ``T_stream`` (weights, activations and
logits, the bytes that do not depend on the context, at the measured copy bandwidth),
``T_kv`` (the KV cache and mask bytes, which grow with ``c``) and ``T_att`` (attention
FLOPs over ``c + s`` keys at a large masked attention's measured rate).  Calibrated on the
device:

    C(s, c) = max(a_c T_lin + b_c, a_m T_stream + b_m)                     the layers
            + min(u_kv T_kv + u_att T_att,                                 attention, unfused
                  max(f_kv T_kv + f_att T_att, f_peak T_att))              attention, fused

with all nine coefficients >= 0.  The first part is the usual roofline of the weight
matmuls: streaming the weights bounds small trees, their FLOPs bound large ones; the
intercepts absorb launch overhead, which dominates eager decoding on large GPUs.  The
second part is attention over the cache, the cheaper of the two ways engines run it.
With few query rows they run it as two batched multiplies over materialised scores,
which read the cache (``u_kv``) and move scores in proportion to the attention work
(``u_att``).  A fused kernel gives each tile of query rows one pass over all ``c`` keys:
with few rows the GPU is under-filled and the time is one such pass, growing only
slowly with the rows (``f_kv``, ``f_att``), until there are enough tiles to reach its
throughput (``f_peak``).  One max-of-two-lines over the whole forward fitted 64-2,048
contexts to 4 % but missed 16k and 32k by 25 % (docs/performance.md, run P): attention
over a long cache costs far more per key, and bends differently in ``s``, than the
roofline's one bandwidth and one FLOP rate allow.

Non-negative coefficients make ``C`` non-decreasing in ``s`` and in ``c`` (every term
is, and max, min and sums keep it), which the tree rule relies on.  Every term is a
polynomial in ``s`` with ``c`` entering linearly, so :meth:`CostModel.curve` evaluates all
tree sizes at one context in a handful of fused tensor ops, inside captured graphs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import torch

from bastion.costmodel.roofline import HardwarePeaks, ModelShape, RooflineTerms, roofline_terms


@dataclass(frozen=True)
class CostParams:
    a_c: float  # layers: matmul FLOPs slope and intercept
    b_c: float
    a_m: float  # layers: weight-streaming slope and intercept
    b_m: float
    u_kv: float = 0.0  # unfused attention: cache bytes
    u_att: float = 0.0  # unfused attention: attention FLOPs (materialised scores)
    f_kv: float = 0.0  # fused attention, under-filled: one pass over the cache ...
    f_att: float = 0.0  # ... growing with the work
    f_peak: float = 0.0  # fused attention at its throughput

    def __post_init__(self) -> None:
        for k, v in asdict(self).items():
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"cost parameter {k} must be finite and >= 0, got {v}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def __iter__(self):
        return iter(getattr(self, k) for k in self.names())


def combine(p, t: RooflineTerms, *, layers=None):
    """``C`` from the roofline terms (numpy arrays or tensors).

    ``p``: a :class:`CostParams` or its nine values in order (the fit passes arrays);
    ``layers``: the layers' part, when it is precomputed.
    """
    a_c, b_c, a_m, b_m, u_kv, u_att, f_kv, f_att, f_peak = p
    xp = torch if isinstance(t.kv, torch.Tensor) else np
    if layers is None:
        layers = xp.maximum(a_c * t.lin + b_c, a_m * t.stream + b_m)
    unfused = u_kv * t.kv + u_att * t.att
    fused = xp.maximum(f_kv * t.kv + f_att * t.att, f_peak * t.att)
    return layers + xp.minimum(unfused, fused)


OLD_FORM = ("a_c", "b_c", "a_m", "b_m")  # calibration files before the attention terms (format 1)


class CostModel:
    """Evaluates C(s, c) in seconds; :meth:`curve` gives all tree sizes in one call per step."""

    def __init__(self, shape: ModelShape, peaks: HardwarePeaks, params: CostParams, node_cost: float = 0.0) -> None:
        self.shape, self.peaks, self.params = shape, peaks, params
        self.node_cost = float(node_cost)  # seconds each node adds outside verification (see StepOverheads)
        self._curve_cache: dict[tuple[int, str], tuple[torch.Tensor, ...]] = {}

    def with_node_cost(self, seconds: float) -> "CostModel":
        """The same model whose :meth:`curve` also charges ``seconds`` per tree node: what the budget rule uses."""
        return CostModel(self.shape, self.peaks, self.params, node_cost=seconds)

    def terms(self, s, c) -> RooflineTerms:
        s = np.asarray(s, dtype=np.float64)
        c = np.asarray(c, dtype=np.float64)
        return roofline_terms(self.shape, self.peaks, s, c)

    def predict(self, s, c) -> np.ndarray:
        return combine(self.params, self.terms(s, c))

    def curve(self, c: int, n_max: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """C(n, c) for n = 0..n_max+1 as a float64 tensor on ``device`` (index n), plus ``node_cost * n``.

        fp64 as in the original release: the budget rule compares C(n+1) - C(n), a small
        difference of two large numbers, which fp32 rounding can flip.

        ``c`` may be an int or a 0-d tensor on ``device`` (the static engine passes its
        committed length, inside a captured graph).  The layers' part does not depend on
        ``c`` and the attention terms are linear in it, so both are precomputed once per
        (n_max, device) and each step costs a few fused ops with no host transfer.
        """
        key = (n_max, str(device))
        if key not in self._curve_cache:
            s = np.arange(n_max + 2, dtype=np.float64)
            t0 = roofline_terms(self.shape, self.peaks, s, 0.0)
            t1 = roofline_terms(self.shape, self.peaks, s, 1.0)
            as_t = lambda a: torch.tensor(a, dtype=torch.float64, device=device)  # noqa: E731
            p = self.params
            layers = np.maximum(p.a_c * t0.lin + p.b_c, p.a_m * t0.stream + p.b_m)
            layers = layers + self.node_cost * s  # what each node costs outside verification
            self._curve_cache[key] = (as_t(layers), as_t(t0.kv), as_t(t1.kv - t0.kv), as_t(t0.att),
                                      as_t(t1.att - t0.att))
        layers, kv0, kv1, att0, att1 = self._curve_cache[key]
        t = RooflineTerms(lin=None, stream=None, kv=kv0 + kv1 * c, att=att0 + att1 * c)
        out = combine(self.params, t, layers=layers)
        out[:1].fill_(0.0)  # fill_: no host-to-device copy, so a CUDA graph can capture it
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"shape": asdict(self.shape), "peaks": asdict(self.peaks), "params": asdict(self.params)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CostModel":
        params = data["params"]
        if set(params) == set(OLD_FORM):
            raise ValueError("the cost model has the old max-of-two-lines form (a_c, b_c, a_m, b_m), without the "
                             "attention terms; recalibrate")
        missing = [k for k in CostParams.names() if k not in params]
        if missing:
            raise ValueError(f"the cost model lacks the parameter(s) {', '.join(missing)}")
        return cls(ModelShape(**data["shape"]), HardwarePeaks(**data["peaks"]), CostParams(**params))


@dataclass(frozen=True)
class StepOverheads:
    """Per-step costs outside verification: ``T_draft`` and ``T_other`` in seconds.

    Measured in steady state: the drafter's first call of a prompt also ingests the whole
    prompt's features and is excluded, or it would inflate ``T_draft`` several-fold.

    ``T_other`` (ranking paths, building the tree and its mask, the acceptance walk and
    the KV compaction) grows with the tree.  For an 8B target that growth is lost in the
    verification time, but for a small model on a GPU it is not: with it left out, the
    tiny pair's trees on an H200 grew to ~160 nodes and decoded slower than a fixed 32
    (docs/performance.md, session 9).  ``t_other_per_node`` is that growth, measured
    between two tree sizes (``reference_nodes``, where ``t_other`` was measured, and a
    larger one); the budget rule adds it to every node's verification cost.  Zero for
    calibrations made before it was measured.
    """

    t_draft: float
    t_other: float
    t_other_per_node: float = 0.0
    reference_nodes: int = 0

    @property
    def fixed(self) -> float:
        """The part of a step's cost that no tree size changes: T_draft and T_other less its growth."""
        return max(0.0, self.t_draft + self.t_other - self.t_other_per_node * self.reference_nodes)


def rule_costs(cost_model: CostModel | None, overheads: StepOverheads | None) -> CostModel | None:
    """The cost curve the budget rule compares: C(n), plus T_other's growth per node when it was measured."""
    if cost_model is None or overheads is None or not overheads.t_other_per_node:
        return cost_model
    return cost_model.with_node_cost(overheads.t_other_per_node)
