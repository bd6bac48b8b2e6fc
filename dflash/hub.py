"""Fail-fast access to the Hugging Face hub.

The hub client retries an unreachable host with backoff for ~25 s per file before it
gives up, so a machine without network would spend minutes failing.  One metadata
request with a short timeout decides first; in ``HF_HUB_OFFLINE`` mode the libraries
read only their local cache and fail at once on a miss, so no probe is needed.
"""

from __future__ import annotations

import os

DEFAULT_TIMEOUT_S = 10.0

FIX_HINT = (
    "set HF_TOKEN (for gated repos) on a machine with Hugging Face access, or pre-fill the "
    "Hugging Face cache and set HF_HUB_OFFLINE=1"
)


def offline() -> bool:
    """Whether the user asked for cache-only hub access (``HF_HUB_OFFLINE``)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
        return True
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    return bool(constants.HF_HUB_OFFLINE)


def timeout() -> float:
    """Probe timeout in seconds (``BASTION_HUB_TIMEOUT_S``), read at call time."""
    try:
        return float(os.environ.get("BASTION_HUB_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def one_line(exc: BaseException) -> str:
    """Compress an exception to one short line for a user-facing message."""
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def probe(repo_id: str, repo_type: str = "model") -> None:
    """Raise quickly if ``repo_id`` cannot be reached (no-op in offline mode)."""
    if offline():
        return
    from huggingface_hub import HfApi

    api = HfApi()
    if repo_type == "dataset":
        api.dataset_info(repo_id, timeout=timeout())
    else:
        api.model_info(repo_id, timeout=timeout())
