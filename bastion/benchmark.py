"""``python -m bastion.benchmark``: AR vs EAGLE-3 vs DFlash vs BASTION on one dataset.

Flags follow the original release (``--model``, ``--draft-model``, ``--dataset``,
``--max-samples``, ``--max-new-tokens``, ``--temperature``, ``--block-size``,
``--enable-thinking``) plus device, dtype, method, output and cache controls.  The flags
fill a :class:`~bastion.runs.run.DecodeRun`, the same object the pipeline's decode jobs
execute.  Parsing, ``--help`` and the checks of flag values import neither torch nor
Transformers: a bad flag is refused in a fraction of a second, and the run's phases
import what they need when they start.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from typing import Any, Sequence

from bastion.data import registry as datasets
from bastion.defaults import (
    DEFAULT_METHODS,
    METHODS,
    N_MAX,
    N_MIN,
    N_MIN_CPU,
    N_MIN_PLUS_SAMPLED_CPU,
    TOPK,
)
from bastion.engines.choice import BLAS_CHOICES, DRAFTER_CHOICES, ENGINE_CHOICES, RANK_CHOICES
from bastion.models import registry as models
from bastion.runs.checks import parse_methods, parse_shard
from bastion.runs.run import DecodeRun


def _n_min(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a node count or 'auto', not {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bastion.benchmark", description="BASTION benchmark: AR vs EAGLE-3 vs DFlash vs BASTION")
    _model_args(p.add_argument_group("models and data"))
    _decoding_args(p.add_argument_group("decoding"))
    kernels_flags(p)
    _budget_args(p.add_argument_group("BASTION's tree budget and EAGLE-3's tree"))
    _calibration_args(p.add_argument_group("calibration"))
    _record_args(p.add_argument_group("records"))
    return p


def _model_args(p: argparse._ArgumentGroup) -> None:
    p.add_argument("--backend", choices=["transformers"], default="transformers", help="decoding backend (only transformers)")
    p.add_argument("--model", required=True, help=f"target: registry key, local folder or HF repo id. Registry: {models.registry_help()}")
    p.add_argument("--draft-model", default=None, help="drafter folder or repo id (default: the registered drafter of --model)")
    p.add_argument("--eagle3-model", default=None, metavar="PATH_OR_REPO",
                   help="EAGLE-3 head folder or repo id (default: the registered head of --model)")
    p.add_argument("--dataset", required=True, help="dataset name, group, or a local .jsonl of {\"turns\": [...]} records")
    p.add_argument("--max-samples", type=int, default=None, help="seeded random subset of this many prompts")
    p.add_argument("--data-seed", type=int, default=datasets.DEFAULT_SEED, help="seed of the --max-samples subset")
    p.add_argument("--shard", default=None, help="I/N: decode only prompts with index %% N == I")
    p.add_argument("--history-from", default=None,
                   help="AR records (.jsonl) whose answers form every later turn's history (multi-turn sets)")


def _decoding_args(p: argparse._ArgumentGroup) -> None:
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--block-size", type=int, default=None, help="draft block size (default: the drafter's)")
    p.add_argument("--enable-thinking", action="store_true", help="chat template thinking mode (refused for the Qwen3 drafters)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    p.add_argument("--methods", default=None,
                   help=f"comma list of {', '.join(METHODS)} (default: {','.join(DEFAULT_METHODS)}; eagle3 only "
                        "when --model has a registered EAGLE-3 head or --eagle3-model is given).  bastion: the paper's "
                        "budget rule as its release runs it; bastion_plus: this project's rule (its own tree sizes "
                        "on a CPU, AR steps at T > 0 while no tree pays); bastion_lossy: the paper's rule with the "
                        "release's acceptance at T > 0 (argmax match, a sampled last token): not lossless, opt-in")
    p.add_argument("--attn-impl", default="sdpa", choices=["sdpa", "eager"])
    p.add_argument("--engine", default="auto", choices=list(ENGINE_CHOICES),
                   help="auto (default): compiled on CUDA, the fastest measured on a CPU; eager: Transformers layers "
                        "step by step; static: preallocated buffers and CUDA graphs; compiled: static with "
                        "torch.compile'd layers")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads torch computes with (default 1, as the pipeline's cpu_threads: steadier times "
                        "on a shared machine); part of a CPU calibration")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (per prompt and turn)")
    p.add_argument("--repeats", type=int, default=1,
                   help="decode each prompt this many times, in turn with the other methods, and keep the fastest "
                        "decode's record (T = 0 only: a steadier time on a shared machine)")


def _budget_args(p: argparse._ArgumentGroup) -> None:
    p.add_argument("--n-min", type=_n_min, default="auto",
                   help=f"BASTION: minimum tree size and bucket width (auto: {N_MIN} on a GPU, {N_MIN_CPU} on a CPU); bastion_plus "
                        f"on a CPU: steps of one from n-min at T = 0, from {N_MIN_PLUS_SAMPLED_CPU} node at T > 0")
    p.add_argument("--n-max", type=int, default=N_MAX, help="BASTION: maximum tree size")
    p.add_argument("--topk", type=int, default=TOPK, help="BASTION: candidate tokens per depth (<= 128)")
    p.add_argument("--budget", type=int, default=None, help="BASTION: fixed tree size instead of the adaptive rule")
    p.add_argument("--eagle3-tree", default="auto", metavar="auto|D/K/T",
                   help="EAGLE-3's tree: depth/top-k/total tokens verified per step, root included (the reference: "
                        "7/10/60); auto (default): the fastest of a short sweep on the run's first prompts, chosen "
                        "once per device and head and cached in --cache-dir (--recalibrate measures it again)")
    p.add_argument("--eagle3-tree-file", default=None,
                   help="use this EAGLE-3 tree choice (made by the pipeline) instead of --cache-dir")


def _calibration_args(p: argparse._ArgumentGroup) -> None:
    p.add_argument("--calib-grid", default="auto", help="latency grid: paper, small or tiny (auto: paper on GPU, small on CPU)")
    p.add_argument("--recalibrate", action="store_true", help="ignore and replace an existing calibration")
    p.add_argument("--accept-calibration-error", action="store_true",
                   help="keep a calibration whose held-out error stays above the 10%% gate after one re-measurement")
    p.add_argument("--calibration", default=None, help="use this calibration file (made by the pipeline) instead of --cache-dir")
    p.add_argument("--cache-dir", default="cache", help="calibration (and prepared dataset) cache directory")


def _record_args(p: argparse._ArgumentGroup) -> None:
    p.add_argument("--output", default=None, help="write one JSON record per (prompt, turn, method) to this .jsonl")
    p.add_argument("--hardware", default="auto", help="hardware key recorded with the results (auto: detected)")
    p.add_argument("--model-name", default=None, help="name recorded with the results (default: --model)")
    p.add_argument("--dataset-name", default=None, help="dataset name recorded with the results (default: from --dataset)")
    p.add_argument("--step-times", action="store_true", help="record per-step phase times (adds device syncs)")
    p.add_argument("--quiet", action="store_true")


def kernels_flags(p: argparse.ArgumentParser) -> None:
    """The engine's kernel settings (the config's ``kernels:`` block; the ``BASTION_*`` variables override them)."""
    p.add_argument("--rank-kernels", default="auto", choices=RANK_CHOICES,
                   help="tree and rule maths: auto (Triton kernels on CUDA, the host walk on a CPU) or torch (their "
                        "torch references everywhere; on CUDA no Triton kernel at all); env BASTION_RANK")
    p.add_argument("--blas", default="cublaslt", choices=BLAS_CHOICES,
                   help="compiled engine on CUDA: the matrix library (env BASTION_BLAS)")
    p.add_argument("--drafter-layers", default="fused", choices=DRAFTER_CHOICES,
                   help="compiled engine: the DFlash drafter's fused functions or its own module layers (env BASTION_DRAFTER)")
    p.add_argument("--row-kernel", default=True, action=argparse.BooleanOptionalAction,
                   help="compiled engine on CUDA in bf16/fp16: AR's rows in the Triton row kernels (env BASTION_ROW_KERNEL=0/1)")
    p.add_argument("--tile-kernel", default=True, action=argparse.BooleanOptionalAction,
                   help="and a tree's rows in the Triton tile kernels, beside the row kernels (env BASTION_TILE_KERNEL=0/1)")


def run_from_args(args: argparse.Namespace) -> DecodeRun:
    """The flags as a :class:`DecodeRun` (the flag names are its field names)."""
    fields = vars(args).copy()
    fields.pop("backend")
    if fields["methods"] is None:  # every method this pair can run
        has_head = models.resolve_eagle3(fields["model"], fields["eagle3_model"]) is not None
        fields["methods"] = tuple(m for m in DEFAULT_METHODS if m != "eagle3" or has_head)
    fields["methods"] = parse_methods(fields["methods"])
    fields["shard"] = parse_shard(fields["shard"])
    return DecodeRun(**fields)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    decode = run_from_args(args)
    decode.validate()  # every flag value, before torch loads
    return decode.execute()


def one_line(exc: Exception) -> str:
    """The error as one line: a message's own line breaks become '; ', and an exception
    that no check anticipated says so and how to see its traceback."""
    text = re.sub(r"\s*\n\s*", "; ", str(exc).strip()).replace(":;", ":")
    if isinstance(exc, (ValueError, RuntimeError, OSError)):
        return text
    return f"{type(exc).__name__}: {text} (unexpected; rerun with BASTION_TRACEBACK=1 for the traceback and report it)"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.output:
        # SIGTERM: stop with one line; the prompts already finished stay in the partial file
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(
            f"error: terminated (SIGTERM); finished prompts are kept in {args.output}.partial: "
            "rerun the same command to resume"))
    try:
        run(args)
    except Exception as exc:  # noqa: BLE001 - one line instead of a traceback (BASTION_TRACEBACK=1 shows it)
        if os.environ.get("BASTION_TRACEBACK"):
            raise
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    finally:
        torch = sys.modules.get("torch")  # only a run that got past its checks imported it
        if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
