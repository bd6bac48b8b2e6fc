"""Logging for pipeline jobs: everything to the job's log, the failure reason also to the console.

Snakemake only prints "Error in rule ..." and the log path; a user whose job failed for
a reason we can state in one line (no network, wrong device, bad input) should read that
line right there.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from typing import Iterator


@contextlib.contextmanager
def job_log(path: str) -> Iterator[None]:
    console = sys.__stderr__
    with open(path, "w", encoding="utf-8") as log:
        old_out, old_err = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = log
        try:
            yield
        except Exception as exc:
            traceback.print_exc(file=log)
            log.flush()
            print(f"error: {exc}", file=console, flush=True)
            raise SystemExit(1) from None
        finally:
            sys.stdout, sys.stderr = old_out, old_err
