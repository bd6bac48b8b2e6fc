"""The drafters the engines know, by the name a :class:`~bastion.speculative.methods.MethodSpec` gives.

Adding a drafter is one module with its eager and static proposer (see
:mod:`bastion.engines.proposer`) and one line here; a method that uses it is a
``MethodSpec`` naming it.
"""

from __future__ import annotations

from typing import NamedTuple

from bastion.engines.compiled import Compilation
from bastion.engines.dflash_proposer import EagerDFlash, StaticDFlash
from bastion.engines.eagle3_proposer import EagerEagle3, StaticEagle3
from bastion.engines.proposer import EagerProposer, NoDraft, StaticProposer
from bastion.engines.static_layers import FusedLayers
from bastion.models.target import Target


class Registration(NamedTuple):
    eager: type  # (model, target) -> EagerProposer
    static: type  # (model, target, compilation, fused target layers) -> StaticProposer


PROPOSERS: dict[str, Registration] = {
    "dflash": Registration(EagerDFlash, StaticDFlash),
    "eagle3": Registration(EagerEagle3, StaticEagle3),
}


def eager_proposer(name: str | None, models: dict[str, object], target: Target) -> EagerProposer:
    """The eager proposer of drafter ``name`` (None: AR's) over ``models[name]``."""
    return NoDraft() if name is None else PROPOSERS[name].eager(models[name], target)


def static_proposers(models: dict[str, object], target: Target, compilation: Compilation,
                     layers: FusedLayers | None) -> dict[str, StaticProposer]:
    """A static proposer for every drafter model given (None: not loaded), by name."""
    return {name: PROPOSERS[name].static(model, target, compilation, layers)
            for name, model in models.items() if model is not None}
