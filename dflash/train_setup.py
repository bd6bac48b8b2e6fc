"""Setting up drafter training: the target, the drafter config, checkpoints that resume.

The parts of :mod:`dflash.train` that run before the first step, so the loop stays readable.  The checks here
fail early with messages that name the offending value *and* the limit it broke, since a
mismatched drafter/target pair otherwise only shows up as a shape error deep in a forward
(or, worse, as a drafter that trains fine against the wrong layers).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import Qwen3Config

from .config import DFlashConfig, default_target_layer_ids
from .model import DFlashDraftModel

CHECKPOINT_DIR = "checkpoint"
STATE_NAME = "state.pt"

# Arguments that may change between a run and its resume without changing what is
# trained (everything else must match, or resuming would silently mix two runs).
RESUME_FREE_ARGS = frozenset(
    {"steps", "save_every", "log_every", "val_every", "val_batches", "val_data", "device", "compile",
     "stop_after", "out", "no_progress"}
)


class TrainSetupError(ValueError):
    """The target, drafter config or arguments cannot be trained together."""


# ----------------------------------------------------------------------------- target


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """``auto`` = bf16 on GPU (what the decoders run), fp32 on CPU (CPU bf16 is slow)."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
             "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}
    if name not in table:
        raise TrainSetupError(f"unknown dtype {name!r}; use auto, bf16, fp16 or fp32")
    return table[name]


def load_target(name: str, dtype: torch.dtype, device: torch.device) -> nn.Module:
    """Load the frozen target: eval mode, no parameter needs a gradient."""
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    except OSError as exc:
        raise TrainSetupError(f"cannot load target {name!r}: {exc}") from exc
    model.to(device).eval()
    model.requires_grad_(False)
    return model


def load_tokenizer(name: str | None):
    """The tokenizer, or None when the folder has none (token-id data needs none)."""
    if not name:
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError, TypeError):
        return None


def target_num_layers(target: nn.Module) -> int:
    return int(target.config.num_hidden_layers)


# ----------------------------------------------------------------------------- drafter config


def parse_layer_ids(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise TrainSetupError(f"--target-layer-ids must be comma-separated integers, got {text!r}") from exc


def derive_config(
    target_config,
    draft_layers: int,
    block_size: int,
    target_layer_ids: list[int] | None,
    mask_token_id: int | None,
) -> DFlashConfig:
    """A drafter config with the target's layer shapes (what the public drafters use).

    The drafter shares the target's embeddings and LM head, and its attention mixes
    target features into the same hidden space, so width, heads and RoPE must match.
    """
    tc = target_config
    heads = int(tc.num_attention_heads)
    head_dim = getattr(tc, "head_dim", None) or int(tc.hidden_size) // heads
    rope = getattr(tc, "rope_parameters", None) or {"rope_type": "default", "rope_theta": getattr(tc, "rope_theta", 10000.0)}
    layers = Qwen3Config(
        vocab_size=int(tc.vocab_size),
        hidden_size=int(tc.hidden_size),
        intermediate_size=int(tc.intermediate_size),
        num_hidden_layers=int(draft_layers),
        num_attention_heads=heads,
        num_key_value_heads=int(getattr(tc, "num_key_value_heads", None) or heads),
        head_dim=int(head_dim),
        hidden_act=getattr(tc, "hidden_act", "silu"),
        max_position_embeddings=int(getattr(tc, "max_position_embeddings", 32768)),
        rms_norm_eps=float(getattr(tc, "rms_norm_eps", 1e-6)),
        rope_parameters=dict(rope),
        attention_bias=bool(getattr(tc, "attention_bias", False)),
        initializer_range=float(getattr(tc, "initializer_range", 0.02)),
        tie_word_embeddings=False,
    )
    n_target = int(tc.num_hidden_layers)
    ids = target_layer_ids or default_target_layer_ids(n_target, int(draft_layers))
    return DFlashConfig(layers=layers, block_size=int(block_size), num_target_layers=n_target,
                        target_layer_ids=list(ids), mask_token_id=mask_token_id)


def check_pair(config: DFlashConfig, target: nn.Module) -> None:
    """Refuse a drafter config that cannot run on this target, naming both sides."""
    n_layers = target_num_layers(target)
    bad = [i for i in config.target_layer_ids if not 0 <= i < n_layers]
    if bad:
        raise TrainSetupError(
            f"target layer id(s) {bad} out of range: the target has {n_layers} layers (valid ids 0..{n_layers - 1})"
        )
    if config.num_target_layers is not None and int(config.num_target_layers) != n_layers:
        raise TrainSetupError(
            f"drafter config says num_target_layers={config.num_target_layers} but the target has {n_layers} layers"
        )
    hidden = int(target.config.hidden_size)
    if config.hidden_size != hidden:
        raise TrainSetupError(f"drafter hidden_size {config.hidden_size} != target hidden_size {hidden}")
    vocab = int(target.get_input_embeddings().weight.shape[0])
    mid = config.mask_token_id
    if mid is None:
        raise TrainSetupError("no mask token id: pass --mask-token-id or use a tokenizer with a mask token")
    if not 0 <= int(mid) < vocab:
        raise TrainSetupError(f"mask token id {mid} is outside the target vocabulary (0..{vocab - 1})")


def init_drafter_weights(model: DFlashDraftModel) -> None:
    """Qwen-style init (normal, std = initializer_range) for a fresh drafter.

    PyTorch's default Linear init scales with fan-in and makes the residual stream of a
    fresh drafter noticeably larger than the target's, which slows early training.
    """
    std = float(getattr(model.config.layers, "initializer_range", 0.02))
    for mod in model.modules():
        if isinstance(mod, nn.Linear):
            nn.init.normal_(mod.weight, mean=0.0, std=std)
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)


# ----------------------------------------------------------------------------- checkpoints


def setup_drafter(args, target: nn.Module, tokenizer) -> DFlashDraftModel:
    """The drafter to train: ``--init-from`` a folder, a ``--drafter-config``, or derived from the target."""
    mask_id = args.mask_token_id
    if mask_id is None and tokenizer is not None:
        mask_id = getattr(tokenizer, "mask_token_id", None)
    if args.init_from:
        drafter = DFlashDraftModel.from_pretrained(args.init_from)
        if args.mask_token_id is not None or drafter.config.mask_token_id is None:
            drafter.config.mask_token_id = mask_id
    else:
        if args.drafter_config:
            config = DFlashConfig.from_json_file(args.drafter_config)
            if args.mask_token_id is not None or config.mask_token_id is None:
                config.mask_token_id = mask_id
        else:
            config = derive_config(target.config, args.draft_layers, args.block_size,
                                   parse_layer_ids(args.target_layer_ids), mask_id)
        check_pair(config, target)
        torch.manual_seed(args.seed)
        drafter = DFlashDraftModel(config)
        init_drafter_weights(drafter)
    check_pair(drafter.config, target)
    return drafter.float()


def checkpoint_dir(out: Path) -> Path | None:
    """The checkpoint to resume from, repairing an interrupted swap; None if there is none."""
    ckpt, old, tmp = out / CHECKPOINT_DIR, out / f"{CHECKPOINT_DIR}.old", out / f"{CHECKPOINT_DIR}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)  # a save that died half-way: never trust it
    if not ckpt.exists() and old.exists():
        old.rename(ckpt)  # died between the two renames of save_checkpoint
    return ckpt if (ckpt / STATE_NAME).exists() else None


def save_checkpoint(out: Path, state: dict[str, Any], config: DFlashConfig) -> None:
    """Write ``<out>/checkpoint`` atomically: build a tmp dir, then swap it in by renames.

    A crash at any point leaves either the old or the new checkpoint complete.
    """
    ckpt, old, tmp = out / CHECKPOINT_DIR, out / f"{CHECKPOINT_DIR}.old", out / f"{CHECKPOINT_DIR}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    torch.save(state, tmp / STATE_NAME)
    config.to_json_file(tmp / "config.json")
    with open(tmp / STATE_NAME, "rb") as fh:
        os.fsync(fh.fileno())
    if old.exists():
        shutil.rmtree(old)
    if ckpt.exists():
        ckpt.rename(old)
    tmp.rename(ckpt)
    if old.exists():
        shutil.rmtree(old)


def load_checkpoint(folder: Path) -> dict[str, Any]:
    return torch.load(folder / STATE_NAME, map_location="cpu", weights_only=True)


def check_resume_args(saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Resuming with different training arguments would mix two runs: refuse it."""
    diff = {k: (saved.get(k), current.get(k)) for k in set(saved) | set(current)
            if k not in RESUME_FREE_ARGS and saved.get(k) != current.get(k)}
    if diff:
        lines = ", ".join(f"--{k.replace('_', '-')}: checkpoint {a!r} vs now {b!r}" for k, (a, b) in sorted(diff.items()))
        raise TrainSetupError(f"cannot resume: arguments differ from the checkpoint's ({lines}); "
                              "use the same arguments or a new --out")
    if saved.get("steps") != current.get("steps"):
        warnings.warn(f"--steps changed from {saved.get('steps')} to {current.get('steps')}: the LR schedule changes",
                      stacklevel=2)


def truncate_log(path: Path, step: int) -> None:
    """Drop log lines past ``step`` (written after the checkpoint by a run that then died)."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by the kill
        if int(rec.get("step", 0)) <= step:
            keep.append(line)
    path.write_text("".join(k + "\n" for k in keep), encoding="utf-8")


def rng_state(data_gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    out = {"data": data_gen.get_state(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def set_rng_state(state: dict[str, torch.Tensor], data_gen: torch.Generator, device: torch.device) -> None:
    data_gen.set_state(state["data"])
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
