"""The calibration file: what it holds, where it lives, how it is written and trusted.

One JSON file per (hardware, model, engine) carrying the fingerprint of the stack that
measured it; loading it against the current fingerprint refuses a stale file, naming
what differs and how to recalibrate.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bastion.calibration import fingerprint as fp
from bastion.costmodel.model import CostModel, StepOverheads
from bastion.costmodel.roofline import ModelShape

FORMAT_VERSION = 2  # 2: the cost model with attention terms (format 1: the max of two lines, refused)
REQUIRED_KEYS = ("format_version", "model", "fingerprint", "cost_model", "overheads", "report", "grid", "points")


class CalibrationError(RuntimeError):
    """A calibration cannot be made, found or trusted."""


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
    temperature: float = 0.0  # the sampling temperature it was measured at (0: greedy probes and overheads)
    # seconds per step of AR and DFlash on the probe prompt (profile_baselines); empty in older files
    baselines: dict[str, float] = field(default_factory=dict)
    # what it covers: the n_min its overhead probe sizes are multiples of, those sizes, and the
    # largest context of its latency grid, whose points past the model's positions are left out
    # since no decode reaches them (None where a file does not say)
    n_min: int | None = None
    probe_sizes: tuple[int, ...] = ()
    max_context: int | None = None

    @property
    def sampled(self) -> bool:
        return self.temperature > 0

    def check_temperature(self, temperature: float, path: str | os.PathLike) -> None:
        """A decode's temperature class (greedy or sampling) must be the one this calibration measured."""
        if (temperature > 0) != self.sampled:
            made = f"with sampling at T={self.temperature:g}" if self.sampled else "greedy (T=0) only"
            raise CalibrationError(
                f"calibration {path} was made {made}, but this run decodes at --temperature {temperature:g}; "
                f"calibrate for {'sampling' if temperature > 0 else 'greedy decoding'}: omit --calibration to use "
                "--cache-dir (one file per temperature class), or pass --recalibrate"
            )

    def check_covers(self, n_min: int, context: int, path: str | os.PathLike, given: bool = False) -> None:
        """A run's ``n_min`` must be the one the step overheads were probed at, and its longest
        context (prompt plus new tokens) inside the measured grid, or its trees are sized by
        extrapolation.  ``given``: the file came from ``--calibration`` (the pipeline's)."""
        fix = ("pass a calibration made for these settings, or omit --calibration and pass --recalibrate "
               "(pipeline: rerun its calibration rules)" if given else "pass --recalibrate to measure again")
        if self.n_min is None or self.max_context is None:
            raise CalibrationError(f"calibration {path} does not record the n_min and contexts it covers; {fix}")
        if self.n_min != n_min:
            raise CalibrationError(f"calibration {path} was made for --n-min {self.n_min} (overheads probed at "
                                   f"{', '.join(map(str, self.probe_sizes))} nodes), but this run uses --n-min {n_min}; {fix}")
        if context > self.max_context:
            raise CalibrationError(f"calibration {path} has a latency grid of contexts up to {self.max_context} tokens, "
                                   f"but this run reaches {context} (its longest prompt plus --max-new-tokens); {fix}")

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
            "temperature": self.temperature,
            "baselines": self.baselines,
            "n_min": self.n_min,
            "probe_sizes": list(self.probe_sizes),
            "max_context": self.max_context,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "the calibration") -> "Calibration":
        fix = "delete it or rerun with --recalibrate"
        if not isinstance(d, dict):
            raise CalibrationError(f"{where} is not a calibration (a JSON object); {fix}")
        missing = [k for k in REQUIRED_KEYS if k not in d]
        if missing:
            raise CalibrationError(f"{where} lacks the key(s) {', '.join(missing)}; {fix}")
        if d["format_version"] == 1:
            raise CalibrationError(
                f"{where} has format 1: its cost model is the old max of two lines, without the attention terms "
                f"that long contexts need, and its parameters mean other roofline times; {fix} to refit it")
        if d["format_version"] != FORMAT_VERSION:
            raise CalibrationError(f"{where} has format {d['format_version']}, not {FORMAT_VERSION}; {fix}")
        try:
            return cls(
                model=d["model"],
                fingerprint=d["fingerprint"],
                cost_model=CostModel.from_dict(d["cost_model"]),
                overheads=StepOverheads(**d["overheads"]),
                report=d["report"],
                grid=d["grid"],
                points=d["points"],
                seconds=d.get("seconds", 0.0),
                temperature=float(d.get("temperature", 0.0)),
                baselines={str(k): float(v) for k, v in d.get("baselines", {}).items()},
                n_min=None if d.get("n_min") is None else int(d["n_min"]),
                probe_sizes=tuple(int(n) for n in d.get("probe_sizes", ())),
                max_context=None if d.get("max_context") is None else int(d["max_context"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"{where} is malformed ({type(exc).__name__}: {exc}); {fix}") from None

    def save(self, path: str | os.PathLike) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike, current: dict[str, Any] | None = None) -> "Calibration":
        fix = "delete it or rerun with --recalibrate"
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise CalibrationError(
                f"calibration {path} is not valid JSON (line {exc.lineno}: {exc.msg}; truncated?); {fix}") from None
        except UnicodeDecodeError:
            raise CalibrationError(f"calibration {path} is not text; {fix}") from None
        except OSError as exc:
            raise CalibrationError(f"calibration {path} cannot be read ({exc.strerror}); pass a calibration file, "
                                   "or omit --calibration to calibrate into --cache-dir") from None
        cal = cls.from_dict(data, f"calibration {path}")
        diff = fp.differences(cal.fingerprint, current) if current is not None else []
        if diff:  # one line: the CLI and the pipeline's jobs print it as their error
            raise fp.FingerprintMismatch(f"the calibration in {path} was made for a different device, software stack "
                                         f"or settings ({'; '.join(diff)}); recalibrate: delete {path} (or pass "
                                         "--recalibrate) and rerun on this device, or run with the settings it names")
        return cal

    def check_model(self, shape: ModelShape, target: str, path: str | os.PathLike, given: bool = False) -> None:
        """A calibration fits the models of its shape only: its cost model is that shape's roofline."""
        mine = {k: v for k, v in asdict(self.cost_model.shape).items() if k != "dtype_bytes"}
        theirs = {k: v for k, v in asdict(shape).items() if k != "dtype_bytes"}
        differ = [f"{k} {mine[k]} (target {theirs[k]})" for k in mine if mine[k] != theirs[k]]
        if differ:
            fix = "pass the calibration of this model, or omit --calibration" if given else "pass --recalibrate"
            raise CalibrationError(f"calibration {path} was made for model {self.model!r} of another shape "
                                   f"({', '.join(differ)}), not for {target}; {fix}")


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


def calibration_path(cache_dir: str | os.PathLike, hw_key: str, model: str, engine: str = "eager",
                     temperature: float = 0.0) -> Path:
    """Per (hardware, model, engine, temperature class): each engine has its own latency curve,
    and sampling (T > 0) adds a per-node cost that greedy decoding does not pay."""
    suffix = ("" if engine == "eager" else f"_{engine}") + (SAMPLED_SUFFIX if temperature > 0 else "")
    return Path(cache_dir) / f"calibration_{hw_key}_{model_slug(model)}{suffix}.json"


SAMPLED_SUFFIX = "_sampled"  # calibration files made at T > 0 (the CLI cache and the pipeline)


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
        why = "is read-only" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else "cannot be written"
        raise CalibrationError(
            f"no calibration at {path} and the cache directory {folder} {why} ({exc.strerror}), "
            "so none can be made; run once where the cache directory is writable, or pass a writable --cache-dir"
        ) from exc
