"""One history for every method: the AR answers that later turns of a multi-turn prompt carry.

On a multi-turn set, turn k's prompt holds the answers to turns 1..k-1.  Every method
must see the same prompts, so those answers are AR's: decoded first in the same run, or
read from AR's records (``--history-from``, what the pipeline's other jobs do).  Records
read that way must be AR's answers to these very prompts under these settings, and their
content (not their path) enters the run key: a regenerated AR file makes partial runs
that read the old one start over.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from bastion.results import records
from bastion.runs.checks import UsageError

# The AR records' fields that must equal this run's: the target's weights, the dataset and
# its subset, and what shapes an answer (temperature, length).
CHECKED = ("target", "dataset_arg", "max_samples", "data_seed", "temperature", "max_new_tokens")


@dataclass(frozen=True)
class History:
    answers: dict[tuple[int, int], list[int]]  # (prompt index, turn) -> AR's output ids
    digest: str  # a hash of the answers: enters the run key


def prompt_hash(prompt: Mapping[str, Any]) -> str:
    """A prompt's identity in its records: a hash of its turns' texts."""
    return hashlib.sha256(json.dumps(list(prompt["turns"])).encode()).hexdigest()[:16]


def load_history(path: str, expect: Mapping[str, Any], prompts: Sequence[Mapping[str, Any]]) -> History:
    """AR's answers from its records at ``path``, checked against this run's ``expect``ed fields and prompts."""
    try:
        recs = [r for r in records.read_records(path) if r.get("method") == "ar"]
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read history records {path} ({exc}); rerun the AR decode that writes them") from None
    if not recs:
        raise UsageError(f"history records {path} hold no AR records; pass the output of --methods ar on this dataset")
    differ = [f"{k} {', '.join(sorted({json.dumps(r.get(k)) for r in recs}))} (this run: {json.dumps(v)})"
              for k, v in expect.items() if any(r.get(k) != v for r in recs)]
    if differ:
        raise UsageError(f"history records {path} were decoded with other settings: {'; '.join(differ)}; decode AR "
                         "with this run's model, dataset, --max-samples, --data-seed, --temperature and --max-new-tokens")
    other = sorted({r["prompt_index"] for r in recs if r["prompt_index"] >= len(prompts)
                    or r.get("prompt_hash") != prompt_hash(prompts[r["prompt_index"]])})
    if other:
        raise UsageError(f"history records {path} answer other prompts than this run's (prompt index "
                         f"{', '.join(map(str, other[:5]))}{', ...' if len(other) > 5 else ''}); decode AR on this dataset")
    answers = {(r["prompt_index"], r["turn"]): r["output_ids"] for r in recs}
    blob = json.dumps(sorted([i, t, ids] for (i, t), ids in answers.items())).encode()
    return History(answers, hashlib.sha256(blob).hexdigest()[:16])
