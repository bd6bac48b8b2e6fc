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

import torch
import torch.nn.functional as F

from bastion.engines.row_kernels import row_linear, row_qkv
from bastion.engines.static_layers import _rms, after_qkv
from benchmarks.tree_phase import graph_us  # µs a replay of a function captured in a CUDA graph

H, I, HEAD, Q, KV, L = 4096, 12288, 151936, 4096, 1024, 36
EPS = 1e-6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--grid", default="full", choices=["full", "near"],
                    help="near: only settings next to the shipped ones (row_kernels.SETTINGS; a short run)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev, dt = torch.device("cuda"), torch.bfloat16
    torch.manual_seed(0)
    # name: (N, K, fusion, copies)
    shapes = {"qkv": (Q + 2 * KV, H, "norm", L), "o": (H, Q, "residual", L), "gate_up": (2 * I, H, "norm", L),
              "down": (H, I, "glu_residual", L), "head": (HEAD, H, "norm", 1)}
    ref_fns = {
        "norm": torch.compile(lambda x, ln, w, r: F.linear(_rms(x, ln, EPS), w), dynamic=False),
        "residual": torch.compile(lambda x, ln, w, r: r + F.linear(x, w), dynamic=False),
        "glu_residual": torch.compile(lambda x, ln, w, r: r + F.linear(F.silu(x.chunk(2, -1)[0]) * x.chunk(2, -1)[1], w),
                                      dynamic=False),
    }
    grid = [(bn, bk, wp) for bn, bk, wp in itertools.product((1, 2, 4, 8, 16, 32), (256, 512, 1024, 2048), (2, 4, 8))]
    if args.grid == "near":
        grid = [(16, 512, 4), (4, 512, 4), (16, 256, 4), (8, 1024, 4), (8, 512, 4), (2, 1024, 4), (4, 1024, 4),
                (16, 512, 8), (32, 256, 4), (2, 512, 2)]
    rows_list = [1]  # the kernels take AR's one row
    results, settings = [], {}
    t0 = time.time()
    for name, (n, k, fusion, copies) in shapes.items():
        ws = [torch.randn(n, k, device=dev, dtype=dt) * 0.02 for _ in range(copies)]
        ln = torch.rand(k, device=dev, dtype=dt) + 0.5
        kin = 2 * k if fusion == "glu_residual" else k
        xs = {m: torch.randn(m, kin, device=dev, dtype=dt) for m in rows_list}
        rs = {m: torch.randn(m, n, device=dev, dtype=dt) for m in rows_list}
        ref = ref_fns[fusion]

        def kw(m):
            return dict(ln=ln if fusion == "norm" else None, eps=EPS, glu=fusion == "glu_residual",
                        residual=rs[m] if "residual" in fusion else None)
        rows = {}
        for m in rows_list:
            x, r = xs[m], rs[m]
            row = rows[m] = {"shape": name, "rows": m, "N": n, "K": k, "fusion": fusion}
            row["blas_us"] = graph_us(lambda: [F.linear(x[:, :k], ws[i % copies]) for i in range(L)]) / L
            row["compiled_us"] = graph_us(lambda: [ref(x, ln, ws[i % copies], r) for i in range(L)]) / L
        timing = {}
        for cfg in grid:
            try:
                timing[cfg] = {m: graph_us(lambda: [row_linear(xs[m], ws[i % copies], **kw(m), setting=cfg)
                                                    for i in range(L)]) / L for m in rows_list}
            except Exception as e:  # a setting that does not fit (shared memory, registers)
                print(f"{name} {cfg}: {type(e).__name__}", flush=True)
        best = min(timing, key=lambda c: sum(timing[c].values()))
        settings[name] = {"N": n, "K": k, "setting": list(best)}
        for m in rows_list:
            row = rows[m]
            row["kernel_us"], row["kernel_cfg"] = timing[best][m], list(best)
            row["kernel_best_alone_us"] = min(t[m] for t in timing.values())
            y_k = row_linear(xs[m], ws[0], **kw(m), setting=best).float()
            y_r = ref(xs[m], ln, ws[0], rs[m]).float()
            row["max_rel_err"] = float((y_k - y_r).abs().max() / y_r.abs().max())
            gb = n * k * 2 / 1e9
            for key in ("blas", "compiled", "kernel"):
                row[key + "_tbs"] = gb / (row[key + "_us"] * 1e-6) / 1e3
            results.append(row)
            print(f"{name:8s} rows {m:2d}: blas {row['blas_us']:7.1f} µs ({row['blas_tbs']:.2f} TB/s)  "
                  f"compiled {row['compiled_us']:7.1f}  kernel {row['kernel_us']:7.1f} ({row['kernel_tbs']:.2f} TB/s, "
                  f"best alone {row['kernel_best_alone_us']:.1f}) {best}  err {row['max_rel_err']:.1e}  "
                  f"[{time.time() - t0:.0f}s]", flush=True)
        del ws
        torch.cuda.empty_cache()
    # what follows the q/k/v product: head norms, rotary, the K/V write (Qwen3-8B heads, window 768)
    d = 128
    qkv = torch.randn(1, 1, Q + 2 * KV, device=dev, dtype=dt)
    qn, kn = torch.rand(d, device=dev, dtype=dt) + 0.5, torch.rand(d, device=dev, dtype=dt) + 0.5
    cos, sin = torch.randn(1, 1, d, device=dev, dtype=dt), torch.randn(1, 1, d, device=dev, dtype=dt)
    caches = [torch.zeros(2, 1, KV // d, 768, d, device=dev, dtype=dt) for _ in range(L)]
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
    results.append(row)
    print(f"after_qkv rows 1: compiled {row['compiled_us']:.1f} µs  kernel {row['kernel_us']:.1f} µs  "
          f"err {row['max_rel_err']:.1e}", flush=True)
    (out / "settings.json").write_text(json.dumps(settings, indent=1))
    (out / "row_kernel.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
