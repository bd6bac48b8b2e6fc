"""The calibrated roofline model of one verification forward.

``C(s, c)`` predicts the latency of a target forward over ``s`` new (tree) tokens with
``c`` tokens already cached.  It starts from an analytic roofline of a decoder-only
transformer, derived from the model's own config (so any Qwen3- or Llama-shaped model
works, not a table of three), and is then calibrated on the device:

    C(s, c) = max(a_c * T_comp(s, c) + b_c,  a_m * T_mem(s, c) + b_m),   all four >= 0,

where ``T_mem`` = bytes / measured bandwidth and ``T_comp`` = FLOPs / measured peak
FLOP/s, with one measured peak per kind of kernel: the projections and the LM head at
the rate of a large matrix multiply, attention at the rate of a large masked attention
(a tree mask keeps attention off the flash kernels, and on an H200 the masked kernel
runs at about a third of the matmul rate; with one rate for both, the fit under-predicts
trees of thousands of tokens, where attention is a third of the work).  The slopes
absorb how far the kernels sit from these ceilings; the intercepts absorb launch
overhead, which dominates eager decoding on large GPUs.  Non-negative
coefficients make ``C`` non-decreasing in ``s``, which the tree rule relies on.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
import torch

from bastion.costmodel.roofline import HardwarePeaks, ModelShape, compute_seconds


@dataclass(frozen=True)
class CostParams:
    a_c: float
    b_c: float
    a_m: float
    b_m: float

    def __post_init__(self) -> None:
        for k, v in asdict(self).items():
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"cost parameter {k} must be finite and >= 0, got {v}")


class CostModel:
    """Evaluates C(s, c) in seconds; :meth:`curve` gives all tree sizes in one call per step."""

    def __init__(self, shape: ModelShape, peaks: HardwarePeaks, params: CostParams) -> None:
        self.shape, self.peaks, self.params = shape, peaks, params
        self._curve_cache: dict[tuple[int, str], tuple[torch.Tensor, ...]] = {}

    def terms(self, s, c) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray(s, dtype=np.float64)
        c = np.asarray(c, dtype=np.float64)
        return compute_seconds(self.shape, self.peaks, s, c), self.shape.bytes(s, c) / self.peaks.bytes_per_s

    def predict(self, s, c) -> np.ndarray:
        t_comp, t_mem = self.terms(s, c)
        p = self.params
        return np.maximum(p.a_c * t_comp + p.b_c, p.a_m * t_mem + p.b_m)

    def curve(self, c: int, n_max: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """C(n, c) for n = 0..n_max+1 as a float64 tensor on ``device`` (index n).

        fp64 as in the original release: the budget rule compares C(n+1) - C(n), a small
        difference of two large numbers, which fp32 rounding can flip.

        Both roofline terms are polynomials in s with c entering linearly, so the parts
        that do not depend on c are precomputed once and each step costs two fused ops.
        """
        key = (n_max, str(device))
        if key not in self._curve_cache:
            s = np.arange(n_max + 2, dtype=np.float64)
            p, pk = self.params, self.peaks
            comp0 = compute_seconds(self.shape, pk, s, 0.0)  # [n]
            comp1 = compute_seconds(self.shape, pk, s, 1.0) - comp0  # per unit of c
            mem0 = self.shape.bytes(s, 0.0) / pk.bytes_per_s
            mem1 = (self.shape.bytes(s, 1.0) / pk.bytes_per_s) - mem0
            as_t = lambda a: torch.tensor(a, dtype=torch.float64, device=device)  # noqa: E731
            self._curve_cache[key] = (
                as_t(p.a_c * comp0 + p.b_c),
                as_t(p.a_c * comp1),
                as_t(p.a_m * mem0 + p.b_m),
                as_t(p.a_m * mem1),
            )
        c0, c1, m0, m1 = self._curve_cache[key]
        out = torch.maximum(c0 + c1 * c, m0 + m1 * c)
        out[:1].fill_(0.0)  # fill_: no host-to-device copy, so a CUDA graph can capture it
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"shape": asdict(self.shape), "peaks": asdict(self.peaks), "params": asdict(self.params)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CostModel":
        return cls(ModelShape(**data["shape"]), HardwarePeaks(**data["peaks"]), CostParams(**data["params"]))


def default_weights(s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Relative-error weights, with larger trees down-weighted by sqrt(s).

    Relative error because latencies span an order of magnitude; the sqrt(s) factor
    because the rule mostly evaluates C at small and medium trees, where the fit
    should be best.
    """
    s = np.asarray(s, dtype=np.float64)
    return 1.0 / (np.asarray(y, dtype=np.float64) ** 2 * np.sqrt(s / s.min()))


def _wnnls(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted non-negative least squares of y ~ a * x + b."""
    from scipy.optimize import nnls

    sw = np.sqrt(w)
    a_mat = np.stack([x * sw, sw], axis=1)
    coef, _ = nnls(a_mat, y * sw)
    return float(coef[0]), float(coef[1])


def fit_params(
    t_comp: np.ndarray,
    t_mem: np.ndarray,
    y: np.ndarray,
    weights: np.ndarray,
) -> CostParams:
    """Fit the max-of-two-lines model by weighted least squares with all parameters >= 0.

    The objective is not convex, so we search the branch assignment first: points are
    ordered by how compute-heavy they are (T_comp / T_mem) and every split point is
    tried, each side fitted by NNLS; the best split seeds a bounded least-squares
    polish of the true max objective.
    """
    from scipy.optimize import least_squares

    t_comp, t_mem, y, w = (np.asarray(a, dtype=np.float64) for a in (t_comp, t_mem, y, weights))
    order = np.argsort(t_comp / t_mem)
    sw = np.sqrt(w)

    def loss(p: np.ndarray) -> float:
        pred = np.maximum(p[0] * t_comp + p[1], p[2] * t_mem + p[3])
        return float(np.sum(w * (pred - y) ** 2))

    best, best_loss = None, math.inf
    n = len(y)
    for k in range(n + 1):  # points order[k:] are assigned to the compute branch
        mem_idx, comp_idx = order[:k], order[k:]
        a_m, b_m = _wnnls(t_mem[mem_idx], y[mem_idx], w[mem_idx]) if k >= 2 else (0.0, 0.0)
        a_c, b_c = _wnnls(t_comp[comp_idx], y[comp_idx], w[comp_idx]) if n - k >= 2 else (0.0, 0.0)
        cand = np.array([a_c, b_c, a_m, b_m])
        cand_loss = loss(cand)
        if cand_loss < best_loss:
            best, best_loss = cand, cand_loss

    def residuals(p: np.ndarray) -> np.ndarray:
        return sw * (np.maximum(p[0] * t_comp + p[1], p[2] * t_mem + p[3]) - y)

    scale = np.maximum(np.abs(best), 1e-12)
    res = least_squares(residuals, best, bounds=(0.0, np.inf), x_scale=scale, method="trf")
    final = res.x if loss(res.x) <= best_loss else best
    return CostParams(*(float(max(v, 0.0)) for v in final))


def fit_cost_model(
    shape: ModelShape,
    peaks: HardwarePeaks,
    s: Sequence[float],
    c: Sequence[float],
    latency_s: Sequence[float],
    weights: Sequence[float] | None = None,
) -> CostModel:
    """Calibrate ``C`` on measured verification latencies at grid points (s, c)."""
    s_arr, c_arr, y = (np.asarray(a, dtype=np.float64) for a in (s, c, latency_s))
    if len(y) < 4:
        raise ValueError(f"need at least 4 latency measurements to fit 4 parameters, got {len(y)}")
    if np.any(y <= 0):
        raise ValueError("latencies must be positive")
    w = default_weights(s_arr, y) if weights is None else np.asarray(weights, dtype=np.float64)
    t_comp = compute_seconds(shape, peaks, s_arr, c_arr)
    t_mem = shape.bytes(s_arr, c_arr) / peaks.bytes_per_s
    return CostModel(shape, peaks, fit_params(t_comp, t_mem, y, w))


def ape(model: CostModel, s, c, latency_s) -> np.ndarray:
    """Absolute percentage errors of the model's predictions, as fractions."""
    y = np.asarray(latency_s, dtype=np.float64)
    return np.abs(model.predict(s, c) - y) / y


@dataclass(frozen=True)
class StepOverheads:
    """Per-step costs outside verification: ``T_draft`` and ``T_other`` in seconds.

    Measured in steady state: the drafter's first call of a prompt also ingests the whole
    prompt's features and is excluded, or it would inflate ``T_draft`` several-fold.
    """

    t_draft: float
    t_other: float

    @property
    def fixed(self) -> float:
        return self.t_draft + self.t_other
