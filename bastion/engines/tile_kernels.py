"""A tree's (or a DFlash block's) products on tensor-core tiles, with the layer's SiLU and residual inside.

A verification forward is AR's forward with 16 to a few dozen rows: each weight byte is
still read once, so the step is bound by the weight stream as AR's is.  cuBLASLt streams
the weights well at 32 rows, but the step around it pays for about 17 kernels a layer
(norms, split-K reductions, SiLU times up, residual adds), as AR's does without
:mod:`bastion.engines.row_kernels`.  This kernel takes the row kernel's fusions that come
after the product, on the tensor cores:

- ``gated``: ``W`` is ``[gate; up]`` stacked by rows and the output is ``silu(gate) * up``:
  each program multiplies the same rows of both halves, so the down product reads the
  activation directly.
- ``residual``: ``y = r + x @ W.T``.

The norms before the q/k/v and gate/up products are one small kernel each
(:func:`rms_rows`), with the layers' own rounding: inside the product they cost more than
they saved (see :func:`_tile_kernel`).

Why a tensor-core tile as tall as it is wide fails here (docs/performance.md): its x tile is
as large as its weight tile, so loading x costs as much as streaming the weights.  Here a
program covers ``block_n`` outputs (32 to 128) for ``block_m`` rows, so x is a fraction of
the weight traffic, and splits K across programs (``split``) to keep every SM streaming
when N / block_n alone is too few programs.  Split programs write fp32 partial sums; a
second small kernel sums them in a fixed order (no atomics, so a decode is repeatable) and
applies the same epilogue.  bf16 and fp16 only (the dispatch in
:mod:`bastion.engines.static_layers`); fp32 keeps the matrix library.

Imported only where Triton is installed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# (rows bucket, N, K) -> (block_m, block_n, block_k, split, warps, stages), the fastest
# measured on an H200 for the Qwen3-8B shape's q/k/v, output, gate/up and down products at 16
# and 32 rows (`python -m benchmarks.tile_kernel_bench`).  Other shapes take
# :func:`default_setting`.
SETTINGS: dict[tuple[int, int, int], tuple[int, int, int, int, int, int]] = {
    (16, 6144, 4096): (16, 64, 256, 1, 4, 3),
    (32, 6144, 4096): (32, 32, 128, 2, 4, 3),
    (16, 4096, 4096): (16, 64, 256, 1, 4, 4),
    (32, 4096, 4096): (32, 32, 128, 4, 4, 3),
    (16, 24576, 4096): (16, 128, 128, 1, 4, 3),
    (32, 24576, 4096): (32, 64, 128, 1, 4, 3),
    (16, 4096, 12288): (16, 64, 256, 2, 4, 4),
    (32, 4096, 12288): (32, 128, 128, 4, 4, 4),
}
# A tree larger than this goes to the matrix library: x's share of the traffic grows with rows.
MAX_ROWS = 64
# Programs wanted in flight: about two a streaming multiprocessor on the GPUs this targets.
TARGET_PROGRAMS = 264


def rows_bucket(m: int) -> int:
    """The tile height that covers ``m`` rows: 16, 32 or 64 (tl.dot's smallest side is 16)."""
    return max(16, triton.next_power_of_2(m))


def default_setting(m: int, n: int, k: int, gated: bool = False) -> tuple[int, int, int, int, int, int]:
    """A tile for shapes nobody measured: 64 outputs by 128 of K, K split until the GPU is busy."""
    bm, bn, bk = min(rows_bucket(m), 64), 64, 128
    tiles = triton.cdiv(n // (2 if gated else 1), bn) * triton.cdiv(m, bm)
    split = 1
    while tiles * split < TARGET_PROGRAMS and k // (split * 2) >= 2 * bk:
        split *= 2
    return bm, bn, bk, split, 4, 3


@triton.jit
def _rms_kernel(x_ptr, ln_ptr, out_ptr, K, eps, BLOCK_K: tl.constexpr):
    """Program m: out[m] = ln * (x[m] * rsqrt(mean(x[m]^2) + eps)), rounded as the layers' ``_rms`` rounds."""
    row = tl.program_id(0)
    ss = tl.zeros([BLOCK_K], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row * K + k, mask=k < K, other=0.0).to(tl.float32)
        ss += x * x
    rstd = tl.rsqrt(tl.sum(ss, axis=0) / K + eps)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row * K + k, mask=k < K, other=0.0).to(tl.float32)
        h = (x * rstd).to(out_ptr.dtype.element_ty).to(tl.float32)  # _rms: the scaled row in x's dtype, then ln
        ln = tl.load(ln_ptr + k, mask=k < K, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * K + k, (ln * h).to(out_ptr.dtype.element_ty), mask=k < K)


@triton.jit
def _epilogue(y, u, m, n, m_ok, n_ok, r_ptr, out_ptr, N, GATED: tl.constexpr, RESID: tl.constexpr):
    """y, u [BM, BN] fp32 sums -> out[m, n]: silu(gate) * up, the residual."""
    if GATED:
        y = y * tl.sigmoid(y) * u
    ok = m_ok[:, None] & n_ok[None, :]
    if RESID:
        y += tl.load(r_ptr + m[:, None] * N + n[None, :], mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + m[:, None] * N + n[None, :], y.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _tile_kernel(x_ptr, w_ptr, out_ptr, part_ptr, r_ptr, M, N, K, K_SLICE,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
                 GATED: tl.constexpr, RESID: tl.constexpr, IEEE: tl.constexpr):
    """Program (n block, m block, K slice): acc[BM, BN] = x[m, slice] @ W[n, slice].T (and W[N + n] if gated).

    x goes into the dot as loaded, so its loads pipeline with the weights'.  (Normalising
    x in here puts arithmetic between load and dot, which stops that: the normed products
    ran 1.15-1.8x slower than cuBLAS at 16-32 rows, docs/performance.md.)
    """
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    n_ok, m_ok = n < N, m < M
    k_lo = tl.program_id(2) * K_SLICE
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(k_lo, tl.minimum(k_lo + K_SLICE, K), BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_ok = k < K
        x = tl.load(x_ptr + m[:, None] * K + k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        w_mask = k_ok[:, None] & n_ok[None, :]
        w = tl.load(w_ptr + n[None, :] * K + k[:, None], mask=w_mask, other=0.0)  # [BK, BN]: W.T's tile
        if IEEE:
            acc = tl.dot(x, w, acc, input_precision="ieee")
        else:
            acc = tl.dot(x, w, acc)
        if GATED:
            wu = tl.load(w_ptr + (N + n[None, :]) * K + k[:, None], mask=w_mask, other=0.0)
            if IEEE:
                acc_u = tl.dot(x, wu, acc_u, input_precision="ieee")
            else:
                acc_u = tl.dot(x, wu, acc_u)
    if SPLIT == 1:
        _epilogue(acc, acc_u, m, n, m_ok, n_ok, r_ptr, out_ptr, N, GATED, RESID)
    else:  # part [SPLIT, 1 or 2, M, N] fp32
        ok = m_ok[:, None] & n_ok[None, :]
        base = part_ptr + tl.program_id(2) * (2 if GATED else 1) * M * N + m[:, None] * N + n[None, :]
        tl.store(base, acc, mask=ok)
        if GATED:
            tl.store(base + M * N, acc_u, mask=ok)


@triton.jit
def _reduce_kernel(part_ptr, r_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   SPLIT: tl.constexpr, GATED: tl.constexpr, RESID: tl.constexpr):
    """Sums the split programs' partials in slice order, then the same epilogue as an unsplit program."""
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    n_ok, m_ok = n < N, m < M
    ok = m_ok[:, None] & n_ok[None, :]
    y = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for s in tl.static_range(SPLIT):
        base = part_ptr + s * (2 if GATED else 1) * M * N + m[:, None] * N + n[None, :]
        y += tl.load(base, mask=ok, other=0.0)
        if GATED:
            u += tl.load(base + M * N, mask=ok, other=0.0)
    _epilogue(y, u, m, n, m_ok, n_ok, r_ptr, out_ptr, N, GATED, RESID)


def rms_rows(x: torch.Tensor, ln: torch.Tensor, eps: float) -> torch.Tensor:
    """The layers' ``_rms`` of x [M, K] in one kernel (one program a row), for the products that follow a norm."""
    rows, k = x.shape
    if not x.is_contiguous() or ln.shape != (k,):
        raise ValueError(f"rms_rows: contiguous x [M, K] and ln [K], got x {tuple(x.shape)}, ln {tuple(ln.shape)}")
    out = torch.empty_like(x)
    _rms_kernel[(rows,)](x, ln, out, k, eps, BLOCK_K=min(triton.next_power_of_2(k), 2048), num_warps=4)
    return out


def tile_linear(x: torch.Tensor, w: torch.Tensor, *, gated: bool = False, residual: torch.Tensor | None = None,
                setting: tuple[int, int, int, int, int, int] | None = None) -> torch.Tensor:
    """x [M, K], w [N, K] -> [M, N] (``gated``: w [2 I, K] -> [M, I]); see the module.

    ``setting``: (block_m, block_n, block_k, split, warps, stages); None reads
    :data:`SETTINGS`, then :func:`default_setting`.
    """
    rows, k = x.shape
    n = w.shape[0] // 2 if gated else w.shape[0]
    if w.shape[1] != k or (gated and w.shape[0] % 2) or not x.is_contiguous() or not w.is_contiguous():
        raise ValueError(f"tile_linear: x {tuple(x.shape)} does not fit w {tuple(w.shape)} (gated={gated})")
    if residual is not None and tuple(residual.shape) != (rows, n):
        raise ValueError(f"tile_linear: residual {tuple(residual.shape)}, expected {(rows, n)}")
    bm, bn, bk, split, warps, stages = (setting or SETTINGS.get((rows_bucket(rows), w.shape[0], k))
                                        or default_setting(rows, w.shape[0], k, gated))
    k_slice = triton.cdiv(triton.cdiv(k, split), bk) * bk  # whole K blocks a slice: slices never overlap
    split = triton.cdiv(k, k_slice)
    out = torch.empty(rows, n, device=x.device, dtype=x.dtype)
    part = torch.empty(split, 2 if gated else 1, rows, n, device=x.device, dtype=torch.float32) if split > 1 else out
    flags = dict(GATED=gated, RESID=residual is not None)
    r = residual if residual is not None else out
    grid = (triton.cdiv(n, bn), triton.cdiv(rows, bm), split)
    _tile_kernel[grid](x, w, out, part, r, rows, n, k, k_slice, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT=split,
                       IEEE=x.dtype == torch.float32, num_warps=warps, num_stages=stages, **flags)
    if split > 1:
        rm, rn = min(bm, 16), 128
        _reduce_kernel[(triton.cdiv(n, rn), triton.cdiv(rows, rm))](
            part, r, out, rows, n, BLOCK_M=rm, BLOCK_N=rn, SPLIT=split, num_warps=4, **flags)
    return out
