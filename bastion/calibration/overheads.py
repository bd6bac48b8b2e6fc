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


def _medians(dec: Decoder, prompt_ids: Sequence[int], steps: int, temperature: float) -> tuple[float, float]:
    """Median T_draft and T_other of a run's steps, the second of two runs (the first warms up).

    The first step is dropped: its drafter call ingests the whole prompt's features
    (a prefill), which is not what a steady decoding step pays.
    """
    draft, other = [], []
    for _ in range(2):  # second pass is warm
        gen = torch.Generator(device=dec.target.device).manual_seed(0)
        res = dec.generate(prompt_ids, max_new_tokens=steps * 2, temperature=temperature, generator=gen,
                           collect_stats=True)
        draft = [st.t_draft for st in res.steps[1:]]
        other = [st.t_other for st in res.steps[1:]]
    if not draft:
        raise CalibrationError("the profiling run produced fewer than two steps; use a longer probe")
    return statistics.median(draft), statistics.median(other)
