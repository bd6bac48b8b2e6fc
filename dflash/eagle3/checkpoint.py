"""Strict loading and saving of EAGLE-3 heads in the public layouts, plus fit checks.

Layouts read (all without remote code):

* the EAGLE reference release (``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``): Llama config with
  ``draft_vocab_size``; tensors ``fc``, ``midlayer.*``, ``norm``, ``lm_head``, ``d2t``,
  ``t2d``; no ``embed_tokens`` (the target's embeddings are used);
* AngelSlim's / SpecForge's Qwen3 heads (``AngelSlim/Qwen3-8B_eagle3``...): the same
  tensor names (their drafter module is also ``midlayer``), Qwen3 widths in a Llama config
  (``head_dim``, ``rope_theta``), optionally ``target_hidden_size`` and a shipped
  ``embed_tokens.weight``;
* exports that name the layer ``layers.0.*`` (vLLM / speculators style) or carry a
  ``model.`` prefix: renamed to ``midlayer.*``.

Weights may be safetensors (sharded or not) or ``pytorch_model.bin`` (the reference
release ships a ``.bin``).  Anything missing, unexpected or of the wrong width is a
:class:`Eagle3CheckpointError` naming the tensor and both sizes, raised before decoding.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ..checkpoint import CheckpointError, check_state_shapes, resolve_checkpoint_dir
from .config import Eagle3Config
from .model import Eagle3Head

WEIGHTS_NAME = "model.safetensors"
LAYOUTS = ("eagle", "angelslim")
# The reference release ships pytorch_model.bin; others ship safetensors.
PATTERNS = ("config.json", "*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json")


class Eagle3CheckpointError(CheckpointError):
    """An EAGLE-3 head checkpoint is malformed or does not fit its target."""


def _read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    files: list[str] = []
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).exists():
            with open(folder / index, encoding="utf-8") as fh:
                files = sorted(set(json.load(fh)["weight_map"].values()))
            break
    if not files:
        files = sorted(p.name for p in folder.glob("*.safetensors")) or sorted(p.name for p in folder.glob("*.bin"))
    if not files:
        raise Eagle3CheckpointError(f"no *.safetensors or *.bin weights in {folder}")
    state: dict[str, torch.Tensor] = {}
    for name in files:
        if name.endswith(".safetensors"):
            state.update(load_file(str(folder / name)))
        else:
            state.update(torch.load(folder / name, map_location="cpu", weights_only=True))
    return state


def normalise_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map the public name variants onto this package's (``midlayer.*``, no prefix)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        name = key.removeprefix("model.")
        if name.startswith("layers.0."):
            name = "midlayer." + name[len("layers.0."):]
        if name in out:
            raise Eagle3CheckpointError(f"tensor {name!r} appears twice (as {key!r} and another name)")
        out[name] = value
    return out


def read_draft_vocab(name_or_path: str, cache_dir: str | None = None) -> int:
    """A head's draft vocabulary from its config.json alone (a repo fetches only that file).

    Tree settings are checked against it before any weights load, so a bad ``--eagle3-topk``
    fails in a second, not after loading a target and a head.
    """
    folder = resolve_checkpoint_dir(name_or_path, cache_dir, allow_patterns=("config.json",))
    path = folder / "config.json"
    if not path.exists():
        raise Eagle3CheckpointError(f"{folder} has no config.json")
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    value = data.get("draft_vocab_size") if isinstance(data, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise Eagle3CheckpointError(f"{path} gives draft_vocab_size {value!r}; an EAGLE-3 head config needs a "
                                    "positive integer there")
    return value


def adopt_target_rope(config: Eagle3Config, target_config: Any) -> None:
    """Give the head the target's RoPE parameters (theta and scaling, e.g. ``llama3``)."""
    params = getattr(target_config, "rope_parameters", None)
    if params:
        config.layers.rope_parameters = dict(params)


def load_eagle3(
    name_or_path: str,
    target_config: Any | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    rope: str = "head",
    cache_dir: str | None = None,
) -> Eagle3Head:
    """Load a head from a folder or HF repo id, strictly; check it fits ``target_config``.

    ``rope="head"`` uses the head config's own RoPE settings, as the EAGLE reference and
    SGLang do (the reference Llama-3.1 head config names no ``rope_theta``, so it runs with
    10000 and no scaling, which is what it was trained with); ``rope="target"`` copies the
    target's ``rope_parameters`` (incl. ``llama3`` scaling) into the head.
    """
    folder = resolve_checkpoint_dir(name_or_path, cache_dir, allow_patterns=PATTERNS)
    if not (folder / "config.json").exists():
        raise Eagle3CheckpointError(f"{folder} has no config.json")
    try:
        config = Eagle3Config.from_json_file(folder / "config.json")
    except (ValueError, TypeError) as exc:
        raise Eagle3CheckpointError(f"{folder}/config.json is not an EAGLE-3 head config: {exc}") from exc
    if rope not in ("head", "target"):
        raise ValueError(f"rope must be 'head' or 'target', got {rope!r}")
    if rope == "target":
        if target_config is None:
            raise ValueError("rope='target' needs target_config")
        adopt_target_rope(config, target_config)
    state = normalise_names(_read_state_dict(folder))
    with torch.device("meta"):
        head = Eagle3Head(config, with_embeddings="embed_tokens.weight" in state)
    expected = {k: tuple(v.shape) for k, v in head.state_dict().items() if not k.startswith("rotary_emb")}
    check_state_shapes(state, expected, folder, "EAGLE-3", Eagle3CheckpointError)
    cast = {k: (v if k in ("d2t", "t2d") else v.to(dtype)) for k, v in state.items()}
    cast["d2t"], cast["t2d"] = cast["d2t"].long(), cast["t2d"].bool()
    head.load_state_dict(cast, strict=False, assign=True)  # strict by the checks above; rope is rebuilt
    head.rotary_emb = type(head.rotary_emb)(config.layers)
    head = head.to(device=device).eval()
    if target_config is not None:
        check_fits_target(head, target_config)
    return head


def _target_hidden(target_config: Any) -> int:
    text = getattr(target_config, "text_config", None) or target_config
    return int(text.hidden_size)


def check_fits_target(head: Eagle3Head, target_config: Any) -> None:
    """Raise :class:`Eagle3CheckpointError` if the head cannot draft for this target.

    Checks every width the head shares with the target: the three tapped features
    (``fc`` in-features vs 3 x target hidden, ``target_hidden_size``), the token embeddings
    (the target's, of target hidden width, feed ``input_layernorm`` of head width unless
    the head ships its own), the vocabularies (``t2d``, ``embed_tokens``, ``d2t`` targets),
    and the tapped layer ids.
    """
    cfg = head.config
    text = getattr(target_config, "text_config", None) or target_config
    th, tv, tl = int(text.hidden_size), int(text.vocab_size), int(text.num_hidden_layers)
    errs: list[str] = []
    if cfg.target_hidden_size is not None and cfg.target_hidden_size != th:
        errs.append(f"config target_hidden_size {cfg.target_hidden_size} != target hidden_size {th}")
    fc_in = int(head.fc.weight.shape[1])
    if fc_in != 3 * th:
        errs.append(f"fc.weight in-features {fc_in} != 3 x target hidden_size {th} = {3 * th}")
    if head.embed_tokens is None and cfg.hidden_size != th:
        errs.append(f"head hidden_size {cfg.hidden_size} != target hidden_size {th} and the head ships no "
                    f"embed_tokens (midlayer.input_layernorm.weight has {cfg.hidden_size}, target embeddings {th})")
    if head.embed_tokens is not None and head.embed_tokens.weight.shape[0] != tv:
        errs.append(f"embed_tokens.weight rows {head.embed_tokens.weight.shape[0]} != target vocab_size {tv}")
    if int(head.t2d.shape[0]) != tv:
        errs.append(f"t2d length {int(head.t2d.shape[0])} != target vocab_size {tv}")
    d2t = head.d2t
    if d2t.numel():
        mapped = torch.arange(d2t.numel(), device=d2t.device) + d2t
        lo, hi = int(mapped.min()), int(mapped.max())
        if lo < 0 or hi >= tv:
            errs.append(f"d2t maps draft ids to target ids in [{lo}, {hi}], outside target vocab_size {tv}")
        elif int(head.t2d.shape[0]) == tv and head.t2d.any() and not bool(head.t2d[mapped].all()):
            errs.append("d2t and t2d disagree: some draft ids map to target ids that t2d marks absent")
    if int(d2t.numel()) > tv:
        errs.append(f"d2t length (draft vocab) {int(d2t.numel())} > target vocab_size {tv}")
    try:
        cfg.layer_ids(tl)
    except ValueError as exc:
        errs.append(str(exc))
    if errs:
        raise Eagle3CheckpointError("EAGLE-3 head does not fit the target: " + "; ".join(errs))


def save_eagle3(head: Eagle3Head, folder: str | os.PathLike, layout: str = "eagle",
                layer_prefix: str = "midlayer") -> None:
    """Write ``config.json`` + ``model.safetensors`` in a public layout.

    ``layout="eagle"``: the reference release (no ``embed_tokens`` even if the head has
    one); ``layout="angelslim"``: ``target_hidden_size`` and ``head_dim`` spelled out and
    ``embed_tokens.weight`` shipped when the head has it.  ``layer_prefix`` picks
    ``midlayer`` (both releases) or ``layers.0`` (vLLM-style exports).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layer_prefix not in ("midlayer", "layers.0"):
        raise ValueError(f"layer_prefix must be 'midlayer' or 'layers.0', got {layer_prefix!r}")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    data = head.config.to_dict()
    if layout == "angelslim":
        data["target_hidden_size"] = head.config.feature_size
        data["head_dim"] = head.config.head_dim
    with open(out / "config.json", "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    state = {}
    for k, v in head.state_dict().items():
        if k.startswith("rotary_emb") or (layout == "eagle" and k.startswith("embed_tokens")):
            continue
        name = layer_prefix + k[len("midlayer"):] if k.startswith("midlayer.") else k
        state[name] = v.detach().contiguous().cpu()
    save_file(state, str(out / WEIGHTS_NAME), metadata={"format": "pt"})
