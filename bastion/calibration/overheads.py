"""The step constants: T_draft, and what a step costs beyond the fitted verification, from short fixed-budget runs."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch

from bastion.calibration.store import CalibrationError
from bastion.costmodel.model import CostModel, StepOverheads

if TYPE_CHECKING:
    from bastion.engines.base import Decoder
    from bastion.results.generation import StepStats

REACH = 3.0  # a probe size is skipped once its fitted verification alone costs this many first-size steps


def profile_overheads(decoder_for: Callable[[int], Decoder], budgets: Sequence[int], prompt_ids: Sequence[int],
                      steps: int = 24, temperature: float = 0.0, cost_model: CostModel | None = None,
                      reference: int | None = None) -> StepOverheads:
    """Steady-state ``T_draft`` and the excess knots (see :class:`StepOverheads`) from fixed-budget BASTION runs.

    ``decoder_for(n)`` makes a decoder with trees of ``n`` nodes; ``budgets`` ascend.
    ``T_draft`` and ``T_other`` are reported at ``reference`` (default: the first budget),
    the paper's rule's constants; every budget adds a knot.  With ``cost_model`` a knot is
    ``T_other`` plus verification's time in decoding less the model's C(n, c) at each
    step's context; without it, ``T_other`` alone.  Knots never fall (a later one is
    raised to the earlier), so the rule's curve keeps rising.  A size above the reference
    whose fitted verification alone would cost ``REACH`` times a step at the reference is
    not run: no tree the rule could justify gets there.  At ``temperature`` > 0 the runs
    sample, so the excess includes the per-node sampling the decoders do outside the
    verification forward.
    """
    ref = budgets[0] if reference is None else reference
    if ref not in budgets:
        raise ValueError(f"the reference size {ref} is not among the probe sizes {tuple(budgets)}")
    knots: list[tuple[int, float]] = []
    draft = other = 0.0
    rest = None  # a step's cost besides C(n) at the reference size, once measured
    for n in budgets:
        if rest is not None and n > ref and cost_model is not None and _out_of_reach(cost_model, n, ref, rest):
            break
        d, o, e = _medians(decoder_for(n), prompt_ids, steps if n == ref else max(steps // 2, 4), temperature,
                           cost_model)
        if n == ref:
            draft, other, rest = d, o, d + e
        knots.append((int(n), max(e, knots[-1][1]) if knots else e))
    return StepOverheads(t_draft=draft, t_other=other, excess=tuple(knots))


BASELINES = ("ar", "dflash")  # the methods BASTION's speedup is divided by and compared with


def profile_baselines(decoder_for: Callable[[str], Decoder], prompt_ids: Sequence[int], steps: int = 24,
                      temperature: float = 0.0) -> dict[str, float]:
    """Seconds per decode step of AR and DFlash on the probe prompt: this hardware's reference step costs.

    The budget rule does not read them.  They say what the speedups are made of (an AR step
    is C(1) plus a little; a DFlash step is T_draft plus C(block)) and are the inputs of a
    projection from published τ.  Measuring them here also compiles every graph these two
    methods replay, once per (hardware, model), so a decode job finds them ready: in memory
    in a warm job worker, in Inductor's cache elsewhere (the first decode job of a worker
    compiled AR's one-token layer graphs, 1.3-5 s each on the H200, docs/performance.md).
    Each is the faster of two untimed runs after a warm-up, the run's decode time over its steps.
    """
    out: dict[str, float] = {}
    for method in BASELINES:
        dec = decoder_for(method)
        best = float("inf")
        for i in range(3):  # the first run warms up (graphs, caches)
            gen = torch.Generator(device=dec.target.device).manual_seed(0)
            res = dec.generate(prompt_ids, max_new_tokens=steps, temperature=temperature, generator=gen)
            if i and res.steps:
                best = min(best, res.decode_seconds / len(res.steps))
        if best == float("inf"):
            raise CalibrationError(f"the {method} baseline run produced no step; use a longer probe")
        out[method] = best
    return out


# An AR step more than this fraction over the fitted one-token verification, C(1, c), is
# measured again, up to :data:`AR_TRIES` times in all.  In 78 calibrations of the tiny pair
# (46 on the 2-core CPU VMs, 32 on GPUs) AR's step came out at 0.73-1.09 of C(1, c) but for
# three disturbed ones, at 1.20, 1.25 and 1.39 times it; at 1.20, under the 1.25 this margin
# once was, the draft gate drafted through three prompts at T = 1 (docs/performance.md, "A
# disturbed calibration").
AR_MARGIN = 0.12
AR_TRIES = 3


def settled_baselines(decoder_for: Callable[[str], Decoder], prompt_ids: Sequence[int], ar_fitted: float,
                      steps: int = 24, temperature: float = 0.0,
                      log: Callable[[str], None] = print) -> dict[str, float]:
    """:func:`profile_baselines`, measured again while AR's step looks disturbed.

    AR's step less ``ar_fitted`` (C(1, c) at the AR runs' contexts) becomes the AR excess
    that this project's draft gate charges for every token an AR step commits, so an AR
    step timed while something else ran makes every drafted step look cheap, and the gate
    drafts where nothing pays.  Timing noise only adds time, so while the fastest AR step
    so far exceeds ``ar_fitted`` by more than :data:`AR_MARGIN` both baselines are measured
    again, up to :data:`AR_TRIES` measurements, and each keeps its fastest.
    """
    baselines = profile_baselines(decoder_for, prompt_ids, steps=steps, temperature=temperature)
    for _ in range(AR_TRIES - 1):
        if baselines["ar"] <= (1.0 + AR_MARGIN) * ar_fitted:
            break
        again = profile_baselines(decoder_for, prompt_ids, steps=steps, temperature=temperature)
        log(f"[calibrate] AR's step {baselines['ar'] * 1e3:.3f} ms was over {1 + AR_MARGIN:.2f} x the fitted "
            f"C(1) {ar_fitted * 1e3:.3f} ms; measured again: {again['ar'] * 1e3:.3f} ms")
        baselines = {m: min(t, again[m]) for m, t in baselines.items()}
    return baselines


def describe_baselines(baselines: dict[str, float]) -> str:
    """One log line: the baselines' seconds per step, in ms."""
    names = {"ar": "AR", "dflash": "DFlash"}
    return "baseline steps " + (", ".join(f"{names.get(m, m)} {t * 1e3:.3f} ms" for m, t in baselines.items())
                                or "not measured")


def describe_overheads(ov: StepOverheads) -> str:
    """One log line: T_draft, T_other, the excess at each probed size and an AR step's over C(1)."""
    knots = ", ".join(f"{n}: {t * 1e3:.3f}" for n, t in ov.excess) or "not measured"
    ar = "" if ov.ar_excess is None else f"; AR step excess {ov.ar_excess * 1e3:.3f} ms"
    return f"T_draft {ov.t_draft * 1e3:.3f} ms, T_other {ov.t_other * 1e3:.3f} ms; step excess (nodes: ms) {knots}{ar}"


def _out_of_reach(cost_model: CostModel, n: int, first: int, first_rest: float) -> bool:
    c = 64  # a short context: the layers' part dominates where the rule stops
    verify = cost_model.predict(np.array([n, first]), c)
    return float(verify[0]) > REACH * (float(verify[1]) + first_rest)


def _excess(st: StepStats, cost_model: CostModel | None) -> float:
    if cost_model is None:
        return st.t_other
    return st.t_other + st.t_verify - float(cost_model.predict(st.tree_size, st.context))


def _medians(dec: Decoder, prompt_ids: Sequence[int], steps: int, temperature: float, cost_model: CostModel | None,
             passes: int = 2) -> tuple[float, float, float]:
    """T_draft, T_other and the excess: each the smallest of ``passes`` per-run medians, after a warm-up run.

    The first step of a run is dropped: its drafter call ingests the whole prompt's
    features (a prefill), which is not what a steady decoding step pays.  Timing noise
    only adds time, so the smallest median is the steadiest; one run alone once put an
    H200's T_other 0.1 ms high at 16 nodes, which hid its growth up to 64
    (docs/performance.md).
    """
    draft, other, excess = [], [], []
    for i in range(passes + 1):  # the first run warms up (graphs, caches)
        gen = torch.Generator(device=dec.target.device).manual_seed(0)
        res = dec.generate(prompt_ids, max_new_tokens=steps * 2, temperature=temperature, generator=gen,
                           collect_stats=True)
        if i == 0:
            continue
        if len(res.steps) < 2:
            raise CalibrationError("the profiling run produced fewer than two steps; use a longer probe")
        draft.append(statistics.median(st.t_draft for st in res.steps[1:]))
        other.append(statistics.median(st.t_other for st in res.steps[1:]))
        excess.append(statistics.median(_excess(st, cost_model) for st in res.steps[1:]))
    return min(draft), min(other), min(excess)
