"""Reading and writing drafter checkpoints in the public DFlash layout.

The layout is a Qwen3-shaped ``config.json`` plus safetensors files whose tensor names are
the module paths of :class:`~dflash.model.DFlashDraftModel` (``layers.N.self_attn.q_proj``,
``fc``, ``hidden_norm``, ``norm``...), with no ``model.`` prefix.  Loading is strict: a
missing or unexpected tensor means the checkpoint is not a DFlash drafter of this shape,
and silently initialising random weights would make every later number meaningless.

This module knows files and tensor names, not the model: the model's
``from_pretrained``/``save_pretrained`` build it and call these, so imports run one way
(model -> checkpoint).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from . import hub
from .config import DFlashConfig

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"


class CheckpointError(RuntimeError):
    """A drafter checkpoint is missing, unreachable or malformed."""


DEFAULT_PATTERNS = ("config.json", "*.safetensors", "*.safetensors.index.json")


def resolve_checkpoint_dir(
    name_or_path: str, cache_dir: str | None = None, allow_patterns: tuple[str, ...] = DEFAULT_PATTERNS
) -> Path:
    """Return a local folder for ``name_or_path``, downloading a repo id if needed.

    A path that exists locally always wins, so offline users can point at a folder.
    ``allow_patterns`` limits the download (EAGLE-3 heads may ship ``pytorch_model.bin``).
    """
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        return local
    if local.exists():
        raise CheckpointError(f"{name_or_path!r} is a file; pass the folder that holds config.json")
    if name_or_path.count("/") != 1 or name_or_path.startswith((".", "/", "~")):
        raise CheckpointError(
            f"drafter {name_or_path!r} is neither an existing folder nor a Hugging Face repo id (owner/name)"
        )
    try:
        from huggingface_hub import snapshot_download

        hub.probe(name_or_path)  # an unreachable hub fails in seconds, not minutes
        folder = snapshot_download(
            repo_id=name_or_path,
            allow_patterns=list(allow_patterns),
            cache_dir=cache_dir,
        )
    except Exception as exc:  # noqa: BLE001 - every hub failure gets the same advice
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"cannot fetch drafter {name_or_path!r} from the Hugging Face hub ({type(exc).__name__}: {first}). "
            f"Fix: {hub.FIX_HINT}, or pass a local folder."
        ) from exc
    return Path(folder)


def read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's safetensors files (through the index when there is one)."""
    index = folder / INDEX_NAME
    if index.exists():
        with open(index, encoding="utf-8") as fh:
            files = sorted(set(json.load(fh)["weight_map"].values()))
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"no *.safetensors weights in {folder}")
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(str(folder / name)))
    return state


def read_config(name_or_path: str, cache_dir: str | None = None) -> tuple[Path, DFlashConfig]:
    """The checkpoint's folder (fetched if a repo id) and its ``config.json``."""
    folder = resolve_checkpoint_dir(name_or_path, cache_dir)
    config_path = folder / "config.json"
    if not config_path.exists():
        raise CheckpointError(f"{folder} has no config.json")
    return folder, DFlashConfig.from_json_file(config_path)


def matching_state(folder: Path, expected: dict[str, tuple[int, ...]], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The folder's tensors, strictly matched to ``expected`` (name -> shape), cast to ``dtype``.

    A missing, unexpected or misshapen tensor is refused, naming them: the file is not a
    drafter of the config's shape.
    """
    state = read_state_dict(folder)
    # Older exports sometimes carry a "model." prefix; accept it, nothing else.
    state = {k.removeprefix("model."): v for k, v in state.items()}
    check_state_shapes(state, expected, folder, "drafter")
    return {k: v.to(dtype) for k, v in state.items()}


def check_state_shapes(state: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]], folder: Path,
                       what: str, error: type[CheckpointError] = CheckpointError) -> None:
    """Refuse ``state`` unless its tensors are exactly ``expected`` (name -> shape), naming the missing,
    unexpected and misshapen ones (the first few of each): a file of another shape must never load
    half-matched, whichever model it is for (``what``: "drafter", "EAGLE-3")."""
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    lead = f"{what} weights in {folder} do not match its config.json: "
    if missing or unexpected:
        raise error(lead + f"missing {_first(missing, 8)}, unexpected {_first(unexpected, 8)}")
    wrong = [f"{k}: file {tuple(state[k].shape)}, config {expected[k]}" for k in sorted(expected)
             if tuple(state[k].shape) != expected[k]]
    if wrong:
        raise error(lead + "; ".join(wrong[:6]))


def _first(names: list[str], k: int) -> str:
    return f"{names[:k]}{'...' if len(names) > k else ''}"


def write_checkpoint(config: DFlashConfig, state: dict[str, torch.Tensor], folder: str | os.PathLike) -> None:
    """``config.json`` and ``model.safetensors`` (buffers such as RoPE frequencies are left out)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    config.to_json_file(out / "config.json")
    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items() if "rotary_emb" not in k}
    save_file(tensors, str(out / WEIGHTS_NAME), metadata={"format": "pt"})
