"""What one decode process has loaded, reused by the runs it executes one after another.

Loading dominates a short run: the target's and the drafters' weights, the tokenizer,
and on a GPU the engine's static buffers, ``torch.compile`` and its captured CUDA graphs.
A :class:`Session` keeps each of them, keyed by the settings that determine it, so a
later :class:`~bastion.runs.run.DecodeRun` of the same process (the pipeline's cell jobs
run one per method) reuses what matches and loads only what differs.  A run without a
session gets a fresh one: everything is loaded for it alone.

One engine serves every method of a session.  Given the methods up front
(``Session(methods=...)``), the first run already loads the drafters that later runs
need, so the engine's buffers and graphs are made once; a run still sees only its own
drafters (``Loaded.drafter`` / ``Loaded.eagle3`` are None when its methods need none),
so its records are those of a run alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch

from bastion.engines.choice import Kernels
from bastion.engines.factory import Engine
from bastion.models import registry as models
from bastion.models.eagle3 import Eagle3Drafter
from bastion.models.target import Target
from bastion.runs.checks import UsageError
from bastion.speculative.methods import Eagle3Policy, method_spec
from dflash import DFlashDraftModel


def drafters(methods: Iterable[str]) -> set[str]:
    """The drafters these methods run: a subset of {"dflash", "eagle3"}."""
    return {d for m in methods if (d := method_spec(m).drafter) is not None}


@dataclass
class Loaded:
    """One run's models.  ``drafter`` / ``eagle3`` are the run's own (None when its methods
    need none); the ``engine_*`` ones are what the session's engine holds for all its runs."""

    target: Target
    tokenizer: Any
    drafter: DFlashDraftModel | None
    eagle3: Eagle3Drafter | None
    engine_drafter: DFlashDraftModel | None
    engine_eagle3: Eagle3Drafter | None


class Session:
    """Models, tokenizer and engine loaded by this process, memoised by their settings.

    ``methods``: every method the session's runs will decode (optional; it lets the
    first run load the drafters of the later ones).  ``eagle3_tree``: the EAGLE-3 tree
    setting of those runs (``--eagle3-tree`` and ``--eagle3-tree-file``), for the head that a
    run without EAGLE-3 loads for a later one.
    """

    def __init__(self, methods: Sequence[str] = (), eagle3_tree: tuple[str, str | None] | None = None) -> None:
        self.methods = tuple(methods)
        self.eagle3_tree = eagle3_tree
        self.loaded: list[tuple] = []  # the key of everything loaded, in order: each at most once per key
        self._items: dict[tuple, Any] = {}
        self._trees: dict[tuple, Any] = {}  # EAGLE-3 trees resolved, by setting (nothing loaded)

    def _memo(self, key: tuple, make: Callable[[], Any]) -> Any:
        if key not in self._items:
            self._items[key] = make()
            self.loaded.append(key)
        return self._items[key]

    def tokenizer(self, target_ref: str) -> Any:
        """The target's tokenizer, without its weights: a run's checks size its contexts with it."""
        return self._memo(("tokenizer", target_ref), lambda: models.load_tokenizer(target_ref))

    def target(self, target_ref: str, dtype: torch.dtype, device: torch.device, attn_impl: str) -> Target:
        tkey = (target_ref, str(dtype), str(device), attn_impl)
        return self._memo(("target", *tkey), lambda: models.load_target(target_ref, dtype, device, attn_impl))

    def eagle3_head(self, eagle3_ref: str, target_ref: str, dtype: torch.dtype, device: torch.device, attn_impl: str):
        """The EAGLE-3 head checked against its target (any tree binds it)."""
        target = self.target(target_ref, dtype, device, attn_impl)
        return self._memo(("eagle3_head", eagle3_ref, target_ref, str(dtype), str(device), attn_impl),
                          lambda: models.load_eagle3_head(eagle3_ref, target, target_ref, dtype, device))

    def memo_tree(self, key: tuple, make: Callable[[], Any]) -> Any:
        """An EAGLE-3 tree resolved once per setting: a cell's runs share one choice."""
        if key not in self._trees:
            self._trees[key] = make()
        return self._trees[key]

    def models(self, methods: Sequence[str], target_ref: str, drafter_ref: str | None, eagle3_ref: str | None,
               dtype: torch.dtype, device: torch.device, attn_impl: str, block_size: int | None,
               eagle3_policy: Eagle3Policy | None) -> Loaded:
        """Target, tokenizer and the drafters of ``methods`` (and of the session's other methods);
        ``eagle3_policy``: the tree of the session's EAGLE-3 runs (resolved by the runner)."""
        own, wanted = drafters(methods), drafters(methods) | drafters(self.methods)
        tkey = (target_ref, str(dtype), str(device), attn_impl)
        target = self.target(target_ref, dtype, device, attn_impl)
        tokenizer = self.tokenizer(target_ref)
        drafter = eagle3 = None
        if "dflash" in wanted and drafter_ref is not None:
            drafter = self._memo(("drafter", drafter_ref, block_size, *tkey),
                                 lambda: _load_drafter(target, target_ref, drafter_ref, dtype, device, block_size))
        if "eagle3" in wanted and eagle3_ref is not None and eagle3_policy is not None:
            head = self.eagle3_head(eagle3_ref, target_ref, dtype, device, attn_impl)
            eagle3 = self._memo(("eagle3", eagle3_ref, eagle3_policy, *tkey),
                                lambda: _bind_eagle3(head, target, eagle3_ref, eagle3_policy))
        return Loaded(target, tokenizer, drafter if "dflash" in own else None, eagle3 if "eagle3" in own else None,
                      drafter, eagle3)

    def engine(self, name: str, loaded: Loaded, n_max: int, max_context: int, kernels: Kernels | None = None) -> Engine:
        """The engine for these models, sizes and kernels (None: the defaults with the environment's
        overrides); a new one replaces the session's previous one."""
        kernels = Kernels.from_environment() if kernels is None else kernels
        key = ("engine", name, id(loaded.target), id(loaded.engine_drafter), id(loaded.engine_eagle3), n_max, max_context,
               kernels)
        if key not in self._items:
            # one engine at a time: its buffers (and a GPU's graphs) are the session's biggest allocation
            for old in [k for k in self._items if k[0] == "engine"]:
                del self._items[old]
        return self._memo(key, lambda: Engine(name, loaded.target, loaded.engine_drafter, n_max=n_max,
                                              max_context=max_context, eagle3=loaded.engine_eagle3, kernels=kernels))


def _load_drafter(target: Target, target_ref: str, ref: str, dtype: torch.dtype, device: torch.device,
                  block_size: int | None) -> DFlashDraftModel:
    drafter = models.load_drafter(ref, dtype, device)
    models.check_pair(target, drafter, target_ref, ref)
    if block_size is not None:
        if not 2 <= block_size <= drafter.config.block_size:
            raise UsageError(f"--block-size {block_size} must be in 2..{drafter.config.block_size} (the drafter's block size)")
        drafter.config.block_size = block_size
    return drafter


def _bind_eagle3(head, target: Target, ref: str, policy: Eagle3Policy) -> Eagle3Drafter:
    """The head bound to its target: strict loading and the fit check (named) come before any decoding."""
    try:
        return Eagle3Drafter.bind(head, target, policy)
    except ValueError as exc:
        raise UsageError(f"EAGLE-3 head {ref!r}: {exc}") from None
