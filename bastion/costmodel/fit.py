"""Fitting the cost model of :mod:`bastion.costmodel.model` to measured latencies.

Given which branch every max and min takes at every point, ``C`` is linear in its nine
coefficients, so a branch assignment is one non-negative least-squares problem.  Each
branch is chosen by a threshold on one ratio: the layers' compute against their
streaming time (``T_lin / T_stream``), and for attention its FLOPs per cache byte
(``T_att / T_kv``): the unfused form for the lowest intensities, the fused kernel's
floor next, its throughput above.  The fit searches those thresholds (on quantiles, a
coordinate at a time), then polishes the best few assignments on the true objective with
bounded least squares, so every point may still change branch.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from bastion.costmodel.model import CostModel, CostParams, combine
from bastion.costmodel.roofline import HardwarePeaks, ModelShape, RooflineTerms, roofline_terms

THRESHOLDS = 16  # candidate thresholds per ratio (quantiles of the measured points)
POLISHED = 5  # best assignments polished on the true objective


def default_weights(s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Relative-error weights, with larger trees down-weighted by sqrt(s).

    Relative error because latencies span two orders of magnitude; the sqrt(s) factor
    because the rule mostly evaluates C at small and medium trees, where the fit
    should be best.
    """
    s = np.asarray(s, dtype=np.float64)
    return 1.0 / (np.asarray(y, dtype=np.float64) ** 2 * np.sqrt(s / s.min()))


def _cuts(key: np.ndarray) -> np.ndarray:
    """Thresholds that put none, some or all of the points above them."""
    inner = np.quantile(key, np.linspace(0.0, 1.0, THRESHOLDS + 1)[1:-1])
    return np.concatenate([[-np.inf], np.unique(inner), [np.inf]])


def _design(t: RooflineTerms, sw: np.ndarray, compute: np.ndarray, unfused: np.ndarray,
            peak: np.ndarray) -> np.ndarray:
    """d C / d p [n, 9] under one branch assignment (each a [n] mask), rows scaled by sqrt(weight)."""
    one = np.ones_like(sw)
    stream, floor, peak = ~compute, ~unfused & ~peak, ~unfused & peak
    cols = [t.lin * compute, compute, t.stream * stream, stream, t.kv * unfused, t.att * unfused,
            t.kv * floor, t.att * floor, t.att * peak]
    return np.stack([np.asarray(col, dtype=np.float64) * one for col in cols], axis=1) * sw[:, None]


def _branches(t: RooflineTerms, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The branch every point takes under parameters ``p``: (compute-bound layers, unfused attention,
    the fused kernel at its throughput), each a [n] mask."""
    fused_floor, fused_peak = p[6] * t.kv + p[7] * t.att, p[8] * t.att
    return (p[0] * t.lin + p[1] > p[2] * t.stream + p[3],
            p[4] * t.kv + p[5] * t.att < np.maximum(fused_floor, fused_peak), fused_peak > fused_floor)


def fit_params(t: RooflineTerms, y: np.ndarray, weights: np.ndarray) -> CostParams:
    """Weighted least squares of ``C`` on the roofline terms, all coefficients >= 0.

    The objective is not convex: search the branch assignment first (see the module
    docstring), then polish.
    """
    t = RooflineTerms(*(np.asarray(a, dtype=np.float64) for a in t))
    y, w = np.asarray(y, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    return CostParams(*(float(v) for v in _polish(_branch_search(t, y, w), t, y, w)))


def _loss(p: np.ndarray, t: RooflineTerms, y: np.ndarray, w: np.ndarray) -> float:
    return float(np.sum(w * (combine(p, t) - y) ** 2))


def _branch_search(t: RooflineTerms, y: np.ndarray, w: np.ndarray) -> list[tuple[float, np.ndarray]]:
    """(loss, coefficients) of every branch assignment tried, by non-negative least squares.

    A point's branches are set by cuts on two ratios: the layers' arithmetic over their
    weight stream, and attention's over its K/V stream.  Coordinate descent over the cuts:
    first the layers' split with attention in one additive form, then twice over the two
    attention splits and the layers' split again.
    """
    from scipy.optimize import nnls

    sw = np.sqrt(w)
    layer_key, att_key = t.lin / t.stream, t.att / t.kv
    tried: dict[tuple[float, float, float], tuple[float, np.ndarray]] = {}

    def attempt(t1: float, t2: float, t3: float) -> float:
        if (t1, t2, t3) not in tried:
            design = _design(t, sw, layer_key >= t1, att_key < t2, att_key >= t3)
            p, _ = nnls(design, y * sw, maxiter=500)
            tried[(t1, t2, t3)] = (_loss(p, t, y, w), p)
        return tried[(t1, t2, t3)][0]

    layer_cuts, att_cuts = _cuts(layer_key), _cuts(att_key)
    t1 = min(layer_cuts, key=lambda v: attempt(v, math.inf, math.inf))
    for _ in range(2):
        pairs = [(a, b) for i, a in enumerate(att_cuts) for b in att_cuts[i:]]
        t2, t3 = min(pairs, key=lambda ab: attempt(t1, *ab))
        t1 = min(layer_cuts, key=lambda v: attempt(v, t2, t3))
    return list(tried.values())


def _polish(tried: list[tuple[float, np.ndarray]], t: RooflineTerms, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The best of the ``POLISHED`` best branch fits, each refined by bounded least squares
    on the full (branch-switching) model; a noise-free fit is kept as it is."""
    from scipy.optimize import least_squares

    sw = np.sqrt(w)
    best_loss, best = math.inf, None
    exact = 1e-20 * float(np.sum(w * y**2))  # a noise-free fit: nothing left to polish
    for cand_loss, cand in sorted(tried, key=lambda lp: lp[0])[:POLISHED]:
        if cand_loss < best_loss:
            best_loss, best = cand_loss, cand
        if best_loss <= exact:
            break
        res = least_squares(lambda p: sw * (combine(p, t) - y), cand, jac=lambda p: _design(t, sw, *_branches(t, p)),
                            bounds=(0.0, np.inf), x_scale=np.maximum(np.abs(cand), 1e-12), method="trf",
                            max_nfev=100)
        polished = np.maximum(res.x, 0.0)
        if _loss(polished, t, y, w) < best_loss:
            best_loss, best = _loss(polished, t, y, w), polished
    return best


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
        raise ValueError(f"need at least 4 latency measurements to fit the cost model, got {len(y)}")
    if np.any(y <= 0):
        raise ValueError("latencies must be positive")
    w = default_weights(s_arr, y) if weights is None else np.asarray(weights, dtype=np.float64)
    one = s_arr == 1
    own_line = bool(one.any()) and int((~one).sum()) >= 4  # else the one curve fits every point
    trees = ~one if own_line else np.ones_like(one)
    row = fit_row(c_arr[one], y[one]) if own_line else None
    params = fit_params(roofline_terms(shape, peaks, s_arr[trees], c_arr[trees]), y[trees], w[trees])
    return CostModel(shape, peaks, params, row=row)


def fit_row(c: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """A one-token forward's line ``y = r0 + r1 c`` (both >= 0), in relative error.

    Its own line because engines run one row on other kernels than a tree's rows: on an
    H200 the tiny pair's one-token step took 0.20 ms where the trees' curve, fitted
    through it, said 0.25-0.27 (every s >= 2 sat on 0.28-0.44 ms), and those points
    alone failed the calibration's gate (docs/performance.md, "Cost-model error").
    """
    from scipy.optimize import nnls

    if len(np.unique(c)) < 2:
        return float(np.median(y)), 0.0
    a = np.stack([np.ones_like(c), c], axis=1) / y[:, None]
    (r0, r1), _ = nnls(a, np.ones_like(y))
    return float(r0), float(r1)


def ape(model: CostModel, s, c, latency_s) -> np.ndarray:
    """Absolute percentage errors of the model's predictions, as fractions."""
    y = np.asarray(latency_s, dtype=np.float64)
    return np.abs(model.predict(s, c) - y) / y
