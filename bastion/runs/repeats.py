"""Repeated decodes of one prompt: the record keeps the fastest decode.

A decode's time on a shared machine carries bursts of other work: on the 2-core CPU two
methods of one job that build the same trees took up to 5% apart (docs/performance.md,
"Identical trees, one job"), as large as the differences the budget ablation shows.  At
T = 0 a decode is a pure function of its prompt, so decoding it again gives the same
tokens and trees, and the faster of the decodes is the better estimate of its cost (as
``timeit`` keeps its fastest loop).  At T > 0 that does not hold: this project's rule
learns its gate and surrogate from every decode, so a second decode of a prompt starts
from another state (:func:`bastion.runs.checks.check_repeats` refuses it).

Each kept record is one decode whole (tokens, steps, times); ``repeat_seconds`` lists
every decode's time, first to last, and ``repeats_agree`` says whether all of them gave
the first one's tokens and trees.  Only decodes that agree with the first can be kept.
"""

from __future__ import annotations

from typing import Any, Sequence


def fastest(decodes: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The records of one prompt's decodes (each a list in the same (turn, method) order), merged.

    One decode: its records as they are.  Several: per position, the fastest record among
    those that agree with the first decode's, with the two fields above.
    """
    if len(decodes) == 1:
        return list(decodes[0])
    merged = []
    for same_slot in zip(*decodes):
        first = same_slot[0]
        agree = [r for r in same_slot if _same_decode(r, first)]
        best = min(agree, key=lambda r: r["decode_seconds"])
        merged.append({**best, "repeat_seconds": [r["decode_seconds"] for r in same_slot],
                       "repeats_agree": len(agree) == len(same_slot)})
    return merged


def _same_decode(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two records of the same (prompt, turn, method) decoded alike: the same tokens through the same trees."""
    return a["output_ids"] == b["output_ids"] and a["tree_sizes"] == b["tree_sizes"]
