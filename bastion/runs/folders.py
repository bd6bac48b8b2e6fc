"""Model folders, read from their files alone: a broken or mismatched folder is refused before torch loads.

A local folder given for a target, a DFlash drafter or an EAGLE-3 head is read as far as
loading would read it without the weights: ``config.json`` must be JSON of the right kind,
weights must be there, and every safetensors file must be as long as its own header says
(a download cut short otherwise fails deep inside Transformers, after the tokenizer and
the calibration checks).  A safetensors header also lists every tensor's shape, so an
EAGLE-3 head's widths are checked against the target's config here too.  Hub repo ids
are left to loading, which reports them with the network's fix.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from bastion.costmodel.roofline import SUPPORTED_FAMILIES

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
HEADER_LIMIT = 100 * 2**20  # a safetensors header longer than this is a damaged length field


class FolderError(ValueError):
    """A model folder that loading would fail on: ``str()`` says what is wrong, ``fix`` what to do."""

    def __init__(self, message: str, fix: str = "download or save the model again, or pass another folder") -> None:
        super().__init__(message)
        self.fix = fix


def looks_like_path(ref: str) -> bool:
    """A reference that can only be a folder: a Hugging Face repo id is ``owner/name``."""
    return ref.startswith(("/", ".", "~")) or ref.count("/") > 1 or "\\" in ref


def read_config(folder: Path) -> dict[str, Any]:
    """``config.json`` of ``folder`` as a dict, or :class:`FolderError` saying why not."""
    path = folder / "config.json"
    if not path.is_file():
        raise FolderError("the folder has no config.json, so it holds no model", "pass the folder with config.json "
                          "and the weights, a registry key or a Hugging Face repo id")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise FolderError(f"its config.json is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except UnicodeDecodeError:
        raise FolderError("its config.json is not text") from None
    if not isinstance(data, dict):
        raise FolderError(f"its config.json holds a JSON {type(data).__name__}, not an object")
    return data


def tensor_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors file's header; :class:`FolderError` if the file
    is shorter than its header says (a cut download) or its header is unreadable."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise FolderError(f"{path.name} is truncated ({size} bytes, shorter than a safetensors header)")
        (length,) = struct.unpack("<Q", head)
        if length > min(size - 8, HEADER_LIMIT):
            raise FolderError(f"{path.name} is truncated or damaged (its header claims {length} bytes of {size})")
        try:
            header = json.loads(fh.read(length))
        except ValueError:
            raise FolderError(f"{path.name} has an unreadable header (damaged)") from None
    if not isinstance(header, dict):
        raise FolderError(f"{path.name} has an unreadable header (damaged)")
    tensors = {k: v for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}
    end = max((int(v.get("data_offsets", (0, 0))[1]) for v in tensors.values()), default=0)
    if 8 + length + end > size:
        raise FolderError(f"{path.name} is truncated ({size} of {8 + length + end} bytes)")
    return {k: list(v.get("shape", [])) for k, v in tensors.items()}


def weight_shapes(folder: Path) -> dict[str, list[int]]:
    """Every tensor shape of the folder's safetensors weights ({} for ``.bin`` weights);
    :class:`FolderError` when weights are missing or cut short."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise FolderError(f"{index.name} is not a safetensors index (no weight_map)") from None
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise FolderError(f"{index.name} lists {', '.join(missing[:3])}, which the folder lacks")
    else:
        names = sorted(p.name for p in folder.glob("*.safetensors"))
    if not names and not list(folder.glob("*.bin")):
        raise FolderError("the folder holds no weights (*.safetensors or *.bin)")
    shapes: dict[str, list[int]] = {}
    for name in names:
        shapes.update(tensor_shapes(folder / name))
    return shapes


def check_role(config: dict[str, Any], role: str, folder: Path) -> None:
    """What the folder must hold to serve as ``role`` (target, drafter or eagle3)."""
    if role == "target":
        if config.get("model_type") not in SUPPORTED_FAMILIES:
            raise FolderError(f"unsupported target model family {config.get('model_type')!r} in its config.json; "
                              f"supported families: {', '.join(SUPPORTED_FAMILIES)}",
                              "pass a target of a supported family")
        if not any((folder / f).is_file() for f in TOKENIZER_FILES):
            raise FolderError(f"the folder has no tokenizer (none of {', '.join(TOKENIZER_FILES)})",
                              "save the target's tokenizer into the folder (tokenizer.save_pretrained)")
    elif role == "drafter":
        dflash = config.get("dflash_config") or {}
        has_taps = isinstance(dflash, dict) and bool(dflash.get("target_layer_ids"))
        if not has_taps and config.get("num_target_layers") is None:
            raise FolderError("its config.json is not a DFlash drafter's (no dflash_config.target_layer_ids "
                              "nor num_target_layers)", "pass the DFlash drafter's folder")
    elif role == "eagle3" and "draft_vocab_size" not in config:
        raise FolderError("its config.json is not an EAGLE-3 head's (no draft_vocab_size)",
                          "pass the EAGLE-3 head's folder")


def check_folder(folder: Path, role: str) -> dict[str, Any]:
    """The folder's config, after every check of a ``role`` folder that needs no weights loaded."""
    config = read_config(folder)
    check_role(config, role, folder)
    weight_shapes(folder)
    return config


def eagle3_misfits(head: Path, target: Path) -> list[str]:
    """What an EAGLE-3 head folder's config and tensor shapes say does not fit the target's
    config: the checks of :func:`dflash.eagle3.checkpoint.check_fits_target` that need no
    weights (safetensors heads; a ``.bin`` head is checked when it loads)."""
    cfg, tcfg = read_config(head), read_config(target)
    text = tcfg.get("text_config") or tcfg
    th, tv, tl = (int(text.get(k) or 0) for k in ("hidden_size", "vocab_size", "num_hidden_layers"))
    shapes = {k.removeprefix("model."): v for k, v in weight_shapes(head).items()}
    errs = []
    if cfg.get("target_hidden_size") and int(cfg["target_hidden_size"]) != th:
        errs.append(f"config target_hidden_size {cfg['target_hidden_size']} != target hidden_size {th}")
    fc = shapes.get("fc.weight")
    if fc and len(fc) == 2 and fc[1] != 3 * th:
        errs.append(f"fc.weight in-features {fc[1]} != 3 x target hidden_size {th} = {3 * th}")
    embed = shapes.get("embed_tokens.weight")
    if shapes and embed is None and cfg.get("hidden_size") not in (None, th):
        errs.append(f"head hidden_size {cfg['hidden_size']} != target hidden_size {th} and the head ships no "
                    "embed_tokens")
    if embed and embed[0] != tv:
        errs.append(f"embed_tokens.weight rows {embed[0]} != target vocab_size {tv}")
    t2d = shapes.get("t2d")
    if t2d and t2d[0] != tv:
        errs.append(f"t2d length {t2d[0]} != target vocab_size {tv}")
    if int(cfg.get("draft_vocab_size") or 0) > tv:
        errs.append(f"draft_vocab_size {cfg['draft_vocab_size']} > target vocab_size {tv}")
    ids = ((cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
           or [int(i) - 1 for i in cfg.get("eagle_aux_hidden_state_layer_ids") or []])
    bad = [int(i) for i in ids if not 0 <= int(i) < tl]
    if bad:
        errs.append(f"tapped layer ids {bad} are outside a target with {tl} layers")
    return errs
