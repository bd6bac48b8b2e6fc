"""The tile kernel (bastion/engines/tile_kernels.py) against cuBLAS, Qwen3-8B shape, bf16, a tree's rows.

    python -m benchmarks.tile_kernel_bench --out $OUT/tk --rows 16,32      # on a CUDA GPU

For each of a layer's four products at 16 and 32 rows (a DFlash block, a 32-node tree), 36
layers' distinct weights so every replay streams them from memory, one CUDA graph of the 36
launches, replayed; µs a launch and the weight stream's TB/s, for
- ``blas``: ``F.linear`` alone,
- ``compiled``: the compiled engine's arithmetic around the product (the norm before it,
  SiLU times up after the gate/up product, the residual after) under torch.compile,
- the tile kernel at each setting of a grid, with its fusion (the q/k/v and gate/up products
  with :func:`rms_rows` before them, timed together).  The grid is walked in
  order until ``--seconds`` a product and row count have passed; the best is written to
  settings.json (which ``tools/gpu/tile_kernel.sh`` loads).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from bastion.engines.tile_kernels import default_setting, rms_rows, rows_bucket, tile_linear
from benchmarks.kernel_bench import EPS, fastest, finish_row, references
from benchmarks.graph_timing import graph_us  # µs a replay of a function captured in a CUDA graph

H, I, Q, KV, L = 4096, 12288, 4096, 1024, 36
# name: (weight rows, K, fusion)
SHAPES = {"qkv": (Q + 2 * KV, H, "norm"), "o": (H, Q, "residual"), "gate_up": (2 * I, H, "gated"),
          "down": (H, I, "residual")}


def grid_for(m: int, n: int, k: int, gated: bool) -> list[tuple[int, int, int, int, int, int]]:
    """The default first, then block_n x block_k x split at 3 stages, then at 4 and 2 (4 warps; 8 for the widest tiles)."""
    bm = rows_bucket(m)
    first = [default_setting(m, n, k, gated)]
    rest = [(bm, bn, bk, sp, 8 if bn * bk >= 128 * 256 else 4, st)
            for st, bn, bk, sp in itertools.product((3, 4, 2), (64, 128, 32), (128, 256, 64), (1, 2, 4, 8, 16))
            if k // sp >= bk]
    return first + [c for c in rest if c not in first]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", default="16,32")
    ap.add_argument("--seconds", type=float, default=25.0, help="grid time a product and row count")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    refs, t0 = references(), time.time()
    results, settings = [], {}
    for name, (wn, k, fusion) in SHAPES.items():
        ws = [torch.randn(wn, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(L)]  # [N, K] each
        for m in (int(r) for r in args.rows.split(",")):
            row = product_row(name, ws, fusion, m, refs[fusion], args.seconds)
            settings[f"{rows_bucket(m)},{wn},{k}"] = {"rows": rows_bucket(m), "N": wn, "K": k, "setting": row["kernel_cfg"]}
            results.append(row)
            print(f"{name:8s} rows {m:2d}: blas {row['blas_us']:6.1f} µs ({row['blas_tbs']:.2f} TB/s)  compiled "
                  f"{row['compiled_us']:6.1f}  tile {row['kernel_us']:6.1f} ({row['kernel_tbs']:.2f} TB/s; default "
                  f"{row['default_us']:.1f}; {row['tried']} tried) {tuple(row['kernel_cfg'])}  "
                  f"err {row['max_rel_err']:.1e}  [{time.time() - t0:.0f}s]", flush=True)
        del ws
        torch.cuda.empty_cache()
    (out / "settings.json").write_text(json.dumps(settings, indent=1))
    (out / "tile_kernel.json").write_text(json.dumps(results, indent=1))


def product_row(name: str, ws: list[torch.Tensor], fusion: str, m: int, ref: Callable, seconds: float) -> dict:
    """One product at ``m`` rows: cuBLAS, the compiled reference and the fastest tile setting found in ``seconds``, µs a launch."""
    wn, k = ws[0].shape
    dev, dt = ws[0].device, ws[0].dtype
    ln = torch.rand(k, device=dev, dtype=dt) + 0.5
    n = wn // 2 if fusion == "gated" else wn  # the gated product's output: SiLU(gate) * up
    x, r = torch.randn(m, k, device=dev, dtype=dt), torch.randn(m, n, device=dev, dtype=dt)
    fused = dict(gated=fusion == "gated", residual=r if fusion == "residual" else None)
    normed = fusion in ("norm", "gated")

    def tile(w: torch.Tensor, cfg: tuple) -> torch.Tensor:
        return tile_linear(rms_rows(x, ln, EPS) if normed else x, w, **fused, setting=cfg)

    row = {"shape": name, "rows": m, "N": wn, "K": k, "fusion": fusion}
    row["blas_us"] = graph_us(lambda: [F.linear(x, ws[i]) for i in range(L)]) / L
    row["compiled_us"] = graph_us(lambda: [ref(x, ln, ws[i], r) for i in range(L)]) / L
    timing, start = {}, time.time()
    for cfg in grid_for(m, wn, k, fusion == "gated"):
        if timing and time.time() - start > seconds:  # the default setting, first, always runs
            break
        try:
            timing[cfg] = graph_us(lambda: [tile(ws[i], cfg) for i in range(L)]) / L
        except Exception as e:  # a setting that does not fit (shared memory, registers)
            print(f"{name} {m} {cfg}: {type(e).__name__}", flush=True)
    best = fastest(timing)
    row["tried"], row["default_us"] = len(timing), next(iter(timing.values()))
    row["kernel_us"], row["kernel_cfg"] = timing[best], list(best)
    return finish_row(row, tile(ws[0], best), ref(x, ln, ws[0], r), wn * k * dt.itemsize)


if __name__ == "__main__":
    main()
