"""Masked grouped-query attention of a few query rows in one or two Triton kernels.

The compiled engine's verification attends a handful of new tokens (AR's one, a tree's
few dozen) to a window of cached K/V.  As two batched multiplies with a fused softmax
between them, plus the transpose into the output projection's layout, that is four
launches a layer; on an H200 at the Qwen3-8B shape they took 17 µs a layer for a 32-node
tree (0.6 ms of a 5.8 ms verification) and 8.5 µs for AR (docs/performance.md).
Here one kernel streams the window once per K/V head in key blocks with an online
softmax (flash-decoding), every query head of the group and every tree row in the same
tile, and writes [s, Hq, D] directly; for long windows the keys are split over more
programs and a second kernel merges the partial results.

How the keys are split depends on the window and the head count only, never on the
number of query rows, so a row sums its keys in the same blocks and splits whether it is
verified alone (AR) or in a tree.  fp32 inputs multiply in full fp32
(``input_precision="ieee"``, not TF32), as the fp32 equality checks need.

Imported only where Triton is installed, by :func:`bastion.engines.static_attention.with_kernel`.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from bastion.engines.attention_layout import kernel_layout

BLOCK_N = 32  # keys per block


@triton.jit
def _partial_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, o_ptr, pacc_ptr, pm_ptr, pl_ptr,
                    s, kv, chunk, scale, stride_qh, stride_kh, stride_kn, stride_vh, stride_vn, stride_ms,
                    HQ: tl.constexpr, G: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, IEEE: tl.constexpr, STAGES: tl.constexpr):
    hk = tl.program_id(0)  # K/V head
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)  # row r of the group: head hk*G + r // s, token r % s
    row_ok = rows < G * s
    head = hk * G + rows // s
    tok = rows % s
    d = tl.arange(0, D)
    q = tl.load(q_ptr + head[:, None] * stride_qh + tok[:, None] * D + d[None, :], mask=row_ok[:, None], other=0.0)
    start = tl.program_id(2) * chunk
    end = tl.minimum(start + chunk, kv)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for n0 in tl.range(start, end, BLOCK_N, num_stages=STAGES):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < end
        # every load of the block first, so the pipeliner can issue the next block's early
        k = tl.load(k_ptr + hk * stride_kh + cols[:, None] * stride_kn + d[None, :], mask=col_ok[:, None], other=0.0)
        v = tl.load(v_ptr + hk * stride_vh + cols[:, None] * stride_vn + d[None, :], mask=col_ok[:, None], other=0.0)
        allowed = tl.load(mask_ptr + tok[:, None] * stride_ms + cols[None, :], mask=row_ok[:, None] & col_ok[None, :],
                          other=0)
        if IEEE:
            sc = tl.dot(q, tl.trans(k), input_precision="ieee")  # [BLOCK_M, BLOCK_N] fp32
        else:
            sc = tl.dot(q, tl.trans(k))
        sc = tl.where(allowed != 0, sc * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(sc, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no allowed key yet: nothing to rescale
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(sc - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    if SPLIT:  # partial results of this key range, by global row head * s + token
        g_row = head * s + tok
        base = tl.program_id(2) * HQ * s
        tl.store(pacc_ptr + (base + g_row)[:, None] * D + d[None, :], acc, mask=row_ok[:, None])
        tl.store(pm_ptr + base + g_row, m_i, mask=row_ok)
        tl.store(pl_ptr + base + g_row, l_i, mask=row_ok)
    else:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # padding rows (not stored) have no keys
        tl.store(o_ptr + (tok * HQ + head)[:, None] * D + d[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=row_ok[:, None])


@triton.jit
def _merge_kernel(pacc_ptr, pm_ptr, pl_ptr, o_ptr, s, splits,
                  HQ: tl.constexpr, D: tl.constexpr, SPLITS_P2: tl.constexpr):
    g_row = tl.program_id(0)  # head * s + token
    head = g_row // s
    tok = g_row % s
    sp = tl.arange(0, SPLITS_P2)
    sp_ok = sp < splits
    m = tl.load(pm_ptr + sp * HQ * s + g_row, mask=sp_ok, other=float("-inf"))
    l_s = tl.load(pl_ptr + sp * HQ * s + g_row, mask=sp_ok, other=0.0)
    m_max = tl.max(m, 0)
    w = tl.where(m == float("-inf"), 0.0, tl.exp(m - m_max))  # a split whose keys were all masked adds nothing
    d = tl.arange(0, D)
    acc = tl.load(pacc_ptr + (sp * HQ * s + g_row)[:, None] * D + d[None, :], mask=sp_ok[:, None], other=0.0)
    out = tl.sum(acc * w[:, None], 0) / tl.sum(l_s * w, 0)
    tl.store(o_ptr + (tok * HQ + head) * D + d, out.to(o_ptr.dtype.element_ty))


@functools.cache
def _programs(device_index: int) -> int:
    """Programs to aim for over the keys: one per streaming multiprocessor."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count if torch.cuda.is_available() else 64


def key_splits(kv: int, kv_heads: int, programs: int, block_n: int = BLOCK_N) -> tuple[int, int]:
    """(splits, keys per split) for a window of ``kv`` keys: a function of the window and head count only."""
    blocks = triton.cdiv(kv, block_n)
    splits = max(1, min(blocks, triton.cdiv(programs, kv_heads)))
    chunk = triton.cdiv(blocks, splits) * block_n
    return triton.cdiv(kv, chunk), chunk


def tree_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                   scale: float, *, programs: int | None = None, block_m: int = 64,
                   block_n: int = BLOCK_N, num_warps: int = 4, num_stages: int = 3) -> torch.Tensor:
    """query [1, Hq, s, D] (contiguous), key/value [1, Hkv, kv, D] (last dim contiguous),
    mask [1, 1, s, kv] bool (last dim contiguous) -> [1, s, Hq, D], as
    :func:`bastion.engines.static_attention.grouped_attention` computes it.

    The keyword arguments are tuning knobs (tools/gpu/attention_tuning.py).  Their defaults
    were the fastest, or within 10% of it, of 150 settings on an H200 at the Qwen3-8B shape
    for 1-64 rows at windows of 768 and 4,352 keys; fewer programs (more keys each) were
    faster for 32 and more rows, but would make the splits depend on the row count.
    """
    _, hq, s, d = query.shape
    hkv, kv = key.shape[1], key.shape[2]
    g = hq // hkv
    if not kernel_layout(query, key, value, mask):
        raise ValueError(f"tree_attention cannot read query {tuple(query.shape)} (contiguous: {query.is_contiguous()}), "
                         f"key/value {tuple(key.shape)} or a {mask.dtype} mask as laid out; "
                         "see bastion.engines.attention_layout.kernel_layout")
    rows = g * s
    if programs is None:
        programs = _programs(query.device.index if query.device.type == "cuda" else 0)
    splits, chunk = key_splits(kv, hkv, programs, block_n)
    out = torch.empty(1, s, hq, d, dtype=query.dtype, device=query.device)
    if splits > 1:
        pacc = torch.empty(splits, hq * s, d, dtype=torch.float32, device=query.device)
        pm = torch.empty(splits, hq * s, dtype=torch.float32, device=query.device)
        pl = torch.empty(splits, hq * s, dtype=torch.float32, device=query.device)
    else:
        pacc = pm = pl = out  # unused
    allowed = mask[0, 0].view(torch.uint8)  # [s, kv]
    grid = (hkv, triton.cdiv(rows, block_m), splits)
    _partial_kernel[grid](query, key, value, allowed, out, pacc, pm, pl, s, kv, chunk, scale,
                          query.stride(1), key.stride(1), key.stride(2), value.stride(1), value.stride(2),
                          allowed.stride(0), HQ=hq, G=g, D=d, BLOCK_M=block_m, BLOCK_N=block_n,
                          SPLIT=splits > 1, IEEE=query.dtype == torch.float32, STAGES=num_stages,
                          num_warps=num_warps)
    if splits > 1:
        _merge_kernel[(hq * s,)](pacc, pm, pl, out, s, splits, HQ=hq, D=d,
                                 SPLITS_P2=max(2, triton.next_power_of_2(splits)))
    return out
