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
from typing import Any, Sequence

import numpy as np
import torch

from bastion.costmodel.roofline import HardwarePeaks, ModelShape, RooflineTerms, roofline_terms
from bastion.defaults import torch_references_forced


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

    def __init__(self, shape: ModelShape, peaks: HardwarePeaks, params: CostParams,
                 extra: tuple[tuple[int, float], ...] = (), row: tuple[float, float] | None = None) -> None:
        self.shape, self.peaks, self.params = shape, peaks, params
        self.extra = tuple((int(n), float(t)) for n, t in extra)  # knots (nodes, seconds) added to the curve
        # a one-token forward's own line (seconds, seconds per cached token): engines run
        # it on other kernels than a tree's rows (the row kernels on a GPU), so it can sit
        # well below the trees' curve; :meth:`predict` uses it at s = 1, the trees' curve does not
        self.row = None if row is None else (float(row[0]), float(row[1]))
        self._curve_cache: dict[tuple[int, str], tuple[torch.Tensor, ...]] = {}

    def with_extra(self, knots: Sequence[tuple[int, float]]) -> "CostModel":
        """The same model whose :meth:`curve` also charges a step cost outside the fitted C(n, c).

        ``knots`` are (tree size, seconds) points of that cost, joined by straight lines and
        extended past both ends along the end segments (one knot: a constant, which the
        rule's differences ignore).  What the budget rule uses (:func:`rule_costs`).
        """
        return CostModel(self.shape, self.peaks, self.params, extra=tuple(knots), row=self.row)

    def with_node_cost(self, seconds: float) -> "CostModel":
        """The same model charging ``seconds`` more per tree node (a line through the origin)."""
        return self.with_extra(((0, 0.0), (1, seconds)))

    def extra_cost(self, n) -> np.ndarray:
        """The charged extra cost at tree sizes ``n`` (seconds; zero without knots)."""
        n = np.asarray(n, dtype=np.float64)
        if len(self.extra) < 2:
            return np.zeros_like(n)
        xs = np.array([k[0] for k in self.extra], dtype=np.float64)
        ys = np.array([k[1] for k in self.extra], dtype=np.float64)
        out = np.interp(n, xs, ys)
        lo, hi = n < xs[0], n > xs[-1]
        out[lo] = ys[0] + (n[lo] - xs[0]) * (ys[1] - ys[0]) / (xs[1] - xs[0])
        out[hi] = ys[-1] + (n[hi] - xs[-1]) * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return out

    def terms(self, s, c) -> RooflineTerms:
        s = np.asarray(s, dtype=np.float64)
        c = np.asarray(c, dtype=np.float64)
        return roofline_terms(self.shape, self.peaks, s, c)

    def predict(self, s, c) -> np.ndarray:
        out = combine(self.params, self.terms(s, c))
        if self.row is None:
            return out
        s, c = np.broadcast_arrays(np.asarray(s, dtype=np.float64), np.asarray(c, dtype=np.float64))
        return np.where(s == 1, self.row[0] + self.row[1] * c, out)

    def curve(self, c: int, n_max: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """C(n, c) for n = 0..n_max+1 as a float64 tensor on ``device`` (index n), plus :meth:`extra_cost`.

        fp64 as in the original release: the budget rule compares C(n+1) - C(n), a small
        difference of two large numbers, which fp32 rounding can flip.

        ``c`` may be an int or a 0-d tensor on ``device`` (the static engine passes its
        committed length, inside a captured graph).  The layers' part does not depend on
        ``c`` and the attention terms are linear in it, so both are precomputed once per
        (n_max, device) and each step costs a few fused ops with no host transfer.
        """
        parts = self.curve_parts(n_max, device)
        if parts[0].device.type == "cpu" and not torch_references_forced() and not torch.compiler.is_compiling():
            # the same fp64 operations in NumPy (identical values): torch's dozen dispatches
            # cost more than the arithmetic, a few hundred microseconds a step on the 2-core
            # CPU.  BASTION_RANK=torch keeps the torch path, as a GPU without Triton runs it
            layers, kv0, kv1, att0, att1 = (x.numpy() for x in parts)
            c = int(c)
            out = combine(self.params, RooflineTerms(lin=None, stream=None, kv=kv0 + kv1 * c, att=att0 + att1 * c),
                          layers=layers)
            out[:1] = 0.0
            return torch.from_numpy(out)
        layers, kv0, kv1, att0, att1 = parts
        t = RooflineTerms(lin=None, stream=None, kv=kv0 + kv1 * c, att=att0 + att1 * c)
        out = combine(self.params, t, layers=layers)
        out[:1].fill_(0.0)  # fill_: no host-to-device copy, so a CUDA graph can capture it
        return out

    def curve_at(self, c: int, n_max: int) -> "CurveAt":
        """C(n, c) for n = 0..n_max+1 as a lazy sequence of Python floats: :meth:`curve`'s values.

        For the CPU's best-first walk (:mod:`bastion.speculative.best_first`), which reads
        C(n) only for the tree sizes it reaches (about 17 of them a step).  Evaluating
        those in Python floats costs less than NumPy's fifteen-odd calls over the whole
        curve, a tenth of a millisecond a step on the 2-core CPU right after a drafter
        forward; the operations and their order are :func:`combine`'s, in the same fp64.
        """
        key = (n_max, "lists")
        if key not in self._curve_cache:
            self._curve_cache[key] = tuple(x.tolist() for x in self.curve_parts(n_max))
        return CurveAt(self._curve_cache[key], self.params, int(c))

    def curve_parts(self, n_max: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
        """(layers, kv0, kv1, att0, att1), fp64 [n_max + 2] each: C(n, c) = combine of the
        layers' part and the terms kv0 + kv1 c, att0 + att1 c (:meth:`curve`; cached per size and device)."""
        key = (n_max, str(device))
        if key not in self._curve_cache:
            s = np.arange(n_max + 2, dtype=np.float64)
            t0 = roofline_terms(self.shape, self.peaks, s, 0.0)
            t1 = roofline_terms(self.shape, self.peaks, s, 1.0)
            as_t = lambda a: torch.tensor(a, dtype=torch.float64, device=device)  # noqa: E731
            p = self.params
            layers = np.maximum(p.a_c * t0.lin + p.b_c, p.a_m * t0.stream + p.b_m)
            layers = layers + self.extra_cost(s)  # what a step of n nodes costs outside the fitted verification
            self._curve_cache[key] = (as_t(layers), as_t(t0.kv), as_t(t1.kv - t0.kv), as_t(t0.att),
                                      as_t(t1.att - t0.att))
        return self._curve_cache[key]

    def to_dict(self) -> dict[str, Any]:
        out = {"shape": asdict(self.shape), "peaks": asdict(self.peaks), "params": asdict(self.params)}
        return out if self.row is None else {**out, "row": list(self.row)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CostModel":
        params = data["params"]
        if set(params) == set(OLD_FORM):
            raise ValueError("the cost model has the old max-of-two-lines form (a_c, b_c, a_m, b_m), without the "
                             "attention terms; recalibrate")
        missing = [k for k in CostParams.names() if k not in params]
        if missing:
            raise ValueError(f"the cost model lacks the parameter(s) {', '.join(missing)}")
        return cls(ModelShape(**data["shape"]), HardwarePeaks(**data["peaks"]), CostParams(**params),
                   row=data.get("row"))


class CurveAt:
    """:meth:`CostModel.curve` at one context, evaluated element by element when indexed."""

    __slots__ = ("parts", "p", "c")

    def __init__(self, parts: tuple[list[float], ...], p: CostParams, c: int) -> None:
        self.parts, self.p, self.c = parts, p, c

    def __len__(self) -> int:
        return len(self.parts[0])

    def __getitem__(self, n: int) -> float:
        if n == 0:
            return 0.0
        layers, kv0, kv1, att0, att1 = self.parts
        p, c = self.p, self.c
        kv = kv0[n] + kv1[n] * c
        att = att0[n] + att1[n] * c
        unfused = p.u_kv * kv + p.u_att * att
        fused = max(p.f_kv * kv + p.f_att * att, p.f_peak * att)
        return layers[n] + min(unfused, fused)


@dataclass(frozen=True)
class StepOverheads:
    """What a decode step costs besides the fitted verification C(n, c), in seconds.

    Measured in steady state: the drafter's first call of a prompt also ingests the whole
    prompt's features and is excluded, or it would inflate ``T_draft`` several-fold.

    ``excess`` holds knots (n, seconds): at a tree of n nodes, the median of ``T_other``
    (ranking paths, building the tree and its mask, the acceptance walk and the KV
    compaction) plus what verification took inside decoding beyond the latency grid's
    C(n, c).  Both matter for small models and neither is constant in n:

    - ``T_other`` grows with the tree: on an H200 the tiny pair's steps cost 0.98 ms at 32
      nodes and 1.21 ms at 155-162.  Left out, or measured at 16 and 64 nodes only (twice
      too small), that growth let the trees grow to ~160 nodes, slower than a fixed 32.
    - Verification inside decoding need not take what the fitted C(n, c) says: the fit
      has its own error at each size, and the drafter's work runs in between.  On the
      2-core CPU, 16-node verifications took about 2.4 ms less inside decoding than the
      fitted ~42 ms; the knots charge what decoding measured.

    The budget rule charges ``T_draft`` plus the first knot as the fixed cost and the
    knots' rise as part of each larger tree's cost (:func:`rule_costs`).  Calibrations
    made before the knots load with the older, linear form: ``t_other_per_node`` past
    ``reference_nodes`` (zero when not measured either).

    ``ar_excess`` is what an AR step costs beyond the fitted C(1, c): with it,
    :meth:`ar_step` is the cost this project's rule weighs a drafted step against when
    it decides whether to draft at all (None where a file does not say: C(1, c) alone).
    """

    t_draft: float
    t_other: float
    t_other_per_node: float = 0.0
    reference_nodes: int = 0
    excess: tuple[tuple[int, float], ...] = ()
    ar_excess: float | None = None

    def __post_init__(self) -> None:  # JSON gives lists; keep tuples so loaded objects compare equal
        object.__setattr__(self, "excess", tuple((int(n), float(t)) for n, t in self.excess))

    def ar_step(self, cost_model: CostModel, c: int) -> float:
        """Seconds of an AR step (the root alone, no draft) at context ``c``."""
        return max(float(cost_model.predict(1, c)) + (self.ar_excess or 0.0), 1e-9)

    @property
    def fixed(self) -> float:
        """The part of a step's cost that no tree size changes (the rest is in :func:`rule_costs`'s curve)."""
        if self.excess:
            return max(0.0, self.t_draft + self.excess[0][1])
        return max(0.0, self.t_draft + self.t_other - self.t_other_per_node * self.reference_nodes)


def rule_inputs(cost_model: CostModel | None, overheads: StepOverheads | None,
                rule: str) -> tuple[CostModel | None, float]:
    """(The cost curve the budget rule compares, its fixed cost) for a rule.

    The paper's rule (``"paper"``) reads the fitted verification latency C(n, c) and the
    two constants ``T_draft + T_other``, as its release does; this project's (``"plus"``)
    charges the measured step excess as the tree grows (:func:`rule_costs`) from the fixed
    cost at its first knot (:attr:`StepOverheads.fixed`).
    """
    if overheads is None:
        return cost_model, 0.0
    if rule == "paper":
        return cost_model, max(0.0, overheads.t_draft + overheads.t_other)
    return rule_costs(cost_model, overheads), overheads.fixed


def rule_costs(cost_model: CostModel | None, overheads: StepOverheads | None) -> CostModel | None:
    """The cost curve the budget rule compares: C(n, c) plus the measured excess's rise past its first knot."""
    if cost_model is None or overheads is None:
        return cost_model
    if overheads.excess:
        base = overheads.excess[0][1]
        return cost_model.with_extra(tuple((n, t - base) for n, t in overheads.excess))
    if overheads.t_other_per_node:
        return cost_model.with_node_cost(overheads.t_other_per_node)
    return cost_model
