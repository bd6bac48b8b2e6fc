"""Names and defaults every layer shares: one source, so labels and knobs never disagree.

Torch-free and import-free, at the bottom of the layer order: the CLI, the pipeline's
rule files, the decoders and the report all read their method names, tree-policy
defaults, display labels and temperature tags from here.
"""

from __future__ import annotations

import os
from typing import Any

# Decoding methods, in the order they run on a prompt: AR first, since later turns of a
# multi-turn prompt reuse AR's answer as history.  ``bastion`` is the paper's budget rule
# as its release runs it; ``bastion_plus`` this project's rule (speculative/methods.py says
# what it changes); ``bastion_lossy`` the paper's rule with the release's acceptance at
# T > 0 (argmax match, sampled last token), which is not lossless: run only when asked.
METHODS: tuple[str, ...] = ("ar", "eagle3", "dflash", "bastion", "bastion_plus", "bastion_lossy")
DEFAULT_METHODS: tuple[str, ...] = ("ar", "eagle3", "dflash", "bastion", "bastion_plus")
BASELINE = "ar"

# BASTION's tree policy (the paper's values; n_min is sized for GPUs, where a verification
# of 32 tokens costs about as much as one).
N_MIN = 32
# On a CPU a verification's cost grows from the first node on, so trees are sized in steps
# of 16 there (the tiny experiment's `n_min: auto`), not 32.  Steps of 8 let the rule stop
# at 8 nodes whenever the draft was unsure; decoded prompt by prompt in one process, trees
# of at least 16 were as fast or faster (1.17-1.25x DFlash against 1.17-1.20x) and accepted
# 0.3-0.5 more tokens a step (docs/performance.md, "Why trees of 16 nodes on a CPU").
N_MIN_CPU = 16
# bastion_plus on a CPU: no graphs ask for few tree shapes, so its trees take the rule's
# count itself (granularity 1).  At T = 0 it counts from the device's n_min, as `bastion`:
# a CPU step costs about the same from 12 to 16 nodes and jumps past 16, which the fitted
# curve smooths over, and counting from one node made trees of 4-15 nodes that decoded 2-5%
# slower than 16 (docs/performance.md, "Where `bastion_plus`'s CPU trees start").  At T > 0 sampled
# drafts rarely survive and a few nodes are what pays, so it counts from one node.
N_MIN_PLUS_SAMPLED_CPU = 1
N_MAX = 8192
TOPK = 128  # candidate tokens per depth; the path-ranking layout allows at most this many
TOPK_LIMIT = 128

# EAGLE-3's fixed tree (the reference's EaModel defaults): depth-wise expansion of the
# top_k best nodes, `depth` rounds, the best total_tokens nodes (root included) verified.
EAGLE3_DEPTH = 7
EAGLE3_TOPK = 10
EAGLE3_TOTAL_TOKENS = 60

# Dataset names of the paper's tables, in the paper's order, and the offline sets.
SHORT_DATASETS: tuple[str, ...] = ("gsm8k", "math500", "aime25", "humaneval", "mbpp", "lcb", "mt-bench", "alpaca")
LONGBENCH_SUBSETS: tuple[str, ...] = (
    "qasper", "multifieldqa_en", "gov_report", "multi_news", "triviaqa", "samsum", "passage_retrieval_en",
)
OFFLINE_DATASETS: tuple[str, ...] = ("humaneval-pkg", "stdlib-heldout")
# Sets whose prompts have several user turns: every method's turn-k prompt carries AR's
# answers to turns 1..k-1 (the CLI decodes AR first; the pipeline's other jobs read AR's records).
MULTI_TURN_DATASETS: tuple[str, ...] = ("mt-bench",)

METHOD_LABELS: dict[str, str] = {"ar": "AR", "eagle3": "EAGLE-3", "dflash": "DFlash", "bastion": "BASTION",
                                  "bastion_plus": "BASTION+", "bastion_lossy": "BASTION (lossy)"}
ABLATION_PREFIX = "bastion-b"  # fixed-budget BASTION runs of the budget ablation: bastion-b64


def method_label(method: str) -> str:
    """Display name: ``bastion`` -> ``BASTION``, ``bastion-b64`` -> ``BASTION (b=64)``.

    A variant of a known method that has no label of its own keeps the method's with its
    suffix: ``dflash_lossy`` -> ``DFlash (lossy)``; any other name shows as it is.
    """
    method = str(method)
    if method in METHOD_LABELS:
        return METHOD_LABELS[method]
    if method.startswith(ABLATION_PREFIX):
        return f"BASTION (b={method[len(ABLATION_PREFIX):]})"
    base, _, variant = method.partition("_")
    if base in METHOD_LABELS and variant:
        return f"{METHOD_LABELS[base]} ({variant.replace('_', ' ')})"
    return method


def is_adaptive(method: str) -> bool:
    """A budget rule's method (``bastion``, ``bastion_plus``, ``bastion_lossy``), not a fixed budget ``bastion-b64``."""
    method = str(method)
    return method.startswith("bastion") and not method.startswith(ABLATION_PREFIX)


def ablation_method(budget: int) -> str:
    """The method name of a fixed-budget BASTION run: 64 -> ``bastion-b64``."""
    return f"{ABLATION_PREFIX}{int(budget)}"


def temperature_tag(t: Any) -> str:
    """Column tag of a temperature in tables and figures: 0.0 -> 'T0', 0.7 -> 'T0.7'."""
    return f"T{float(t):g}"


def temperature_dir(t: Any) -> str:
    """A temperature in result paths (the pipeline's {temperature} wildcard): 0.0 -> '0'."""
    return f"{float(t):g}"


def resolve_n_min(value: int | str, gpu: bool) -> int:
    """``n_min`` as configured: a node count, or ``auto``, sized for the device (GPU: 32, CPU: 16).

    On a GPU a 32-node verification costs about what one node does, and every distinct
    tree size is one more graph to compile and capture; on a CPU each node costs time.
    """
    if value == "auto":
        return N_MIN if gpu else N_MIN_CPU
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"n_min must be a node count >= 1 or 'auto', not {value!r}")
    return value


# The running engine's ``kernels.rank`` choice (``Kernels`` in bastion/engines/choice.py):
# the tree and rule maths are engine-agnostic functions called from every engine and from
# the cost model, so the choice is the process's, as torch's BLAS library choice is.
_torch_references = False


def use_torch_references(on: bool) -> None:
    """Set by the engine from its run's ``kernels.rank`` (``torch``: on) when it is made and
    before each decoder or probe it hands out."""
    global _torch_references
    _torch_references = bool(on)


def torch_references_forced() -> bool:
    """The torch reference paths of the tree and rule maths everywhere: no Triton kernels on a
    GPU and no NumPy or host-walk paths on a CPU (what a GPU without Triton runs).

    ``BASTION_RANK`` (``torch`` or ``auto``), where set, overrides the engine's choice.
    """
    env = os.environ.get("BASTION_RANK", "").strip()
    return env == "torch" if env else _torch_references
