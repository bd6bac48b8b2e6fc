"""All turns of one prompt with every method of a run: the records of one prompt."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import torch

from bastion.results import records
from bastion.runs.checks import UsageError
from bastion.runs.history import prompt_hash
from bastion.runs.order import turn_order

if TYPE_CHECKING:
    from bastion.data.prompts import PromptBuilder
    from bastion.engines.base import Decoder
    from bastion.runs.settings import RunSettings


def decode_prompt(run: RunSettings, idx: int, prompt: Mapping[str, Any], decoders: Mapping[str, Decoder],
                  builder: PromptBuilder, stops: Sequence[int], base: dict[str, Any],
                  histories: Mapping[tuple[int, int], list[int]] | None = None) -> list[dict[str, Any]]:
    """Every turn of prompt ``idx`` with every method; turn k's history is AR's answers to the turns before.

    The first method (AR when it runs) gives the history, or ``histories`` (AR's
    records, ``history_from``) when given, so every method sees the same prompts.  Each
    (prompt, turn) has its own sampling seed, the same for every method, so the order in
    which the methods take their turns (:func:`~bastion.runs.order.turn_order`) changes
    only their times.
    """
    out = []
    history: list[tuple[str, str]] = []
    for turn, text in enumerate(prompt["turns"]):
        if histories is not None and turn > 0:
            if (idx, turn - 1) not in histories:
                raise UsageError(f"history records {run.history_from} have no answer for prompt {idx}, turn {turn - 1}; "
                                 "decode AR on the same dataset and settings first")
            history[turn - 1] = (history[turn - 1][0], builder.decode(histories[(idx, turn - 1)]))
        ids = builder.encode(history, text)
        answers, made = {}, {}
        for m in (run.methods[i] for i in turn_order(len(run.methods), idx)):
            gen = torch.Generator(device=decoders[m].target.device)
            gen.manual_seed((run.seed * 1_000_003 + idx * 1_009 + turn) % (1 << 62))
            res = decoders[m].generate(ids, run.max_new_tokens, run.temperature, stops, gen, collect_stats=run.step_times)
            answers[m] = res.output_ids
            dataset = run.dataset_name or prompt.get("dataset")
            made[m] = records.make_record(res, prompt_index=idx, turn=turn, method=m,
                                          base={**base, "dataset": dataset, "prompt_hash": prompt_hash(prompt)})
        out.extend(made[m] for m in run.methods)  # the records in the given order, whatever order decoded them
        history.append((text, builder.decode(answers[run.methods[0]])))
    return out
