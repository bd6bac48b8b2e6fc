"""Kernel-by-kernel view of the Qwen3-8B-shaped verification graphs (AR's and a 32-node tree's).

For choosing which kernels to fuse: the full kernel table of each graph replay (name,
count, GPU time), the kernel sequence of one replay in launch order (one layer's share is
every 36th), and the same graphs without the Triton attention kernel and with cuBLAS's own kernel choice.

    python -m benchmarks.verify_kernels --out vk      # on a CUDA GPU; writes vk/kernels.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from bastion.engines.graphs import GraphRunner
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.models.target import Target
from bastion.speculative import fused
from bastion.speculative.policy import TreePolicy
from benchmarks.shapes import random_pair
from benchmarks.graph_timing import kernels, replay_us


def sequence(graph) -> list[tuple[str, float]]:
    """(kernel name, µs) of one replay, in start order."""
    from torch.profiler import ProfilerActivity, profile

    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    evs.sort(key=lambda e: e.time_range.start)
    return [(e.name[:100], round(e.time_range.elapsed_us(), 2)) for e in evs]


def verify_graphs(engine, prompt, nodes: int) -> dict:
    out = {}
    for method, policy in (("bastion", TreePolicy(budget=nodes)), ("ar", None)):
        engine.runner = GraphRunner(engine.device, enabled=True)
        dec = StaticDecoder(engine, method, policy)
        dec.generate(prompt, 8)
        state = engine.state()
        saved = [t.clone() for t in state]
        latest = {key[0]: (key, g) for key, g in engine.runner.graphs.items()}
        key, graph = latest["verify"]
        us = replay_us(graph, 20, restore=state)
        table = kernels(graph.replay)
        seq = sequence(graph)
        for t, s in zip(state, saved):
            t.copy_(s)
        out[method] = {"graph": str(key), "us": us, "launches": sum(r["count"] for r in table), "table": table,
                       "sequence": seq}
        print(method, key, us, "us", out[method]["launches"], "launches", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="vk")
    ap.add_argument("--nodes", type=int, default=32)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    t0 = time.perf_counter()
    model, drafter = random_pair("qwen3-8b", device, torch.bfloat16)
    target = Target(model)
    prompt = torch.randint(0, 150000, (512,), generator=torch.Generator().manual_seed(0)).tolist()
    engine = StaticEngine(target, drafter, max_context=2560, n_max=1024, fused=True)
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    key = ("tree_attention", str(torch.device("cuda", torch.cuda.current_device())))  # as run_triton keys it
    # the engine as it is; then without the attention kernel; then with cuBLAS's own kernel choice
    for name, works, blas in (("now", None, "cublaslt"), ("no_attention_kernel", False, "cublaslt"),
                              ("cublas", None, "cublas")):
        try:
            torch.backends.cuda.preferred_blas_library(blas)
            if works is None:
                fused._WORKS.pop(key, None)
            else:
                fused._WORKS[key] = works
            res[name] = verify_graphs(engine, prompt, args.nodes)
            res[name]["attention_kernel"] = fused._WORKS.get(key)
            if name != "now":
                for m in ("bastion", "ar"):
                    res[name][m].pop("sequence")
        except Exception as exc:  # noqa: BLE001 - keep the other variants
            res[name + "_error"] = repr(exc)[:400]
        print(name, "done", round(time.perf_counter() - t0, 1), flush=True)
    (out / "kernels.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
