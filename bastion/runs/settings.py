"""A decode run's settings: every knob, checked, and every ``auto`` made concrete for the device.

:class:`RunSettings` holds every knob of a run (field names are the CLI's flags).
:meth:`RunSettings.validate` needs neither torch nor a model, so the CLI refuses a bad
flag in a fraction of a second; :meth:`RunSettings.resolve` turns every ``auto`` into its
value on the device, by the rules of :data:`AUTO_RULES`, and applies the environment's
overrides of the kernel settings (:class:`~bastion.engines.choice.Kernels`).  One ``auto``
resolves later: EAGLE-3's tree (``eagle3_tree``) is measured on the loaded target and
head, by the runner (:mod:`bastion.runs.eagle3_choice`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from bastion.data.registry import DEFAULT_SEED
from bastion.defaults import DEFAULT_METHODS, N_MAX, TOPK, is_adaptive
from bastion.engines.choice import (
    BLAS_CHOICES,
    DRAFTER_CHOICES,
    RANK_CHOICES,
    Kernels,
    check_engine,
    resolve_engine,
)
from bastion.runs.checks import (
    UsageError,
    check_at_least,
    check_block_size,
    check_eagle3_tree,
    check_model_folder,
    check_n_min,
    check_repeats,
    check_temperature,
    check_topk,
    parse_methods,
)

if TYPE_CHECKING:
    import torch

DTYPES = ("auto", "bfloat16", "float16", "float32")
CALIB_GRIDS = ("auto", "paper", "small", "tiny")  # calibration.grid.Grid.named's names (tests tie the two)
DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
HARDWARE_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # it names folders and files: no separators


@dataclass
class RunSettings:
    """Every setting of one run; field names are the CLI's flags (``--max-new-tokens`` -> max_new_tokens)."""

    model: str
    dataset: str
    draft_model: str | None = None
    methods: tuple[str, ...] = DEFAULT_METHODS  # bastion_lossy only when asked for
    max_samples: int | None = None
    max_new_tokens: int = 2048
    temperature: float = 0.0
    block_size: int | None = None
    enable_thinking: bool = False
    device: str = "auto"  # auto: the first GPU, else the CPU
    dtype: str = "auto"  # auto: bf16 on a GPU, fp32 on a CPU
    output: str | None = None
    cache_dir: str = "cache"
    attn_impl: str = "sdpa"
    engine: str = "auto"  # auto: the device's fastest (engines.choice)
    n_min: int | str = "auto"  # auto: sized for the device (defaults.resolve_n_min)
    n_max: int = N_MAX
    topk: int = TOPK
    budget: int | None = None
    calib_grid: str = "auto"  # auto: paper on a GPU, small on a CPU
    recalibrate: bool = False
    calibration: str | None = None
    hardware: str = "auto"  # auto: the device's key, from its fingerprint
    model_name: str | None = None
    dataset_name: str | None = None
    step_times: bool = False
    repeats: int = 1  # decodes of each prompt, the fastest kept (T = 0 only; runs.repeats)
    seed: int = 0
    data_seed: int = DEFAULT_SEED
    shard: tuple[int, int] = (0, 1)
    quiet: bool = False
    eagle3_model: str | None = None
    eagle3_tree: str = "auto"  # depth/top-k/total tokens, e.g. 7/10/60; auto: chosen for the device and head (runs.eagle3_choice)
    eagle3_tree_file: str | None = None  # an `auto` choice made beforehand (the pipeline's choose_eagle3_tree)
    history_from: str | None = None  # AR's records: turn-k prompts carry its answers to turns 1..k-1
    accept_calibration_error: bool = False  # keep a calibration that fails the held-out error gate
    keep_partial: bool = False  # keep <output>.partial after the output is written (a cell job resumes from it)
    # the engine's kernels (Kernels; the config's `kernels:` block); BASTION_* variables override them
    rank_kernels: str = "auto"  # auto: the fastest exact tree and rule maths; torch: their torch references
    blas: str = "cublaslt"  # the compiled engine's matrix library on CUDA
    drafter_layers: str = "fused"  # the compiled engine's DFlash drafter: fused functions or its own module
    row_kernel: bool = True  # the compiled engine's Triton row kernels (CUDA, bf16/fp16)
    tile_kernel: bool = True  # and its tile kernels (beside the row kernels)
    threads: int = 1  # CPU threads torch computes with (the pipeline's `cpu_threads`)

    def validate(self) -> None:
        """Settings checks that need no model, data, device or torch."""
        self.methods = parse_methods(self.methods)
        check_temperature(self.temperature)
        check_at_least("--max-new-tokens", self.max_new_tokens, 1)
        check_at_least("--threads", self.threads, 1, " (the CPU threads torch computes with)")
        check_at_least("--max-samples", self.max_samples, 1, " (omit it to decode every prompt)")
        check_repeats(self.repeats, self.temperature)
        if self.budget is not None and self.budget < 1:
            raise UsageError(f"--budget must be >= 1 node, got {self.budget}")
        check_at_least("--n-max", self.n_max, 1)
        check_n_min(self.n_min, self.n_max)
        check_topk(self.topk)
        check_block_size(self.block_size, None)
        check_eagle3_tree(self.eagle3_tree)
        if self.eagle3_tree_file is not None and not Path(self.eagle3_tree_file).is_file():
            raise UsageError(f"--eagle3-tree-file {self.eagle3_tree_file} does not exist; omit it to choose the tree "
                             "into --cache-dir")
        self._check_names()
        for flag, ref in (("--model", self.model), ("--draft-model", self.draft_model),
                          ("--eagle3-model", self.eagle3_model)):
            check_model_folder(flag, ref)
        if self.history_from is not None and not Path(self.history_from).is_file():
            missing = "are a folder, not a file" if Path(self.history_from).is_dir() else "do not exist"
            raise UsageError(f"history records {self.history_from} {missing}; decode AR first (it writes them)")
        if self.calibration is not None and self.adaptive and not Path(self.calibration).exists():
            raise UsageError(f"--calibration {self.calibration} does not exist; omit it to calibrate into --cache-dir")

    def _check_names(self) -> None:
        """The flags that take one of a few names (or a key that names files)."""
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype {self.dtype!r}: choose from {', '.join(DTYPES)}")
        try:
            check_engine(self.engine)
        except ValueError as exc:
            raise UsageError(f"--engine: {exc}") from None
        if not DEVICE.fullmatch(self.device):
            raise UsageError(f"--device {self.device!r}: choose auto, cpu, cuda or cuda:N")
        if self.calib_grid not in CALIB_GRIDS:
            raise UsageError(f"--calib-grid {self.calib_grid!r}: choose from {', '.join(CALIB_GRIDS)}")
        for flag, value, choices in (("--rank-kernels", self.rank_kernels, RANK_CHOICES),
                                     ("--blas", self.blas, BLAS_CHOICES),
                                     ("--drafter-layers", self.drafter_layers, DRAFTER_CHOICES)):
            if value not in choices:
                raise UsageError(f"{flag} {value!r}: choose from {', '.join(choices)}")
        try:
            self.kernels  # noqa: B018 - the environment's overrides, checked
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if not HARDWARE_KEY.fullmatch(self.hardware):
            raise UsageError(f"--hardware {self.hardware!r}: a key is letters, digits, '.', '_' and '-' (it names "
                             "the calibration file), e.g. nvidia-h200; or auto")

    @property
    def kernels(self) -> Kernels:
        """The engine's kernel settings: these flags, with the ``BASTION_*`` variables that are set in their place."""
        return Kernels(self.rank_kernels, self.blas, self.drafter_layers, self.row_kernel,
                       self.tile_kernel).overridden(os.environ)

    @property
    def adaptive(self) -> bool:
        """A budget rule (any of BASTION's methods) runs adaptively, so the run needs a calibration."""
        return any(is_adaptive(m) for m in self.methods) and self.budget is None

    def resolve(self, local_rank: int | None = None) -> RunSettings:
        """A copy with every ``auto`` made concrete for the device, after :meth:`validate`.

        The device resolves first (``local_rank``: this process's GPU under torchrun);
        each later rule of :data:`AUTO_RULES` sees the values resolved before it.
        """
        self.validate()
        from bastion.calibration import hardware

        device = hardware.resolve_device(self.device, local_rank)
        k = self.kernels
        run = replace(self, device=str(device), rank_kernels=k.rank, blas=k.blas, drafter_layers=k.drafter,
                      row_kernel=k.row_kernel, tile_kernel=k.tile_kernel)
        for name, rule in AUTO_RULES:
            if getattr(run, name) == "auto":
                run = replace(run, **{name: rule(run, device)})
        return run


def _dtype(run: RunSettings, device: torch.device) -> str:
    from bastion.calibration import hardware

    return str(hardware.resolve_dtype(run.dtype, device)).removeprefix("torch.")


def _n_min(run: RunSettings, device: torch.device) -> int:
    return int(check_n_min(run.n_min, run.n_max, gpu=device.type == "cuda"))


def _calib_grid(run: RunSettings, device: torch.device) -> str:
    return "paper" if device.type == "cuda" else "small"


def _hardware(run: RunSettings, device: torch.device) -> str:
    import torch

    from bastion.calibration import fingerprint

    return fingerprint.hardware_key(fingerprint.collect(device, getattr(torch, run.dtype), run.attn_impl, run.engine,
                                                        run.kernels))


# Each ``auto`` knob and the rule that makes it concrete, in order (a rule sees the values
# resolved before it; the device always comes first).  A new ``auto`` knob adds a line here.
# ``eagle3_tree``'s ``auto`` cannot: it needs the loaded target and head and a sweep on real
# prompts, so the runner resolves it after loading (bastion.runs.eagle3_choice.resolve_tree).
AUTO_RULES: tuple[tuple[str, Callable[[RunSettings, Any], Any]], ...] = (
    ("dtype", _dtype),
    ("engine", lambda run, device: resolve_engine(run.engine, device)),
    ("n_min", _n_min),
    ("calib_grid", _calib_grid),
    ("hardware", _hardware),
)
