"""Capture-once, replay-many CUDA graphs keyed by shape.

A step of the static engine is a few functions whose every input and output lives in
buffers owned by the engine (allocated outside any capture, fixed addresses), and whose
only Python-level parameters are shapes: the tree bucket, the attention window.  Each
distinct key is captured the first time it is needed and replayed after that, so a step
costs a handful of graph launches instead of a thousand kernel launches.

All graphs share one memory pool.  That is safe here because no graph's output is read
after another graph runs: anything that must outlive a replay is copied, inside the
graph, into an engine buffer.  On a CPU (or with ``enabled=False``) the same functions
simply run eagerly, which is how the CPU tests check the engine's logic.
"""

from __future__ import annotations

import time
from typing import Callable, Hashable, Sequence

import torch


#: every capture of this process: the job worker reports what each job added
CAPTURES = {"count": 0, "seconds": 0.0}


class GraphRunner:
    """Runs ``fn()`` for a key, through a CUDA graph captured on first use when enabled."""

    def __init__(self, device: torch.device, enabled: bool = True, warmup: int = 2) -> None:
        self.device = device
        self.enabled = enabled and device.type == "cuda"
        self.warmup = warmup
        self.graphs: dict[Hashable, torch.cuda.CUDAGraph] = {}
        self.capture_seconds = 0.0
        self._pool = torch.cuda.graph_pool_handle() if self.enabled else None

    def __call__(self, key: Hashable, fn: Callable[[], None], writes: Sequence[torch.Tensor] = ()) -> None:
        """Run ``fn`` for ``key``.  ``writes``: state ``fn`` updates in place (not idempotently).

        Capturing runs ``fn`` for warm-up first; those runs must not count, so the
        tensors in ``writes`` are saved before and restored after them.
        """
        if not self.enabled:
            fn()
            return
        graph = self.graphs.get(key)
        if graph is None:
            graph = self._capture(fn, writes)
            self.graphs[key] = graph
        graph.replay()

    def _capture(self, fn: Callable[[], None], writes: Sequence[torch.Tensor]) -> "torch.cuda.CUDAGraph":
        t0 = time.perf_counter()
        # Warm up on a side stream (as capture requires): lazy initialisation, cuBLAS
        # workspaces and cached constants all happen here, outside the capture.
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            warm_up(fn, writes, self.warmup)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            fn()
        # A graph's first replay costs about twice a later one (300 small kernels on an H100:
        # 0.58 against 0.30 ms, docs/performance.md): replayed once here, its writes put back,
        # that one-off work counts with the capture instead of the decode step that first
        # needs the graph.
        warm_up(graph.replay, writes, 1)
        torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - t0
        self.capture_seconds += elapsed
        CAPTURES["count"] += 1
        CAPTURES["seconds"] += elapsed
        return graph


def warm_up(fn: Callable[[], None], writes: Sequence[torch.Tensor], times: int) -> None:
    """Run ``fn`` ``times`` times as a capture's warm-up, then put ``writes`` back as they were:
    the state ``fn`` updates in place must see only the runs that count."""
    saved = [t.clone() for t in writes]
    for _ in range(times):
        fn()
    for t, old in zip(writes, saved):
        t.copy_(old)


def read_to_host(src: torch.Tensor, pinned: torch.Tensor, poll: torch.cuda.Event | None) -> list[int]:
    """``src`` on the host, through the page-locked ``pinned``: waits for all work launched so far.

    With a ``poll`` event the host spins on it instead of blocking in the stream
    synchronisation, so it notices the copy's end sooner (the GPU is idle from then until
    the host launches the next graph) at the price of a busy core while it waits.
    """
    if src.device.type != "cuda":
        return src.tolist()
    pinned.copy_(src, non_blocking=True)
    if poll is not None:
        poll.record()
        while not poll.query():
            pass
    else:
        torch.cuda.current_stream(src.device).synchronize()
    return pinned.tolist()

