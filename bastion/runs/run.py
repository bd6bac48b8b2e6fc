"""One decode run: its settings, executed phase by phase, the same way from the CLI and the pipeline.

:class:`DecodeRun` is a :class:`~bastion.runs.settings.RunSettings` that can execute:
the CLI fills it from flags and the pipeline's decode jobs from their params
(:func:`run_from_knobs`), so both run the same code, the phases of
:func:`bastion.runs.inputs.check_inputs` (without torch), then those of
:class:`bastion.runs.runner.Runner` (resolve, load, calibrate, decode with resume, gather).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from bastion.runs.inputs import check_inputs
from bastion.runs.settings import RunSettings

if TYPE_CHECKING:
    from bastion.runs.session import Session


@dataclass
class DecodeRun(RunSettings):
    """A run's settings and the way to execute them (records end up in ``self.records``)."""

    def execute(self, session: Session | None = None) -> list[dict[str, Any]]:
        """Decode every prompt of this rank's shard; write, resume and summarise the records.

        ``session``: models and engine already loaded by this process, reused where they
        match this run's settings (:mod:`bastion.runs.session`); without one, all are loaded here.
        """
        for _ in self.prompt_steps(session):
            pass
        return self.records

    def prompt_steps(self, session: Session | None = None) -> Iterator[int]:
        """:meth:`execute` one prompt at a time: yields each decoded prompt's index (``repeats`` times each).

        Every records file, resume and summary is as :meth:`execute` makes them (the
        records end up in ``self.records``); a cell advances several runs in turn this way
        (:func:`bastion.runs.cell.decode_cell`).
        """
        inputs = check_inputs(self)  # flags, models, dataset, history, output: without torch
        from bastion.runs.runner import Runner  # torch, from here on

        runner = Runner(self, inputs, session)
        yield from runner.steps()
        self.records = runner.records

    def choose_eagle3_tree(self, output: str) -> None:
        """Sweep EAGLE-3's tree shapes for this run's device and head and write the choice to ``output``,
        which runs of ``eagle3_tree: auto`` then read (``eagle3_tree_file``) instead of sweeping each."""
        inputs = check_inputs(self)
        from bastion.runs.runner import Runner

        Runner(self, inputs).choose_tree(output)


def run_from_knobs(k: dict[str, Any], models: dict[str, Any], data: str, calibration: str | None, hardware_key: str,
                   model_name: str, dataset_name: str, output: str | None, history: str | None = None,
                   shard: tuple[int, int] = (0, 1), threads: int = 1, eagle3_tree_file: str | None = None) -> DecodeRun:
    """The run of one pipeline decode job (or one method of a cell) from its rule's knobs.

    ``threads``: the CPU threads Snakemake gave the job (its rule's ``threads:``, scaled
    down to ``--cores``), what the job computes with.  ``eagle3_tree_file``: the pair's
    ``auto`` EAGLE-3 tree, chosen once by the pipeline's choose_eagle3_tree.
    """
    kernels = k["kernels"]
    return DecodeRun(
        model=models["target"], draft_model=models["drafter"], dataset=data, methods=(k["method"],),
        temperature=k["temperature"], max_new_tokens=k["max_new_tokens"], max_samples=k["max_samples"] or None,
        n_min=k["n_min"], n_max=k["n_max"], topk=k["topk"], budget=k["budget"] or None, block_size=k["block_size"] or None,
        device=k["device"], dtype=k["dtype"], attn_impl=k["attn_impl"], engine=k["engine"], seed=k["seed"],
        data_seed=k["seed"], calibration=calibration, hardware=hardware_key, output=output, model_name=model_name,
        dataset_name=dataset_name, shard=shard, eagle3_model=models.get("eagle3"), history_from=history,
        rank_kernels=kernels["rank"], blas=kernels["blas"], drafter_layers=kernels["drafter"],
        row_kernel=kernels["row_kernel"], tile_kernel=kernels["tile_kernel"], threads=threads,
        eagle3_tree=k.get("eagle3_tree", "auto"), eagle3_tree_file=eagle3_tree_file, repeats=k.get("repeats", 1),
    )
