"""Phase stamps of a decode step (either engine): none, synchronised host times, or CUDA events.

Step times (``collect_stats``) come in two kinds.  ``True`` synchronises the device at
every phase boundary, so each phase is timed alone (host launch included); ``"events"``
records a CUDA event at each boundary and reads them after the last step, so the decode
runs exactly as it does untimed.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from bastion.engines.choice import sync


def step_clock(collect_stats: bool | str, device: torch.device) -> Callable[[], object]:
    """``clock()`` stamps a phase boundary.  Untimed, the stamps are zeros and are never turned into times."""
    if collect_stats == "events":
        if device.type != "cuda":
            raise ValueError(f"collect_stats='events' needs a CUDA device, not {device}; use collect_stats=True")

        def stamp() -> torch.cuda.Event:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event

        return stamp
    if collect_stats not in (True, False):
        raise ValueError(f"collect_stats must be True, False or 'events', not {collect_stats!r}")
    if collect_stats:
        return lambda: (sync(device), time.perf_counter())[1]
    return lambda: 0.0


def intervals(stamps: tuple) -> list[float]:
    """Seconds between consecutive stamps (perf_counter floats or recorded CUDA events)."""
    if isinstance(stamps[0], float):
        return [b - a for a, b in zip(stamps, stamps[1:])]
    return [a.elapsed_time(b) / 1e3 for a, b in zip(stamps, stamps[1:])]


def fill_times(marks: list[tuple]) -> None:
    """Each step's phase times from its stamps: ``marks`` holds (StepStats, stamps) pairs, read
    after the decode's final synchronisation, when every recorded event has completed."""
    for stats, stamps in marks:
        stats.t_draft, stats.t_tree, stats.t_verify, stats.t_accept, stats.t_commit = intervals(stamps)
