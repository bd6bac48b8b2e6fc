"""The step constants T_draft and T_other, from a short fixed-budget run of the decoder."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from bastion.calibration.store import CalibrationError
from bastion.costmodel.model import StepOverheads

if TYPE_CHECKING:
    from bastion.engines.base import Decoder


def profile_overheads(decoder_factory: Callable[[], Decoder], prompt_ids: Sequence[int], steps: int = 24,
                      temperature: float = 0.0) -> StepOverheads:
    """Steady-state ``T_draft`` and ``T_other`` from a short fixed-budget BASTION run.

    At ``temperature`` > 0 the run samples, so ``T_other`` includes the per-node sampling
    the decoders do outside the verification forward.

    The first step is dropped: its drafter call ingests the whole prompt's features
    (a prefill), which is not what a steady decoding step pays.
    """
    dec = decoder_factory()
    draft, other = [], []
    for _ in range(2):  # second pass is warm
        gen = torch.Generator(device=dec.target.device).manual_seed(0)
        res = dec.generate(prompt_ids, max_new_tokens=steps * 2, temperature=temperature, generator=gen,
                           collect_stats=True)
        draft = [st.t_draft for st in res.steps[1:]]
        other = [st.t_other for st in res.steps[1:]]
    if not draft:
        raise CalibrationError("the profiling run produced fewer than two steps; use a longer probe")
    return StepOverheads(t_draft=statistics.median(draft), t_other=statistics.median(other))
