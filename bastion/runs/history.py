"""One history for every method: the AR answers that later turns of a multi-turn prompt carry.

On a multi-turn set, turn k's prompt holds the answers to turns 1..k-1.  Every method
must see the same prompts, so those answers are AR's: decoded first in the same run, or
read from AR's records (``--history-from``, what the pipeline's other jobs do).
"""

from __future__ import annotations

from bastion.results import records
from bastion.runs.checks import UsageError


def load_histories(path: str) -> dict[tuple[int, int], list[int]]:
    """(prompt index, turn) -> AR's output ids, from AR's records file."""
    try:
        recs = records.read_records(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read history records {path} ({exc}); rerun the AR decode that writes them") from None
    return {(r["prompt_index"], r["turn"]): r["output_ids"] for r in recs if r.get("method", "ar") == "ar"}
