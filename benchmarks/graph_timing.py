"""CUDA-graph timing for the benchmarks: GPU microseconds per replay and a replay's kernels.

The benchmarks that compare step functions or kernels time them as the engines run them,
replayed from a CUDA graph, so launch gaps of the host do not enter the figure.  On a CPU
(smoke runs in the tests) the plain call is timed instead.
"""

from __future__ import annotations

import time

import torch

from bastion.engines.graphs import GraphRunner


def graph_us(fn, iters: int = 50, restore=()) -> float:
    """GPU microseconds per replay of ``fn`` captured in a CUDA graph (``restore``: state to reset).

    On a CPU (smoke runs) the plain call is timed instead.
    """
    saved = [t.clone() for t in restore]
    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        for _ in range(3):
            fn()
        for t, s in zip(restore, saved):
            t.copy_(s)
        return round(1e6 * (time.perf_counter() - t0) / 3, 1)
    runner = GraphRunner(torch.device("cuda"), warmup=3)  # the engine's own capture: warm-up, state restored
    runner("fn", fn, writes=restore)
    us = replay_us(runner.graphs["fn"], iters)
    for t, s in zip(restore, saved):
        t.copy_(s)
    return us


def replay_us(graph, iters: int, restore=()) -> float:
    """GPU microseconds per replay of an already captured CUDA graph (``restore``: state to reset)."""
    saved = [t.clone() for t in restore]
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    for t, s in zip(restore, saved):
        t.copy_(s)
    return round(1e3 * start.elapsed_time(end) / iters, 1)


def kernels(fn) -> list[dict]:
    """Kernel names, counts and GPU time of one graph replay of ``fn`` (after warm-up)."""
    from torch.profiler import ProfilerActivity, profile

    gpu = torch.cuda.is_available()
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    for _ in range(2):
        fn()
    sync()
    with profile(activities=[ProfilerActivity.CUDA if gpu else ProfilerActivity.CPU]) as prof:
        fn()
        sync()
    rows = []
    for e in prof.key_averages():
        t = (getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)) if gpu else e.self_cpu_time_total
        if t > 0 and e.count > 0:
            rows.append({"kernel": e.key[:90], "count": e.count, "us": round(t, 1)})
    rows.sort(key=lambda r: -r["us"])
    return rows
