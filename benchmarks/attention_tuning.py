"""The tree-attention kernel's knobs timed at the Qwen3-8B shape, against the compiled fallback.

Each configuration runs 36 layers' attention back to back (each layer its own K/V cache,
as in a verification, so the window is read from memory, not L2) inside one CUDA graph;
the table gives µs per layer.  For choosing the kernel's defaults.

    python -m benchmarks.attention_tuning --out at   # on a CUDA GPU; writes at/tuning.json
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import torch

from bastion.engines import tree_attention_kernel as K
from bastion.engines.static_attention import grouped_attention
from bastion.engines.static_layers import COMPILED_MATMUL_ROWS, compile_step_function
from benchmarks.graph_timing import graph_us

LAYERS, HQ, HKV, D = 36, 32, 8, 128


def per_layer_us(fn, iters: int = 20) -> float:
    """GPU µs per layer of ``fn`` (all layers' attention) replayed from one CUDA graph."""
    return round(graph_us(fn, iters) / LAYERS, 2)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="at")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    compiled = compile_step_function(functools.partial(grouped_attention, matmul_rows=COMPILED_MATMUL_ROWS))
    rows = []
    t0 = time.perf_counter()
    for kv in (768, 4352):
        cap = kv + 256
        caches = torch.randn(LAYERS, 2, 1, HKV, cap, D, device=dev, dtype=torch.bfloat16)
        for s in (1, 16, 32, 64):
            qs = torch.randn(LAYERS, 1, HQ, s, D, device=dev, dtype=torch.bfloat16)
            mask = torch.zeros(s + 8, cap, dtype=torch.bool, device=dev)
            m = mask[:s, :kv]
            m[:, : kv - 200] = True
            m[:, kv - 200 : kv - 200 + s] = torch.ones(s, s, dtype=torch.bool, device=dev).tril()
            mm = m[None, None]
            outs = [None] * LAYERS

            def run(attend, qs=qs, caches=caches, kv=kv, mm=mm, outs=outs):
                def f():
                    for i in range(LAYERS):
                        outs[i] = attend(qs[i], caches[i, 0, :, :, :kv], caches[i, 1, :, :, :kv], mm, 0.088)
                return f

            ref = compiled(qs[0], caches[0, 0, :, :, :kv], caches[0, 1, :, :, :kv], mm, 0.088)
            row = {"kv": kv, "s": s, "fallback_compiled": per_layer_us(run(compiled))}
            for programs in (264, 132, 64, 32, 16):
                for block_m in (16, 64, 128):
                    if block_m == 128 and 4 * s < 128:
                        continue
                    for block_n in (32, 64):
                        for stages in (1, 2, 3):
                            name = f"p{programs}_m{block_m}_n{block_n}_s{stages}"
                            attend = functools.partial(K.tree_attention, programs=programs, block_m=block_m,
                                                       block_n=block_n, num_stages=stages)
                            try:
                                got = attend(qs[0], caches[0, 0, :, :, :kv], caches[0, 1, :, :, :kv], mm, 0.088)
                                err = (got.float() - ref.float()).abs().max().item()
                                row[name] = per_layer_us(run(attend)) if err < 0.05 else f"err {err:.3g}"
                            except Exception as exc:  # noqa: BLE001 - keep the other configurations
                                row[name] = repr(exc)[:120]
            best = min((v, k) for k, v in row.items() if isinstance(v, float) and k != "fallback_compiled")
            row["best"] = best[1]
            print(kv, s, "fallback", row["fallback_compiled"], "best", best, "default", row.get("p264_m64_n64_s2"),
                  round(time.perf_counter() - t0, 1), flush=True)
            rows.append(row)
    (out / "tuning.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
