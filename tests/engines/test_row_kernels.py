"""The row kernels (AR's products, and what follows its q/k/v product) against the layers' own arithmetic, their wiring into the layers, and their dispatch."""

from __future__ import annotations

import torch

from bastion.engines import static_layers
from bastion.engines.static_layers import row_kernel
from tests.support.kernel_check import run_kernel_check

# Runs in a subprocess with TRITON_INTERPRET=1 (the kernel's code on the CPU) unless a GPU is there.
KERNEL_CHECK = r"""
import itertools, torch, torch.nn.functional as F
from bastion.engines.row_kernels import row_linear
from bastion.engines.static_layers import _rms as rms  # the layers' own norm

dev = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator().manual_seed(0)

cases, worst = 0, 0.0
# K: whole blocks and a ragged end; N: a ragged last block of outputs; one and several K blocks
m = 1
for (n, k), setting in itertools.product([(48, 96), (40, 72), (5, 300)], [(8, 32, 2), (16, 64, 4), (4, 512, 1)]):
    t = lambda *s: torch.randn(*s, generator=gen).to(dev)
    w, x, xg, r, ln = t(n, k), t(m, k), t(m, 2 * k), t(m, n), t(k).abs() + 0.5
    for name, got, ref in (
        ("plain", row_linear(x, w, setting=setting), F.linear(x, w)),
        ("norm", row_linear(x, w, ln=ln, eps=1e-6, setting=setting), F.linear(rms(x, ln, 1e-6), w)),
        ("residual", row_linear(x, w, residual=r, setting=setting), r + F.linear(x, w)),
        ("glu", row_linear(xg, w, glu=True, residual=r, setting=setting), r + F.linear(F.silu(xg[:, :k]) * xg[:, k:], w)),
    ):
        assert got.shape == ref.shape == (m, n), (name, got.shape)
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-5, (name, m, n, k, setting, err)
        worst = max(worst, err)
        cases += 1
for bad, want in ((lambda: row_linear(t(2, 96), t(48, 96)), "one row"),
                  (lambda: row_linear(t(1, 96), t(48, 96), glu=True), "does not fit")):
    try:
        bad()
        raise SystemExit(f"accepted: {want}")
    except ValueError as exc:
        assert want in str(exc), exc
from bastion.engines.row_kernels import row_qkv
from bastion.engines.static_layers import after_qkv
# query / K/V heads, head dim, head norms (Qwen3) or none (Llama)
# AR's one row and a tree's five (cache positions out of order, as a tree's are)
for (hq, hkv, d, norm), s in itertools.product(((4, 2, 16, True), (8, 2, 32, False), (2, 2, 64, True)), (1, 5)):
    qkv, cos, sin = t(1, s, (hq + 2 * hkv) * d), t(1, s, d), t(1, s, d)
    qn, kn = (t(d).abs() + 0.5, t(d).abs() + 0.5) if norm else (None, None)
    kv_ref = t(2, 1, hkv, 12, d)
    kv_got = kv_ref.clone()
    index = torch.tensor([7, 2, 9, 3, 11][:s]).to(dev)
    q_ref = after_qkv(qkv, qn, kn, cos, sin, kv_ref, index, 1e-6, d, hkv * d)
    q_got = row_qkv(qkv, qn, kn, cos, sin, kv_got, index, 1e-6, d, hkv * d)
    assert q_got.shape == q_ref.shape == (1, hq, s, d), q_got.shape
    err = max((q_got - q_ref).abs().max().item(), (kv_got - kv_ref).abs().max().item())
    assert err < 1e-5, (hq, hkv, d, norm, s, err)  # the cache too: those positions written, the rest untouched
    cases += 1
print(f"kernels equal the layers' arithmetic on {cases} cases, worst {worst:.1e}")
"""

# A tree's rows: the tensor-core tile kernel, one K slice or several (the reduction kernel), against the same arithmetic
TILE_CHECK = r"""
import itertools, torch, torch.nn.functional as F
from bastion.engines.tile_kernels import rms_rows, tile_linear
from bastion.engines.static_layers import _rms as rms

dev = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator().manual_seed(0)
t = lambda *s: torch.randn(*s, generator=gen).to(dev)
cases, worst = 0, 0.0
# rows: fewer than a tile, a ragged second tile, whole tiles; N and K ragged; settings (block_m, block_n, block_k,
# split, warps, stages): one slice, three slices (the last one short), two slices of two K blocks, the default
for (m, n, k), setting in itertools.product([(5, 48, 96), (17, 40, 200), (32, 64, 64)],
                                           [(16, 16, 32, 1, 4, 2), (16, 32, 32, 3, 4, 2), (32, 16, 64, 2, 4, 1), None]):
    w, wg, x, r, ln = t(n, k), t(2 * n, k), t(m, k), t(m, n), t(k).abs() + 0.5
    for name, got, ref in (
        ("plain", tile_linear(x, w, setting=setting), F.linear(x, w)),
        ("norm", tile_linear(rms_rows(x, ln, 1e-6), w, setting=setting), F.linear(rms(x, ln, 1e-6), w)),
        ("residual", tile_linear(x, w, residual=r, setting=setting), r + F.linear(x, w)),
        ("gated", tile_linear(rms_rows(x, ln, 1e-6), wg, gated=True, setting=setting),
         (lambda gu: F.silu(gu[:, :n]) * gu[:, n:])(F.linear(rms(x, ln, 1e-6), wg))),
    ):
        assert got.shape == ref.shape == (m, n), (name, got.shape)
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-5, (name, m, n, k, setting, err)
        worst = max(worst, err)
        cases += 1
# the norm kernel is the layers' norm: K of one block, of several blocks with a ragged end
for k in (96, 5000):
    x, ln = t(3, k), t(k).abs() + 0.5
    err = (rms_rows(x, ln, 1e-6) - rms(x, ln, 1e-6)).abs().max().item()
    assert err < 1e-6, (k, err)
    cases += 1
for bad, want in ((lambda: tile_linear(t(4, 96), t(48, 90)), "does not fit"),
                  (lambda: tile_linear(t(4, 96), t(47, 96), gated=True), "does not fit"),
                  (lambda: tile_linear(t(4, 96), t(48, 96), residual=t(4, 24)), "expected (4, 48)"),
                  (lambda: rms_rows(t(4, 96), t(90), 1e-6), "ln [K]")):
    try:
        bad()
        raise SystemExit(f"accepted: {want}")
    except ValueError as exc:
        assert want in str(exc), exc
print(f"tile kernel equals the layers' arithmetic on {cases} cases, worst {worst:.1e}")
"""

# The layers with their products in the kernel decode what the eager engine decodes (fp32).
WIRING_CHECK = r"""
import torch
from bastion.engines.eager import EagerDecoder
from types import SimpleNamespace
from bastion.engines import row_kernels, tile_kernels
from bastion.engines.static_decoder import StaticDecoder
from bastion.engines.static_engine import StaticEngine
from bastion.engines.static_layers import FusedLayers
from bastion.models.target import Target
from bastion.speculative.policy import TreePolicy
from tests.support.builders import tiny_drafter, tiny_target

dev = "cuda" if torch.cuda.is_available() else "cpu"  # compiled kernels on a GPU's tensors, else interpreted
model = tiny_target("qwen3", seed=11, scale=3.0, layers=3)
drafter = tiny_drafter(model, block_size=6, seed=8).to(dev)
target = Target(model.to(dev))
engine = StaticEngine(target, drafter, max_context=96, n_max=16)
fused = FusedLayers(target, compile=False, columns=False)  # the kernels read rows
calls = []
def row_linear(x, *a, **kw):
    calls.append(x.shape[0])
    return row_kernels.row_linear(x, *a, **kw)
tile_calls = []
def tile_linear(x, *a, **kw):
    tile_calls.append(x.shape[0])
    return tile_kernels.tile_linear(x, *a, **kw)
fused.rows = SimpleNamespace(row_linear=row_linear, row_qkv=row_kernels.row_qkv)
fused.tiles = SimpleNamespace(tile_linear=tile_linear, rms_rows=tile_kernels.rms_rows, MAX_ROWS=tile_kernels.MAX_ROWS)
engine.fused = fused
prompt = list(range(3, 20))
for method, policy in (("bastion", TreePolicy(budget=8)), ("dflash", None), ("ar", None)):
    want = EagerDecoder(target, method, drafter, policy).generate(prompt, 12)
    got = StaticDecoder(engine, method, policy).generate(prompt, 12)
    assert got.output_ids == want.output_ids, (method, got.output_ids, want.output_ids)
assert calls and set(calls) == {1}, sorted(set(calls))  # AR's steps, never a tree's or the prefill's rows
# the trees' rows (budget 8) and DFlash's blocks (6 rows) in the tile kernel; the prompt's 17 rows are not the layers'
assert 6 in tile_calls and 1 < min(tile_calls) and max(tile_calls) <= 8, sorted(set(tile_calls))
print("wiring ok", len(calls), sorted(set(tile_calls)))
"""


def test_kernel_equals_the_layers_arithmetic():
    proc = run_kernel_check(KERNEL_CHECK)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on 42 cases" in proc.stdout


def test_tile_kernel_equals_the_layers_arithmetic():
    proc = run_kernel_check(TILE_CHECK)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on 50 cases" in proc.stdout


def test_layers_with_the_kernel_decode_as_eager():
    proc = run_kernel_check(WIRING_CHECK)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wiring ok" in proc.stdout


def test_the_matrix_library_serves_off_cuda_in_fp32_and_when_turned_off(monkeypatch):
    bf16 = torch.zeros(4, 4, dtype=torch.bfloat16)
    assert row_kernel(bf16) is None  # a CPU tensor
    monkeypatch.setattr(static_layers, "use_triton", lambda device: True)
    monkeypatch.setattr(static_layers, "_probe_rows", lambda device, dtype: "the kernels")
    assert row_kernel(bf16) == "the kernels"  # where Triton serves bf16, the kernels
    assert row_kernel(torch.zeros(4, 4)) is None  # fp32: the equality checks' rounding
    assert row_kernel(bf16, enabled=False) is None  # kernels.row_kernel: false


def test_the_row_and_tile_settings_reach_the_fused_layers(monkeypatch):
    """``kernels.row_kernel`` / ``tile_kernel`` of a run reach the compiled engine's layers
    through its Compilation (where Triton would serve, patched in here)."""
    from bastion.engines.choice import Kernels
    from bastion.engines.compiled import Compilation
    from bastion.models.target import Target
    from tests.support.builders import tiny_target

    monkeypatch.setattr(static_layers, "use_triton", lambda device: True)
    monkeypatch.setattr(static_layers, "_probe_rows", lambda device, dtype: "rows")
    monkeypatch.setattr(static_layers, "_probe_tiles", lambda device, dtype: "tiles")
    target = Target(tiny_target("qwen3", hidden=64, layers=2).to(torch.bfloat16))
    cpu = torch.device("cpu")

    def layers(**settings):
        fused = Compilation.choose(True, cpu, compile=True, kernels=Kernels(**settings)).layers(target)
        return fused.rows, fused.tiles

    assert layers() == ("rows", "tiles")
    assert layers(tile_kernel=False) == ("rows", None)
    assert layers(row_kernel=False) == (None, None)  # the tile kernels run only beside the row kernels


def test_only_power_of_two_head_dims_take_the_row_kernels(monkeypatch):
    from bastion.engines.static_layers import FusedLayers
    from bastion.models.target import Target
    from tests.support.builders import tiny_target

    monkeypatch.setattr(static_layers, "row_kernel", lambda weight, enabled=True: "the kernels")
    assert FusedLayers(Target(tiny_target("qwen3", hidden=64, layers=2)), compile=True).rows == "the kernels"
    assert FusedLayers(Target(tiny_target("qwen3", hidden=80, layers=2)), compile=True).rows is None  # head dim 20
    assert FusedLayers(Target(tiny_target("qwen3", hidden=64, layers=2)), compile=False).rows is None


def test_the_blas_setting_reaches_the_matrix_library(monkeypatch):
    """``kernels.blas`` of a run picks torch's BLAS library when the compiled engine is made on
    CUDA (recorded here, since this machine may have no GPU); on a CPU nothing is chosen."""
    from bastion.engines.choice import Kernels
    from bastion.engines.compiled import Compilation

    chosen = []
    monkeypatch.setattr(torch.backends.cuda, "preferred_blas_library", chosen.append)
    cuda = torch.device("cuda", 0)
    assert Compilation.choose(True, cuda, compile=False, kernels=Kernels(blas="cublas")).kernels.blas == "cublas"
    Compilation.choose(True, cuda, compile=False, kernels=Kernels())
    Compilation.choose(True, torch.device("cpu"), compile=False, kernels=Kernels(blas="cublas"))
    Compilation.choose(False, cuda, kernels=Kernels(blas="cublas"))  # the static engine keeps the process's choice
    assert chosen == ["cublas", "cublaslt"]
