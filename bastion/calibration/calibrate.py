"""Calibration: device ceilings, the verification-latency grid, the fit, step overheads.

Everything is measured on the device that will decode, through the same verification
code path the decoders use, so the cost model describes the engine that runs.  The
result is one JSON file per (hardware, model) carrying the fingerprint; later runs
reuse it and refuse it when the fingerprint differs.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from bastion.calibration import fingerprint as fp
from bastion.costmodel.model import CostModel, HardwarePeaks, ModelShape, StepOverheads, ape, fit_cost_model
from bastion.models.target import Target

FORMAT_VERSION = 1


class CalibrationError(RuntimeError):
    """A calibration cannot be made, found or trusted."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_time(fn: Callable[[], Any], device: torch.device, warmup: int, repeats: int) -> tuple[float, float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), (statistics.pstdev(times) if len(times) > 1 else 0.0)


# ---------------------------------------------------------------------------- ceilings
def measure_peaks(device: torch.device | str, dtype: torch.dtype) -> HardwarePeaks:
    """Measure the matmul rate, the masked-attention rate and the copy bandwidth (read + written).

    Sizes fill a large GPU yet stay quick on a CPU; fp16/bf16 matmuls on the CPU are
    emulated and slow, so the CPU measures the rate of the dtype it will decode in.
    """
    device = torch.device(device)
    return HardwarePeaks(flops_per_s=_matmul_rate(device, dtype), bytes_per_s=_copy_rate(device),
                         attention_flops_per_s=_attention_rate(device, dtype))


def _matmul_rate(device: torch.device, dtype: torch.dtype) -> float:
    gpu = device.type == "cuda"
    n = 8192 if gpu else 1024
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    t_mm, _ = _median_time(lambda: a @ b, device, warmup=3, repeats=10 if gpu else 5)
    return 2.0 * n**3 / t_mm


def _copy_rate(device: torch.device) -> float:
    numel = (1 << 30) // 4 if device.type == "cuda" else (1 << 26) // 4  # 1 GiB / 64 MiB of float32
    src = torch.randn(numel, device=device)
    dst = torch.empty_like(src)
    t_cp, _ = _median_time(lambda: dst.copy_(src), device, warmup=3, repeats=10)
    return 2.0 * numel * 4 / t_cp


def _attention_rate(device: torch.device, dtype: torch.dtype) -> float:
    """FLOP/s of a large masked attention, laid out as the engines run tree attention.

    The query heads that share a K/V head are folded into rows, and a boolean mask (a
    lower-triangular tree block after a visible context) keeps SDPA off its flash kernel,
    as every tree verification does.  FLOPs count every (row, key) pair, as the roofline does.
    """
    import torch.nn.functional as F

    heads, rows, keys, d = (8, 8192, 8192, 128) if device.type == "cuda" else (4, 512, 1024, 64)
    q = torch.randn(1, heads, rows, d, device=device).to(dtype)
    k = torch.randn(1, heads, keys, d, device=device).to(dtype)
    v = torch.randn(1, heads, keys, d, device=device).to(dtype)
    mask = torch.ones(rows, keys, dtype=torch.bool, device=device).tril_(keys - rows)[None, None]
    t, _ = _median_time(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), device, warmup=2, repeats=5)
    return 4.0 * heads * rows * keys * d / t


# ---------------------------------------------------------------------------- grid
@dataclass(frozen=True)
class Grid:
    """Latency probe grid: tree sizes ``s`` x cached context lengths ``c``."""

    s_values: tuple[int, ...]
    c_values: tuple[int, ...]
    warmup: int = 2
    repeats: int = 5
    holdout_every: int = 5  # every k-th grid point is held out of the fit
    tail_s: tuple[int, ...] = ()  # larger trees, probed at the smallest and largest c only

    @classmethod
    def named(cls, name: str) -> "Grid":
        if name == "paper":  # DESIGN section 3: s 16..512 step 16, c 64..2048 in powers of two
            return cls(tuple(range(16, 513, 16)), tuple(64 << i for i in range(6)), tail_s=(1024, 2048, 4096, 8192))
        if name == "small":  # CPUs: small models, trees rarely pass 128 nodes
            return cls(tuple(range(8, 129, 8)), tuple(64 << i for i in range(5)), warmup=1, repeats=3, tail_s=(192, 256))
        if name == "tiny":  # tests
            return cls((2, 4, 8, 12, 16), (16, 32, 64), warmup=1, repeats=2, holdout_every=4)
        raise ValueError(f"unknown calibration grid {name!r}; choose paper, small or tiny")

    def points(self) -> list[tuple[int, int]]:
        """The (s, c) grid; the sparse tail lets the tree grow as far as it was measured."""
        ends = (self.c_values[0], self.c_values[-1])
        return [(s, c) for c in self.c_values for s in self.s_values + (self.tail_s if c in ends else ())]


def probe_grid(
    target: Target, grid: Grid, seed: int = 0, progress: Callable[[int, int], None] | None = None, static=None
) -> list[dict[str, float]]:
    """Median verification latency at every grid point.

    Eager: each context length is prefilled once; every tree-size measurement verifies
    ``s`` tokens under a chain mask and crops the cache back, exactly like a decode step.
    With ``static`` (a :class:`~bastion.engines.static_engine.StaticEngine`) every point replays
    that engine's own verification graph for (s, attention window).
    """
    device = target.device
    gen = torch.Generator(device="cpu").manual_seed(seed)
    vocab = int(target.config.vocab_size)
    rows: list[dict[str, float]] = []
    # points past the model's positions cannot occur while decoding: skip them
    points = [(s, c) for s, c in grid.points() if c + s <= target.max_positions]
    if len(points) < 8:
        raise CalibrationError(f"only {len(points)} grid points fit the target's {target.max_positions} positions")
    total, done = len(points), 0
    if static is not None:  # one allocation for the whole grid (growing drops captured graphs)
        static.ensure_capacity(max(c + s for s, c in points), nodes=max(s for s, _ in points))
    for c in grid.c_values:
        s_values = [s for s, cc in points if cc == c]
        if not s_values:
            continue
        if static is None:
            cache = target.new_cache(capacity=c + max(s_values))
            ctx = torch.randint(0, vocab, (1, c), generator=gen).to(device)
            target.forward(ctx, torch.arange(c, device=device)[None], None, cache, features=False)
        for s in s_values:
            ids = torch.randint(0, vocab, (1, s), generator=gen).to(device)
            if static is not None:
                step = static.probe(ids[0], c)
            else:
                step = _eager_step(target, cache, ids, c)
            med, std = _median_time(step, device, grid.warmup, grid.repeats)
            rows.append({"s": s, "c": c, "latency_s": med, "std_s": std})
            done += 1
            if progress:
                progress(done, total)
    return rows


def _eager_step(target: Target, cache, ids: torch.Tensor, c: int) -> Callable[[], None]:
    """Verify ``ids`` [1, s] as a chain after ``c`` cached tokens, then crop back."""
    s, device = ids.shape[1], ids.device
    pos = torch.arange(c, c + s, device=device)[None]
    mask = torch.ones(1, 1, s, c + s, dtype=torch.bool, device=device)
    mask[0, 0, :, c:] = torch.ones(s, s, dtype=torch.bool, device=device).tril_()

    def step() -> None:
        out = target.forward(ids, pos, mask, cache, features=False)
        target.logits(out.hidden[0])
        cache.crop(c)

    return step


def fit_probe(rows: Sequence[dict[str, float]], shape: ModelShape, peaks: HardwarePeaks, holdout_every: int):
    """Fit on all but every ``holdout_every``-th point; report errors on both parts."""
    idx = np.arange(len(rows))
    held = (idx % holdout_every) == (holdout_every // 2) if holdout_every > 1 else np.zeros(len(rows), bool)
    s = np.array([r["s"] for r in rows], dtype=float)
    c = np.array([r["c"] for r in rows], dtype=float)
    y = np.array([r["latency_s"] for r in rows], dtype=float)
    model = fit_cost_model(shape, peaks, s[~held], c[~held], y[~held])
    err_in = ape(model, s[~held], c[~held], y[~held])
    report = {
        "points_fit": int((~held).sum()),
        "points_heldout": int(held.sum()),
        "in_sample_mape": float(err_in.mean()),
        "in_sample_max_ape": float(err_in.max()),
    }
    if held.any():
        err_out = ape(model, s[held], c[held], y[held])
        report.update(heldout_mape=float(err_out.mean()), heldout_max_ape=float(err_out.max()))
    for r, h, pred in zip(rows, held, model.predict(s, c)):
        r["heldout"] = bool(h)
        r["predicted_s"] = float(pred)
    return model, report


# ---------------------------------------------------------------------------- overheads
def profile_overheads(decoder_factory: Callable[[], Any], prompt_ids: Sequence[int], steps: int = 24) -> StepOverheads:
    """Steady-state ``T_draft`` and ``T_other`` from a short fixed-budget BASTION run.

    The first step is dropped: its drafter call ingests the whole prompt's features
    (a prefill), which is not what a steady decoding step pays.
    """
    dec = decoder_factory()
    draft, other = [], []
    for _ in range(2):  # second pass is warm
        res = dec.generate(prompt_ids, max_new_tokens=steps * 2, collect_stats=True)
        draft = [st.t_draft for st in res.steps[1:]]
        other = [st.t_other for st in res.steps[1:]]
    if not draft:
        raise CalibrationError("the profiling run produced fewer than two steps; use a longer probe")
    return StepOverheads(t_draft=statistics.median(draft), t_other=statistics.median(other))


# ---------------------------------------------------------------------------- the file
@dataclass
class Calibration:
    model: str
    fingerprint: dict[str, Any]
    cost_model: CostModel
    overheads: StepOverheads
    report: dict[str, Any]
    grid: dict[str, Any]
    points: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def max_s(self) -> int:
        """The largest tree size measured: the adaptive rule never grows past it."""
        return int(max(p["s"] for p in self.points))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "model": self.model,
            "fingerprint": self.fingerprint,
            "cost_model": self.cost_model.to_dict(),
            "overheads": asdict(self.overheads),
            "report": self.report,
            "grid": self.grid,
            "points": self.points,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Calibration":
        if d.get("format_version") != FORMAT_VERSION:
            raise CalibrationError(f"calibration format {d.get('format_version')} is not {FORMAT_VERSION}")
        return cls(
            model=d["model"],
            fingerprint=d["fingerprint"],
            cost_model=CostModel.from_dict(d["cost_model"]),
            overheads=StepOverheads(**d["overheads"]),
            report=d["report"],
            grid=d["grid"],
            points=d.get("points", []),
            seconds=d.get("seconds", 0.0),
        )

    def save(self, path: str | os.PathLike) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike, current: dict[str, Any] | None = None) -> "Calibration":
        with open(path, encoding="utf-8") as fh:
            cal = cls.from_dict(json.load(fh))
        if current is not None:
            fp.check(
                cal.fingerprint,
                current,
                str(path),
                f"Recalibrate: delete {path} (or pass --recalibrate) and rerun on this device.",
            )
        return cal


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)


def model_slug(name: str) -> str:
    return name.strip("/").replace("/", "--").replace(" ", "_")


def calibration_path(cache_dir: str | os.PathLike, hw_key: str, model: str, engine: str = "eager") -> Path:
    """Per (hardware, model, engine): each engine has its own latency curve."""
    suffix = "" if engine == "eager" else f"_{engine}"
    return Path(cache_dir) / f"calibration_{hw_key}_{model_slug(model)}{suffix}.json"


def check_writable(cache_dir: str | os.PathLike, path: Path) -> None:
    """Fail before any measurement if the calibration could not be saved.

    Tries a real write (permission bits alone do not tell, e.g. for root or read-only
    mounts).
    """
    folder = Path(cache_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise CalibrationError(
            f"no calibration at {path} and the cache directory {folder} is read-only ({exc.strerror}), "
            "so none can be made; run once where the cache directory is writable, or pass a writable --cache-dir"
        ) from exc


def calibrate(
    target: Target,
    model: str,
    fingerprint: dict[str, Any],
    grid: Grid,
    overheads_fn: Callable[[CostModel], StepOverheads],
    log: Callable[[str], None] = print,
    static=None,
) -> Calibration:
    """Measure peaks, probe the grid, fit, then profile the step overheads."""
    t0 = time.perf_counter()
    shape = ModelShape.from_config(target.config, torch.finfo(target.dtype).bits // 8)
    peaks = measure_peaks(target.device, target.dtype)
    log(f"[calibrate] peaks: {peaks.flops_per_s / 1e12:.2f} TFLOP/s matmul, "
        f"{peaks.attention_flops_per_s / 1e12:.2f} TFLOP/s masked attention, {peaks.bytes_per_s / 1e9:.1f} GB/s")
    step = max(1, len(grid.points()) // 8)
    rows = probe_grid(target, grid, progress=lambda d, t: log(f"[calibrate] grid {d}/{t}") if d % step == 0 else None,
                      static=static)
    model_obj, report = fit_probe(rows, shape, peaks, grid.holdout_every)
    log(
        f"[calibrate] fit {model_obj.params}; in-sample MAPE {report['in_sample_mape']:.1%}, "
        f"held-out MAPE {report.get('heldout_mape', float('nan')):.1%}"
    )
    overheads = overheads_fn(model_obj)
    log(f"[calibrate] T_draft {overheads.t_draft * 1e3:.2f} ms, T_other {overheads.t_other * 1e3:.2f} ms")
    return Calibration(
        model=model,
        fingerprint=fingerprint,
        cost_model=model_obj,
        overheads=overheads,
        report=report,
        grid=asdict(grid),
        points=rows,
        seconds=time.perf_counter() - t0,
    )
