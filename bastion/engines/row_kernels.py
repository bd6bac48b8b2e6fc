"""AR's matrix-vector products in one Triton kernel each, with the layer's norm and residual inside.

At batch 1 an AR step of the target is a chain of matrix-vector products: every weight
byte is read once for one row.  On an H200 at the Qwen3-8B shape the GEMM kernels of an
AR step stream the weights at 91% of the copy rate, but the step as a whole reaches 68%:
the RMS norms, the split-K reductions, SiLU times up, the residual adds and the gaps
between ~600 launches take the rest (docs/performance.md).  This kernel folds
those into the product that consumes or produces them:

- ``norm``: ``y = rms_norm(x) * ln @ W.T``.  The norm's scale is one number for the row,
  so it leaves the sum: the kernel multiplies ``x * ln`` into the product, sums the row's
  squares on the way, and scales the result at the end.  No pass over ``x`` before.
- ``glu``: ``x`` is ``[gate | up]`` and the product's input is ``silu(gate) * up``.
- ``residual``: ``y = r + x @ W.T``.

:func:`row_qkv` then does in one kernel what follows the q/k/v product (four Inductor
kernels otherwise): the head norms, the rotary embedding, the K/V write into the cache.

It serves one row only.  A tree's rows need the tensor cores (on the CUDA cores 32 rows
would cost more than streaming the weights), and a 16-row tensor-core form of this
kernel measured 2 to 9 times slower than cuBLAS on three of the four products
(docs/performance.md).  It runs in bf16 and fp16; fp32 keeps the matrix
library (see :func:`bastion.engines.static_layers.row_kernel`).

Imported only where Triton is installed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# (N, K) -> (block_n, block_k, warps), the fastest measured for that weight shape on an
# H200 (`python -m benchmarks.row_kernel_bench`: the Qwen3-8B shape's q/k/v, output, gate/up and
# down products).  Other shapes take DEFAULT_SETTING.
SETTINGS: dict[tuple[int, int], tuple[int, int, int]] = {
    (6144, 4096): (16, 512, 4),
    (4096, 4096): (2, 512, 2),
    (24576, 4096): (16, 256, 4),
    (4096, 12288): (8, 1024, 4),
}
DEFAULT_SETTING = (8, 512, 4)


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, y_ptr, ln_ptr, r_ptr, N, K, eps, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 NORM: tl.constexpr, GLU: tl.constexpr, RESID: tl.constexpr):
    """One row: y[n] = sum_k w[n, k] x[k] for BLOCK_N outputs, on the CUDA cores.

    A 16-row tensor-core tile wastes 15 rows of x work per weight tile at this shape, and
    that work equalled the weight stream's (docs/performance.md).
    Here every thread multiplies what it loads into an fp32 accumulator of the tile's shape
    and the tile is summed once at the end, so the loads are wide and independent.
    """
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < N
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    ss = tl.zeros([BLOCK_K], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_ok = k < K
        w = tl.load(w_ptr + n[:, None] * K + k[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
        if GLU:
            g = tl.load(x_ptr + k, mask=k_ok, other=0.0).to(tl.float32)
            u = tl.load(x_ptr + K + k, mask=k_ok, other=0.0).to(tl.float32)
            x = g * tl.sigmoid(g) * u
        else:
            x = tl.load(x_ptr + k, mask=k_ok, other=0.0).to(tl.float32)
        if NORM:
            ss += x * x
            x = x * tl.load(ln_ptr + k, mask=k_ok, other=0.0).to(tl.float32)
        acc += w.to(tl.float32) * x[None, :]
    y = tl.sum(acc, axis=1)
    if NORM:
        y = y * tl.rsqrt(tl.sum(ss, axis=0) / K + eps)
    if RESID:
        y += tl.load(r_ptr + n, mask=n_ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + n, y.to(y_ptr.dtype.element_ty), mask=n_ok)


def row_linear(x: torch.Tensor, w: torch.Tensor, *, ln: torch.Tensor | None = None, eps: float = 0.0,
               glu: bool = False, residual: torch.Tensor | None = None,
               setting: tuple[int, int, int] | None = None) -> torch.Tensor:
    """x [1, K] (or [1, 2K] with ``glu``), w [N, K] -> [1, N]; see the module.

    ``setting``: (block_n, block_k, warps); None reads :data:`SETTINGS`.
    """
    n, k = w.shape
    if x.shape[0] != 1:
        raise ValueError(f"row_linear takes one row, got {x.shape[0]}")
    if x.shape[1] != (2 * k if glu else k) or not x.is_contiguous() or not w.is_contiguous():
        raise ValueError(f"row_linear: x {tuple(x.shape)} does not fit w {tuple(w.shape)} (glu={glu})")
    block_n, block_k, warps = setting or SETTINGS.get((n, k), DEFAULT_SETTING)
    y = torch.empty(1, n, device=x.device, dtype=x.dtype)
    _gemv_kernel[(triton.cdiv(n, block_n),)](
        x, w, y, ln if ln is not None else w, residual if residual is not None else y, n, k, eps,
        BLOCK_N=block_n, BLOCK_K=block_k, NORM=ln is not None, GLU=glu, RESID=residual is not None, num_warps=warps)
    return y


@triton.jit
def _qkv_kernel(qkv_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, q_ptr, kv_ptr, index_ptr, stride_kv, stride_kh,
                stride_kpos, S, eps, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, HEAD_NORM: tl.constexpr):
    """Program (h, row): query head h, key head h - HQ or value head h - HQ - HKV of one of the S rows."""
    h = tl.program_id(0)
    row = tl.program_id(1)
    half = tl.arange(0, D // 2)
    qkv_ptr += row * (HQ + 2 * HKV) * D
    cos_ptr += row * D
    sin_ptr += row * D
    q_ptr += row * D  # q [1, HQ, S, D]: head h's row at (h * S + row) * D
    x1 = tl.load(qkv_ptr + h * D + half).to(tl.float32)  # [D/2] each
    x2 = tl.load(qkv_ptr + h * D + D // 2 + half).to(tl.float32)
    pos = tl.load(index_ptr + row)
    if h >= HQ + HKV:  # a value head: into the cache as it is
        dst = kv_ptr + stride_kv + (h - HQ - HKV) * stride_kh + pos * stride_kpos
        tl.store(dst + half, x1.to(kv_ptr.dtype.element_ty))
        tl.store(dst + D // 2 + half, x2.to(kv_ptr.dtype.element_ty))
    else:
        if HEAD_NORM:
            if h < HQ:
                w1 = tl.load(qn_ptr + half).to(tl.float32)
                w2 = tl.load(qn_ptr + D // 2 + half).to(tl.float32)
            else:
                w1 = tl.load(kn_ptr + half).to(tl.float32)
                w2 = tl.load(kn_ptr + D // 2 + half).to(tl.float32)
            r = tl.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / D + eps)
            x1 = x1 * r * w1
            x2 = x2 * r * w2
        c1 = tl.load(cos_ptr + half).to(tl.float32)
        c2 = tl.load(cos_ptr + D // 2 + half).to(tl.float32)
        s1 = tl.load(sin_ptr + half).to(tl.float32)
        s2 = tl.load(sin_ptr + D // 2 + half).to(tl.float32)
        y1 = x1 * c1 - x2 * s1  # x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1]
        y2 = x2 * c2 + x1 * s2
        if h < HQ:
            tl.store(q_ptr + h * S * D + half, y1.to(q_ptr.dtype.element_ty))
            tl.store(q_ptr + h * S * D + D // 2 + half, y2.to(q_ptr.dtype.element_ty))
        else:
            dst = kv_ptr + (h - HQ) * stride_kh + pos * stride_kpos
            tl.store(dst + half, y1.to(kv_ptr.dtype.element_ty))
            tl.store(dst + D // 2 + half, y2.to(kv_ptr.dtype.element_ty))


def row_qkv(qkv: torch.Tensor, qn: torch.Tensor | None, kn: torch.Tensor | None, cos: torch.Tensor,
            sin: torch.Tensor, kv: torch.Tensor, index: torch.Tensor, eps: float, head_dim: int,
            kv_width: int) -> torch.Tensor:
    """:func:`bastion.engines.static_layers.after_qkv` in one kernel, for AR's row and a tree's rows alike.

    qkv [1, s, (Hq + 2 Hkv) D]; cos, sin [1, s, D]; kv [2, 1, Hkv, capacity, D] (row i
    written at ``index[i]``, index [s]) -> q [1, Hq, s, D].
    """
    d = head_dim
    hkv = kv_width // d
    hq = qkv.shape[-1] // d - 2 * hkv
    s = qkv.shape[1]
    if qkv.shape[0] != 1 or not qkv.is_contiguous() or kv.stride(-1) != 1 or d % 2 or d & (d - 1):
        raise ValueError(f"row_qkv: contiguous rows of one sequence and a power-of-two head dim, got qkv "
                         f"{tuple(qkv.shape)}, head dim {d}")
    if index.numel() != s or cos.shape[1] != s:
        raise ValueError(f"row_qkv: {s} rows, {index.numel()} cache positions, {cos.shape[1]} rotary rows")
    q = torch.empty(1, hq, s, d, device=qkv.device, dtype=qkv.dtype)
    _qkv_kernel[(hq + 2 * hkv, s)](
        qkv, qn if qn is not None else qkv, kn if kn is not None else qkv, cos.contiguous(), sin.contiguous(), q, kv,
        index, kv.stride(0), kv.stride(2), kv.stride(3), s, eps, HQ=hq, HKV=hkv, D=d, HEAD_NORM=qn is not None,
        num_warps=1)
    return q
