"""The step constants T_draft and T_other, from a short fixed-budget run of the decoder."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from bastion.calibration.store import CalibrationError
from bastion.costmodel.model import StepOverheads

if TYPE_CHECKING:
    from bastion.engines.base import Decoder


def profile_overheads(decoder_for: Callable[[int], Decoder], budgets: Sequence[int], prompt_ids: Sequence[int],
                      steps: int = 24, temperature: float = 0.0) -> StepOverheads:
    """Steady-state ``T_draft`` and ``T_other`` from short fixed-budget BASTION runs.

    ``decoder_for(n)`` makes a decoder with trees of ``n`` nodes.  The constants are
    measured at ``budgets[0]``; a second, larger budget also measures how much ``T_other``
    grows per node (a line through the two medians, never below zero).  At ``temperature``
    > 0 the runs sample, so ``T_other`` includes the per-node sampling the decoders do
    outside the verification forward.
    """
    draft, other = _medians(decoder_for(budgets[0]), prompt_ids, steps, temperature)
    if len(budgets) < 2 or budgets[-1] <= budgets[0]:
        return StepOverheads(t_draft=draft, t_other=other)
    _, wide = _medians(decoder_for(budgets[-1]), prompt_ids, max(steps // 2, 4), temperature)
    slope = max(0.0, (wide - other) / (budgets[-1] - budgets[0]))
    return StepOverheads(t_draft=draft, t_other=other, t_other_per_node=slope, reference_nodes=int(budgets[0]))


def _medians(dec: Decoder, prompt_ids: Sequence[int], steps: int, temperature: float,
             passes: int = 2) -> tuple[float, float]:
    """T_draft and T_other: each the smallest of ``passes`` per-run medians, after a warm-up run.

    The first step of a run is dropped: its drafter call ingests the whole prompt's
    features (a prefill), which is not what a steady decoding step pays.  Timing noise
    only adds time, so the smallest median is the steadiest; one run alone once put an
    H200's T_other 0.1 ms high at 16 nodes, which hid its growth up to 64
    (docs/performance.md, session 9).
    """
    draft, other = [], []
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
    return min(draft), min(other)
