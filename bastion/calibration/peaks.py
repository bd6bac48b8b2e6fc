"""The device's ceilings, measured where it decodes: matmul, masked attention, copy.

Datasheet numbers are documentation only; the roofline divides by these measured
rates, so any GPU (and the CPU) gets a cost model of its own.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from bastion.costmodel.roofline import HardwarePeaks
from bastion.engines.choice import sync


def sample_times(fn: Callable[[], Any], device: torch.device, warmup: int, repeats: int) -> list[float]:
    """``fn``'s wall time over ``repeats`` calls after ``warmup`` untimed ones, each bracketed by device syncs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return times


def median_time(fn: Callable[[], Any], device: torch.device, warmup: int, repeats: int) -> tuple[float, float]:
    """Median and spread of ``fn``'s wall time (:func:`sample_times`)."""
    times = sample_times(fn, device, warmup, repeats)
    return statistics.median(times), (statistics.pstdev(times) if len(times) > 1 else 0.0)


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
    t_mm, _ = median_time(lambda: a @ b, device, warmup=3, repeats=10 if gpu else 5)
    return 2.0 * n**3 / t_mm


def _copy_rate(device: torch.device) -> float:
    numel = (1 << 30) // 4 if device.type == "cuda" else (1 << 26) // 4  # 1 GiB / 64 MiB of float32
    src = torch.randn(numel, device=device)
    dst = torch.empty_like(src)
    t_cp, _ = median_time(lambda: dst.copy_(src), device, warmup=3, repeats=10)
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
    t, _ = median_time(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), device, warmup=2, repeats=5)
    return 4.0 * heads * rows * keys * d / t
