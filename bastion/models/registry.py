"""Target/drafter pairs: the registry, loading, and the checks that they fit together.

Names resolve in this order: a registry key (``tiny``, ``qwen3-8b``...), a local folder,
a Hugging Face repo id.  A registered target id given without a drafter gets its public
drafter, as in the original release.  Every mismatch between a drafter and its target
is reported before any weights are used, naming both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bastion.costmodel.roofline import SUPPORTED_FAMILIES
from dflash import hub

if TYPE_CHECKING:  # torch, Transformers and the models load inside the functions that need them:
    import torch  # the pipeline's fetch_model job resolves folders only and starts in a second

    from bastion.models.target import Target
    from dflash import DFlashDraftModel

THINKING_ERROR = (
    "DFlash draft models for Qwen3-4B and Qwen3-8B were not trained with thinking traces. "
    "Using --enable-thinking will lead to suboptimal performance."
)


@dataclass(frozen=True)
class ModelPair:
    key: str
    target: str
    drafter: str
    gated: bool = False
    eagle3: str | None = None  # the EAGLE-3 head the paper compares with


def tiny_dir(part: str) -> Path:
    """Folder of the bundled tiny pair (``target``, ``drafter`` or ``eagle3``) inside the installed package."""
    return Path(str(resources.files("dflash") / "assets" / "tiny" / part))


PAIRS: dict[str, ModelPair] = {
    "qwen3-4b": ModelPair("qwen3-4b", "Qwen/Qwen3-4B", "z-lab/Qwen3-4B-DFlash-b16", eagle3="AngelSlim/Qwen3-4B_eagle3"),
    "qwen3-8b": ModelPair("qwen3-8b", "Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16", eagle3="AngelSlim/Qwen3-8B_eagle3"),
    "llama3.1-8b": ModelPair(
        "llama3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat", gated=True,
        eagle3="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    ),
    "tiny": ModelPair("tiny", "<bundled>/target", "<bundled>/drafter", eagle3="<bundled>/eagle3"),
}


class ModelUnavailableError(RuntimeError):
    """Weights cannot be fetched or read."""


class DrafterMismatchError(ValueError):
    """The drafter was not built for this target."""


def _materialise(ref: str) -> str:
    if ref.startswith("<bundled>/"):
        return str(tiny_dir(ref.split("/", 1)[1]))
    return ref


def resolve(model: str, draft_model: str | None = None) -> tuple[str, str | None, str]:
    """Return (target ref, drafter ref or None, display name) for CLI arguments."""
    if model in PAIRS:
        pair = PAIRS[model]
        return _materialise(pair.target), _materialise(draft_model or pair.drafter), pair.key
    for pair in PAIRS.values():
        if model == pair.target and draft_model is None:
            return model, _materialise(pair.drafter), model
    return model, draft_model, model


def resolve_eagle3(model: str, eagle3_model: str | None = None) -> str | None:
    """The EAGLE-3 head for ``--model``: ``eagle3_model`` if given, else the registered one (or None)."""
    if eagle3_model:
        pair = PAIRS.get(eagle3_model)
        return _materialise(pair.eagle3 if pair is not None and pair.eagle3 else eagle3_model)
    for key, pair in PAIRS.items():
        if model in (key, pair.target) and pair.eagle3:
            return _materialise(pair.eagle3)
    return None


def registry_help() -> str:
    return ", ".join(f"{k} ({p.target} + {p.drafter})" for k, p in PAIRS.items())


def check_thinking(enable_thinking: bool, model: str) -> None:
    """Refuse thinking mode with the Qwen3 DFlash drafters, as the original release does."""
    if enable_thinking and any(x in model.lower() for x in ("qwen3-4b", "qwen3-8b")):
        raise ValueError(THINKING_ERROR)


def _is_local(ref: str) -> bool:
    return Path(ref).expanduser().exists()


def _unavailable(kind: str, ref: str, exc: BaseException, gated: bool = False) -> ModelUnavailableError:
    if _is_local(ref):  # no network is involved: the folder's own files are at fault
        return ModelUnavailableError(f"cannot load {kind} from the folder {ref}: {hub.one_line(exc)}; its files are "
                                     "incomplete or damaged: download or save the model again")
    extra = " (a gated repo: accept its licence on the hub first)" if gated else ""
    return ModelUnavailableError(
        f"cannot load {kind} {ref!r}{extra}: {hub.one_line(exc)}. Fix: {hub.FIX_HINT}, or pass a local folder."
    )


def load_tokenizer(ref: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(ref)
    except Exception as exc:  # noqa: BLE001
        raise _unavailable("tokenizer", ref, exc) from exc


def load_target(ref: str, dtype: torch.dtype, device: str | torch.device, attn_impl: str = "sdpa") -> Target:
    """Load a causal LM and wrap it; unsupported families are refused before the weights load."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from bastion.models.target import Target, UnsupportedModelError

    gated = any(p.gated and p.target == ref for p in PAIRS.values())
    try:
        if not _is_local(ref):
            hub.probe(ref)
        config = AutoConfig.from_pretrained(ref)
    except Exception as exc:  # noqa: BLE001
        raise _unavailable("target model", ref, exc, gated) from exc
    if config.model_type not in SUPPORTED_FAMILIES:
        raise UnsupportedModelError(
            f"unsupported target model family {config.model_type!r} ({ref}); "
            f"supported families: {', '.join(SUPPORTED_FAMILIES)}; registered pairs: {registry_help()}"
        )
    try:
        model = AutoModelForCausalLM.from_pretrained(ref, dtype=dtype, attn_implementation=attn_impl)
    except Exception as exc:  # noqa: BLE001
        raise _unavailable("target model", ref, exc, gated) from exc
    return Target(model.to(device).eval())


def load_drafter(ref: str, dtype: torch.dtype, device: str | torch.device) -> DFlashDraftModel:
    from dflash import DFlashDraftModel
    from dflash.checkpoint import CheckpointError

    try:
        if not _is_local(ref):
            hub.probe(ref)
        return DFlashDraftModel.from_pretrained(ref, dtype=dtype, device=device)
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _unavailable("drafter", ref, exc) from exc


def load_eagle3_head(ref: str, target: Target, target_name: str, dtype: torch.dtype, device: str | torch.device):
    """Load an EAGLE-3 head strictly; a head that does not fit ``target`` is refused naming both."""
    from dflash.checkpoint import CheckpointError
    from dflash.eagle3.checkpoint import load_eagle3

    try:
        if not _is_local(ref):
            hub.probe(ref)
        head = load_eagle3(ref, dtype=dtype, device=device)
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _unavailable("EAGLE-3 head", ref, exc) from exc
    check_eagle3(head, target, target_name, ref)
    return head


def check_eagle3(head, target: Target, target_name: str, head_name: str) -> None:
    """Refuse an EAGLE-3 head whose widths, vocabularies or tapped layers do not fit the target."""
    from dflash.checkpoint import CheckpointError
    from dflash.eagle3.checkpoint import check_fits_target

    try:
        check_fits_target(head, target.config)
    except CheckpointError as exc:
        reason = str(exc).removeprefix("EAGLE-3 head does not fit the target: ")
        raise DrafterMismatchError(
            f"EAGLE-3 head {head_name!r} does not fit target {target_name!r}: {reason}"
        ) from None


def _config_problems(target_config: Any, drafter_config: Any) -> list[str]:
    """What the two configs alone say does not fit (no weights needed)."""
    problems = []
    t_hidden, d_hidden = int(target_config.hidden_size), int(drafter_config.hidden_size)
    t_layers, vocab = int(target_config.num_hidden_layers), int(target_config.vocab_size)
    if t_hidden != d_hidden:
        problems.append(f"hidden size: drafter {d_hidden}, target {t_hidden}")
    bad = [i for i in drafter_config.target_layer_ids if not 0 <= i < t_layers]
    if bad:
        problems.append(f"drafter taps target layers {bad}, but the target has {t_layers} layers")
    mask_id = drafter_config.mask_token_id
    if mask_id is None or not 0 <= mask_id < vocab:
        problems.append(f"mask token id {mask_id} is outside the target vocabulary (size {vocab})")
    if drafter_config.num_target_layers not in (None, t_layers):
        problems.append(f"drafter was trained on a {drafter_config.num_target_layers}-layer target, this one has {t_layers}")
    return problems


def _refuse(problems: list[str], target_name: str, drafter_name: str) -> None:
    if problems:
        raise DrafterMismatchError(f"drafter {drafter_name!r} does not fit target {target_name!r}: " + "; ".join(problems))


def check_pair_configs(target_ref: str, drafter_ref: str) -> None:
    """The pair check from the two config files, before any weights load.

    Configs that cannot be read here (an unreachable hub, a missing folder) are skipped:
    loading reports them with their own fix.
    """
    try:
        from transformers import AutoConfig

        from dflash.checkpoint import resolve_checkpoint_dir
        from dflash.config import DFlashConfig

        target_config = AutoConfig.from_pretrained(target_ref)
        drafter_config = DFlashConfig.from_json_file(resolve_checkpoint_dir(drafter_ref) / "config.json")
    except Exception:  # noqa: BLE001 - reported, with its fix, when the model loads
        return
    _refuse(_config_problems(target_config, drafter_config), target_ref, drafter_ref)


def check_pair(target: Target, drafter: DFlashDraftModel, target_name: str, drafter_name: str) -> None:
    """Refuse a drafter whose sizes or tapped layers do not fit the target."""
    problems = _config_problems(target.config, drafter.config)
    n_tapped = drafter.fc.in_features // max(int(drafter.config.hidden_size), 1)
    if n_tapped != len(drafter.target_layer_ids):
        problems.append(f"fc expects {n_tapped} tapped layers, config lists {len(drafter.target_layer_ids)}")
    _refuse(problems, target_name, drafter_name)


def fetch(ref: str, kind: str) -> str:
    """A local folder holding ``ref`` (registry key, folder or repo id), downloading if needed.

    The pipeline resolves every model once, on a machine with hub access, so decode jobs
    (possibly on compute nodes without network) only read local files.
    """
    if ref in PAIRS:
        pair = PAIRS[ref]
        ref = {"target": pair.target, "eagle3": pair.eagle3}.get(kind, pair.drafter)
        if ref is None:
            raise ValueError(f"registry entry {pair.key!r} has no {kind} model")
    ref = _materialise(ref)
    if _is_local(ref):
        return str(Path(ref).expanduser().resolve())
    gated = any(p.gated and p.target == ref for p in PAIRS.values())
    try:
        from huggingface_hub import snapshot_download

        hub.probe(ref)
        patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "tokenizer*"]
        if kind == "eagle3":  # the reference EAGLE-3 release ships pytorch_model.bin
            patterns.append("*.bin")
        return snapshot_download(repo_id=ref, allow_patterns=patterns, local_files_only=hub.offline())
    except Exception as exc:  # noqa: BLE001
        raise _unavailable(kind, ref, exc, gated) from exc
