"""What every engine's decoder is and shares: the Decoder protocol and the request checks.

The eager, static and compiled engines differ only in how they run a step (Transformers'
layers with growing caches, or preallocated buffers replayed as CUDA graphs); what a
decoder accepts, refuses and returns is defined here once, so calibration, the runs and
the tests treat every engine alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable

import torch

from bastion.costmodel.model import CostModel, StepOverheads
from bastion.engines.static_buffers import WIDE_ROWS
from bastion.models.target import Target
from bastion.results.generation import GenerationResult, StepStats
from bastion.speculative.gate import DraftGate
from bastion.speculative.methods import MethodSpec, method_spec
from bastion.speculative.policy import TreePolicy


@dataclass(kw_only=True)
class DecodeRun:
    """What one ``generate`` call carries from step to step, on either engine (each adds its own)."""

    max_new_tokens: int
    stops: set[int]
    temperature: float
    generator: torch.Generator | None
    clock: Callable[[], object]
    hint: int  # about twice the last tree: where the adaptive search starts
    gate: DraftGate | None = None  # whether a step drafts (this project's rule; None: every step does)
    learning: tuple | None = None  # the last drafted tree's (depth mass, accepted, shift), for the surrogate's fit
    output: list[int] = field(default_factory=list)
    steps: list[StepStats] = field(default_factory=list)
    done: bool = False
    stop_reason: str = "max_new_tokens"


@runtime_checkable
class Decoder(Protocol):
    """Decodes one prompt at batch size 1 with one method; made by :meth:`Engine.decoder`."""

    method: str
    policy: TreePolicy
    target: Target
    block_size: int

    def generate(
        self,
        prompt_ids: Sequence[int] | torch.Tensor,
        max_new_tokens: int,
        temperature: float = 0.0,
        stop_token_ids: Iterable[int] = (),
        generator: torch.Generator | None = None,
        collect_stats: bool | str = False,
    ) -> GenerationResult: ...


@runtime_checkable
class VerifyProbe(Protocol):
    """One engine's verification step, alone, for the latency grid of the cost model.

    Calibration times exactly what the engine's decode steps run, whatever the engine:
    ``reserve`` sizes buffers for the whole grid once, ``at_context`` readies ``c`` cached
    tokens (with room for ``room`` more), ``probe`` returns a call verifying ``tokens`` [s]
    as a chain after them (at ``temperature`` > 0 sampling a token at every node, as
    the decoders do).
    """

    target: Target

    def reserve(self, tokens: int, nodes: int) -> None: ...

    def at_context(self, c: int, room: int, generator: torch.Generator) -> None: ...

    def probe(self, tokens: torch.Tensor, c: int, temperature: float = 0.0) -> Callable[[], None]: ...


class PositionLimitError(ValueError):
    """The prompt plus the requested tokens do not fit the model's positions."""


def check_method(method: str, has_drafter: bool, policy: TreePolicy, cost_model, overheads,
                 has_eagle3: bool = False) -> MethodSpec:
    """What every engine's decoder refuses before any work: unknown or under-equipped methods."""
    spec = method_spec(method)
    if spec.drafter == "dflash" and not has_drafter:
        raise ValueError(f"method {method!r} needs a drafter")
    if spec.drafter == "eagle3" and not has_eagle3:
        raise ValueError(f"method {method!r} needs an EAGLE-3 head (--eagle3-model)")
    if spec.ranked and policy.budget is None and (cost_model is None or overheads is None):
        raise ValueError("adaptive BASTION needs a calibrated cost model and step overheads (or a fixed budget)")
    return spec


def gate_drafts(gate: DraftGate | None, first: bool, prompt_rows: int) -> bool:
    """Whether a step drafts (else an AR step, without the drafter's forward: :mod:`bastion.speculative.gate`);
    both engines decide here, so they take the same steps.  A prompt's ``first`` step may set its
    ``prompt_rows`` aside for a later draft, which takes in at most :data:`WIDE_ROWS` rows."""
    if gate is None:
        return True
    return gate.drafts_first(prompt_rows, WIDE_ROWS) if first else gate.drafts()


def draft_gate(spec: MethodSpec, policy: TreePolicy, cost_model: CostModel | None, rule_model: CostModel | None,
               fixed_cost: float, overheads: StepOverheads | None) -> DraftGate | None:
    """A decode's :class:`DraftGate` for a method that skips drafts while no tree pays (None: it always drafts).

    An AR step costs :meth:`StepOverheads.ar_step`; a drafted step of ``n`` nodes the
    rule's own fixed cost and curve at ``n`` (``rule_model``, the fitted ``cost_model`` with
    the step excess).  A fixed budget, or a decoder without a calibration, always drafts.
    """
    if not spec.skips_drafts or policy.budget is not None or cost_model is None or overheads is None:
        return None
    return DraftGate(lambda c: overheads.ar_step(cost_model, c),
                     lambda n, c: fixed_cost + rule_model.curve_at(c, policy.n_max)[n])


def check_fits(target: Target, prompt_len: int, max_new_tokens: int, block: int) -> None:
    """The prompt, the requested tokens and one draft block must fit the target's positions."""
    need = prompt_len + max_new_tokens + block
    if need > target.max_positions:
        raise PositionLimitError(
            f"prompt of {prompt_len} tokens + max_new_tokens {max_new_tokens} + block {block} "
            f"= {need} positions, but the target supports {target.max_positions} "
            "(max_position_embeddings); shorten the prompt or lower --max-new-tokens"
        )


def prompt_tensor(prompt_ids: Sequence[int] | torch.Tensor, max_new_tokens: int, device: torch.device) -> torch.Tensor:
    """The prompt as [1, P] on ``device``, after the request checks both decoders share."""
    ids = torch.as_tensor(prompt_ids, dtype=torch.long, device=device).view(1, -1)
    if ids.shape[1] == 0:
        raise ValueError("empty prompt: at least one token is needed")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    return ids


def emit(output: list[int], tokens: Sequence[int], stops: set[int], max_new_tokens: int) -> str | None:
    """Append a step's tokens up to the first stop token or the length limit; return why it ended, if it did."""
    for tok in tokens:
        output.append(tok)
        if tok in stops:
            return "stop_token"
        if len(output) >= max_new_tokens:
            return "max_new_tokens"
    return None
