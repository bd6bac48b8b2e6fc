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

Consecutive runs on the same prompts advance prompt by prompt, in turn (every method on
prompt 0, then every method on prompt 1, ...): a slow spell of the machine then touches
every method alike.  Run one method after another, the 2-core CPU's drifts of 10-15% over
a few minutes made one method look 10% faster or slower than another from run to run
(docs/performance.md).  The order within a round changes from round to round
(:mod:`bastion.runs.order`), so that no method always runs right after AR.  On multi-turn
sets the runs that read AR's answers as their history start once AR's file is written: AR
decodes its prompts first, then the readers advance in turn.  Each run's records and
files are the same either way.
"""

from __future__ import annotations

import sys
from typing import Iterator, Sequence

from bastion.results import records
from bastion.runs.checks import parse_methods
from bastion.runs.order import turn_order
from bastion.runs.run import DecodeRun
from bastion.runs.session import Session


def decode_cell(runs: Sequence[DecodeRun]) -> Session:
    """Execute ``runs`` in order on one session; returns the session (what was loaded)."""
    methods = [m for run in runs for m in parse_methods(run.methods)]
    eagle3 = [(run.eagle3_tree, run.eagle3_tree_file) for run in runs if "eagle3" in parse_methods(run.methods)]
    session = Session(methods, eagle3[0] if eagle3 else None)
    for group in _groups(runs):
        for run in group:
            if not run.quiet:  # the job log tells the runs apart (the ablation runs all decode "bastion")
                budget = f" at budget {run.budget}" if run.budget else ""
                print(f"[cell] {'/'.join(parse_methods(run.methods))}{budget} -> {run.output}", file=sys.stderr, flush=True)
            run.keep_partial = True
        # a run reads its history file whole when it starts: the runs that write it go first
        writers = [run for run in group if not run.history_from]
        readers = [run for run in group if run.history_from]
        for batch in (writers, readers):
            _in_turn([run.prompt_steps(session) for run in batch])
    for run in runs:
        if run.output:
            records.partial_path(run.output).unlink(missing_ok=True)
    return session


def _groups(runs: Sequence[DecodeRun]) -> list[list[DecodeRun]]:
    """Consecutive runs of the same prompts (dataset, subset and seed)."""
    groups: list[list[DecodeRun]] = []
    for run in runs:
        key = (run.dataset, run.max_samples, run.data_seed)
        if groups and (groups[-1][0].dataset, groups[-1][0].max_samples, groups[-1][0].data_seed) == key:
            groups[-1].append(run)
        else:
            groups.append([run])
    return groups


def _in_turn(steps: list[Iterator[int]]) -> None:
    """Advance every run by one prompt in turn until all are done, each round in the order of
    :func:`~bastion.runs.order.turn_order` (the given order first)."""
    live = list(steps)
    round_ = 0
    while live:
        done = {i for i in turn_order(len(live), round_) if next(live[i], None) is None}
        live = [s for i, s in enumerate(live) if i not in done]
        round_ += 1

