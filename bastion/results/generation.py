"""What one decode of one prompt produced: its tokens, times and per-step statistics.

Plain dataclasses with no torch, so the records, the aggregation and the report read
them without loading a model stack; every engine's decoder returns them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StepStats:
    """One decoding step.  Times are seconds, measured only when statistics are requested."""

    committed: int  # tokens this step emitted (accepted drafts + the target's own token, cut at a stop or the limit)
    tree_size: int  # tokens in the verification forward, root included
    context: int  # tokens in the target's cache before the step
    t_draft: float = 0.0
    t_tree: float = 0.0
    t_verify: float = 0.0
    t_accept: float = 0.0
    t_commit: float = 0.0
    drafted: bool = True  # a drafter ran this step (AR's steps, and a BASTION+ step that fell back to AR, did not)

    @property
    def t_other(self) -> float:
        return self.t_tree + self.t_accept + self.t_commit


@dataclass
class GenerationResult:
    output_ids: list[int]
    num_prompt_tokens: int
    prefill_seconds: float
    decode_seconds: float
    stop_reason: str  # "stop_token" | "max_new_tokens"
    steps: list[StepStats] = field(default_factory=list)
    prefill_reused: bool = False  # the prompt's prefill was restored from the engine's memo (a copy's time)

    @property
    def acceptance_lengths(self) -> list[int]:
        """Tokens emitted per step; they sum to ``len(output_ids) - 1`` (the prefill emits the first token)."""
        return [s.committed for s in self.steps]
