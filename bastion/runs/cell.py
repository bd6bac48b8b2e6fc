"""A cell: every method of one (model, dataset, temperature) decoded in one process.

The pipeline's ``decode_cell`` (and ``decode_model``) jobs run one :class:`~bastion.runs.run.DecodeRun` per
method, each writing its own output, records and run key exactly as the per-method
``decode`` job would, through one :class:`~bastion.runs.session.Session`: the target,
the drafters and the engine (with its buffers and graphs) load once per cell instead of
once per method.

Runs go in the order given: AR first, since on multi-turn sets the others'
``history_from`` is the output it has just written.  Every run keeps its
``<output>.partial`` until the whole cell is done: Snakemake deletes the finished outputs
of a killed job before rerunning it, and the kept records let every method resume
(a finished one in no time).  The partial files go once every output is written.
"""

from __future__ import annotations

import sys
from typing import Sequence

from bastion.results import records
from bastion.runs.checks import parse_methods
from bastion.runs.run import DecodeRun
from bastion.runs.session import Session


def decode_cell(runs: Sequence[DecodeRun]) -> Session:
    """Execute ``runs`` in order on one session; returns the session (what was loaded)."""
    methods = [m for run in runs for m in parse_methods(run.methods)]
    eagle3 = [run.eagle3_policy() for run in runs if "eagle3" in parse_methods(run.methods)]
    session = Session(methods, eagle3[0] if eagle3 else None)
    for run in runs:
        if not run.quiet:  # the job log tells the runs apart (the ablation runs all decode "bastion")
            budget = f" at budget {run.budget}" if run.budget else ""
            print(f"[cell] {'/'.join(parse_methods(run.methods))}{budget} -> {run.output}", file=sys.stderr, flush=True)
        run.keep_partial = True
        run.execute(session)
    for run in runs:
        if run.output:
            records.partial_path(run.output).unlink(missing_ok=True)
    return session
