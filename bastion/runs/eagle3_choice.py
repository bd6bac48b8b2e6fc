"""EAGLE-3's tree for a run: the explicit setting, or ``auto``'s choice for this device and head.

Which shape decodes fastest depends on the device and on the head
(:mod:`bastion.speculative.eagle3_tree`), and the acceptance it needs comes only from real
drafts, so ``auto`` sweeps a few shapes on the first prompts of the run's dataset, greedy,
on the engine and dtype that will decode (:func:`bastion.calibration.eagle3_tree.sweep_trees`).
The choice belongs to the head: it is cached under a :class:`TreeKey` that hashes the
head's files beside the hardware key, engine and dtype, so another head (or the same head
retrained) is measured anew, while a rerun reuses the cached choice without decoding.

The sweep is kept short (a few prompts, at most 128 new tokens, shapes spread from chains
to the reference tree, the hopeless ones dropped after one prompt) so that choosing costs
seconds on a CPU with the tiny pair; τ at T = 0 does not depend on timing, and the step
times only need to rank the shapes.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from bastion.calibration.eagle3_tree import TreeChoice
from bastion.calibration.store import CalibrationError, write_json_atomic
from bastion.runs.checks import check_eagle3_tree
from bastion.speculative.methods import Eagle3Policy

if TYPE_CHECKING:
    from bastion.runs.inputs import Inputs
    from bastion.runs.session import Session
    from bastion.runs.settings import RunSettings

# How many of the run's dataset's first prompts (first turns) the sweep decodes, per device
# type.  Each shape decodes every prompt, and the tie rule's band is two standard errors of
# the shapes' per-prompt rate ratio, which narrows as prompts are added.  On a 2-core CPU a
# decode takes seconds, so 4; on a GPU tens of milliseconds, so 8: there the four-prompt
# band reached its 10% cap and let trees 6-9% slower than the fastest win on τ
# (docs/performance.md, "The tiny pair on a CPU and a GPU").
SWEEP_PROMPTS = {"cpu": 4, "cuda": 8}


def _per_device(table: dict, device_type: str):
    """``table``'s entry for a device of this type; another accelerator counts as a GPU."""
    return table.get(device_type, table["cuda"])


def sweep_prompts(device_type: str) -> int:
    """The sweep's prompt count on a device of this type."""
    return _per_device(SWEEP_PROMPTS, device_type)


# Whether a near-tie with the fastest shape goes to the higher τ, per device type.  On a
# 2-core CPU VM one sweep's rates move by up to 6% from sweep to sweep, and the tie rule
# kept 3/1/5 against 1/1/3 there, which decoded as fast or faster over more prompts (1.286x
# against 1.258x AR on 16).  A GPU's sweep times the faster of two replayed passes: seven
# sweeps of the tiny pair on H100s and H200s put 3/1/5 first every time; the four times the
# rule passed it over for a deeper tree 4.5-9.4% behind, EAGLE-3 decoded at 1.12-1.15x AR,
# against 1.27-1.29x in the three where 3/1/5 decoded (docs/performance.md, "The tiny pair
# on a CPU and a GPU").  So on a GPU the fastest shape wins alone; seven H100 runs with this
# rule kept 3/1/5 and decoded it at 1.26-1.31x.
SWEEP_TIES = {"cpu": True, "cuda": False}


def sweep_ties(device_type: str) -> bool:
    """Whether the sweep's near-ties go to the higher τ on a device of this type."""
    return _per_device(SWEEP_TIES, device_type)


# New tokens per sweep decode: the run's own, up to this many.  τ grows along an answer
# (its first tokens are the hardest to guess), more for deep trees than for short chains:
# on the tiny pair's first 4 humaneval-pkg prompts the 5-node chain's τ went from 2.96 at
# 64 tokens to 3.55 at 128, the 3-node chain's from 2.25 to 2.51.
SWEEP_MAX_NEW_TOKENS = 128
# From chains to the reference tree, one or two shapes per size class: each shape costs a
# warm-up and a decode of every sweep prompt, so the list stays short.  On a CPU, where
# every verified node costs arithmetic, chains are the shapes that compete.
SWEEP_SHAPES: tuple[tuple[int, int, int], ...] = ((1, 1, 3), (3, 1, 5), (2, 2, 6), (4, 2, 10), (4, 4, 16),
                                                  (6, 8, 32), (7, 10, 60))


@dataclass(frozen=True)
class TreeKey:
    """What a tree choice belongs to: the head's files, the hardware, the engine and the dtype."""

    head: str  # head_digest of the head's folder
    hardware: str
    engine: str
    dtype: str

    def file_name(self) -> str:
        return f"{self.head}-{self.engine}-{self.dtype}.json"


def head_digest(folder: str | Path) -> str:
    """A hash of every file of the head's folder (names and bytes): a retrained head is another head."""
    root = Path(folder)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and ".cache" not in p.relative_to(root).parts):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def head_folder(ref: str) -> Path:
    """The local folder of head ``ref`` (a repo id is fetched as loading would)."""
    from dflash.checkpoint import resolve_checkpoint_dir
    from dflash.eagle3.checkpoint import PATTERNS

    return resolve_checkpoint_dir(ref, allow_patterns=PATTERNS)


def tree_cache_path(cache_dir: str | Path, key: TreeKey) -> Path:
    return Path(cache_dir) / "eagle3_tree" / key.hardware / key.file_name()


def save_choice(path: str | Path, key: TreeKey, choice: TreeChoice) -> None:
    write_json_atomic(path, {"key": asdict(key), **choice.to_dict()})


def load_choice(path: str | Path, key: TreeKey) -> TreeChoice:
    """A stored choice, refused (naming the fix) when made for another head, device, engine or dtype."""
    fix = f"delete {path} (or pass --recalibrate) to choose the tree again"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        choice = TreeChoice.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CalibrationError(f"EAGLE-3 tree choice {path} cannot be read ({exc}); {fix}") from None
    made = data.get("key")
    if made != asdict(key):
        raise CalibrationError(f"EAGLE-3 tree choice {path} was made for {made}, not for this run's {asdict(key)}; "
                               f"{fix}")
    return choice


def describe(choice: TreeChoice) -> str:
    p, m = choice.policy, choice.chosen
    return f"{p.depth}/{p.top_k}/{p.total_tokens} (tau {m.tau:.2f}, {m.tokens_per_second:.1f} tok/s)"


def resolve_tree(setting: str, tree_file: str | None, key: Callable[[], TreeKey], cache_dir: str | Path,
                 again: bool, measure: Callable[[], TreeChoice],
                 log: Callable[[str], None]) -> tuple[Eagle3Policy, str]:
    """(the tree, ``"explicit"`` or ``"auto"``) of one run.

    An explicit setting is used as given.  ``auto`` reads ``tree_file`` when given (the
    pipeline's choice), else the cache entry of ``key()``; ``measure()`` sweeps when there is
    none or ``again`` (``--recalibrate``) asks, and the choice is cached.
    """
    explicit = check_eagle3_tree(setting)
    if explicit is not None:
        return Eagle3Policy(*explicit), "explicit"
    k = key()
    if tree_file is not None:
        choice = load_choice(tree_file, k)
        log(f"[eagle3] tree {describe(choice)}, chosen for this head in {tree_file}")
        return choice.policy, "auto"
    path = tree_cache_path(cache_dir, k)
    if path.exists() and not again:
        choice = load_choice(path, k)
        log(f"[eagle3] reusing tree {describe(choice)}, chosen for this head in {path}")
        return choice.policy, "auto"
    log(f"[eagle3] choosing the tree for head {k.head} on {k.hardware} ({k.engine}, {k.dtype}): a sweep of "
        f"{len(SWEEP_SHAPES)} shapes on the dataset's first prompts")
    start = time.perf_counter()
    choice = measure()
    save_choice(path, k, choice)
    log(f"[eagle3] chose tree {describe(choice)} in {time.perf_counter() - start:.1f}s; wrote {path}")
    return choice.policy, "auto"


def sweep(target, head, engine: str, kernels, prompts: list[list[int]], log: Callable[[str], None],
          max_new_tokens: int = SWEEP_MAX_NEW_TOKENS) -> TreeChoice:
    """Decode ``prompts`` greedily with each of :data:`SWEEP_SHAPES` that the head can build, on a
    fresh ``engine`` holding only the head, and choose (:func:`bastion.speculative.eagle3_tree.choose_tree`)."""
    from bastion.calibration.eagle3_tree import sweep_trees
    from bastion.engines.factory import Engine
    from bastion.models.eagle3 import Eagle3Drafter

    context = max(len(p) for p in prompts) + max_new_tokens + 64

    def decoder_for(policy: Eagle3Policy):
        drafter = Eagle3Drafter.bind(head, target, policy)
        return Engine(engine, target, None, n_max=1, max_context=context, eagle3=drafter, kernels=kernels).decoder("eagle3")

    # a GPU engine captures a graph per new attention window during a prompt's first decode,
    # which would time captures, not steps: there the faster of two passes counts
    passes = 2 if target.device.type == "cuda" else 1
    return sweep_trees(decoder_for, prompts, head.config.draft_vocab_size, max_new_tokens, passes=passes,
                       shapes=SWEEP_SHAPES, log=log, ties=sweep_ties(target.device.type))


def tree_key(run: RunSettings, eagle3_ref: str) -> TreeKey:
    """What a resolved run's ``auto`` tree choice belongs to: its head's files, hardware, engine and dtype."""
    return TreeKey(head_digest(head_folder(eagle3_ref)), run.hardware, run.engine, run.dtype)


def sweep_for(run: RunSettings, inputs: Inputs, session: Session, log: Callable[[str], None]) -> TreeChoice:
    """``auto``'s sweep for a resolved run: the first prompts of its dataset, on its engine and dtype."""
    import torch

    from bastion.data.prompts import PromptBuilder

    dtype, device = getattr(torch, run.dtype), torch.device(run.device)
    target = session.target(inputs.target_ref, dtype, device, run.attn_impl)
    head = session.eagle3_head(inputs.eagle3_ref, inputs.target_ref, dtype, device, run.attn_impl)
    builder = PromptBuilder(session.tokenizer(inputs.target_ref), run.enable_thinking)
    prompts = [builder.encode([], p["turns"][0]) for p in inputs.prompts[:sweep_prompts(device.type)]]
    return sweep(target, head, run.engine, run.kernels, prompts, log, min(run.max_new_tokens, SWEEP_MAX_NEW_TOKENS))
