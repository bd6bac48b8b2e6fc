"""Progress bars that keep job logs small: live on a terminal, a line every half minute in a log file.

Calibration grids and decode cells run for minutes to hours; their bars show the ETA
(and, for decoding, the live tokens per second) on stderr.  Written to a file (a
Snakemake or SLURM job log) a bar refreshes at most every ``LOG_INTERVAL`` seconds, so
an hour-long cell adds about a hundred short lines.
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm

LOG_INTERVAL = 30.0  # seconds between refreshes when stderr is not a terminal


def bar(total: int, desc: str, unit: str, enabled: bool = True, **kw: Any) -> tqdm:
    """A tqdm bar on stderr, throttled when stderr is a file; ``enabled=False`` draws nothing."""
    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr, ascii=not tty,
                dynamic_ncols=tty, mininterval=0.5 if tty else LOG_INTERVAL, maxinterval=LOG_INTERVAL * 4,
                smoothing=0.1, **kw)
