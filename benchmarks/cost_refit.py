"""Refit measured latency grids offline: the saved fit's held-out errors against the current cost model's.

Reads a calibration file (``calibration_*.json`` or the pipeline's ``latency_grid.json``:
points, shape and peaks inside) or a bare list of points (``static_calibration_points.json``
of ``benchmarks.static_engine --sections calib``, with ``--shape`` and ``--peaks``).  Every
point carries ``predicted_s`` of the fit made when it was measured; the same points are
fitted again with :func:`bastion.calibration.grid.fit_probe` on the saved held-out split, and
both are tabulated per context: held-out mean and worst absolute percentage error.

    python -m benchmarks.cost_refit tests/costmodel/data/h200_qwen3_8b_compiled_32k.json \\
        --shape qwen3-8b --peaks 656.5019,4.048762,225.2669
    python -m benchmarks.cost_refit cache/calibration_cpu-..._tiny_static.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bastion.calibration.grid import fit_probe
from bastion.costmodel.roofline import HardwarePeaks, ModelShape


def load(path: str, shape: str | None, peaks: str | None):
    """(rows, shape, peaks, held-out period) of a calibration file or a bare list of points."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):
        cm = data["cost_model"]
        return data["points"], ModelShape(**cm["shape"]), HardwarePeaks(**cm["peaks"]), data["grid"]["holdout_every"]
    if not (shape and peaks):
        raise SystemExit(f"error: {path} is a bare list of points; pass --shape and --peaks")
    from benchmarks.shapes import SHAPES

    dtype_bytes = 2  # the shapes are benchmarked in bf16
    f, w, a = (float(v) for v in peaks.split(","))
    return (data, ModelShape.from_config(dict(SHAPES[shape], model_type="qwen3"), dtype_bytes),
            HardwarePeaks(f * 1e12, w * 1e12, a * 1e12), 5)


def errors(rows, key: str) -> dict:
    """Held-out APE per context (and ``all``) of the predictions under ``key``."""
    out: dict = {}
    for r in rows:
        if r["heldout"]:
            e = abs(r[key] - r["latency_s"]) / r["latency_s"]
            out.setdefault(int(r["c"]), []).append(e)
            out.setdefault("all", []).append(e)
    return out


def table(saved: dict, refit: dict) -> str:
    head = "| context | held-out points | saved fit: mean | worst | refit: mean | worst |\n|---|---:|---:|---:|---:|---:|"
    lines = [head]
    for c in [k for k in saved if k != "all"] + ["all"]:
        a, b = np.array(saved[c]), np.array(refit[c])
        lines.append(f"| {c} | {len(a)} | {100 * a.mean():.1f} % | {100 * a.max():.0f} % | "
                     f"{100 * b.mean():.1f} % | {100 * b.max():.0f} % |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("points", help="calibration JSON, or a list of points (then --shape and --peaks)")
    ap.add_argument("--shape", help="a benchmarks.shapes name, for a bare list of points")
    ap.add_argument("--peaks", help="matmul TFLOP/s,copy TB/s,masked-attention TFLOP/s the saved fit used")
    args = ap.parse_args(argv)
    rows, shape, peaks, every = load(args.points, args.shape, args.peaks)
    saved = [dict(r) for r in rows]
    fresh = [{k: r[k] for k in ("s", "c", "latency_s")} for r in rows]
    model, report = fit_probe(fresh, shape, peaks, every, held=np.array([r["heldout"] for r in saved]))
    for r, f in zip(saved, fresh):
        r["refit_s"] = f["predicted_s"]
    print(table(errors(saved, "predicted_s"), errors(saved, "refit_s")))
    print(f"\nrefit parameters: {model.params}\nrefit in-sample MAPE {report['in_sample_mape']:.1%}, "
          f"held-out {report['heldout_mape']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
