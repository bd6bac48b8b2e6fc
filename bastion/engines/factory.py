"""Choosing the engine that calibrates and decodes: ``eager``, ``static`` or ``compiled``.

All engines run the same methods with the same lossless semantics.  ``eager`` drives the
Transformers layers step by step with growing caches; ``static`` preallocates every
buffer and replays CUDA graphs (:mod:`bastion.engines.static_engine`); ``compiled`` is ``static``
with the target's layers fused by ``torch.compile`` (:mod:`bastion.engines.compiled`; on a
CPU it runs the same functions uncompiled).  Calibration must use the
engine that decodes, so everything that makes a decoder or probes verification latency
goes through one :class:`Engine` object.  The engine gets its kernel settings
(:class:`~bastion.engines.choice.Kernels`) from the run that makes it.
"""

from __future__ import annotations

from bastion.costmodel.model import CostModel, StepOverheads
from bastion.engines.base import Decoder, VerifyProbe
from bastion.defaults import use_torch_references
from bastion.engines.choice import Kernels, resolve_engine
from bastion.engines.eager import EagerDecoder, EagerProbe
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
from dflash import DFlashDraftModel


class Engine:
    """Makes decoders for one (target, drafter) pair on the chosen engine.

    The static engine's buffers and graphs are made on first use and shared by every
    decoder this object makes (decoding is sequential at batch size 1).  ``kernels``: the
    run's kernel settings (None: the defaults with the environment's overrides); its
    ``rank`` choice is the process's, set again before each decoder or probe goes out.
    """

    def __init__(self, name: str, target: Target, drafter: DFlashDraftModel | None, n_max: int,
                 max_context: int = 2048, graphs: bool = True, eagle3: Eagle3Drafter | None = None,
                 kernels: Kernels | None = None) -> None:
        self.name = resolve_engine(name, target.device)
        self.target, self.drafter, self.eagle3 = target, drafter, eagle3
        self.n_max, self.max_context, self.graphs = n_max, max_context, graphs
        self.kernels = Kernels.from_environment() if kernels is None else kernels
        use_torch_references(self.kernels.rank == "torch")
        self._static = None

    @property
    def static(self):
        """The shared :class:`StaticEngine` (static engine only)."""
        if self._static is None:
            from bastion.engines.static_engine import StaticEngine

            self._static = StaticEngine(self.target, self.drafter, self.max_context, self.n_max, graphs=self.graphs,
                                        fused=self.name == "compiled", eagle3=self.eagle3, kernels=self.kernels)
        return self._static

    def decoder(self, method: str, policy: TreePolicy | None = None, cost_model: CostModel | None = None,
                overheads: StepOverheads | None = None) -> Decoder:
        use_torch_references(self.kernels.rank == "torch")
        if self.name == "eager":
            return EagerDecoder(self.target, method, self.drafter, policy, cost_model, overheads, eagle3=self.eagle3)
        from bastion.engines.static_decoder import StaticDecoder

        return StaticDecoder(self.static, method, policy, cost_model, overheads)

    def verify_probe(self) -> VerifyProbe:
        """The engine's own verification step, for the latency grid."""
        use_torch_references(self.kernels.rank == "torch")
        if self.name == "eager":
            return EagerProbe(self.target)
        from bastion.engines.static_probe import StaticProbe

        return StaticProbe(self.static)
