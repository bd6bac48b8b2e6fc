"""How many kernels a piece of the engine launches, from the profiler: on a CPU as an estimate, on CUDA as run.

On CUDA the device trace lists every kernel (a CUDA graph's replay included).  On a CPU
there are no launches to see, so the profiler's host events stand for them: each
operator that does work, counted once at its outermost call, and each kernel Inductor
generated (with ``torch._inductor.config.cpp.enable_kernel_profile`` set before compiling).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

# operators that only make views, allocate or read metadata: no kernel on a GPU
NO_WORK = frozenset(f"aten::{op}" for op in (
    "view", "reshape", "_reshape_alias", "_unsafe_view", "as_strided", "slice", "select", "expand", "expand_as",
    "unsqueeze", "squeeze", "transpose", "t", "permute", "narrow", "split", "split_with_sizes", "chunk", "unbind",
    "alias", "detach", "lift_fresh", "empty", "empty_strided", "empty_like", "resize_", "resolve_conj",
    "resolve_neg", "contiguous", "to", "numel", "size", "stride", "flatten", "unflatten", "view_as", "matmul",
    "linear", "type_as", "dropout", "is_nonzero",
))
COMPILED_REGION = "Torch-Compiled Region"
GRAPH_INPUTS = "Pregraph bytecode"  # Dynamo wrapping a compiled graph's inputs (Python scalars into tensors)


def _chain(event) -> list[str]:
    names = []
    parent = event.cpu_parent
    while parent is not None:
        names.append(parent.name)
        parent = parent.cpu_parent
    return names


def _does_work(event) -> bool:
    """An operator that computes, or one (matmul, to, reshape...) that calls one."""
    if event.name.startswith("aten::") and event.name not in NO_WORK:
        return True
    return any(_does_work(child) for child in event.cpu_children)


def cpu_launches(fn: Callable[[], object]) -> dict:
    """One call of ``fn`` (after two unprofiled ones), counted on the host.  See :data:`NO_WORK`."""
    fn()
    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    counts: Counter = Counter()
    graphs = set()
    for e in prof.events():
        chain = _chain(e)
        if e.name.startswith(COMPILED_REGION):
            counts["compiled_calls"] += 1
            graphs.add(e.name)
        elif "cpp_fused" in e.name:
            counts["inductor_kernels"] += 1
        elif (e.name.startswith("aten::") and not any(n.startswith("aten::") for n in chain)
              and GRAPH_INPUTS not in chain and _does_work(e)):
            counts["extern_ops" if any(n.startswith(COMPILED_REGION) for n in chain) else "eager_ops"] += 1
    out = {k: counts[k] for k in ("compiled_calls", "inductor_kernels", "extern_ops", "eager_ops")}
    out["graphs"] = len(graphs)
    out["launches"] = out["inductor_kernels"] + out["extern_ops"] + out["eager_ops"]
    return out


def gpu_launches(fn: Callable[[], object], device: torch.device) -> dict:
    """The kernels and the memory copies or sets one call of ``fn`` runs on the GPU (after two unprofiled calls)."""
    fn()
    fn()
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize(device)
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    copies = sum(1 for n in names if n.startswith(("Memcpy", "Memset")))
    return {"launches": len(names) - copies, "copies": copies}
