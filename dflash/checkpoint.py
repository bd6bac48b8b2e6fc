"""Reading and writing drafter checkpoints in the public DFlash layout.

The layout is a Qwen3-shaped ``config.json`` plus safetensors files whose tensor names are
the module paths of :class:`~dflash.model.DFlashDraftModel` (``layers.N.self_attn.q_proj``,
``fc``, ``hidden_norm``, ``norm``...), with no ``model.`` prefix.  Loading is strict: a
missing or unexpected tensor means the checkpoint is not a DFlash drafter of this shape,
and silently initialising random weights would make every later number meaningless.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from . import hub
from .config import DFlashConfig
from .model import DFlashDraftModel

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


def _read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
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


def load_drafter(
    name_or_path: str,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    cache_dir: str | None = None,
) -> DFlashDraftModel:
    folder = resolve_checkpoint_dir(name_or_path, cache_dir)
    config_path = folder / "config.json"
    if not config_path.exists():
        raise CheckpointError(f"{folder} has no config.json")
    config = DFlashConfig.from_json_file(config_path)
    with torch.device("meta"):
        model = DFlashDraftModel(config)
    state = _read_state_dict(folder)
    # Older exports sometimes carry a "model." prefix; accept it, nothing else.
    state = {k.removeprefix("model."): v for k, v in state.items()}
    expected = {k for k in model.state_dict()}
    missing = sorted(expected - state.keys())
    unexpected = sorted(state.keys() - expected)
    if missing or unexpected:
        raise CheckpointError(
            f"drafter weights in {folder} do not match its config.json: "
            f"missing {missing[:8]}{'...' if len(missing) > 8 else ''}, "
            f"unexpected {unexpected[:8]}{'...' if len(unexpected) > 8 else ''}"
        )
    shapes = {k: tuple(t.shape) for k, t in model.state_dict().items()}
    wrong = [f"{k}: file {tuple(state[k].shape)}, config {shapes[k]}" for k in sorted(shapes) if tuple(state[k].shape) != shapes[k]]
    if wrong:
        raise CheckpointError(f"drafter weights in {folder} do not match its config.json: " + "; ".join(wrong[:6]))
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True, assign=True)
    # Buffers (RoPE frequencies) are not in the checkpoint: rebuild them on the real device.
    model.rotary_emb = type(model.rotary_emb)(config.layers)
    return model.to(device=device).eval()


def save_drafter(model: DFlashDraftModel, folder: str | os.PathLike) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    model.config.to_json_file(out / "config.json")
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if "rotary_emb" not in k}
    save_file(state, str(out / WEIGHTS_NAME), metadata={"format": "pt"})
