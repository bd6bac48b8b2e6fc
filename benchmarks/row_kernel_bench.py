"""The fused row kernel (bastion/engines/row_kernels.py) against cuBLAS, Qwen3-8B shape, bf16.

    python -m benchmarks.row_kernel_bench --out $OUT/lk      # on a CUDA GPU

For each of the target's five products at one row (36 layers' distinct weights, so every
replay streams them from memory; the LM head once): one CUDA graph of the 36 launches,
replayed, µs a launch and the weight stream's TB/s, for
- ``blas``: ``F.linear`` alone (what the compiled engine's GEMM kernels do today),
- ``compiled``: the compiled engine's own arithmetic around the product (norm before it,
  SiLU-times-up before it, residual after it) under torch.compile, as the engine runs it,
- the kernel at every setting of a small grid, with its fusion; the best is kept and
  written to settings.json (which ``tools/gpu/row_kernel.sh`` loads).
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

from bastion.engines.row_kernels import row_linear, row_qkv
from bastion.engines.static_layers import after_qkv
from benchmarks.kernel_bench import EPS, fastest, finish_row, references
from benchmarks.graph_timing import graph_us  # µs a replay of a function captured in a CUDA graph

H, I, HEAD, Q, KV, L = 4096, 12288, 151936, 4096, 1024, 36
# name: (N, K, fusion, distinct weights)
SHAPES = {"qkv": (Q + 2 * KV, H, "norm", L), "o": (H, Q, "residual", L), "gate_up": (2 * I, H, "norm", L),
          "down": (H, I, "glu_residual", L), "head": (HEAD, H, "norm", 1)}
FULL_GRID = list(itertools.product((1, 2, 4, 8, 16, 32), (256, 512, 1024, 2048), (2, 4, 8)))  # block_n, block_k, warps
NEAR_GRID = [(16, 512, 4), (4, 512, 4), (16, 256, 4), (8, 1024, 4), (8, 512, 4), (2, 1024, 4), (4, 1024, 4),
             (16, 512, 8), (32, 256, 4), (2, 512, 2)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--grid", default="full", choices=["full", "near"],
                    help="near: only settings next to the shipped ones (row_kernels.SETTINGS; a short run)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    refs, grid, t0 = references(), FULL_GRID if args.grid == "full" else NEAR_GRID, time.time()
    results, settings = [], {}
    for name, (n, k, fusion, copies) in SHAPES.items():
        row = product_row(name, n, k, fusion, copies, refs[fusion], grid, dev)
        settings[name] = {"N": n, "K": k, "setting": row["kernel_cfg"]}
        results.append(row)
        print(f"{name:8s} rows  1: blas {row['blas_us']:7.1f} µs ({row['blas_tbs']:.2f} TB/s)  "
              f"compiled {row['compiled_us']:7.1f}  kernel {row['kernel_us']:7.1f} ({row['kernel_tbs']:.2f} TB/s) "
              f"{tuple(row['kernel_cfg'])}  err {row['max_rel_err']:.1e}  [{time.time() - t0:.0f}s]", flush=True)
        torch.cuda.empty_cache()
    row = after_qkv_row(dev)
    results.append(row)
    print(f"after_qkv rows 1: compiled {row['compiled_us']:.1f} µs  kernel {row['kernel_us']:.1f} µs  "
          f"err {row['max_rel_err']:.1e}", flush=True)
    (out / "settings.json").write_text(json.dumps(settings, indent=1))
    (out / "row_kernel.json").write_text(json.dumps(results, indent=1))


def product_row(name: str, n: int, k: int, fusion: str, copies: int, ref: Callable, grid: list[tuple[int, int, int]],
                dev: torch.device, dt: torch.dtype = torch.bfloat16) -> dict:
    """One product at one row: cuBLAS, the compiled reference and the kernel's fastest setting of ``grid``, in µs a launch."""
    ws = [torch.randn(n, k, device=dev, dtype=dt) * 0.02 for _ in range(copies)]  # [N, K] each
    ln = torch.rand(k, device=dev, dtype=dt) + 0.5
    x = torch.randn(1, 2 * k if fusion == "glu_residual" else k, device=dev, dtype=dt)  # gate and up side by side for the GLU
    r = torch.randn(1, n, device=dev, dtype=dt)
    fused = dict(ln=ln if fusion == "norm" else None, eps=EPS, glu=fusion == "glu_residual",
                 residual=r if "residual" in fusion else None)
    row = {"shape": name, "rows": 1, "N": n, "K": k, "fusion": fusion}
    row["blas_us"] = graph_us(lambda: [F.linear(x[:, :k], ws[i % copies]) for i in range(L)]) / L
    row["compiled_us"] = graph_us(lambda: [ref(x, ln, ws[i % copies], r) for i in range(L)]) / L
    timing = {}
    for cfg in grid:
        try:
            timing[cfg] = graph_us(lambda: [row_linear(x, ws[i % copies], **fused, setting=cfg) for i in range(L)]) / L
        except Exception as e:  # a setting that does not fit (shared memory, registers)
            print(f"{name} {cfg}: {type(e).__name__}", flush=True)
    best = fastest(timing)
    row["kernel_us"], row["kernel_cfg"] = timing[best], list(best)
    return finish_row(row, row_linear(x, ws[0], **fused, setting=best), ref(x, ln, ws[0], r), n * k * dt.itemsize)


def after_qkv_row(dev: torch.device, dt: torch.dtype = torch.bfloat16, d: int = 128, window: int = 768) -> dict:
    """What follows the q/k/v product (head norms, rotary, the K/V write; Qwen3-8B heads), compiled against the kernel."""
    qkv = torch.randn(1, 1, Q + 2 * KV, device=dev, dtype=dt)
    qn, kn = torch.rand(d, device=dev, dtype=dt) + 0.5, torch.rand(d, device=dev, dtype=dt) + 0.5
    cos, sin = torch.randn(1, 1, d, device=dev, dtype=dt), torch.randn(1, 1, d, device=dev, dtype=dt)
    caches = [torch.zeros(2, 1, KV // d, window, d, device=dev, dtype=dt) for _ in range(L)]
    index = torch.tensor([500], device=dev)
    ref = torch.compile(after_qkv, dynamic=False)
    row = {"shape": "after_qkv", "rows": 1}
    row["compiled_us"] = graph_us(lambda: [ref(qkv, qn, kn, cos, sin, caches[i], index, EPS, d, KV) for i in range(L)]) / L
    row["kernel_us"] = graph_us(lambda: [row_qkv(qkv, qn, kn, cos, sin, caches[i], index, EPS, d, KV)
                                         for i in range(L)]) / L
    kv_ref, kv_got = caches[0].clone(), caches[1].clone()
    q_ref = ref(qkv, qn, kn, cos, sin, kv_ref, index, EPS, d, KV).float()
    q_got = row_qkv(qkv, qn, kn, cos, sin, kv_got, index, EPS, d, KV).float()
    row["max_rel_err"] = float(max((q_got - q_ref).abs().max() / q_ref.abs().max(),
                                   (kv_got.float() - kv_ref.float()).abs().max() / kv_ref.float().abs().max()))
    return row


if __name__ == "__main__":
    main()
